"""How a replica's core reaches the other actors on Ray (its :class:`~raytide.engine.outbox.Transport`):
data to its peers in one ``receive_many`` call per event and receiver, with at most
``max_inflight`` calls in flight per receiver (backpressure, but never out of a feedback
vertex: a loop always drains); progress to the progress actor or its node's relay, or riding
with data to a peer (:mod:`raytide.engine.riding`); local snapshots to the writer thread;
a rescale cut's report and failures. The message flow is in :mod:`raytide.actors.vertex_actor`'s
docstring; the vertex actor owns one transport, rebuilt at each incarnation's ``reset``.

A peer on this node is sent to over a socket once connected (:mod:`raytide.actors.socket_hops`,
the same ``receive_many`` and ``receive_marker`` arguments, framed): the peer is asked its
socket's address at the first send; Ray calls carry the channel until the answer is in and
every Ray call to that peer has run, then the socket does, in this incarnation (a reset
closes the sockets: a rescale or a recovery starts again on Ray calls; a ``connect`` in the
same incarnation keeps the socket of every peer it leaves in place, :meth:`RayTransport.connect`),
so every channel stays FIFO. A peer elsewhere, or without a listener, stays on Ray calls.
"""

from __future__ import annotations

import collections
import dataclasses
import pickle
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import ray

from raytide.actors.host_base import Beside
from raytide.actors.socket_hops import Outbound, connect_ready
from raytide.core.batches import to_records
from raytide.engine import epoch_tokens
from raytide.engine.riding import Rides
from raytide.errors import RaytideError, ReplicaLost, SnapshotError
from raytide.physical.frames import DATA, MARKER, PROGRESS
from raytide.physical.pickled import frame, pack_records, packed_size, unpicklable
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import (
    ChannelId,
    EpochClosed,
    Marker,
    ProgressBatch,
    ProgressRoute,
    ReplicaKey,
    Sequenced,
    encode,
)
from raytide.physical.wire import pack
from raytide.progress.timestamps import Timestamp

if TYPE_CHECKING:  # imported by a replica's first snapshot or cut, which a first job may never take
    from raytide.snapshots.replica_state import HeldReport, LocalSnapshot
    from raytide.snapshots.writer import SnapshotWriter

#: A peer that is reached by Ray calls only (on another node, or without a socket).
BY_RAY = "ray"
#: Output records of at most this many pickled bytes per epoch travel inline to the progress
#: actor; larger ones stay in the object store (Ray passes arguments by value up to 100 KiB).
INLINE_BYTES = 64 * 1024


class Sent(NamedTuple):
    """A batch as :meth:`RayTransport.send` packed it (``(payload, packed)``, :func:`~raytide.physical.wire.pack`):
    what an upstream log keeps, and sends again as it is (docs/recovery.md, "What it costs")."""

    payload: tuple[Any, bool]


