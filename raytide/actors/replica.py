"""One replica of a chain of fused vertices, as pure logic: events in, sends and progress out.

The Ray shell (``vertex_actor.py``) feeds a :class:`ReplicaCore` four kinds of events:
a data message from another actor, a progress push from the progress actor, and, for
input vertices, driver pushes and epoch advances. The core runs the user's callbacks,
routes what they send (to fused vertices by a direct call, to itself through a queue it
drains before shipping progress -- a loop's feedback --, to other actors through the
:class:`Transport`), and keeps the pointstamp deltas of everything it did.

Progress accounting follows Naiad's rule: the deltas of one event (the ``-1`` of the
consumed message and the ``+1`` of everything it caused) are shipped together, and
batches from one replica are applied in order. Outside loops, deltas are held back
while they cannot matter (inside a loop every iteration waits on them, so they go at
once): when each event that caused them is *covered*, i.e. the frontier at the
event's location is held below it, or at it by some other pointstamp, the tracker's
frontier cannot move past anything the held deltas would retire. When a progress push
uncovers a cause, or a notification or a capability change happened, the whole batch
is shipped. So the number of progress messages does not grow with the number of
data batches, and holding back never advances a frontier early (an unshipped ``-1``
only keeps a count up).

Notifications are delivered when no timestamp at or before them may still arrive at
the vertex's inputs, in timestamp order. For a vertex on a cycle a notification's
own output may come back to it, so it delivers one round of minimal timestamps at a
time and waits until the tracker has absorbed that round (an acknowledged flush).
"""

from __future__ import annotations

import collections
import traceback
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from raytide.core.batches import batch_length, eager, to_records
from raytide.core.routing import BroadcastRouter, ExchangeRouter, PipelineRouter, Router, non_empty
from raytide.actors.markers import ChannelId, Marker, MarkerRecord
from raytide.actors.plan import Consumer, PhysicalPlan
from raytide.core.vertex import Vertex
from raytide.errors import ProgressError, RaytideError
from raytide.progress.change_batch import ChangeBatch
from raytide.progress.publisher import Interests, answers
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp, minimal_elements
from raytide.snapshots.barriers import BarrierAligner, Decision, ForwardBarrier, Release, TakeSnapshot

#: A location's frontier as the progress actor pushes it: each minimal timestamp, and
#: whether some pointstamp other than the ones at that very place holds it there.
Status = list[tuple[Timestamp, bool]]
Pointstamp = tuple[Location, Timestamp]

#: Ship held-back progress anyway once it has this many distinct pointstamps.
MAX_HELD_PROGRESS = 4096


