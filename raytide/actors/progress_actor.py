"""The progress actor: a thin Ray shell around :class:`~raytide.engine.progress_core.ProgressCore`.

It takes the replicas' numbered messages (:class:`~raytide.physical.protocol.Sequenced`),
performs the core's status pushes (fire and forget; with relays, one call per relay at the
top of the replicas' paths: :mod:`~raytide.physical.relay_tree`) and keeps the job's
events for the driver's long poll. It never waits for anyone (see :mod:`raytide.physical.protocol`).

It is the role of a pooled host (:class:`~raytide.actors.hosts.ProgressHost`). Every call
but the long poll runs on one thread, in turn; the long poll runs in the host's
concurrency group ``poll``, so that it waits without blocking progress, and shares
only the event log with the rest, under a lock. (A threaded actor answers calls as fast
as a plain one; an asyncio actor took half as long again per call.) The log keeps only
the events the driver has not acknowledged: a poll from ``cursor`` says that every event
before it has been read, so a job that runs for weeks holds no more than one poll's worth.

Replicas on its node send their messages over a Unix socket once connected
(:mod:`raytide.actors.socket_hops`): its delivery thread runs each frame as a :meth:`receive`
call, holding the host's lock that every call but the long poll holds. Messages are numbered
per replica and applied in number order, so those that still come by Ray call and those by
socket may arrive in any order. Its status pushes to a replica on its node go by that
replica's socket once connected (:class:`~raytide.actors.push_links.PushLinks`): a push
carries absolute statuses, so a replica's pushes switch only once every push by Ray call
to it has run.

In a job with recovery, :meth:`ProgressActor.restore` replaces the core with one rebuilt
from a snapshot (:mod:`raytide.snapshots.recovery`); calls and pushes carry the incarnation,
and calls of an older one are dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from raytide.actors.event_feed import EventFeed
from raytide.actors.push_links import PushLinks
from raytide.actors.socket_hops import Inbound
from raytide.engine.progress_core import ProgressCore, ProgressEffects
from raytide.errors import InternalError, RaytideError
from raytide.physical.frames import Frame
from raytide.physical.pickled import pack_records
from raytide.physical.protocol import JobEvent, JobFailed, ReplicaKey, Sequenced, decode, encode
from raytide.physical.relay_tree import Paths, bundled
from raytide.progress.graph import ProgressGraph
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp

if TYPE_CHECKING:
    from raytide.engine.replica import AloneRestored


class ProgressActor:
    """Owns the job's :class:`ProgressCore`; pushes statuses, logs events for the driver."""

    def __init__(self, graph: ProgressGraph, outputs: list[str], initial: list[tuple[Pointstamp, int]],
                 serial: threading.RLock | None = None, name: str = "progress") -> None:
        """``serial``: the host's lock of this role's calls, which the socket's delivery thread
        holds too (none: no socket, replicas call by Ray)."""
        self.graph, self.outputs = graph, outputs
        self.serial = serial
        self.inbound = Inbound(name, self._delivered) if serial is not None else None
        self.links = PushLinks(serial is not None)
        self.feed = EventFeed()  # the driver's subscription to the events, if it made one
        self.core = ProgressCore(graph, outputs, initial)
        self.incarnation = 0
        self.handles: dict[ReplicaKey, Any] = {}
        self.paths: Paths = {}  # each replica's relays its pushes go down, if the job has relays
        self.events: list[JobEvent] = []
        self.first = 0  # the number of the first event still in ``events``
        self.changed = threading.Condition()
        self.calls = 0  # Ray calls received with messages (a call may carry several, of several replicas)
        self.fan_outs = 0  # Ray calls made to relays with pushes to deliver (each may carry several)

    def connect(self, replicas: dict[ReplicaKey, tuple[Any, list[Location], tuple[ReplicaKey, ...]]]) -> None:
        """Learn every replica's handle, the locations it reads and the relays its pushes go
        down (:mod:`~raytide.physical.relay_tree`; none without relays), push their initial
        statuses, then apply what replicas sent before this call (the driver does not wait
        for this actor)."""
        self.handles = {key: handle for key, (handle, _, _) in replicas.items()}
        self.links.reset(self.handles)
        self.paths = {key: path for key, (_, _, path) in replicas.items() if path}
        self._perform(self.core.connect({key: locations for key, (_, locations, _) in replicas.items()}))

    def restore(self, incarnation: int, pointstamps: list[tuple[Pointstamp, int]], delivered: dict[str, int],
                kept: dict[str, dict[int, list]], replicas: dict[ReplicaKey, tuple[Any, list[Location], tuple[ReplicaKey, ...]]],
                cursor: int) -> None:
        """Start incarnation ``incarnation`` from a restore point: the tracker holds
        ``pointstamps``, the output log the ``kept`` records (lists of records per epoch),
        and epochs up to ``delivered`` are not released again. Events the driver has not
        read (from before the rollback) are dropped; numbering goes on from ``cursor``."""
        packed = {name: {epoch: [pack_records(records) for records in parts] for epoch, parts in epochs.items()}
                  for name, epochs in kept.items()}
        self.incarnation = incarnation
        self.core = ProgressCore(self.graph, self.outputs, pointstamps, delivered, packed)
        with self.changed:
            self.events, self.first = [], cursor
            self.feed.close()  # the driver drops what it has not taken and subscribes again
        self.connect(replicas)

    def replace(self, incarnation: int, key: ReplicaKey, handle: Any, restored: AloneRestored | RaytideError,
                first: int) -> None:
        """Replica ``key`` was recovered alone as ``handle`` (docs/recovery.md, "A replica recovered
        alone"), which answered its ``restore_alone`` with ``restored`` (the driver passes that
        call's ref: Ray hands it over once it is in): the tracker counts its numbered traffic from
        its restored figures on, its lost incarnation's late messages are dropped (the
        replacement's are numbered from ``first``), and it is pushed the statuses of the
        locations it reads (:meth:`ProgressCore.replace`). A restore that raised changes nothing:
        the driver fails the job with its error."""
        if incarnation == self.incarnation and not isinstance(restored, RaytideError):
            locations, figures, _ = restored
            self._reach(key, handle)
            self._perform(self.core.replace(key, figures, first, locations))

    def join(self, incarnation: int, key: ReplicaKey, handle: Any, locations: list[Location]) -> None:
        """Replica ``key`` joined the job as ``handle`` (a growing stepped rescale, docs/rescaling.md):
        it is pushed the statuses of ``locations`` and counted from now on (:meth:`ProgressCore.join`)."""
        if incarnation == self.incarnation:
            self._reach(key, handle)
            self._perform(self.core.join(key, locations))

    def leave(self, incarnation: int, key: ReplicaKey, through: int) -> bool:
        """Replica ``key`` leaves the job (a shrink's retiring switch, docs/rescaling.md), once its
        first ``through`` messages are applied here (:meth:`ProgressCore.leave`); whether it has left
        (False: the driver asks again; nothing here waits)."""
        if incarnation != self.incarnation or not self.core.leave(key, through):
            return False
        self.handles.pop(key, None)
        self.links.drop(key)
        return True

    def _reach(self, key: ReplicaKey, handle: Any) -> None:
        """Send to replica ``key`` as ``handle`` from now on (a replacement's or a joined replica's)."""
        self.handles[key] = handle
        self.links.replace(key, handle)

    def socket_address(self) -> tuple[str, str] | None:
        """Where a replica on this node sends its messages by socket; None: by Ray calls only."""
        return self.inbound.address() if self.inbound is not None else None

    def _delivered(self, frame: Frame) -> None:
        """A frame of a replica's messages, on the delivery thread: a :meth:`receive` call, under the host's lock."""
        assert self.serial is not None and self.inbound is not None
        with self.serial:
            if not self.inbound.closed:
                assert isinstance(frame.packed, bytes)
                self.receive(frame.packed)

    def close(self) -> None:
        """The job is over here: stop the socket's threads."""
        if self.inbound is not None:
            self.inbound.close()
        self.links.reset({})
        self.feed.close()

    def receive(self, encoded: bytes) -> None:
        """Numbered messages (progress batches with their output records, declarations) of one or more
        replicas, with the sender's incarnation, encoded as one (see
        :func:`~raytide.physical.protocol.encode`: one argument costs a call less than two)."""
        incarnation, calls = decode(encoded)
        self.receive_with_refs(incarnation, *calls)

    def receive_with_refs(self, incarnation: int, *calls: Sequenced) -> None:
        """The same messages as Ray arguments: batches whose output parts are object refs travel so
        (Ray counts who borrows a ref only when it sees it)."""
        if incarnation == self.incarnation:
            self._apply(calls)

    def receive_relayed(self, encoded: list[bytes], with_refs: list[tuple[int, tuple[Sequenced, ...]]]) -> None:
        """What a node's relay (:mod:`raytide.actors.progress_relay`) gathered from its replicas
        while its previous call was in flight: the arguments of their :meth:`receive` and
        :meth:`receive_with_refs` calls, applied as one call (one propagation, at most one
        push per replica); those of another incarnation are dropped."""
        calls = [call for incarnation, sent in [*map(decode, encoded), *with_refs] if incarnation == self.incarnation
                 for call in sent]
        if calls:
            self._apply(calls)

    def _apply(self, calls: Sequence[Sequenced]) -> None:
        self.calls += 1
        try:
            self._perform(self.core.receive_all(calls))
        except Exception as error:  # the core may be half-applied: fail the job, never leave it waiting
            senders = ", ".join(sorted({str(getattr(call, "sender", "?")) for call in calls}))
            self._log([JobFailed(InternalError(f"the progress actor could not apply a call from {senders}: {error!r}"))])

    def hold(self, incarnation: int, changes: list[tuple[Pointstamp, int]]) -> None:
        """Pointstamps the driver makes: a stepped rescale's holds (:meth:`ProgressCore.hold`)."""
        if incarnation == self.incarnation:
            self._perform(self.core.hold(changes))

    def fail(self, incarnation: int, error: Any) -> None:
        """A replica failed; the driver will tear the job down (or recover) and raise ``error``."""
        if incarnation == self.incarnation:
            self._log([JobFailed(error)])

    def _perform(self, effects: ProgressEffects) -> None:
        direct, bundles = bundled(effects.pushes, self.paths)
        for key, push in direct:
            self.links.push(key, encode((self.incarnation, push)))
        for relay, bundle in bundles.items():
            self.handles[relay].fan_out.remote(encode((self.incarnation, bundle)))
        self.fan_outs += len(bundles)
        self._log(effects.events)

    def _log(self, events: list[JobEvent]) -> None:
        if events:
            with self.changed:
                first = self.first + len(self.events)
                self.events += events
                self.changed.notify_all()
                if self.feed.send(first, events):  # in the driver's socket: read
                    self._read(first + len(events))

    def _read(self, cursor: int) -> None:
        """The events before ``cursor`` have been read: they leave the log (under :attr:`changed`)."""
        del self.events[: max(0, cursor - self.first)]
        self.first = max(self.first, cursor)

    def subscribe(self, token: int, address: tuple[str, str], cursor: int) -> bool:
        """Write the job's events to the driver's socket at ``address`` from number ``cursor``
        on, those logged already first (:mod:`raytide.actors.event_feed`); False: the driver polls."""
        with self.changed:
            self._read(cursor)
            if not self.feed.subscribe(token, address):
                return False
            if self.feed.send(self.first, list(self.events)):
                self._read(self.first + len(self.events))
            return True

    def next_events(self, cursor: int, timeout: float) -> tuple[list[JobEvent], int]:
        """Events from number ``cursor`` on (or from the first still logged, if later: those
        before went by socket), waiting up to ``timeout`` seconds for one to arrive, and the
        number after them; the events before ``cursor`` have been read and are dropped."""
        with self.changed:
            self._read(cursor)
            self.changed.wait_for(lambda: self.first + len(self.events) > cursor, timeout)
            self.feed.polled(self.first + len(self.events))
            return list(self.events), self.first + len(self.events)

    def frontier(self, location: Location) -> list[Timestamp]:
        """The frontier at ``location`` (for probes)."""
        return self.core.frontier(location)

    def describe(self, limit: int = 20) -> dict[str, Any]:
        """What is still pending, for timeout messages."""
        return self.core.describe(limit)

    def ping(self) -> bool:
        """Liveness check for the driver."""
        return True

    def stats(self) -> dict[str, Any]:
        """How many batches were applied, calls received and pushes sent, and each vertex's
        queued work and frontier (:meth:`ProgressCore.vertex_progress`)."""
        return {**self.core.stats(), "calls": self.calls, "fan_outs": self.fan_outs, "pushes_by_socket": self.links.frames,
                "event_frames": self.feed.frames,
                "vertices": self.core.vertex_progress()}
