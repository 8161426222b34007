"""A replica's state and the vertices it hosts: their callbacks run, what they send checked
and routed, their notifications asked for and cancelled.

The base of :class:`~raytide.engine.replica.ReplicaCore` (the core is built up in layers,
one purpose each: this one; barriers, snapshots and restores in
:mod:`raytide.engine.replica_barriers`; what a replica ships after every event in
:mod:`raytide.engine.settling`; the events from outside in :mod:`raytide.engine.replica`).
Everything a replica keeps is made here, in :meth:`HostedVertices.__init__`, so that each
layer reads one set of attributes.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from raytide.core.batches import batch_length, eager
from raytide.core.routing import non_empty
from raytide.core.vertex import Vertex
from raytide.engine import epoch_tokens
from raytide.engine.context import ReplicaContext, VertexCounters
from raytide.engine.holdback import HeldProgress
from raytide.engine.modes import HeldCut, ReplicaMode
from raytide.engine.notifications import NotificationQueue
from raytide.engine.numbered_channels import Numbering, kept_into
from raytide.engine.outbox import Outbox, Transport, split
from raytide.errors import GraphError, ProgressError, RaytideError, UserCodeError
from raytide.physical.pickled import copied
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import (
    ChannelId,
    Marker,
    MarkerRecord,
    ReplicaKey,
)
from raytide.physical.wire import output_records
from raytide.progress.publisher import Interests, Status
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.barriers import BarrierAligner

if TYPE_CHECKING:  # imported with a first stepped rescale, snapshot or restore (raytide.engine.replica_barriers)
    from raytide.engine.stepping import SteppedVertex
    from raytide.snapshots.replica_state import LoggedBatch, OutputPickles, TakenState

#: How many of the markers that passed it a replica remembers (for tests and ``replica_stats()``): not all.
MARKERS_KEPT = 64


class HostedVertices:
    """What replica ``replica`` of chain ``chain`` of ``plan`` keeps, and how it runs its vertices
    (:class:`~raytide.engine.replica.ReplicaCore` is the whole replica).

    With ``keep_outputs`` (every job on Ray) its output vertices keep the records they received until a snapshot
    barrier or a rescale's cut says the driver has them (:attr:`Marker.delivered`), or the driver does
    (:meth:`~raytide.engine.replica_barriers.BarrierHandling.forget_delivered`, in a job without snapshots): a recovery
    or a rescale hands them to the new progress actor.
    """

    #: Snapshots up to this id are aligned and passed on, not taken (abandoned while a replica
    #: was recovered alone: :meth:`~raytide.engine.replica.ReplicaCore.replace_alone`).
    quiet_through = 0
    positions: dict[str, int]
    #: Each hosted input's latest epoch records were pushed at since this core started (a stepped plan may be
    #: cut at an input's own epoch only if none was: :func:`~raytide.engine.stepping.check_in_time`).
    fed: dict[str, int]

    def __init__(self, plan: PhysicalPlan, chain: str, replica: int, transport: Transport, keep_outputs: bool = False,
                 numbered: bool = False, logged: Collection[str] | None = None, log_cap: int | None = None) -> None:
        """``numbered``: number sends, keep them, drop duplicates (:mod:`raytide.engine.numbered_channels`), keeping
        only sends into the chains ``logged`` (none: every one; :func:`~raytide.supervisor.alone.logged_chains`), at
        most ``log_cap`` of them (``Recovery.upstream_log_cap``; none: :data:`~raytide.engine.upstream_log.CAP`)."""
        self.plan, self.replica, self.transport = plan, replica, transport
        self.keep_outputs = keep_outputs
        self.chain = plan.chain(chain)
        head, channels = self.chain.vertices[0], plan.input_channels(self.chain.vertices[0], replica)
        back_edges = plan.back_edges(head, channels)
        self.outbox = Outbox(plan, self.chain, replica, transport, Numbering(f"{chain}[{replica}]", numbered, back_edges,
                                                                               keeps=kept_into(logged), cap=log_cap))
        self.contexts = {name: ReplicaContext(self, name, replica, plan.width(name)) for name in self.chain.vertices}
        self.stats = {name: VertexCounters() for name in self.chain.vertices}
        self.notifications = NotificationQueue(self.chain.vertices)
        self.held_back = HeldProgress()
        self.vertices: dict[str, Vertex] = {}
        self.input_epochs: dict[str, int | None] = {}
        self.positions, self.fed = {}, {}  # driver commands each hosted input consumed; the epoch of its latest push
        self.outputs: dict[str, dict[int, list]] = {}  # records per epoch not shipped yet (a columnar batch: a BatchRows)
        self.kept: dict[str, dict[int, list]] = {}  # records per epoch the driver may not have yet
        self.kept_pickles: OutputPickles = {}  # of the kept records at the last snapshot
        for name in self.chain.vertices:
            self._host(name)
        self.statuses: dict[Location, Status] = {}
        self.interests: Interests = {}
        self.sequence = itertools.count()  # numbers the messages to the progress actor
        self.flushes = self.unacked = 0
        self.markers: dict[int, Marker] = {}
        self.marker_log: collections.deque[MarkerRecord] = collections.deque(maxlen=MARKERS_KEPT)  # the last ones
        self.taken: dict[int, TakenState] = {}  # local snapshots waiting for their back edges' barriers
        self.replay: list[LoggedBatch] = []  # restored back-edge batches, delivered at resume()
        #: Where this replica's source readers are (the shell sets it; part of a snapshot), and
        #: where a restored snapshot says they were (snapshots keep these until a reader takes over).
        self.source_positions: Callable[[], dict[str, Any]] = dict
        self.restored_sources: dict[str, Any] = {}
        self.aligning: dict[int, float] = {}  # when each marker's first barrier arrived here
        self.mode = ReplicaMode.RUNNING  # runs, waits to be resumed after a restore, or holds at a cut
        #: In :attr:`ReplicaMode.HOLDING`: the cut it holds at and its state there.
        self.cut: HeldCut | None = None
        self.aligner = BarrierAligner(head, inputs=channels, back_edges=back_edges)
        self.tokens = epoch_tokens.TokenBook(plan, head, replica)  # the epoch tokens it takes, and sends:
        self.token_sender = epoch_tokens.TokenSender(plan, self.outbox)
        self.in_cycle = any(plan.vertex(v).cyclic for v in self.chain.vertices)
        self.stepped: dict[str, SteppedVertex] = {}  # hosted vertices a stepped rescale moves (install_plan)

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
        for consumer, router, chain, copy in self.outbox.routes(vertex, output):
            if router is None:
                own = self._copied(message, vertex, output, time, consumer.vertex) if copy else message
                self.deliver(consumer.vertex, consumer.port, time, own)
                continue
            target = Location.of_input(consumer.vertex, consumer.port)
            channel = ChannelId(vertex, output, self.replica, consumer.port)
            try:
                parts = non_empty(split(router, message, time))
            except Exception as error:  # the consumer's key function (or an unhashable key it returned)
                raise UserCodeError(consumer.vertex, self.replica, time, error,
                                    where=f"its input's key function, run where {vertex!r} sends") from error
            for replica, part in parts:
                self.held_back.update((target, time), 1)
                self.outbox.send(ReplicaKey(chain, replica), channel, consumer.vertex, time, part, target)

    def _copied(self, message: Any, vertex: str, output: int, time: Timestamp, reader: str) -> Any:
        """``message`` copied for ``reader``, one of the fused readers of ``vertex``'s ``output``
        (:func:`~raytide.engine.outbox.readers_own`); the error says where if it does not pickle."""
        return copied(message, lambda: f"vertex {vertex!r} replica {self.replica}, output {output} at {time}, "
                                       f"copied for {reader!r}, one of its readers")

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

    # -- introspection -------------------------------------------------------------------

    def snapshot_stats(self) -> dict[str, Any]:
        """Counters per hosted vertex (with what it counts of its state) plus this replica's progress flushes."""
        return {"vertices": {name: {**vars(s), **(self.vertices[name].statistics() if name in self.vertices else {})}
                             for name, s in self.stats.items()},
                "progress_flushes": self.flushes, "local_sends": self.outbox.local_sends,
                "upstream_log": self.outbox.numbering.kept(),  # messages kept for a replay (0: not numbered)
                "log_dropped": self.outbox.numbering.log.dropped}  # messages its log dropped past its cap