class Transport(Protocol):
    """What the shell does for the core: send messages, and progress with the output records it retires."""

    def send(self, chain: str, replica: int, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None: ...  # noqa: D102

    def send_marker(self, chain: str, replica: int, channel: ChannelId, vertex: str, marker: Marker) -> None: ...  # noqa: D102

    def flush_progress(self, changes: list[tuple[Pointstamp, int]], ack: bool,  # noqa: D102
                       outputs: dict[str, dict[int, list]], interests: Optional[Interests]) -> None: ...

    def declare_interests(self, interests: Interests) -> None: ...  # noqa: D102


class UserCodeError(RaytideError):
    """User code (or a vertex breaking the progress rules) raised inside a vertex callback."""

    def __init__(self, vertex: str, replica: int, time: Optional[Timestamp], error: BaseException) -> None:
        self.vertex, self.replica, self.time = vertex, replica, time
        self.original = repr(error)
        self.traceback = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        when = f"epoch {time.epoch}" + (f", iteration {time.counters}" if time and time.counters else "") if time else "no epoch"
        super().__init__(f"vertex {vertex!r} replica {replica} failed at {when}: {error!r}\n{self.traceback}")

    def __reduce__(self) -> Any:
        return (_rebuild_user_error, (self.vertex, self.replica, self.time, self.original, self.traceback))


def _rebuild_user_error(vertex: str, replica: int, time: Optional[Timestamp], original: str, tb: str) -> UserCodeError:
    error = UserCodeError.__new__(UserCodeError)
    error.vertex, error.replica, error.time, error.original, error.traceback = vertex, replica, time, original, tb
    when = f"epoch {time.epoch}" if time else "no epoch"
    RaytideError.__init__(error, f"vertex {vertex!r} replica {replica} failed at {when}: {original}\n{tb}")
    return error


@dataclass
class VertexStats:
    """Counters of one hosted vertex in this replica."""

    records_in: int = 0
    records_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    notifications: int = 0


class _Context:
    """The :class:`~raytide.core.vertex.VertexContext` of one hosted vertex."""

    def __init__(self, core: ReplicaCore, vertex: str, replica: int, parallelism: int) -> None:
        self.core, self.vertex, self.replica, self.parallelism = core, vertex, replica, parallelism
        self.current: Optional[Timestamp] = None

    def send_by(self, output: int, message: Any, time: Timestamp) -> None:
        self.core.send(self, output, message, time)

    def notify_at(self, time: Timestamp) -> None:
        self.core.request_notification(self, time)


@dataclass
class _InputState:
    epoch: Optional[int] = 0


class ReplicaCore:
    """Replica ``replica`` of chain ``chain`` of ``plan``: runs its vertices, accounts progress."""

    def __init__(self, plan: PhysicalPlan, chain: str, replica: int, transport: Transport) -> None:
        self.plan, self.replica, self.transport = plan, replica, transport
        self.chain = plan.chain(chain)
        self.contexts: dict[str, _Context] = {}
        self.vertices: dict[str, Vertex] = {}
        self.inputs: dict[str, _InputState] = {}
        self.outputs: dict[str, dict[int, list]] = {}  # records per epoch not shipped yet
        self.routers: dict[tuple[str, int, int], Router] = {}
        self.pending: dict[str, set[Timestamp]] = {}
        self.statuses: dict[Location, Status] = {}
        self.stats: dict[str, VertexStats] = {}
        self.progress: ChangeBatch[Pointstamp] = ChangeBatch()
        self.causes: set[tuple[str, Location, Timestamp]] = set()
        self.must_flush = False
        self.flushes = 0
        self.unacked = 0
        self.interests: Interests = {}
        self.markers: dict[int, Marker] = {}
        self.marker_log: list[MarkerRecord] = []
        #: Batches and markers this replica sent itself, not delivered yet: ``(is_marker, arguments)``.
        self.local: collections.deque[tuple[bool, tuple]] = collections.deque()
        self.local_sends = 0
        for name in self.chain.vertices:
            self._host(name)
        head = self.chain.vertices[0]
        channels = self._input_channels(head)
        self.aligner = BarrierAligner(head, inputs=channels, back_edges=self._back_edges(head, channels))
        self.in_cycle = any(v in plan.cyclic for v in self.chain.vertices)

    # -- setup -------------------------------------------------------------------------

    def _host(self, name: str) -> None:
        logical = self.plan.vertex(name)
        context = _Context(self, name, self.replica, self.plan.parallelism[name])
        self.contexts[name] = context
        self.stats[name] = VertexStats()
        self.pending[name] = set()
        if logical.role == "input":
            self.inputs[name] = _InputState()
        elif logical.role == "output":
            self.outputs[name] = {}
        elif logical.role in ("vertex", "feedback"):
            vertex = logical.factory() if logical.factory else Vertex()
            vertex.bind(context)
            self.vertices[name] = vertex
        for port in range(logical.outputs):
            for index, consumer in enumerate(self.plan.consumers[(name, port)]):
                if not self.plan.is_fused(consumer):
                    self.routers[(name, port, index)] = self._router(name, consumer)

    def _router(self, name: str, consumer: Consumer) -> Router:
        width = self.plan.parallelism[consumer.vertex]
        if consumer.channel.kind == "exchange":
            assert consumer.channel.key is not None
            return ExchangeRouter(consumer.channel.key, width)
        if consumer.channel.kind == "broadcast":
            return BroadcastRouter(width)
        return PipelineRouter(self.replica, self.plan.parallelism[name], width)

    def _input_channels(self, vertex: str) -> list[ChannelId]:
        """Every channel that can deliver to ``vertex`` (a replica of each upstream edge sending here)."""
        channels: list[ChannelId] = []
        width = self.plan.parallelism[vertex]
        for port, edges in enumerate(self.plan.vertex(vertex).inputs):
            for edge in edges:
                senders = self.plan.parallelism[edge.source]
                if edge.channel.kind == "pipeline" and senders == width:
                    channels.append((edge.source, edge.output, self.replica, port))
                else:
                    channels += [(edge.source, edge.output, r, port) for r in range(senders)]
        return channels

    def _back_edges(self, head: str, channels: list[ChannelId]) -> list[ChannelId]:
        """Channels that close a cycle through ``head`` (their sender is downstream of it).

        Markers come back on those only after ``head`` forwarded them, so they are not
        aligned on. A vertex all of whose inputs lie on the cycle (inside a loop body) is
        not where the cycle is entered, and aligns on them as usual.
        """
        graph, start = self.plan.graph, Location.of_vertex(head)
        back = [c for c in channels if graph.summaries(start, Location.of_vertex(c[0]))]
        return back if len(back) < len(channels) else []

    def _destinations(self, router: Router, consumer: Consumer) -> list[int]:
        """The replicas of ``consumer`` this replica has a channel to (where markers go)."""
        if isinstance(router, PipelineRouter) and self.plan.parallelism[consumer.vertex] == self.chain.parallelism:
            return [self.replica]
        return list(range(self.plan.parallelism[consumer.vertex]))

    def subscriptions(self) -> list[Location]:
        """The locations whose frontier this replica needs: every input of its vertices.

        Outputs need none: the progress actor decides when an output epoch is complete.
        """
        return [
            Location.of_input(name, port)
            for name in self.chain.vertices if name not in self.outputs
            for port in range(len(self.plan.vertex(name).inputs))
        ]

    # -- events from outside -------------------------------------------------------------

    def on_message(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        """A batch arrived from another actor on ``channel`` for ``vertex`` (the chain head)."""
        self._receive(channel, vertex, time, batch)
        self._settle()

    def _receive(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        if self.aligner.on_record(channel, (channel, vertex, time, batch)) is not Decision.BUFFER:
            self._consume(channel, vertex, time, batch)

    def _consume(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        location = Location.of_input(vertex, channel[3])
        self.progress.update((location, time), -1)
        self.causes.add(("message", location, time))
        self.deliver(vertex, channel[3], time, batch)

    def on_marker(self, channel: ChannelId, marker: Marker) -> None:
        """A control marker arrived on ``channel``: align, then act on it and forward it."""
        self._receive_marker(channel, marker)
        self._settle()

    def _receive_marker(self, channel: ChannelId, marker: Marker) -> None:
        self.markers.setdefault(marker.marker_id, marker)
        self._apply_barrier_effects(self.aligner.on_barrier(channel, marker.marker_id))

    def _send_batch(self, chain: str, replica: int, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        if self._is_self(chain, replica):
            self.local.append((False, (channel, vertex, time, batch)))
            self.local_sends += 1
        else:
            self.transport.send(chain, replica, channel, vertex, time, batch)

    def _send_marker(self, chain: str, replica: int, channel: ChannelId, vertex: str, marker: Marker) -> None:
        if self._is_self(chain, replica):
            self.local.append((True, (channel, marker)))
        else:
            self.transport.send_marker(chain, replica, channel, vertex, marker)

    def _is_self(self, chain: str, replica: int) -> bool:
        """Whether ``(chain, replica)`` is this replica: a loop's feedback routed back here."""
        return replica == self.replica and chain == self.chain.name

    def _drain_local(self) -> None:
        """Deliver what this replica sent itself, in send order (each channel stays FIFO).

        Self-sends skip Ray: no serialisation (the receiving vertex gets the very object
        sent, which is why ``send_by`` hands a batch over) and no wait in the actor's
        mailbox. Draining before progress is shipped lets the +1 of such a batch cancel
        its -1 in the same progress batch.
        """
        while self.local:
            is_marker, arguments = self.local.popleft()
            if is_marker:
                self._receive_marker(*arguments)
            else:
                self._receive(*arguments)

    def inject_marker(self, marker: Marker) -> None:
        """At an input replica: start ``marker`` here (the driver injects it at every input)."""
        self.markers.setdefault(marker.marker_id, marker)
        self._apply_barrier_effects(self.aligner.inject(marker.marker_id))
        self._settle()

    def _apply_barrier_effects(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, TakeSnapshot):
                self._pass_marker(self.markers[effect.snapshot_id])
            elif isinstance(effect, ForwardBarrier):
                self._forward_marker(self.markers.pop(effect.snapshot_id))
            elif isinstance(effect, Release):
                for channel, vertex, time, batch in effect.records:
                    self._consume(channel, vertex, time, batch)

    def _pass_marker(self, marker: Marker) -> None:
        """The chain is at the marker: record where it stood and switch routing tables."""
        self.marker_log.append(MarkerRecord(marker.marker_id, {v: s.records_in for v, s in self.stats.items()}))
        for (vertex, output, index), router in self.routers.items():
            table = marker.reroute.get((vertex, output, self.plan.consumers[(vertex, output)][index].vertex))
            if table is not None and isinstance(router, ExchangeRouter):
                router.swap_table(table)

    def _forward_marker(self, marker: Marker) -> None:
        for (vertex, output, index), router in self.routers.items():
            consumer = self.plan.consumers[(vertex, output)][index]
            chain = self.plan.chain_of[consumer.vertex]
            for replica in self._destinations(router, consumer):
                self._send_marker(chain, replica, (vertex, output, self.replica, consumer.port), consumer.vertex, marker)

    def on_progress(self, statuses: dict[Location, Status], acked: bool) -> None:
        """The progress actor pushed new frontiers (and, if ``acked``, absorbed our last flush)."""
        self.statuses.update(statuses)
        if acked:
            self.unacked = max(0, self.unacked - 1)
        self._settle()

    def push_input(self, vertex: str, batch: Any, epoch: int) -> None:
        """The driver (or a source) delivers records of ``epoch`` to input ``vertex``."""
        state = self.inputs[vertex]
        if state.epoch is None or epoch != state.epoch:
            raise ProgressError(f"input {vertex!r} replica {self.replica} got records for epoch {epoch} "
                                f"but is at epoch {state.epoch}: advance the input first")
        time = Timestamp(epoch)
        self.causes.add(("capability", Location.of_vertex(vertex), time))
        self.stats[vertex].records_in += batch_length(batch)
        self.stats[vertex].batches_in += 1
        context = self.contexts[vertex]
        context.current = time
        self.send(context, 0, batch, time)
        context.current = None
        self._settle()

    def advance_input(self, vertex: str, epoch: Optional[int]) -> None:
        """Move input ``vertex``'s capability to ``epoch`` (None: close the input)."""
        state = self.inputs[vertex]
        if state.epoch is None:
            raise ProgressError(f"input {vertex!r} is closed; it cannot move to epoch {epoch}")
        if epoch is not None and epoch < state.epoch:
            raise ProgressError(f"input {vertex!r} is at epoch {state.epoch}; it cannot go back to epoch {epoch}")
        if epoch == state.epoch:
            return
        location = Location.of_vertex(vertex)
        self.progress.update((location, Timestamp(state.epoch)), -1)
        if epoch is not None:
            self.progress.update((location, Timestamp(epoch)), 1)
        state.epoch = epoch
        self.must_flush = True
        for name in self.chain.vertices[1:]:  # an input heads its chain: the rest get nothing more from it before epoch
            if name in self.vertices:
                self._run(name, None, self.vertices[name].on_input_epoch, epoch)
        self._settle()

    # -- running vertices ----------------------------------------------------------------

    def deliver(self, vertex: str, port: int, time: Timestamp, batch: Any) -> None:
        """Hand a batch to a hosted vertex (from another actor or from a fused upstream)."""
        stats = self.stats[vertex]
        stats.batches_in += 1
        stats.records_in += batch_length(batch)
        if vertex in self.vertices:
            target = self.vertices[vertex]
            self._run(vertex, time, target.on_recv, port, batch if target.takes_lazy_batches else eager(batch), time)
        elif vertex in self.outputs:
            self.outputs[vertex].setdefault(time.epoch, []).extend(to_records(batch))
            self.must_flush = True  # records go with the batch that retires them: at once, for latency

    def _run(self, vertex: str, time: Timestamp, callback: Any, *args: Any) -> None:
        context = self.contexts[vertex]
        outer, context.current = context.current, time
        try:
            callback(*args)
        except UserCodeError:
            raise
        except Exception as error:  # user code: wrap with where it happened
            raise UserCodeError(vertex, self.replica, time, error) from error
        finally:
            context.current = outer

    def send(self, context: _Context, output: int, message: Any, time: Timestamp) -> None:
        """``send_by`` of a hosted vertex: check the time, route, count progress."""
        vertex = context.vertex
        current = context.current
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
        for index, consumer in enumerate(self.plan.consumers[(vertex, output)]):
            router = self.routers.get((vertex, output, index))
            if router is None:
                self.deliver(consumer.vertex, consumer.port, time, message)
                continue
            target = Location.of_input(consumer.vertex, consumer.port)
            chain = self.plan.chain_of[consumer.vertex]
            channel = (vertex, output, self.replica, consumer.port)
            for replica, part in non_empty(router.route(message)):
                self.progress.update((target, time), 1)
                self._send_batch(chain, replica, channel, consumer.vertex, time, part)

    def _may_send(self, vertex: str, output: int, current: Optional[Timestamp], time: Timestamp) -> bool:
        """Whether ``vertex``, called at ``current``, may send at ``time`` on ``output``.

        It may at any time its call's timestamp can reach, and at any time a pending
        notification can reach: the notification's pointstamp holds the frontier there
        (like a capability in timely dataflow). A call without a time
        (:meth:`~raytide.Vertex.on_input_epoch`) holds only the notifications.
        """
        summary = self.plan.vertex(vertex).output_summary(output)
        held = self.pending[vertex] if current is None else (current, *self.pending[vertex])
        return any(earliest is not None and earliest.less_equal(time) for earliest in map(summary.results_in, held))

    def request_notification(self, context: _Context, time: Timestamp) -> None:
        """``notify_at`` of a hosted vertex."""
        current = context.current
        if current is not None and not current.less_equal(time):
            raise ProgressError(f"vertex {context.vertex!r} replica {self.replica} asked to be notified at {time} "
                                f"while processing {current}: notifications cannot be in the past")
        pending = self.pending[context.vertex]
        if time not in pending:
            pending.add(time)
            self.progress.update((Location.of_vertex(context.vertex), time), 1)

    # -- after every event ---------------------------------------------------------------

    def _settle(self) -> None:
        """After every event: deliver what this replica sent itself, then notifications, then
        ship progress if it may matter, and tell the progress actor what this replica now
        waits on (in the same call when both)."""
        self._drain_local()
        self._deliver_notifications()
        flushing = self._should_flush()
        changes, outputs = self._take() if flushing else ([], {})
        interests = self._interests()
        changed = interests != self.interests
        self.interests = interests
        if changes or outputs:
            self._ship(changes, False, outputs, interests if changed else None)
        elif changed:
            self.transport.declare_interests(interests)

    def _interests(self) -> Interests:
        """What this replica waits on: pending notifications at their vertex's inputs and
        held-back progress at the location of its cause; only the minimal times matter (a
        later one is answered no earlier)."""
        waits: dict[Location, set[Timestamp]] = {}
        for vertex, pending in self.pending.items():
            for port in range(len(self.plan.vertex(vertex).inputs)):
                waits.setdefault(Location.of_input(vertex, port), set()).update(pending)
        for kind, location, time in self.causes:
            if kind == "message":
                waits.setdefault(location, set()).add(time)
        return {loc: sorted(minimal_elements(times), key=tuple) for loc, times in waits.items() if times}

    def _ready(self, vertex: str, time: Timestamp) -> bool:
        for port in range(len(self.plan.vertex(vertex).inputs)):
            status = self.statuses.get(Location.of_input(vertex, port))
            if status is None or not answers(status, time)[0]:
                return False
        return True

    def _deliver_notifications(self) -> None:
        for vertex in self.chain.vertices:
            pending = self.pending[vertex]
            if not pending:
                continue
            cyclic = vertex in self.plan.cyclic
            if cyclic and self.unacked:
                continue
            ready = sorted((t for t in pending if self._ready(vertex, t)), key=tuple)
            if cyclic:
                ready = [t for t in ready if not any(o.less_than(t) for o in pending)]
            for time in ready:
                pending.discard(time)
                self.stats[vertex].notifications += 1
                self._run(vertex, time, self.vertices[vertex].on_notify, time)
                self.progress.update((Location.of_vertex(vertex), time), -1)
                self.must_flush = True
            self._drain_local()
            if cyclic and ready:
                self._flush(ack=True)

    def _covered(self, cause: tuple[str, Location, Timestamp]) -> bool:
        kind, location, time = cause
        if kind == "capability":
            return self.inputs[location.vertex].epoch == time.epoch
        status = self.statuses.get(location)
        return status is not None and answers(status, time)[1]

    def _should_flush(self) -> bool:
        if self.progress.is_empty() and not any(self.outputs.values()):
            self.causes.clear()
            self.must_flush = False
            return False
        return (self.must_flush or self.in_cycle or len(self.progress) > MAX_HELD_PROGRESS
                or not all(map(self._covered, self.causes)))

    def _flush(self, ack: bool) -> None:
        changes, outputs = self._take()
        if changes or outputs or ack:
            self._ship(changes, ack, outputs, None)

    def _take(self) -> tuple[list[tuple[Pointstamp, int]], dict[str, dict[int, list]]]:
        """Everything held back: the progress deltas and the output records they retire."""
        changes = self.progress.drain()
        outputs = {name: epochs for name, epochs in self.outputs.items() if epochs}
        for name in outputs:
            self.outputs[name] = {}
        self.causes.clear()
        self.must_flush = False
        return changes, outputs

    def _ship(self, changes: list[tuple[Pointstamp, int]], ack: bool, outputs: dict[str, dict[int, list]],
              interests: Optional[Interests]) -> None:
        self.flushes += 1
        if ack:
            self.unacked += 1
        self.transport.flush_progress(changes, ack, outputs, interests)

    # -- introspection -------------------------------------------------------------------

    def snapshot_stats(self) -> dict[str, Any]:
        """Counters per hosted vertex plus this replica's progress flushes."""
        return {
            "vertices": {name: vars(s).copy() for name, s in self.stats.items()},
            "progress_flushes": self.flushes,
            "local_sends": self.local_sends,
        }

