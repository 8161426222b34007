"""One replica of a chain of fused vertices, as pure logic: events in, sends and progress out.

A shell (the Ray actor in ``vertex_actor.py``, or the in-process runtime in ``local.py``) feeds a :class:`ReplicaCore` its events: data
batches (those another replica sent in one event, together) or a marker from another replica, a status push from the progress actor, and,
for input vertices, records and epoch advances. The core runs the user's callbacks, routes what they send
(:class:`~raytide.engine.outbox.Outbox`: to fused vertices by a direct call, to itself through a queue it drains before shipping progress,
to other replicas through the transport), and keeps the pointstamp deltas of everything it did.

Progress accounting follows Naiad's rule: the deltas of one event (the ``-1`` of the consumed message and the ``+1``
of everything it caused) are shipped together, and a replica's messages to the progress actor are numbered and applied
in that order. Deltas are held back while they cannot matter (:mod:`raytide.engine.holdback`), so the number of
progress messages does not grow with the number of data batches. Notifications are delivered when no timestamp at or
before them may still arrive (:mod:`raytide.engine.notifications`); a vertex on a cycle gets one round at a time,
each once the tracker has absorbed the last (an acknowledged flush).
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Callable
from time import monotonic
from typing import Any

from raytide.core.batches import batch_length, eager
from raytide.core.keygroups import KeyGroupAssignment
from raytide.core.routing import non_empty
from raytide.core.vertex import Vertex
from raytide.engine import epoch_tokens
from raytide.engine.context import ReplicaContext, VertexCounters
from raytide.engine.holdback import HeldProgress, is_covered
from raytide.engine.modes import HeldCut, ReplicaMode
from raytide.engine.notifications import NotificationQueue
from raytide.engine.outbox import Outbox, Transport
from raytide.engine.riding import Rides
from raytide.errors import GraphError, ProgressError, RaytideError, RescaleError, UserCodeError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import (
    Cause,
    ChannelId,
    Declaration,
    EpochClosed,
    HeldCause,
    Marker,
    MarkerKind,
    MarkerRecord,
    ProgressBatch,
    ProgressMessage,
    ReplicaKey,
    Sequenced,
)
from raytide.physical.wire import output_records
from raytide.progress.publisher import Interests, Status, answers
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp, minimal_elements
from raytide.progress.tracker import Pointstamp
from raytide.rescale.layout import Piece, merge, split
from raytide.snapshots.barriers import BarrierAligner, Decision, ForwardBarrier, Release, SnapshotComplete, TakeSnapshot
from raytide.snapshots.replica_state import (
    HeldReport,
    LoggedBatch,
    OutputPickles,
    ReplicaState,
    ReplicaSummary,
    TakenState,
    capabilities,
    complete,
    load,
    pickle_outputs,
    take,
    unpicklable_state,
)

#: How many of the markers that passed it a replica remembers (for tests and ``replica_stats()``): not all.
MARKERS_KEPT = 64


class ReplicaCore:
    """Replica ``replica`` of chain ``chain`` of ``plan``: runs its vertices, accounts progress.

    With ``keep_outputs`` (a job that takes snapshots) its output vertices keep the records they received until a
    snapshot barrier says the driver has them (:attr:`Marker.delivered`): a recovery hands them to the new progress actor.
    """

    def __init__(self, plan: PhysicalPlan, chain: str, replica: int, transport: Transport, keep_outputs: bool = False) -> None:
        self.plan, self.replica, self.transport = plan, replica, transport
        self.keep_outputs = keep_outputs
        self.chain = plan.chain(chain)
        self.outbox = Outbox(plan, self.chain, replica, transport)
        self.contexts = {name: ReplicaContext(self, name, replica, plan.width(name)) for name in self.chain.vertices}
        self.stats = {name: VertexCounters() for name in self.chain.vertices}
        self.notifications = NotificationQueue(self.chain.vertices)
        self.held_back = HeldProgress()
        self.vertices: dict[str, Vertex] = {}
        self.input_epochs: dict[str, int | None] = {}
        self.positions: dict[str, int] = {}  # driver commands each hosted input consumed
        self.outputs: dict[str, dict[int, list]] = {}  # records per epoch not shipped yet (a columnar batch: a BatchRows)
        self.kept: dict[str, dict[int, list]] = {}  # records per epoch the driver may not have yet
        self.kept_pickles: OutputPickles = {}  # of the kept records at the last snapshot
        for name in self.chain.vertices:
            self._host(name)
        self.statuses: dict[Location, Status] = {}
        self.interests: Interests = {}
        self.sequence = itertools.count()  # numbers the messages to the progress actor
        self.flushes = 0
        self.unacked = 0
        self.markers: dict[int, Marker] = {}
        self.marker_log: collections.deque[MarkerRecord] = collections.deque(maxlen=MARKERS_KEPT)  # the last ones
        self.taken: dict[int, TakenState] = {}  # local snapshots waiting for their back edges' barriers
        self.replay: list[LoggedBatch] = []  # restored back-edge batches, delivered at resume()
        #: Where this replica's source readers are (the shell sets it; part of a snapshot), and
        #: where a restored snapshot says they were (snapshots keep these until a reader takes over).
        self.source_positions: Callable[[], dict[str, Any]] = dict
        self.restored_sources: dict[str, Any] = {}
        self.aligning: dict[int, float] = {}  # when each marker's first barrier arrived here
        #: What the replica does now: runs, waits to be resumed after a restore, or holds at a cut.
        self.mode = ReplicaMode.RUNNING
        #: In :attr:`ReplicaMode.HOLDING`: the cut it holds at and its state there.
        self.cut: HeldCut | None = None
        head = self.chain.vertices[0]
        channels = plan.input_channels(head, replica)
        self.aligner = BarrierAligner(head, inputs=channels, back_edges=plan.back_edges(head, channels))
        self.tokens = epoch_tokens.TokenBook(plan, head, replica)  # the epoch tokens it takes, and sends:
        self.token_sender = epoch_tokens.TokenSender(plan, self.outbox)
        self.in_cycle = any(plan.vertex(v).cyclic for v in self.chain.vertices)

    # -- setup -------------------------------------------------------------------------

    def _host(self, name: str) -> None:
        vertex = self.plan.vertex(name)
        if vertex.role == "input":
            self.input_epochs[name] = 0
            self.positions[name] = 0
        elif vertex.role == "output":
            self.outputs[name] = {}
            self.kept[name] = {}
        elif vertex.role in ("vertex", "feedback"):
            instance = vertex.factory() if vertex.factory else Vertex()
            instance.bind(self.contexts[name])
            self.vertices[name] = instance

    def subscriptions(self) -> list[Location]:
        """The locations whose frontier this replica needs: every input of its vertices (not
        outputs': the progress actor decides when an output epoch is complete)."""
        return [Location.of_input(name, port) for name in self.chain.vertices if name not in self.outputs
                for port in range(len(self.plan.vertex(name).inputs))]

    # -- events from outside -------------------------------------------------------------

    def on_messages(self, messages: list[tuple[ChannelId, str, Timestamp, Any]]) -> None:
        """Batches ``(channel, vertex, time, batch)`` that arrived together from another replica, in order, for
        ``vertex`` (the chain head) on ``channel``: each received, then one settle (one progress message)."""
        for message in messages:
            self._receive(*message)
        self._settle()

    def _receive(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        if self.aligner.on_record(channel, (channel, vertex, time, batch)) is not Decision.BUFFER:
            self._consume(channel, vertex, time, batch)

    def _consume(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        if self.mode is ReplicaMode.HOLDING:
            return  # after a rescale's cut: the rescaled job gets it again (the inputs replay their calls)
        if isinstance(batch, EpochClosed):
            self.tokens.record(channel, batch)
            return
        location = Location.of_input(vertex, channel.port)
        self.held_back.update((location, time), -1)
        self.held_back.caused_by(HeldCause(Cause.MESSAGE, location, time))
        self.deliver(vertex, channel.port, time, batch)

    def on_marker(self, channel: ChannelId, marker: Marker) -> None:
        """A control marker arrived on ``channel``: align, then act on it and forward it."""
        self._receive_marker(channel, marker)
        self._settle()

    def _receive_marker(self, channel: ChannelId, marker: Marker) -> None:
        self.aligning.setdefault(marker.marker_id, monotonic())
        self.markers.setdefault(marker.marker_id, marker)
        self._apply_barrier_effects(self.aligner.on_barrier(channel, marker.marker_id))

    def inject_marker(self, marker: Marker) -> None:
        """At an input replica: start ``marker`` here (the driver injects it at every input)."""
        self.markers.setdefault(marker.marker_id, marker)
        self._apply_barrier_effects(self.aligner.inject(marker.marker_id))
        self._settle()

    def _apply_barrier_effects(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, TakeSnapshot):
                marker = self.markers[effect.snapshot_id]
                self.marker_log.append(MarkerRecord(marker.marker_id, {v: s.records_in for v, s in self.stats.items()}))
                first = self.aligning.pop(marker.marker_id, None)
                alignment_s = 0.0 if first is None else monotonic() - first
                if marker.kind is MarkerKind.SNAPSHOT:
                    self.taken[marker.marker_id] = self._take(marker, alignment_s)
                elif marker.kind is MarkerKind.HOLD:  # nothing runs here from now on: the state stays as it is, uncopied
                    self.mode, self.cut = ReplicaMode.HOLDING, HeldCut(marker.marker_id, alignment_s, self._state(marker))
            elif isinstance(effect, SnapshotComplete):
                taken = self.taken.pop(effect.snapshot_id, None)
                if self.cut is not None and self.cut.marker_id == effect.snapshot_id:
                    self._report_held([batch for records in effect.logged.values() for batch in records])
                elif taken is not None:
                    self.transport.local_snapshot(complete(effect.snapshot_id, self.outbox.key, taken, effect.logged))
            elif isinstance(effect, ForwardBarrier):
                self.outbox.forward_marker(self.markers.pop(effect.snapshot_id))
            elif isinstance(effect, Release):
                for channel, vertex, time, batch in effect.records:
                    self._consume(channel, vertex, time, batch)

    # -- snapshots and restore ----------------------------------------------------------

    def _state(self, marker: Marker) -> ReplicaState:
        """The replica's state at ``marker`` (the chain is aligned on it), by reference, after
        dropping the kept output records of epochs the driver already has."""
        for name, epochs in self.kept.items():
            done = marker.delivered.get(name, -1)
            for epoch in [e for e in epochs if e <= done]:
                del epochs[epoch]
        user = {name: vertex.snapshot() for name, vertex in self.vertices.items()}
        return ReplicaState(user, self.notifications.pending, self.input_epochs, self.positions, self.kept,
                            self.outbox.tables(), {**self.restored_sources, **self.source_positions()})

    def _take(self, marker: Marker, alignment_s: float) -> TakenState:
        """The local snapshot at ``marker``, taken ``alignment_s`` seconds after its first
        barrier came: the state, copied by pickling (processing goes on)."""
        state = self._state(marker)
        try:
            taken, self.kept_pickles = take(state, alignment_s, self.kept_pickles)
        except Exception as error:  # user state that does not pickle: say whose, where and which snapshot
            raise unpicklable_state(state, error, f"{self.chain.name}/{self.replica}", marker.marker_id) from error
        return taken

    def _report_held(self, logged: list[LoggedBatch]) -> None:
        """The cut is complete here (``logged``: the back-edge batches in flight in it): tell the coordinator."""
        cut = self.cut
        assert cut is not None
        cut.logged = logged
        outputs, self.kept_pickles = pickle_outputs(cut.state.kept, self.kept_pickles)
        summary = ReplicaSummary(capabilities(cut.state, logged), dict(cut.state.positions), outputs, cut.alignment_s)
        self.transport.held(cut.marker_id, HeldReport(summary, dict(cut.state.tables)))

    def hand_over(self, plan: PhysicalPlan, old_widths: dict[str, int],
                  tables: dict[str, KeyGroupAssignment]) -> dict[ReplicaKey, Piece]:
        """A rescale to ``plan`` (``tables``: who owns each vertex's key groups there): this
        held replica's state cut into a piece per replica of ``plan`` that gets any of it
        (:func:`~raytide.rescale.layout.split`). Uses the state up: the core is done.

        Raises:
            RescaleError: the replica is not held at a rescale's cut.
        """
        if self.cut is None or self.taken:
            raise RescaleError(f"replica {self.outbox.key} was asked for its state for a rescale, but it is not "
                               f"held at a complete rescale cut")
        return split(plan, old_widths, tables, self.replica, self.cut.state, self.cut.logged)

    def adopt(self, old_widths: dict[str, int], tables: dict[str, KeyGroupAssignment],
              pieces: list[Piece]) -> list[tuple[Pointstamp, int]]:
        """Become this replica of a rescaled job from the ``pieces`` the held replicas handed
        over (a fresh core, before any event; :func:`~raytide.rescale.layout.merge`); returns
        the pointstamps it holds now. Its logged back-edge batches go at :meth:`resume`."""
        state, logged = merge(self.plan, old_widths, tables, self.outbox.key, pieces)
        self._restore(state, logged)
        return capabilities(state, logged)

    def restore(self, data: bytes) -> None:
        """Become the replica whose local snapshot is ``data`` (a fresh core, before any event).

        Its back-edge batches logged in the snapshot are delivered by :meth:`resume`, once
        every replica of the job is restored.
        """
        self._restore(*load(data))

    def _restore(self, state: ReplicaState, logged: list[LoggedBatch]) -> None:
        self.mode, self.replay = ReplicaMode.RESTORED, logged
        for name, saved in state.user.items():
            self._run(name, None, self.vertices[name].restore, saved)
        self.notifications.pending.update(state.notifications)
        self.input_epochs.update(state.input_epochs)
        self.positions.update(state.positions)
        self.kept.update(state.kept)
        self.outbox.restore_tables(state.tables)
        self.restored_sources = state.sources

    def resume(self) -> None:
        """Deliver the restored back-edge batches (ahead of any new traffic), then run as usual."""
        self.mode = ReplicaMode.RUNNING
        replay, self.replay = self.replay, []
        for channel, vertex, time, batch in replay:
            self._consume(channel, vertex, time, batch)
        self._settle()

    def on_progress(self, statuses: dict[Location, Status], acked: int) -> None:
        """The progress actor pushed new frontiers (and absorbed ``acked`` more of our acknowledged flushes)."""
        self.statuses.update(statuses)
        self.unacked = max(0, self.unacked - acked)
        self._settle()

    def push_input(self, vertex: str, batch: Any, epoch: int) -> None:
        """The driver (or a source) delivers records of ``epoch`` to input ``vertex``."""
        if self.mode is ReplicaMode.HOLDING:
            return
        self.positions[vertex] += 1
        current = self.input_epochs[vertex]
        if current is None or epoch != current:
            raise ProgressError(f"input {vertex!r} replica {self.replica} got records for epoch {epoch} "
                                f"but is at epoch {current}: advance the input first")
        time = Timestamp(epoch)
        self.held_back.caused_by(HeldCause(Cause.CAPABILITY, Location.of_vertex(vertex), time))
        self.stats[vertex].records_in += batch_length(batch)
        self.stats[vertex].batches_in += 1
        context = self.contexts[vertex]
        context.current = time
        self.send(context, 0, batch, time)
        context.current = None
        self._settle()

    def advance_input(self, vertex: str, epoch: int | None, quiet: bool = False, proxies: epoch_tokens.Proxies = ()) -> None:
        """Move input ``vertex``'s capability to ``epoch`` (None: close); ``quiet``, ``proxies``: ``epoch_tokens.ProxyPlan``."""
        if self.mode is ReplicaMode.HOLDING:
            return
        self.positions[vertex] += 1
        current = self.input_epochs[vertex]
        if current is None:
            raise ProgressError(f"input {vertex!r} is closed; it cannot move to epoch {epoch}")
        if epoch is not None and epoch < current:
            raise ProgressError(f"input {vertex!r} is at epoch {current}; it cannot go back to epoch {epoch}")
        if epoch == current:
            return
        location = Location.of_vertex(vertex)
        self.held_back.update((location, Timestamp(current)), -1)
        if epoch is not None:
            self.held_back.update((location, Timestamp(epoch)), 1)
        self.input_epochs[vertex] = epoch
        self.held_back.force()
        for name in self.chain.vertices[1:]:  # an input heads its chain: the rest get nothing more from it before epoch
            if name in self.vertices:
                self._run(name, None, self.vertices[name].on_input_epoch, epoch)
            for time in self.notifications.take_before(name, epoch) if self.plan.vertex(name).settles_with_input else ():
                self.held_back.update((Location.of_vertex(name), time), -1)  # it is done with those times (LogicalVertex)
        self.token_sender.close(self.transport, self.notifications.pending, epoch, proxies, quiet)
        self._settle()

    # -- running vertices ----------------------------------------------------------------

    def deliver(self, vertex: str, port: int, time: Timestamp, batch: Any) -> None:
        """Hand a batch to a hosted vertex (from another replica or from a fused upstream)."""
        stats, target = self.stats[vertex], self.vertices.get(vertex)
        stats.batches_in += 1
        stats.records_in += batch_length(batch) if target is None or port not in target.control_ports else 0
        if target is not None:
            self._run(vertex, time, target.on_recv, port, batch if target.takes_lazy_batches else eager(batch), time)
        elif vertex in self.outputs:
            records = output_records(batch)
            self.outputs[vertex].setdefault(time.epoch, []).extend(records)
            if self.keep_outputs:
                self.kept[vertex].setdefault(time.epoch, []).extend(records)
            self.held_back.force()  # records go with the batch that retires them: at once, for latency

    def _run(self, vertex: str, time: Timestamp | None, callback: Any, *args: Any) -> None:
        context = self.contexts[vertex]
        outer, context.current = context.current, time
        try:
            callback(*args)
        except RaytideError:  # raytide's own error: says where it happened (a dead peer, a broken rule)
            raise
        except Exception as error:  # user code: wrap with where it happened
            raise UserCodeError(vertex, self.replica, time, error) from error
        finally:
            context.current = outer

    def send(self, context: ReplicaContext, output: int, message: Any, time: Timestamp) -> None:
        """``send_by`` of a hosted vertex: check the time, route, count progress."""
        vertex = context.vertex
        current = context.current
        self._check_port(vertex, output, current if current is not None else time)
        if not self._may_send(vertex, output, current, time):
            during = f"while processing {current}" if current is not None else "in on_input_epoch"
            raise ProgressError(f"vertex {vertex!r} replica {self.replica} sent at {time} {during}: a vertex may "
                                f"not send at a time earlier than the one it was called with, unless it awaits a "
                                f"notification at or before that time")
        n = batch_length(message)
        if not n:
            return
        stats = self.stats[vertex]
        stats.batches_out += 1
        stats.records_out += n
        for consumer, router, chain in self.outbox.routes(vertex, output):
            if router is None:
                self.deliver(consumer.vertex, consumer.port, time, message)
                continue
            target = Location.of_input(consumer.vertex, consumer.port)
            channel = ChannelId(vertex, output, self.replica, consumer.port)
            try:
                parts = non_empty(router.route(message))
            except Exception as error:  # the consumer's key function (or an unhashable key it returned)
                raise UserCodeError(consumer.vertex, self.replica, time, error,
                                    where=f"its input's key function, run where {vertex!r} sends") from error
            for replica, part in parts:
                self.held_back.update((target, time), 1)
                self.outbox.send(ReplicaKey(chain, replica), channel, consumer.vertex, time, part)

    def _check_port(self, vertex: str, output: Any, time: Timestamp) -> None:
        """Raise a GraphError naming the vertex and its ports if ``output`` is not one of them."""
        ports = self.plan.vertex(vertex).outputs
        if not isinstance(output, int) or isinstance(output, bool) or not 0 <= output < ports:
            raise GraphError(f"vertex {vertex!r} replica {self.replica} called send_by at {time} on output port "
                             f"{output!r}, which it does not have; its output ports are {list(range(ports))}")

    def _may_send(self, vertex: str, output: int, current: Timestamp | None, time: Timestamp) -> bool:
        """Whether ``vertex``, called at ``current``, may send at ``time`` on ``output``.

        It may at any time its call's timestamp can reach, and at any time a pending
        notification can reach: the notification's pointstamp holds the frontier there
        (like a capability in timely dataflow). A call without a time
        (:meth:`~raytide.Vertex.on_input_epoch`) holds only the notifications.
        """
        summary = self.plan.vertex(vertex).output_summary(output)
        pending = self.notifications.of(vertex)
        held = pending if current is None else (current, *pending)
        return any(earliest is not None and earliest.less_equal(time) for earliest in map(summary.results_in, held))

    def request_notification(self, context: ReplicaContext, time: Timestamp) -> None:
        """``notify_at`` of a hosted vertex."""
        current = context.current
        if current is not None and not current.less_equal(time):
            raise ProgressError(f"vertex {context.vertex!r} replica {self.replica} asked to be notified at {time} "
                                f"while processing {current}: notifications cannot be in the past")
        if self.notifications.request(context.vertex, time):
            self.held_back.update((Location.of_vertex(context.vertex), time), 1)

    def cancel_notification(self, context: ReplicaContext, time: Timestamp) -> None:
        """``cancel_notify`` of a hosted vertex: its pointstamp goes as a delivered one's does,
        shipped at the next chance (what waits downstream need not wait for a delivery)."""
        if self.notifications.cancel(context.vertex, time):
            self.held_back.update((Location.of_vertex(context.vertex), time), -1)
            self.held_back.force()

    # -- after every event ---------------------------------------------------------------

    def _settle(self) -> None:
        """After every event: deliver what this replica sent itself, then notifications, then
        ship progress if it may matter, and tell the progress actor what this replica now
        waits on (with the progress when both go).

        When what it waits on must be declared and would still be once its held-back
        progress were shipped (a new notification), the replica sends the progress actor a
        message anyway, so what it holds back goes along: the same number of messages, and
        the frontier does not wait a round trip (a status push, then this flush) for it. A
        wait of held-back progress alone is declared instead: shipping would only make it
        due again at the next message.
        """
        self._drain_local()
        self._deliver_notifications()
        if self.token_sender.owed and self.mode is ReplicaMode.RUNNING:  # after what its notifications sent
            self.token_sender.close(self.transport, self.notifications.pending, self.input_epochs[self.chain.vertices[0]])
        ship = self._should_ship()  # first: it forgets causes whose deltas cancelled out
        interests = self._interests()
        if not ship and self._must_declare(interests):
            ship = self._must_declare(self._interests(held=False))
        if ship:
            changes, outputs = self._take_held()
            if changes or outputs:
                self._send_held(changes, outputs, ack=False)
                return
            interests = self._interests()  # what it held is no longer waited on
        if self._must_declare(interests):
            self.interests = interests
            self._to_progress(Declaration(interests))

    def _must_declare(self, interests: Interests) -> bool:
        """Whether the progress actor must learn ``interests`` now: they changed, and one of
        them could be answered before this replica ships progress anyway.

        An input this replica hosts holds its capability until it moves, which ships
        progress (and the interests with it); meanwhile no time it could still result in
        is ready or uncovered anywhere it can reach (a pointstamp at another location holds
        the frontier there), so a declaration of only such waits may wait for that batch.
        The waits of a vertex fused behind an input are such waits until the input moves on.
        """
        if interests == self.interests:
            return False
        return not interests or not all(self._held_here(location, time)
                                        for location, waits in interests.items() for time, _ in waits)

    def _held_here(self, location: Location, time: Timestamp) -> bool:
        """Whether an open input of this replica holds the frontier at ``location`` at or before ``time``."""
        return any(epoch is not None and self.plan.graph.could_result_in(Location.of_vertex(name), Timestamp(epoch),
                                                                        location, time)
                   for name, epoch in self.input_epochs.items())

    def _drain_local(self) -> None:
        """Deliver what this replica sent itself, in send order (each channel stays FIFO).

        Draining before progress is shipped lets the +1 of such a batch cancel its -1 in
        the same progress batch.
        """
        local = self.outbox.local
        while local:
            is_marker, arguments = local.popleft()
            if is_marker:
                self._receive_marker(*arguments)
            else:
                self._receive(*arguments)

    def _interests(self, held: bool = True) -> Interests:
        """What this replica waits on: pending notifications at their vertex's inputs (for
        their time to be ready) and, unless ``held`` is False (as once it is shipped),
        held-back progress at the location of its cause (for its time to be no longer
        covered); only the minimal times matter (a later one is answered no earlier)."""
        waits: dict[Location, dict[Timestamp, bool]] = {}
        for vertex, pending in self.notifications.pending.items():
            asked = [time for time in pending if not self.tokens.answers_alone(vertex, time)]  # tokens answer the rest
            if asked:
                for port in range(len(self.plan.vertex(vertex).inputs)):
                    waits[Location.of_input(vertex, port)] = dict.fromkeys(asked, False)
        for location, time in self.held_back.waits() if held else ():
            if not self._shipped_at_a_token(location.vertex, time):
                waits.setdefault(location, {})[time] = True
        return {loc: [(t, times[t]) for t in sorted(minimal_elements(times), key=Timestamp.sort_key)]
                for loc, times in waits.items()}

    def _shipped_at_a_token(self, vertex: str, time: Timestamp) -> bool:
        """Whether progress held back at an input of ``vertex`` at ``time`` will be shipped
        when tokens alone make a notification due: one of ``vertex`` at or before ``time``
        is pending (its delivery ships all that is held), so no status need tell when it
        is no longer covered (nothing downstream can pass ``time`` before that delivery)."""
        return any(pending.less_equal(time) and self.tokens.answers_alone(vertex, pending)
                   for pending in self.notifications.pending.get(vertex, ()))

    def _ready(self, vertex: str, time: Timestamp) -> bool:
        if self.tokens.ready(vertex, time):
            return True
        for port in range(len(self.plan.vertex(vertex).inputs)):
            status = self.statuses.get(Location.of_input(vertex, port))
            if status is None or not answers(status, time)[0]:
                return False
        return True

    def _deliver_notifications(self) -> None:
        if self.mode is ReplicaMode.HOLDING:
            return
        for vertex in self.chain.vertices:
            if not self.notifications.of(vertex):
                continue
            cyclic = self.plan.vertex(vertex).cyclic
            if cyclic and self.unacked:
                continue
            due = self.notifications.take_due(vertex, functools.partial(self._ready, vertex), one_round=cyclic)
            for time in due:
                self.stats[vertex].notifications += 1
                self._run(vertex, time, self.vertices[vertex].on_notify, time)
                self.held_back.update((Location.of_vertex(vertex), time), -1)
                self.held_back.force()
            self._drain_local()
            if cyclic and due:
                self._send_held(*self._take_held(), ack=True)

    def _should_ship(self) -> bool:
        def covered(cause: HeldCause) -> bool:
            return is_covered(cause, self.statuses, self.input_epochs)

        return self.held_back.should_ship(covered, self.in_cycle, has_outputs=any(self.outputs.values()))

    def riders_to_pass_on(self, rides: Rides) -> list[Sequenced]:
        """The batches that came with data to pass on now: while it runs, those that rode with tokens may wait."""
        if self.mode is not ReplicaMode.RUNNING or not self.tokens.keeps_riders():
            return rides.take_passing_on()
        rides.keep(self.tokens.latest)
        return rides.take_passing_on(self.tokens.closed_by_all)

    def _take_held(self) -> tuple[list[tuple[Pointstamp, int]], dict[str, dict[int, list]]]:
        """Everything held back: the progress deltas and the output records they retire."""
        outputs = {name: epochs for name, epochs in self.outputs.items() if epochs}
        for name in outputs:
            self.outputs[name] = {}
        return self.held_back.take(), outputs

    def _send_held(self, changes: list[tuple[Pointstamp, int]], outputs: dict[str, dict[int, list]], ack: bool) -> None:
        """Ship the progress with the output records it retires, and what the replica now waits
        on if that changed (a cyclic round's next notification goes along)."""
        previous, self.interests = self.interests, self._interests()
        self.flushes += 1
        if ack:
            self.unacked += 1
        parts = {name: {e: [records] for e, records in epochs.items()} for name, epochs in outputs.items()}
        self._to_progress(ProgressBatch(changes, ack, self.interests if self.interests != previous else None,
                                        parts or None))

    def _to_progress(self, message: ProgressMessage) -> None:
        self.transport.to_progress(Sequenced(self.outbox.key, next(self.sequence), message))

    # -- introspection -------------------------------------------------------------------

    def snapshot_stats(self) -> dict[str, Any]:
        """Counters per hosted vertex (with what it counts of its state) plus this replica's progress flushes."""
        return {"vertices": {name: {**vars(s), **(self.vertices[name].statistics() if name in self.vertices else {})}
                             for name, s in self.stats.items()},
                "progress_flushes": self.flushes, "local_sends": self.outbox.local_sends}
