"""Compiling a logical :class:`~raytide.core.dataflow.Dataflow` into a physical plan.

The plan fixes every vertex's parallelism, validates the graph (through the progress
graph builder, which rejects cycles outside loop contexts), and fuses vertices into
*chains* that run in one actor per replica (Flink's operator chaining): a vertex joins
its upstream's chain when its only input is a pipeline edge from a vertex with the
same parallelism whose output port feeds nothing else. A vertex with several outputs
can so have several fused consumers: a chain is a tree rooted at its head, listed in
topological order. Fusing never creates a cycle of actors waiting on each other,
because a fused vertex is reachable only through the vertex it is fused to.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from raytide.core.arguments import positive_int
from raytide.core.logical import Channel, InputEdge, LogicalVertex, Role, VertexFactory
from raytide.errors import GraphError
from raytide.physical.protocol import ChannelId, ReplicaKey
from raytide.progress.graph import GraphBuilder, ProgressGraph
from raytide.progress.reachability import Location
from raytide.progress.summaries import PathSummary
from raytide.progress.timestamps import Timestamp

if TYPE_CHECKING:  # a host that unpickles a plan does not need the builder
    from raytide.core.dataflow import Dataflow


@dataclass(frozen=True)
class Consumer:
    """Where one output port's records go: ``vertex``'s input ``port``, over ``channel``."""

    vertex: str
    port: int
    channel: Channel


@dataclass(frozen=True)
class ChainPlan:
    """Vertices fused into one actor per replica, in topological order; only ``vertices[0]``
    receives from other actors, the others from a vertex before them in the chain."""

    name: str
    vertices: tuple[str, ...]
    parallelism: int


@dataclass(frozen=True)
class VertexPlan:
    """One vertex as the runtime runs it: what it is, where its inputs come from, how wide it is.

    Attributes:
        inputs: per input port, the edges into it.
        cyclic: its output can come back to one of its inputs (it sits inside a loop).
        notifies: it may ask for notifications (see :class:`~raytide.core.dataflow.LogicalVertex`).
        settles_with_input: its notifications end when the input it is fused behind moves on (the same).
    """

    name: str
    role: Role
    factory: VertexFactory | None
    inputs: tuple[tuple[InputEdge, ...], ...]
    outputs: int
    summaries: tuple[PathSummary, ...]
    parallelism: int
    chain: str
    cyclic: bool
    notifies: bool = True
    settles_with_input: bool = False
    event_time: Any = None  # an input's EventTime (raytide.windows.event_time), read by the driver

    def output_summary(self, port: int) -> PathSummary:
        """The path summary from the vertex to its output ``port`` (identity unless a loop boundary)."""
        return self.summaries[port] if self.summaries else PathSummary.identity()


_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenMap(dict[_K, _V]):
    """A dict that refuses changes after it is built (and pickles as one)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a compiled plan cannot be changed")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, tuple[dict[_K, _V]]]:
        return FrozenMap, (dict(self),)


