"""Where a replica's sends go: to fused vertices, to itself, or to other replicas.

For each output port of each hosted vertex the outbox knows the consumers and, for
those that run in another actor (or in another replica of this chain), the router
that splits a batch among their replicas (:mod:`raytide.core.routing`). What this
replica sends itself (a loop's feedback routed back here) never leaves it: such
batches and markers wait in a local queue that the replica drains, in send order, so
each channel stays FIFO; they skip serialisation, which is why ``send_by`` hands a
batch over.

While a stepped rescale of a keyed vertex runs (:meth:`Outbox.install_plan`), every exchange
into it routes a batch by the owners in force at the batch's epoch
(:class:`~raytide.rescale.migration.TimedRouter`), not by the moment it is sent. The rescale's
modules come with the first such plan (or a snapshot of the tables), not with every replica.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias

from raytide.core.keygroups import KeyGroupAssignment
from raytide.core.routing import BroadcastRouter, ExchangeRouter, PipelineRouter, Routed, Router
from raytide.engine.numbered_channels import Numbering
from raytide.physical.plan import ChainPlan, Consumer, PhysicalPlan
from raytide.physical.protocol import ChannelId, Marker, ReplicaKey, Sequenced
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp

if TYPE_CHECKING:
    from raytide.rescale.migration import TimedRouter
    from raytide.rescale.steps import StepPlan
    from raytide.snapshots.replica_state import HeldReport, LocalSnapshot

#: A router of an outbox: one of :mod:`raytide.core.routing`'s, or one that routes by a
#: stepped rescale's plan at the batch's time.
OutRouter: TypeAlias = "Router | TimedRouter"


class Transport(Protocol):
    """What the shell does for the core: deliver to other replicas and to the progress actor."""

    def send(self, to: ReplicaKey, channel: ChannelId, vertex: str, time: Timestamp, batch: Any,
             sequence: int | None = None) -> Any:
        """A data batch for ``vertex`` (the head of ``to``'s chain) on ``channel``, numbered
        ``sequence`` on it (None: the job does not number its sends, :mod:`raytide.engine.numbered_channels`).
        Returns what a numbered send's upstream log keeps in place of ``batch`` (the form the
        transport made of it, which it takes back as ``batch`` in a replay), or None: the batch."""

    def send_marker(self, to: ReplicaKey, channel: ChannelId, vertex: str, marker: Marker) -> None:
        """A control marker on ``channel``."""

    def to_progress(self, call: Sequenced) -> None:
        """A numbered message to the progress actor."""

    def local_snapshot(self, snapshot: LocalSnapshot) -> None:
        """A complete local snapshot: write it off the processing path, then acknowledge it."""

    def held(self, marker_id: int, report: HeldReport) -> None:
        """Held at rescale marker ``marker_id``, with the cut complete here: acknowledge it."""


class Route(NamedTuple):
    """One consumer of an output port: its router (None: fused, a direct call), its chain, and
    whether a fused consumer is handed a copy of each batch (:func:`readers_own`)."""

    consumer: Consumer
    router: OutRouter | None
    chain: str
    copy: bool = False


#: A message this replica sent itself: a data batch ``(channel, vertex, time, batch)``
#: or a marker ``(channel, marker)``.
LocalMessage = tuple[bool, tuple[Any, ...]]


class Outbox:
    """Routes for every output of a chain replica, plus the queue of its self-sends."""

    def __init__(self, plan: PhysicalPlan, chain: ChainPlan, replica: int, transport: Transport,
                 numbering: Numbering | None = None) -> None:
        """``numbering``: what numbers and keeps the sends to other replicas (none: off)."""
        self.plan, self.chain, self.replica, self.transport = plan, chain, replica, transport
        self.key = ReplicaKey(chain.name, replica)
        self.numbering = numbering or Numbering(f"{chain.name}[{replica}]", enabled=False)
        #: The numbering if it is on, else None: a send skips it with one test, not two calls that return at once.
        self.numbered = self.numbering if self.numbering.enabled else None
        self.routers: dict[tuple[str, int, int], OutRouter] = {}
        for name in chain.vertices:
            for port in range(plan.vertex(name).outputs):
                for index, consumer in enumerate(plan.consumers_of(name, port)):
                    if not plan.is_fused(consumer):
                        self.routers[(name, port, index)] = self._router(name, consumer)
        self._routes = self._make_routes()
        self.local: collections.deque[LocalMessage] = collections.deque()
        self.local_sends = 0

    def _router(self, name: str, consumer: Consumer) -> Router:
        width = self.plan.width(consumer.vertex)
        if consumer.channel.kind == "exchange":
            assert consumer.channel.key is not None
            return ExchangeRouter(consumer.channel.key, width)
        if consumer.channel.kind == "broadcast":
            return BroadcastRouter(width)
        return PipelineRouter(self.replica, self.plan.width(name), width)

    def _make_routes(self) -> dict[tuple[str, int], list[Route]]:
        routes = {}
        for name in self.chain.vertices:
            for port in range(self.plan.vertex(name).outputs):
                consumers = self.plan.consumers_of(name, port)
                routers = [self.routers.get((name, port, index)) for index in range(len(consumers))]
                routes[(name, port)] = [Route(consumer, router, self.plan.chain_of(consumer.vertex).name, copy)
                                        for consumer, router, copy in zip(consumers, routers, readers_own(routers))]
        return routes

    def install_plan(self, vertex: str, steps: StepPlan) -> bool:
        """Route every exchange out of this replica into ``vertex`` by ``steps``' owners at a
        batch's epoch; whether this replica has such an exchange."""
        from raytide.rescale.migration import TimedRouter

        found = False
        for (name, port, index), router in self.routers.items():
            consumer = self.plan.consumers_of(name, port)[index]
            if consumer.vertex == vertex and isinstance(router, ExchangeRouter | TimedRouter):
                assert consumer.channel.key is not None
                self.routers[(name, port, index)] = TimedRouter(consumer.channel.key, steps)
                found = True
        self._routes = self._make_routes()
        return found

    def follow(self, plan: PhysicalPlan) -> None:
        """Send by ``plan`` from now: one keyed vertex wider or narrower, in place (a stepped
        rescale's join or retiring switch, docs/rescaling.md). Markers and epoch tokens follow
        its width at once; the data keeps its routes' tables, but a stepped exchange into a
        vertex that narrowed (its plan's steps all past: the retiring replicas own nothing)
        routes by the plan's final table at the new width from now on."""
        from raytide.rescale.migration import TimedRouter

        self.plan = plan
        for (name, port, index), router in self.routers.items():
            consumer = plan.consumers_of(name, port)[index]
            width = plan.width(consumer.vertex)
            if isinstance(router, TimedRouter) and router.after.parallelism > width:
                assert consumer.channel.key is not None
                table = KeyGroupAssignment(router.after.owners, width)  # refuses a group owned by a retiring replica
                self.routers[(name, port, index)] = ExchangeRouter(consumer.channel.key, width, table.key_groups, table)
        self._routes = self._make_routes()

    def routes(self, vertex: str, output: int) -> list[Route]:
        """The consumers of ``vertex``'s ``output``, each with its router and chain (computed once)."""
        return self._routes[(vertex, output)]

    def send(self, to: ReplicaKey, channel: ChannelId, vertex: str, time: Timestamp, batch: Any,
             counted: Location | None = None) -> None:
        """A batch to replica ``to``: queued locally when that is this replica, else numbered
        on the channel (and kept in the upstream log) if the job numbers its sends, and its
        figure counted at ``counted`` (where its ``+1`` was; None: it has none, a hand-over). The
        log keeps what the transport made of the batch (its pickled bytes on Ray), not the batch:
        one object per send, not one per record, and a replay does not pickle it again."""
        if to == self.key:
            self.local.append((False, (channel, vertex, time, batch)))
            self.local_sends += 1
        else:
            numbered = self.numbered
            if numbered is None:
                self.transport.send(to, channel, vertex, time, batch)
                return
            if counted is not None:
                numbered.count(True, counted, time, to, channel)
            sent = self.transport.send(to, channel, vertex, time, batch, sequence=numbered.log.next((to, channel)))
            numbered.number((to, channel), (vertex, time, batch if sent is None else sent))  # the number it went with

    def replay(self, to: ReplicaKey, positions: dict[ChannelId, int], after: int = 0) -> int:
        """Send replica ``to`` again what this replica sent it on each channel from the
        position ``positions`` names (a channel it does not name: from the log's start), under
        the same numbers, with the markers after snapshot ``after`` (the one ``to`` restored)
        in their places: the upstream backup of a replica restored alone. Returns how many batches."""
        replayed = 0
        for receiver, channel, consumer in self._channels_out():
            if receiver != to:
                continue
            for sequence, entry in self.numbering.replay((to, channel), positions.get(channel, 0), after):
                if sequence is None:
                    self.transport.send_marker(to, channel, consumer.vertex, entry)
                else:
                    vertex, time, batch = entry
                    self.transport.send(to, channel, vertex, time, batch, sequence=sequence)
                    replayed += 1
        return replayed

    def refusal(self, to: ReplicaKey, positions: dict[ChannelId, int]) -> str | None:
        """Why :meth:`replay` to ``to`` from ``positions`` cannot be given (None: it can; see
        :meth:`~raytide.engine.upstream_log.UpstreamLog.refusal`), asked before anything is sent."""
        refusals = (self.numbering.log.refusal((to, channel), positions.get(channel, 0))
                    for receiver, channel, _ in self._channels_out() if receiver == to)
        return next((refused for refused in refusals if refused is not None), None)

    def forward_marker(self, marker: Marker) -> None:
        """Send ``marker`` on every channel out of this replica (after everything sent before it)."""
        for to, channel, consumer in self._channels_out():
            if to == self.key:
                self.local.append((True, (channel, marker)))
            else:
                self.numbering.note_marker((to, channel), marker)
                self.transport.send_marker(to, channel, consumer.vertex, marker)

    def token_channels(self, receivers: frozenset[str]) -> list[tuple[ReplicaKey, ChannelId, str]]:
        """Every channel out of this replica into a vertex of ``receivers``: ``(to, channel, vertex)``."""
        return [(to, channel, consumer.vertex) for to, channel, consumer in self._channels_out()
                if consumer.vertex in receivers]

    def _channels_out(self) -> Iterator[tuple[ReplicaKey, ChannelId, Consumer]]:
        """Every channel out of this replica to another actor, or to itself: ``(to, channel, consumer)``."""
        for vertex, output, index in self.routers:
            consumer = self.plan.consumers_of(vertex, output)[index]
            to_chain = self.plan.chain_of(consumer.vertex).name
            channel = ChannelId(vertex, output, self.replica, consumer.port)
            for replica in destinations(self.plan, self.chain, self.replica, consumer):
                yield ReplicaKey(to_chain, replica), channel, consumer

    def tables(self) -> dict[tuple[str, int, int], KeyGroupAssignment]:
        """The routing table of every exchange out of this replica (part of its snapshot; a
        stepped rescale's, its table after the last step: no snapshot is taken while it runs)."""
        from raytide.rescale.migration import TimedRouter

        return {route: router.table if isinstance(router, ExchangeRouter) else router.after
                for route, router in self.routers.items() if isinstance(router, ExchangeRouter | TimedRouter)}

    def restore_tables(self, tables: dict[tuple[str, int, int], KeyGroupAssignment]) -> None:
        """Route by ``tables`` (as :meth:`tables` returned them)."""
        for route, table in tables.items():
            router = self.routers[route]
            if isinstance(router, ExchangeRouter):
                router.swap_table(table)


