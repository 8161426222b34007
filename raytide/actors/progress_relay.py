"""A node's progress relay: forwards the progress messages of a node's replicas to the
progress actor, one call in flight, so that the central actor's calls grow with the nodes of
a cluster, not with its replicas (Naiad accumulates progress per process for the same reason).

On a cluster, one replica host per node plays the relay beside its replica (the driver
chooses it: :meth:`~raytide.driver.placement.JobPlacement.routes`); the node's replicas,
that one included, send it what they would send the progress actor (their ``receive``
and ``receive_with_refs`` calls' arguments, untouched). The relay sends the first at once;
what arrives while that call is in flight waits and goes in the next call
(``ProgressActor.receive_relayed``), so the busier the progress actor, the more each call
carries; each replica's consecutive messages go in it merged into one run (:func:`merged`),
so the progress actor also unpickles and applies fewer messages than were gathered.
On a cluster of more than :data:`~raytide.physical.relay_tree.RELAY_FANIN` nodes, a node's
relay forwards to its group's relay instead (another node's relay, its route's
``upstream``: :func:`~raytide.physical.relay_tree.relay_groups`), which takes the call as
more gathered messages and forwards them with its own node's, runs of runs merged again.
Message flow::

    replica ──relay(encoded) / relay_with_refs(...)──▶ node's relay host   (its "relay" threads)
    relay ──relay_gathered(gathered)──────────────────▶ group's relay host  (*waits*: one in flight)
    relay ──receive_relayed(gathered)─────────────────▶ progress actor     (*waits*: one in flight)

A relay's thread of its own waits only for the progress actor, which waits for nobody, or
for a group's relay's ``relay_gathered``, which only adds to what is gathered.
The replicas' calls run on the host's ``relay`` concurrency group, not in turn with its
replica's calls, and only add to what is gathered: neither a replica's event nor its
backpressure delays the relay, and the relay never delays the replica.

Why nothing can go wrong with the order or the loss of messages: every message is numbered
by its replica and applied in that order (:class:`~raytide.progress.inorder.InOrder`),
however it travelled; delaying a replica's messages only keeps frontiers back. A relay that
dies is its replica's host dying: the job recovers (or fails), and a recovery rolls every
replica and the progress actor back to a snapshot in a new incarnation, so what the relay
held is not needed. Messages of an older incarnation are dropped by the progress actor.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import ray

from raytide.engine.progress_runs import merge_by_incarnation
from raytide.errors import InternalError
from raytide.physical.protocol import ProgressRoute, ProgressRun, Sequenced, decode, encode

logger = logging.getLogger(__name__)

#: How long the relay waits for the progress actor to take a call before it says so in the
#: log (and waits on: the driver's liveness watch fails the job if the progress actor died).
SLOW_CALL_S = 60.0


def merged(encoded: list[bytes]) -> tuple[list[bytes], int]:
    """Replicas' encoded calls as one per incarnation, each replica's consecutive messages
    merged into one run (:func:`~raytide.engine.progress_runs.merge_by_incarnation`), and how many
    runs that made: the progress actor then unpickles and applies one message per replica,
    not one per event."""
    if len(encoded) < 2:
        return encoded, 0
    runs = merge_by_incarnation((incarnation, call) for incarnation, calls in map(decode, encoded) for call in calls)
    made = sum(isinstance(call.message, ProgressRun) for calls in runs.values() for call in calls)
    return [encode((incarnation, tuple(calls))) for incarnation, calls in runs.items()], made


class ProgressRelay:
    """Gathers a node's messages for the progress actor; its thread (started by the first
    message) sends them, at most one call in flight."""

    def __init__(self, name: str) -> None:
        self.name = name  # the host's job/chain/replica, for the log
        self.gathered = threading.Condition()
        self.encoded: list[bytes] = []
        self.with_refs: list[tuple[int, tuple[Sequenced, ...]]] = []
        self.route = ProgressRoute(None)  # this host's route, as the latest caller knew it (a recovery may replace it)
        self.incarnation = 0  # the job's incarnation, as the latest caller knew it (for a failure)
        self.closed = False
        self.thread: threading.Thread | None = None
        self.received = 0  # calls of replicas relayed
        self.forwarded = 0  # calls made to the progress actor
        self.upward = 0  # calls made to the group's relay
        self.runs = 0  # runs of a replica's consecutive messages merged into one (sent by this thread only)

    def relay(self, route: ProgressRoute, incarnation: int, encoded: bytes) -> None:
        """A replica's ``receive`` argument, to forward by ``route`` (this host's, known in ``incarnation``)."""
        self._add(route, incarnation, lambda: self.encoded.append(encoded))

    def relay_with_refs(self, route: ProgressRoute, incarnation: int, sent: tuple[int, tuple[Sequenced, ...]]) -> None:
        """A replica's ``receive_with_refs`` arguments (batches whose output parts are object refs)."""
        self._add(route, incarnation, lambda: self.with_refs.append(sent))

    def relay_gathered(self, route: ProgressRoute, incarnation: int, encoded: list[bytes],
                       with_refs: list[tuple[int, tuple[Sequenced, ...]]]) -> None:
        """What another node's relay gathered (this is its group's relay): more of the same."""
        def add() -> None:
            self.encoded.extend(encoded)
            self.with_refs.extend(with_refs)
        self._add(route, incarnation, add)

    def _add(self, route: ProgressRoute, incarnation: int, add: Callable[[], None]) -> None:
        with self.gathered:
            if self.closed:
                return
            add()
            self.route, self.incarnation = route, incarnation
            self.received += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._send, name=f"progress relay {self.name}", daemon=True)
                self.thread.start()
            self.gathered.notify()

    def _send(self) -> None:
        """Send what is gathered, wait until the progress actor has taken it, repeat."""
        while True:
            with self.gathered:
                self.gathered.wait_for(lambda: self.closed or bool(self.encoded or self.with_refs))
                if self.closed:
                    return
                encoded, with_refs, route = self.encoded, self.with_refs, self.route
                self.encoded, self.with_refs = [], []
                if route.upstream is None:
                    self.forwarded += 1
                else:
                    self.upward += 1
            try:
                blobs, runs = merged(encoded)
                self.runs += runs
                to = route.progress.receive_relayed if route.upstream is None else route.upstream.relay_gathered
                self._wait(to.remote(blobs, with_refs), len(encoded) + len(with_refs))
            except Exception as error:  # never drop messages silently: the job fails, saying why
                logger.exception("%s: relaying progress failed", self.name)
                route.progress.fail.remote(self.incarnation, InternalError(
                    f"the progress relay on {self.name} could not forward {len(encoded) + len(with_refs)} calls: {error!r}"))

    def _wait(self, call: Any, count: int) -> None:
        """Wait until the progress actor (or the group's relay) has taken ``call``; its
        death ends the wait (the driver's liveness watch handles it)."""
        while True:
            try:
                ready, _ = ray.wait([call], timeout=SLOW_CALL_S)
                if ready:
                    ray.get(ready)
                    return
            except ray.exceptions.RayActorError:
                logger.warning("%s: the progress actor or the group's relay died; %d relayed calls dropped",
                               self.name, count)
                return
            logger.warning("%s: the progress actor or the group's relay has not taken %d relayed calls after "
                           "%.0f s; still waiting",
                           self.name, count, SLOW_CALL_S)

    def close(self) -> None:
        """The host's role is over: the thread ends, and what is gathered is dropped (of an
        incarnation that is over too)."""
        with self.gathered:
            self.closed = True
            self.encoded, self.with_refs = [], []
            self.gathered.notify()

    def stats(self) -> dict[str, int]:
        """The calls relayed (of replicas, and of other nodes' relays), the calls made to the
        progress actor and to the group's relay, and the runs of messages merged into one."""
        with self.gathered:
            return {"relayed": self.received, "forwarded": self.forwarded, "upward": self.upward, "runs": self.runs}
