"""The vertex actor: a thin Ray shell that feeds a :class:`ReplicaCore` and performs its effects.

Message flow (no actor ever waits for one that may wait for it):

* data: ``sender.send -> receiver.receive_many`` (fire and forget; one call per event and receiver). A sender keeps at most
  ``max_inflight`` unacknowledged calls per receiver and waits for the oldest when it
  has that many: backpressure. Sends out of a feedback vertex never wait, and every
  cycle passes through one (nothing is fused after a feedback vertex, so no other send
  in its actor depends on it): actors waiting on each other would need a cycle without
  a feedback vertex, which the plan rejects. So a loop can always drain.
* progress: ``replica -> progress actor.apply`` (with the output records the batch
  retires) and ``progress actor -> replica.on_progress``, both fire and forget; a
  replica numbers its calls to the progress actor, which applies them in that order.
  A progress batch may ride with data to a peer instead (docs/architecture.md, Messages;
  the rules are :mod:`raytide.engine.riding`'s, which the in-process runtime runs too).
  On a cluster, both go through the relays (:mod:`~raytide.physical.relay_tree`): this host's ``relay``/``relay_gathered`` calls
  gather for the progress actor, its ``fan_out`` delivers pushes, each on threads of its own.
* failures: ``replica -> progress actor.fail`` (fire and forget).
* snapshots (a job with ``recovery``): at a snapshot barrier the core hands its local
  snapshot to a writer thread (:class:`~raytide.snapshots.writer.SnapshotWriter`),
  which stores it and acknowledges it to the coordinator; processing goes on meanwhile.
* incarnations: every call between the job's actors and from the driver carries the
  sender's incarnation, and a replica drops what is not of its own: after a recovery
  (``restore`` then ``resume``) nothing sent before the rollback reaches the restored state.
* to itself (a loop's feedback routed back to the replica that sent it): no Ray call;
  :class:`ReplicaCore` keeps such batches and markers and delivers them itself.
* to a peer on this node: once connected, a frame on a Unix socket instead of the Ray call
  (:mod:`raytide.actors.socket_hops`; the ``RAYTIDE_SOCKET_HOPS`` setting): this replica's
  listener hands each frame to :meth:`VertexActor._delivered` on its delivery thread, which
  runs it as the Ray call would have run, under the host's lock of the replica's calls.

Ray runs the calls of one caller on one actor in submission order (a sequential actor,
no retries that reorder), which is what makes each channel FIFO (a socket keeps its
sender's frames in order too); do not make this actor threaded or async: the only other
thread that enters the core is the socket's delivery thread, and it holds the host's lock
of the replica's calls (``serial``) as each Ray call of the default group does.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray

from raytide.actors import socket_hops
from raytide.actors.host_base import Beside
from raytide.actors.metrics import ReplicaMetrics, busy_and_blocked
from raytide.actors.progress_relay import ProgressRelay
from raytide.actors.ray_transport import RayTransport
from raytide.actors.vertex_inputs import InputCalls
from raytide.actors.vertex_rescaling import RescaleCalls
from raytide.engine.replica import AloneRestored, Received, ReplicaCore
from raytide.errors import RaytideError
from raytide.physical.frames import Frame, replica_call
from raytide.physical.pickled import Packed
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import (
    ChannelId,
    Marker,
    ProgressRoute,
    ReplicaKey,
    Sequenced,
    decode,
    encode,
)
from raytide.physical.wire import unframe, unpack_for
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.writer import replica_writer
from raytide.sources.base import Reader, late_counts, reader_positions

if TYPE_CHECKING:  # not imported by a host: a job without rescales, recovery or streams never loads them
    from raytide.rescale.layout import Piece
    from raytide.snapshots.config import Recovery

logger = logging.getLogger(__name__)


def _batch_place(channel: ChannelId, vertex: str, time: Timestamp) -> str:
    """Where a received batch was going, for an error."""
    return f"vertex {vertex!r} input {channel.port} at {time} (from replica {channel.sender} of {channel.source!r})"


class VertexActor(InputCalls, RescaleCalls):
    """One replica of one chain of fused vertices (its input calls: :class:`InputCalls`; its rescale calls:
    :class:`RescaleCalls`)."""

    def __init__(self, plan: PhysicalPlan, job: str, chain: str, replica: int, max_inflight: int, myself: Any = None,
                 recovery: Recovery | None = None, incarnation: int = 0, kept: tuple[int, ReplicaKey, Piece] | None = None,
                 serial: threading.RLock | None = None, beside: Beside | None = None) -> None:
        """``myself``: this replica's own handle (bound to its host's lease), for the calls
        a reader makes to itself. ``recovery``: the job takes snapshots (see the module docstring).
        ``incarnation``: the job's (a rescale's replica drops the calls of the configuration before).
        ``kept``: what the replica this host played before kept for this one, in a rescale to
        that incarnation (:meth:`hand_over`). ``serial``: the host's lock of the replica's calls, which
        the socket's delivery thread holds too (none: no socket, every peer calls by Ray). ``beside``: the replica
        this host plays beside this one, an input replica seated in it (:attr:`VertexHost.inputs
        <raytide.actors.hosts.VertexHost.inputs>`), called in this process."""
        self.myself = myself if myself is not None else ray.get_runtime_context().current_actor
        self.plan, self.key = plan, ReplicaKey(chain, replica)
        self.writer = replica_writer(self.key, recovery, incarnation)
        self.store = self.writer.store if self.writer is not None else None
        self.serial = serial
        sockets = serial is not None
        self.numbered = recovery is not None and recovery.alone  # numbered sends (raytide.engine.numbered_channels)
        self.logged = recovery.logged if recovery is not None else None  # and kept into these chains only
        self.log_cap = recovery.upstream_log_cap if recovery is not None else None  # at most this many
        self.transport = RayTransport(self.key, plan, job, max_inflight, self.writer, sockets, self.numbered, beside)
        self.inbound = socket_hops.Inbound(f"{job}/{chain}/{replica}", self._delivered) if sockets else None
        self.transport.incarnation = incarnation
        self.readers: dict[str, tuple[Reader[Any], Iterator[tuple[int, Any]]]] = {}
        self.started: dict[str, Reader[Any]] = {}  # every reader started, reading or done
        self.core = self._new_core()
        self.failed: RaytideError | None = None
        self.busy_s = 0.0  # handling events (see _guard)
        self.restores = 0  # how often this process reset its state for a recovery or restore= (job.stats())
        self.in_event: tuple[float, float] | None = None  # the event in hand: when it began, blocked_s then
        self.metrics = ReplicaMetrics(job, chain, replica)
        self.kept = kept
        self.node_relay = ProgressRelay(f"{job}/{chain}/{replica}")  # used if the driver made this host its node's relay

    def _new_core(self) -> ReplicaCore:
        core = ReplicaCore(self.plan, self.key.chain, self.key.replica, self.transport, keep_outputs=True,
                           numbered=self.numbered, logged=self.logged, log_cap=self.log_cap)
        core.source_positions = functools.partial(reader_positions, self.started)  # not self: no cycle (see reader_positions)
        return core

    def connect(self, peers: dict[ReplicaKey, Any], unbounded: set[str], progress: ProgressRoute,
                coordinator: Any = None) -> list[Location]:
        """Learn the replicas this one calls (``peers``: those it sends to and, if its host is
        its node's relay, those it delivers pushes to; the driver gives it no others:
        :meth:`JobPlacement.peers_of <raytide.driver.placement.JobPlacement.peers_of>`), the
        snapshot coordinator, if any, and where to send progress; returns the locations to
        subscribe to."""
        self.transport.connect(peers, unbounded, progress)
        self.transport.coordinator = coordinator
        if self.writer is not None:
            self.writer.coordinator = coordinator
        return self.core.subscriptions()

    def close(self) -> None:
        """The job is over here (its host is being reset): publish the final figures, stop the writer and relay threads."""
        self.metrics.publish(self.stats())
        self.node_relay.close()
        if self.inbound is not None:
            self.inbound.close()
        self.transport.close_sockets()
        if self.writer is not None:
            self.writer.close()

    def socket_address(self) -> tuple[str, str] | None:
        """Where a peer on this node reaches this replica by socket (its node and path);
        None: by Ray calls only (see :mod:`raytide.actors.socket_hops`)."""
        return self.inbound.address() if self.inbound is not None else None

    def _delivered(self, frame: Frame) -> None:
        """A frame from a peer's (or the driver's) socket, on the delivery thread: the call it stands for, under
        the host's lock (a replica that is closed by then drops it, as its host drops a call of an
        ended lease)."""
        assert self.serial is not None and self.inbound is not None
        with self.serial:
            if self.inbound.closed:
                return
            method, args = replica_call(frame)
            getattr(self, method)(*args)

    def _current(self, incarnation: int) -> bool:
        """Whether a call of ``incarnation`` is for this replica's state (older ones are dropped)."""
        return incarnation == self.transport.incarnation

    def receive_many(self, framed: Packed) -> None:
        """Data batches another replica sent in one event (:meth:`RayTransport.flush`), in
        order: received as one event, with one progress message for all. Framed with them
        (:func:`~raytide.physical.pickled.frame`): each batch's incarnation, channel, vertex and
        time, and the sender's progress batches of that event, passed on to the progress
        actor ahead of this replica's own next message (see the module docstring). Taken apart
        inside the guard: a batch that does not unpickle here fails the job, saying where."""
        self._guard(self._on_framed, framed)

    def _on_framed(self, framed: Packed) -> None:
        calls, progress = unframe(framed)
        messages: list[Received] = [
            (channel, vertex, time, unpack_for(payload, packed, functools.partial(_batch_place, channel, vertex, time)),
             sequence)
            for (incarnation, channel, vertex, time, sequence), payload, packed in calls if self._current(incarnation)]
        if messages:
            self.transport.rides.carried(progress)
            self.core.on_messages(messages)

    def receive_marker(self, incarnation: int, channel: ChannelId, marker: Marker) -> None:
        """A control marker on ``channel``."""
        if self._current(incarnation):
            self._guard(self.core.on_marker, channel, marker)

    def inject_marker(self, incarnation: int, marker: Marker) -> None:
        """Start ``marker`` at this input replica (from the driver or the snapshot coordinator)."""
        if self._current(incarnation):
            self._guard(self.core.inject_marker, marker)

    def forget_delivered(self, incarnation: int, delivered: dict[str, int]) -> None:
        """The driver has each output's epochs up to ``delivered``: the kept records of those go
        (a job without snapshots, whose output replicas keep their records for a rescale only:
        the driver says this about once a second)."""
        if self._current(incarnation):
            self.core.forget_delivered(delivered)

    def on_progress(self, encoded: bytes) -> None:
        """A frontier push from the progress actor: its incarnation and a ``StatusPush``, encoded as one."""
        incarnation, push = decode(encoded)
        if self._current(incarnation):
            self._guard(self.core.on_progress, *push)

    def restore(self, incarnation: int, snapshot_id: int | None, peers: dict[ReplicaKey, Any], progress: ProgressRoute,
                coordinator: Any) -> list[Location] | RaytideError:
        """Start incarnation ``incarnation`` as this replica was in committed snapshot ``snapshot_id`` (None: as at
        the job's start), with the job's actors as they are now; nothing runs until :meth:`resume`. Returns the
        locations to subscribe to, or what the restore raised (user code's ``restore()``): the driver fails the job."""
        self._reset(incarnation, peers, progress, coordinator)
        self.restores += 1
        self.kept = None  # a rescale's piece this replica did not adopt (a death during the switch)
        if snapshot_id is not None and self.writer is not None:
            self._guard(self.core.restore, self.writer.read_own(snapshot_id))
        return self.failed or self.core.subscriptions()

    def _reset(self, incarnation: int, peers: dict[ReplicaKey, Any], progress: ProgressRoute, coordinator: Any) -> None:
        """A fresh core for ``incarnation``, with the job's actors as they are now."""
        self.transport.reset(incarnation, peers, progress)
        self.transport.coordinator = coordinator
        if self.writer is not None:
            self.writer.reset(incarnation, coordinator)
        self.core = self._new_core()
        self.failed = None
        self.readers.clear()
        self.started.clear()

    def relay(self, encoded: bytes) -> None:
        """As the node's relay: another replica's message for the progress actor (see
        :mod:`~raytide.actors.progress_relay`); runs on the host's ``relay`` threads."""
        self.node_relay.relay(self.transport.route, self.transport.incarnation, encoded)

    def relay_with_refs(self, incarnation: int, *calls: Sequenced) -> None:
        """As the node's relay: another replica's messages that hold object refs."""
        self.node_relay.relay_with_refs(self.transport.route, self.transport.incarnation, (incarnation, calls))

    def fan_out(self, encoded: bytes) -> None:
        """As a relay: deliver the progress actor's pushes of one :class:`PushBundle` (with its
        incarnation, encoded as one), to its replicas and to the relays below it (see
        :mod:`~raytide.physical.relay_tree`); runs on the host's one ``fan_out`` thread, in turn."""
        incarnation, bundle = decode(encoded)
        peers = self.transport.peers
        for key, push in bundle.pushes:
            peers[key].on_progress.remote(encode((incarnation, push)))
        for relay, below in bundle.via.items():
            peers[relay].fan_out.remote(encode((incarnation, below)))

    def relay_gathered(self, encoded: list[bytes], with_refs: list[tuple[int, tuple[Sequenced, ...]]]) -> None:
        """As its group's relay: what another node's relay gathered (its ``receive_relayed`` arguments)."""
        self.node_relay.relay_gathered(self.transport.route, self.transport.incarnation, encoded, with_refs)

    def restore_alone(self, incarnation: int, snapshot_id: int | None, figures: bool, first: int,
                      quiet_through: int) -> AloneRestored | RaytideError:
        """Become the lost replica, recovered alone in ``incarnation`` (the survivors' own) from its part of snapshot
        ``snapshot_id`` (:meth:`ReplicaCore.replace_alone`, :mod:`raytide.driver.alone_recovery`); nothing runs
        until :meth:`resume`. Returns what the driver hands on, or what the restore raised."""
        self.transport.incarnation, self.restores = incarnation, self.restores + 1
        if self.writer is not None:
            self.writer.reset(incarnation, self.transport.coordinator)
        data = self.writer.read_own(snapshot_id) if snapshot_id is not None and self.writer is not None else None
        self._guard(self.core.replace_alone, data, figures, first, quiet_through)
        return self.failed or self.core.alone_restored()

    def replay_to(self, incarnation: int, to: ReplicaKey, handle: Any, positions: dict[ChannelId, int], after: int) -> str | None:
        """Replica ``to`` was recovered alone as ``handle`` (from snapshot ``after``): send it this replica's log from
        ``positions`` on, then what follows, in one event (:meth:`RayTransport.rejoin`: the dead's sends were dropped);
        or, sending nothing, why the log cannot (:meth:`ReplicaCore.refusal`: the whole job rolls back)."""
        refused = self.core.refusal(to, positions) if self._current(incarnation) else None
        if self._current(incarnation) and refused is None:
            self.transport.rejoin(to, handle)
            self._guard(self.core.replay_to, to, positions, after)
        return refused

    def resume(self, incarnation: int) -> None:
        """Run again after :meth:`restore`: the restored back-edge batches first."""
        if self._current(incarnation):
            self._guard(self.core.resume)

    def debug_state(self) -> dict[str, Any]:
        """What the replica holds back and knows, for diagnosing a stuck job."""
        core = self.core
        return {"statuses": core.statuses, "held": core.held_back.changes.items(), "causes": sorted(map(str, core.held_back.causes)),
                "pending": {v: sorted(p, key=Timestamp.sort_key) for v, p in core.notifications.pending.items() if p},
                "unacked": core.unacked,
                "failed": repr(self.failed)}

    def ping(self) -> bool:
        """Liveness check for the driver."""
        return True

    def stats(self) -> dict[str, Any]:
        """Counters of this replica and its channels. Runs on a thread of its own (the host's
        ``inspect`` group) beside the event in hand, so it only reads, copies in one step."""
        stats = self.core.snapshot_stats()
        stats["markers"] = [(m.marker_id, m.records_in) for m in list(self.core.marker_log)]
        stats["max_inflight_seen"] = self.transport.max_seen
        stats["backpressure_waits"] = self.transport.waits
        stats["data_calls"] = self.transport.data_calls
        stats["beside_calls"] = self.transport.beside_calls
        stats["socket_frames"] = self.transport.socket_frames
        stats["busy_s"], stats["blocked_s"] = busy_and_blocked(self.busy_s, self.transport.blocked_s, self.in_event,
                                                               self.transport.blocked_since)
        stats["relay"] = self.node_relay.stats()
        stats["late"] = late_counts(self.started)
        stats["restores"] = self.restores
        return stats

    def _guard(self, method: Any, *args: Any) -> None:
        """Run an event through the core; its time, less what it waited for backpressure,
        counts as busy. A failure fails the job with where it happened."""
        if self.failed is not None:
            return
        started, blocked = time.perf_counter(), self.transport.blocked_s
        outermost = not self.transport.gathering
        if outermost:
            self.in_event = (started, blocked)
        self.transport.gathering = True
        try:
            method(*args)
            if outermost:
                self.transport.gathering = False
                self.transport.flush()
                self.transport.pass_on(self.core.riders_to_pass_on(self.transport.rides))
        except RaytideError as error:  # says where it happened: user code, a broken rule, a dead peer
            self._fail(error)
        except Exception as error:  # a bug or a dead peer: still fail the job with where it happened
            logger.exception("replica %s failed", self.transport.key)
            self._fail(RaytideError(f"replica {self.transport.key[0]!r} #{self.transport.key[1]} failed: {error!r}"))
        finally:
            if outermost:  # a failed event's batches are dropped: the job fails
                self.transport.gathering = False
                self.transport.gathered.clear()
                self.transport.rides.end_event()
                self.in_event = None  # before the total grows: see busy_and_blocked
            now = time.perf_counter()
            self.busy_s += now - started - (self.transport.blocked_s - blocked)
            if self.metrics.due(now):
                self.metrics.publish(self.stats())

    def _fail(self, error: RaytideError) -> None:
        self.failed = error
        self.transport.fail(error)