def readers_own(routers: list[OutRouter | None]) -> list[bool]:
    """Which consumers of one output port (by their routers; None: fused) are handed a copy of
    each batch: a stream read by several consumers gives each its own records, as separate
    processes would get them, so that none sees what another changed in them or keeps. The
    batch itself goes to the routed consumers (as it did before any reader was fused) or, when
    every consumer is fused, to the last one, which runs after the others took their copies."""
    fused = [index for index, router in enumerate(routers) if router is None]
    owner = fused[-1] if fused and len(fused) == len(routers) else None
    return [router is None and index != owner for index, router in enumerate(routers)]


def split(router: OutRouter, batch: Any, time: Timestamp) -> Routed:
    """``(replica, part)`` for ``batch`` sent at ``time`` (a timed router routes by the epoch)."""
    return router.route(batch) if isinstance(router, Router) else router.route(batch, time)


def destinations(plan: PhysicalPlan, chain: ChainPlan, replica: int, consumer: Consumer) -> list[int]:
    """The replicas of ``consumer`` (not fused) that replica ``replica`` of ``chain`` has a
    channel to: its own number along a pipeline between equal widths, else every one."""
    if consumer.channel.kind not in ("exchange", "broadcast") and plan.width(consumer.vertex) == chain.parallelism:
        return [replica]
    return list(range(plan.width(consumer.vertex)))


def receivers(plan: PhysicalPlan, key: ReplicaKey) -> frozenset[ReplicaKey]:
    """The other replicas that replica ``key`` of ``plan`` sends data and markers to: the
    only ones whose handles it needs for them (the driver gives it no others)."""
    chain = plan.chain(key.chain)
    found = {ReplicaKey(plan.chain_of(consumer.vertex).name, replica)
             for name in chain.vertices for port in range(plan.vertex(name).outputs)
             for consumer in plan.consumers_of(name, port) if not plan.is_fused(consumer)
             for replica in destinations(plan, chain, key.replica, consumer)}
    return frozenset(found - {key})