class RayTransport:
    """Sends through Ray with a bounded window of in-flight calls per receiver."""

    def __init__(self, key: ReplicaKey, plan: PhysicalPlan, job: str, max_inflight: int,
                 writer: SnapshotWriter | None, sockets: bool = False, numbered: bool = False,
                 beside: Beside | None = None) -> None:
        """``numbered``: the job numbers its sends (``Recovery(alone=True)``): an input's epoch
        close then goes to the progress actor itself, never kept by a receiver that may be lost alone.
        ``beside``: the replica this one's host plays, reached in this process (an input replica seated
        beside the replica it feeds, :attr:`VertexHost.inputs <raytide.actors.hosts.VertexHost.inputs>`)."""
        self.key, self.plan, self.job = key, plan, job
        self.max_inflight = max_inflight
        self.writer = writer
        self.coordinator: Any = None  # the snapshot coordinator's handle (a cut's reports go to it)
        self.incarnation = 0
        self.peers: dict[ReplicaKey, Any] = {}
        self.unbounded: set[str] = set()
        self.route = ProgressRoute(None)  # the progress actor, and the node's relay if the job has them
        self.inflight: dict[ReplicaKey, collections.deque] = collections.defaultdict(collections.deque)
        self.max_seen = 0
        self.waits = 0
        self.blocked_s = 0.0  # waiting for a receiver's window (backpressure)
        self.blocked_since: float | None = None  # when the wait in hand began (read by stats, on another thread)
        self.data_calls = 0  # Ray calls that carried data batches (several batches may share one)
        self.gathering = False  # inside an event: data batches wait in `gathered` until it ends
        self.gathered: dict[ReplicaKey, list[tuple[str, tuple]]] = {}  # per receiver, (sender, receive args)
        #: Progress batches going with this event's data, and other replicas' to pass on.
        self.rides = Rides(key.chain, epoch_tokens.rides_with_tokens(plan, key.chain) and not numbered)
        #: Numbered: a send to a receiver that died is dropped (its upstream log keeps it for the
        #: replacement's replay, :meth:`rejoin`) and the driver learns of the death from Ray.
        self.numbered = numbered
        self.dead: set[ReplicaKey] = set()  # receivers found dead, until they rejoin
        #: Per peer: its socket, or the pending answer of its address, or :data:`BY_RAY`; none yet: not asked.
        self.links: dict[ReplicaKey, Any] = {}
        self.progress_link: Any = None  # the same for the progress actor
        self.sockets = sockets  # whether to ask peers for their sockets at all
        self.socket_frames = 0  # frames sent over sockets (data and markers)
        self.beside = beside
        self.beside_calls = 0  # calls to the replica beside, in this process (data and markers)

    def send(self, to: ReplicaKey, channel: ChannelId, vertex: str, time: Timestamp, batch: Any,
             sequence: int | None = None) -> Sent | None:
        """Pack ``batch`` (a :class:`Sent`: as it was packed before, a replay) and gather it for
        ``to``; numbered, what an upstream log keeps of it: its packed form."""
        try:
            payload = batch.payload if type(batch) is Sent else pack(batch)
        except Exception as error:
            raise unpicklable(to_records(batch), error, f"vertex {channel.source!r} sending to {vertex!r} at "
                              f"epoch {time.epoch}") from error
        self.gathered.setdefault(to, []).append((channel.source, ((self.incarnation, channel, vertex, time, sequence), *payload)))
        self.rides.sent(to, token=isinstance(batch, EpochClosed))
        if not self.gathering:
            self._flush(to)
        return None if sequence is None else Sent(payload)

    def send_marker(self, to: ReplicaKey, channel: ChannelId, vertex: str, marker: Marker) -> None:
        self._flush(to)  # the batches sent before it go first: a channel stays FIFO
        self._call(to, channel.source, "receive_marker", self.incarnation, channel, marker)

    def flush(self) -> None:
        """The end of an event: each receiver gets the batches gathered for it in one call
        (``receive_many``, its arguments framed as one pickle: :func:`~raytide.physical.pickled.frame`)
        and takes them in one event, so a round of a loop that sends a peer two batches (the
        next round's rows and the epoch gate's token) costs one Ray call and one progress
        message there instead of two. A progress batch placed with a receiver whose data
        went before it (a marker sent it on) goes to the progress actor."""
        for to in list(self.gathered):
            self._flush(to)
        stranded = self.rides.take_stranded()
        if stranded:
            self._send_progress(tuple(stranded), refs=False)

    def _flush(self, to: ReplicaKey) -> None:
        calls = self.gathered.pop(to, None)
        if not calls:
            return
        self.data_calls += 1
        bounded = next((sender for sender, _ in calls if sender not in self.unbounded), None)  # no wait if any is
        framed = frame([args for _, args in calls], self.rides.take(to))
        self._call(to, calls[0][0] if bounded is None else bounded, "receive_many", framed)

    def _call(self, to: ReplicaKey, sender: str, method: str, *args: Any) -> None:
        """Call ``method`` of receiver ``to``; with numbered sends, a dead receiver's call is dropped
        (see :attr:`numbered`: nothing waits on it, nothing fails here)."""
        if to in self.dead:
            return
        try:
            self._call_live(to, sender, method, *args)
        except ReplicaLost:
            if not self.numbered:
                raise
            self.dead.add(to)
            self.inflight.pop(to, None)

    def rejoin(self, to: ReplicaKey, handle: Any) -> None:
        """Receiver ``to`` was recovered alone as ``handle``: sends go to it again (after the replay
        the caller sends first), by Ray calls until its socket is asked for again."""
        self.dead.discard(to)
        self.inflight.pop(to, None)
        self.connect({**self.peers, to: handle}, self.unbounded, self.route)

    def _call_live(self, to: ReplicaKey, sender: str, method: str, *args: Any) -> None:
        peer = self.peers[to]
        if self.beside is not None and self.beside.plays(peer):
            self._in_host(peer.lease, method, args)
            return
        try:
            link = self._link(to) if self.sockets else None
        except ray.exceptions.RayActorError as error:  # a Ray call to it that failed, or its address
            raise self._lost(to, error) from error
        if link is not None:
            self._by_socket(link, to, sender, method, args)
            return
        window = self.inflight[to]
        try:
            if len(window) >= self.max_inflight:  # one look per window of calls, not one per call
                self._prune(window)
            if sender not in self.unbounded and len(window) >= self.max_inflight:
                started = self.blocked_since = time.perf_counter()
                try:
                    while len(window) >= self.max_inflight:
                        self.waits += 1
                        ray.get(window.popleft())  # the oldest call; raises if the receiver died
                finally:  # cleared before the total grows (see VertexActor._busy_and_blocked)
                    self.blocked_since = None
                    self.blocked_s += time.perf_counter() - started
        except ray.exceptions.RayActorError as error:
            raise self._lost(to, error) from error
        window.append(getattr(self.peers[to], method).remote(*args))
        self.max_seen = max(self.max_seen, len(window))

    def _in_host(self, lease: int, method: str, args: tuple) -> None:
        """Run the call on the replica beside, in this process, now: FIFO as the sender's events
        are, and it holds back the sender as a full window would, so its time counts as blocked.
        Safe from deadlock: the replica beside never sends to this one (an input has no
        upstream), and this sender's waits for other hosts' windows hold only its own lock."""
        assert self.beside is not None
        started = self.blocked_since = time.perf_counter()
        try:
            self.beside.call(lease, method, args)
        finally:
            self.blocked_since = None
            self.blocked_s += time.perf_counter() - started
        self.beside_calls += 1

    def _link(self, to: ReplicaKey) -> Outbound | None:
        """The socket to ``to``, if the channel goes by socket now (see the module docstring)."""
        link = self.links.get(to)
        if link is None:
            self.links[to] = self.peers[to].socket_address.remote()
            return None
        if isinstance(link, Outbound) or link == BY_RAY:
            return link if isinstance(link, Outbound) else None
        window = self.inflight[to]
        if window:
            self._prune(window)
        if window or not ray.wait([link], timeout=0)[0]:
            return None  # Ray calls to it still to run, or no answer yet: Ray calls keep the channel FIFO
        outbound = connect_ready(link, f"{self.job}/{to}")
        self.links[to] = outbound if outbound is not None else BY_RAY
        return outbound

    def _by_socket(self, link: Outbound, to: ReplicaKey, sender: str, method: str, args: tuple) -> None:
        """One call's arguments as a frame on ``to``'s socket, in the window a Ray call would wait in."""
        kind, packed = (DATA, args[0]) if method == "receive_many" else (MARKER, pickle.dumps(args, pickle.HIGHEST_PROTOCOL))
        try:
            waited = link.send(kind, packed, None if sender in self.unbounded else self.max_inflight)
        except (OSError, TimeoutError) as error:  # a dead peer's socket closed: a death notice
            raise self._lost(to, error) from error
        self.socket_frames += 1
        if waited:
            self.waits += 1
            self.blocked_s += waited

    def _to_progress_by_socket(self, encoded: bytes) -> bool:
        """Send progress messages on the progress actor's socket, if connected (asked at the
        first send; numbered messages may overtake those still in Ray calls). A socket that
        fails goes: the Ray call goes instead, and the driver learns of a dead progress actor
        as before."""
        link = self.progress_link
        if link is None:
            self.progress_link = self.route.progress.socket_address.remote()
            return False
        if not isinstance(link, Outbound):
            if link == BY_RAY or not ray.wait([link], timeout=0)[0]:
                return False
            try:
                link = self.progress_link = connect_ready(link, "the progress actor") or BY_RAY
            except ray.exceptions.RayActorError:
                self.progress_link = BY_RAY
            if not isinstance(link, Outbound):
                return False
        try:
            link.send(PROGRESS, encoded, None)
        except (OSError, TimeoutError):
            link.close()
            self.progress_link = BY_RAY
            return False
        self.socket_frames += 1
        return True

    def connect(self, peers: dict[ReplicaKey, Any], unbounded: set[str], route: ProgressRoute) -> None:
        """The peers, the sends that never wait and the progress route now, in this incarnation
        (a job without ``recovery=`` is told them again at its first rescale, mid-stream). A
        peer whose handle is the same keeps its link: its socket still reaches the same
        receiver, and frames written on it may still wait for its delivery thread, so a Ray
        call sent now could overtake them (a reorder within a channel). A peer replaced or gone
        loses its link, and so does the progress actor if its route changed."""
        for to, link in list(self.links.items()):
            if peers.get(to) != self.peers.get(to):
                if isinstance(link, Outbound):
                    link.close()
                del self.links[to]
        if route != self.route:
            if isinstance(self.progress_link, Outbound):
                self.progress_link.close()
            self.progress_link = None
        self.peers, self.unbounded, self.route = peers, unbounded, route

    def close_sockets(self) -> None:
        """Close every peer's socket; the next sends go by Ray calls until they are connected again."""
        for link in [*self.links.values(), self.progress_link]:
            if isinstance(link, Outbound):
                link.close()
        self.links.clear()
        self.progress_link = None

    def _lost(self, to: ReplicaKey, error: BaseException) -> ReplicaLost:
        """The error for a receiver that died: it names the receiver, not this sender's user code."""
        return ReplicaLost(f"{self.job}/{to}", self.plan.chain(to.chain).vertices,
                           f"replica {self.job}/{self.key} sending to it", type(error).__name__)

    @staticmethod
    def _prune(window: collections.deque) -> None:
        """Forget calls that completed (surfacing their errors), keeping the order of the rest."""
        ready, _ = ray.wait(list(window), num_returns=len(window), timeout=0)
        if ready:
            ray.get(ready)
            done = set(ready)
            for _ in range(len(window)):
                ref = window.popleft()
                if ref not in done:
                    window.append(ref)

    def local_snapshot(self, snapshot: LocalSnapshot) -> None:
        if self.writer is None:
            raise SnapshotError(f"replica {self.job}/{self.key} reached snapshot barrier {snapshot.snapshot_id}, but "
                                f"the job was started without recovery=rt.Recovery(...)")
        self.writer.submit(self.incarnation, snapshot)

    def held(self, marker_id: int, report: HeldReport) -> None:
        """Tell the coordinator the replica holds at rescale cut ``marker_id`` (a part-less
        acknowledgement, with what it holds: ``report``); in a job without snapshots too."""
        if self.coordinator is None:
            raise SnapshotError(f"replica {self.job}/{self.key} reached rescale cut {marker_id} without a snapshot "
                                f"coordinator to report to")
        from raytide.snapshots.coordinator import Acknowledgement

        self.coordinator.acknowledge.remote(Acknowledgement(self.key, marker_id, self.incarnation, (), report))

    def reset(self, incarnation: int, peers: dict[ReplicaKey, Any], route: ProgressRoute) -> None:
        """A recovery or a rescale: the peers now (replaced ones; the old handles are let go),
        and nothing of the calls still in flight is waited for."""
        self.incarnation, self.peers = incarnation, peers
        self.route = route
        self.inflight.clear()
        self.dead.clear()
        self.close_sockets()
        self.rides.reset()

    def to_progress(self, call: Sequenced) -> None:
        """A message for the progress actor: it rides with this event's data
        (:meth:`Rides.place <raytide.engine.riding.Rides.place>`) or goes in a call of its
        own, encoded unless an output part is an object ref. Output records travel packed,
        and large parts stay in the object store."""
        refs = False
        if isinstance(call.message, ProgressBatch) and call.message.outputs:
            packed = {name: {epoch: [self._part(part, name, epoch) for part in parts] for epoch, parts in epochs.items()}
                      for name, epochs in call.message.outputs.items()}
            refs = any(isinstance(part, ray.ObjectRef) for epochs in packed.values() for parts in epochs.values()
                       for part in parts)
            call = call._replace(message=dataclasses.replace(call.message, outputs=packed))
        calls = self.rides.place(call, self.gathering, self.gathered)
        if calls:
            self._send_progress(calls, refs=refs)

    def _send_progress(self, calls: tuple[Sequenced, ...], refs: bool) -> None:
        """One Ray call to the progress actor, or to the node's relay: encoded, unless a part is
        an object ref (Ray must see it)."""
        relay, progress = self.route.relay, self.route.progress
        if relay is None and not refs and self.sockets and self._to_progress_by_socket(encode((self.incarnation, calls))):
            return
        if refs:
            (relay.relay_with_refs if relay is not None else progress.receive_with_refs).remote(self.incarnation, *calls)
        else:
            (relay.relay if relay is not None else progress.receive).remote(encode((self.incarnation, calls)))

    def pass_on(self, calls: list[Sequenced]) -> None:
        """Send the progress actor what came with data, did not go with a message of this
        replica's and is not kept for its next (:meth:`ReplicaCore.riders_to_pass_on`)."""
        if calls:
            self._send_progress(tuple(calls), refs=False)

    def fail(self, error: RaytideError) -> None:
        self.route.progress.fail.remote(self.incarnation, error)

    @staticmethod
    def _part(records: list, output: str, epoch: int) -> Any:
        try:
            blob = pack_records(records)
        except Exception as error:
            raise unpicklable(records, error, f"output {output!r} epoch {epoch}") from error
        return blob if packed_size(blob) <= INLINE_BYTES else ray.put(blob)