@dataclass(frozen=True, eq=False)
class PhysicalPlan:
    """Everything the runtime needs to place actors and route records, compiled once and
    self-contained: nothing reads the :class:`~raytide.core.dataflow.Dataflow` after it."""

    name: str
    graph: ProgressGraph
    vertices: FrozenMap[str, VertexPlan]  # in the dataflow's order
    chains: tuple[ChainPlan, ...]
    consumers: FrozenMap[tuple[str, int], tuple[Consumer, ...]]  # (vertex, output port) -> where it goes

    def vertex(self, name: str) -> VertexPlan:
        """The plan of vertex ``name``."""
        return self.vertices[name]

    @functools.cached_property
    def _chains_by_name(self) -> dict[str, ChainPlan]:
        return {chain.name: chain for chain in self.chains}

    def chain(self, name: str) -> ChainPlan:
        """The chain called ``name``."""
        return self._chains_by_name[name]

    def chain_of(self, vertex: str) -> ChainPlan:
        """The chain that hosts ``vertex``."""
        return self.chain(self.vertex(vertex).chain)

    def width(self, vertex: str) -> int:
        """How many replicas ``vertex`` has."""
        return self.vertex(vertex).parallelism

    def consumers_of(self, vertex: str, port: int) -> tuple[Consumer, ...]:
        """Where output ``port`` of ``vertex`` goes."""
        return self.consumers[(vertex, port)]

    def with_role(self, role: Role) -> list[str]:
        """The vertices of ``role`` (``input``, ``output``, ``feedback``...), in the dataflow's order."""
        return [name for name, v in self.vertices.items() if v.role == role]

    @property
    def inputs(self) -> list[str]:
        """Names of the dataflow's inputs."""
        return self.with_role("input")

    @property
    def outputs(self) -> list[str]:
        """Names of the dataflow's outputs."""
        return self.with_role("output")

    def replica_keys(self) -> list[ReplicaKey]:
        """Every replica of the plan, chain by chain (each one actor; each acknowledges a snapshot)."""
        return list(self._replica_keys)

    @functools.cached_property
    def _replica_keys(self) -> tuple[ReplicaKey, ...]:
        """Worked out once: the in-process runtime's scheduler asks at every step."""
        return tuple(ReplicaKey(chain.name, replica) for chain in self.chains for replica in range(chain.parallelism))

    def initial_pointstamps(self) -> list[tuple[tuple[Location, Timestamp], int]]:
        """The pointstamps held before anything runs: every input replica at epoch 0."""
        return [((Location.of_vertex(n), Timestamp(0)), self.width(n)) for n in self.inputs]

    def input_channels(self, vertex: str, replica: int) -> list[ChannelId]:
        """Every channel that can deliver to replica ``replica`` of ``vertex`` (a replica of each
        upstream edge sending there)."""
        channels: list[ChannelId] = []
        width = self.width(vertex)
        for port, edges in enumerate(self.vertex(vertex).inputs):
            for edge in edges:
                senders = self.width(edge.source)
                if edge.channel.kind == "pipeline" and senders == width:
                    channels.append(ChannelId(edge.source, edge.output, replica, port))
                else:
                    channels += [ChannelId(edge.source, edge.output, r, port) for r in range(senders)]
        return channels

    def back_edges(self, head: str, channels: list[ChannelId]) -> list[ChannelId]:
        """Channels that close a cycle through ``head`` (their sender is downstream of it).

        Markers come back on those only after ``head`` forwarded them, so they are not
        aligned on. A vertex all of whose inputs lie on the cycle (inside a loop body) is
        not where the cycle is entered, and aligns on them as usual.
        """
        start = Location.of_vertex(head)
        if start not in self.graph.cyclic:
            return []
        back = [c for c in channels if self.graph.summaries(start, Location.of_vertex(c.source))]
        return back if len(back) < len(channels) else []

    def is_fused(self, consumer: Consumer) -> bool:
        """Whether ``consumer`` runs in the same actor as its upstream (not a chain head)."""
        return self.chain_of(consumer.vertex).vertices[0] != consumer.vertex


def _width(parallelism: Any, what: str) -> int | None:
    """A parallelism given (checked: a positive integer), or None where none was."""
    return None if parallelism is None else positive_int(parallelism, what)


def compile_plan(flow: Dataflow, parallelism: int | None = None, chaining: bool = True,
                 widths: Mapping[str, int] | None = None) -> PhysicalPlan:
    """Validate ``flow`` and compile it into a self-contained, immutable plan.

    Args:
        flow: the logical dataflow.
        parallelism: default replicas per vertex, overriding the dataflow's default.
        chaining: fuse pipeline-connected vertices into one actor where possible.
        widths: replicas of the vertices named, overriding everything else (a rescale
            compiles the plan again with the new widths).

    Raises:
        GraphError: on an invalid graph (no inputs, a dangling stream, a cycle outside a
            loop context, mismatched loop depths).
        ArgumentError: a parallelism that is not a positive integer.
    """
    given = dict(widths or {})
    unknown = sorted(set(given) - set(flow.vertices))
    if unknown:
        raise GraphError(f"dataflow {flow.name!r} has no vertex {unknown[0]!r}; its vertices: {sorted(flow.vertices)}")
    if not flow.inputs():
        raise GraphError(f"dataflow {flow.name!r} has no input: start it with flow.input(name)")
    default = _width(parallelism, "rt.run's parallelism") or _width(flow.parallelism, f"dataflow {flow.name!r}'s parallelism") or 1
    width_of = {name: _width(v.parallelism, f"vertex {name!r}'s parallelism") or default for name, v in flow.vertices.items()}
    width_of.update({name: positive_int(width, f"vertex {name!r}'s parallelism") for name, width in given.items()})
    consumers = _consumers(flow)
    _check_connected(flow, consumers)
    for name, vertex in flow.vertices.items():
        if vertex.role == "feedback" and not vertex.inputs[0]:
            raise GraphError(f"feedback {name!r} is never connected: close the loop with feedback.connect(stream)")
    graph = _progress_graph(flow)
    chains = _chains(flow, width_of) if chaining else [ChainPlan(n, (n,), width_of[n]) for n in flow.vertices]
    chain_of = {v: c.name for c in chains for v in c.vertices}
    cyclic = _on_cycles(flow, graph)
    vertices = {
        name: VertexPlan(name, v.role, v.factory, tuple(map(tuple, v.inputs)), v.outputs, tuple(v.summaries),
                         width_of[name], chain_of[name], name in cyclic, v.notifies,
                         v.settles_with_input, v.event_time)
        for name, v in flow.vertices.items()
    }
    return PhysicalPlan(flow.name, graph, FrozenMap(vertices), tuple(chains),
                        FrozenMap({key: tuple(targets) for key, targets in consumers.items()}))


def _on_cycles(flow: Dataflow, graph: ProgressGraph) -> frozenset[str]:
    """Vertices whose output can come back to one of their inputs (they sit inside a loop).

    Only a vertex on a cycle of the graph can; the summaries from the others are not computed.
    """
    return frozenset(
        name for name, v in flow.vertices.items()
        if Location.of_vertex(name) in graph.cyclic
        and any(graph.summaries(Location.of_vertex(name), Location.of_input(name, p)) for p in range(len(v.inputs)))
    )


def _consumers(flow: Dataflow) -> dict[tuple[str, int], list[Consumer]]:
    out: dict[tuple[str, int], list[Consumer]] = {(n, p): [] for n, v in flow.vertices.items() for p in range(v.outputs)}
    for name, vertex in flow.vertices.items():
        for port, edges in enumerate(vertex.inputs):
            for edge in edges:
                out[(edge.source, edge.output)].append(Consumer(name, port, edge.channel))
    return out


def _check_connected(flow: Dataflow, consumers: dict[tuple[str, int], list[Consumer]]) -> None:
    for (name, port), targets in consumers.items():
        if not targets and not flow.vertices[name].terminal:
            raise GraphError(
                f"stream from vertex {name!r} (output {port}) is never connected: "
                "send it somewhere, e.g. .output(name), or remove the operator"
            )


def _progress_graph(flow: Dataflow) -> ProgressGraph:
    builder = GraphBuilder()
    for name, v in flow.vertices.items():
        builder.add_vertex(name, inputs=len(v.inputs), outputs=v.outputs, depth=v.depth,
                           summaries=[v.output_summary(p) for p in range(v.outputs)])
    for name, v in flow.vertices.items():
        for port, edges in enumerate(v.inputs):
            for edge in edges:
                builder.add_edge(edge.source, edge.output, name, port)
    return builder.build()


def _chains(flow: Dataflow, widths: dict[str, int]) -> list[ChainPlan]:
    """Greedy fusing in insertion order (a topological order once back edges are set aside).

    A feedback vertex is placed last, in its upstream's chain when it can be fused there
    (it is stateless and its sends never wait, so the cycle still drains; fused, it saves
    every iteration a hop through an actor of its own); nothing is ever fused after a
    feedback vertex.
    """
    head_of: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    names = [n for n, v in flow.vertices.items() if v.role != "feedback"]
    names += [n for n, v in flow.vertices.items() if v.role == "feedback"]
    for name in names:
        upstream = _fusable_upstream(flow, flow.vertices[name], widths)
        head = head_of.get(upstream, name) if upstream is not None else name
        head_of[name] = head
        members.setdefault(head, []).append(name)
    return [ChainPlan("+".join(vs), tuple(vs), widths[head]) for head, vs in members.items()]


def _fusable_upstream(flow: Dataflow, vertex: LogicalVertex, widths: dict[str, int]) -> str | None:
    """The vertex ``vertex`` is fused behind, if any: its one input is a pipeline from a vertex of
    its width that chains (however many others read that stream: each reader is fused)."""
    if not vertex.chain or vertex.role == "input" or len(vertex.inputs) != 1 or len(vertex.inputs[0]) != 1:
        return None
    edge = vertex.inputs[0][0]
    source = flow.vertices.get(edge.source)
    if source is None or not source.chain or source.role == "feedback" or edge.channel.kind != "pipeline":
        return None
    if widths[edge.source] != widths[vertex.name]:
        return None
    return edge.source
