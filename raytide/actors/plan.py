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

from dataclasses import dataclass
from typing import Optional

from raytide.core.dataflow import Channel, Dataflow, LogicalVertex
from raytide.errors import GraphError
from raytide.progress.graph import GraphBuilder, ProgressGraph
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp


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


@dataclass
class PhysicalPlan:
    """Everything the runtime needs to place actors and route records."""

    flow: Dataflow
    graph: ProgressGraph
    parallelism: dict[str, int]
    chains: list[ChainPlan]
    chain_of: dict[str, str]
    consumers: dict[tuple[str, int], list[Consumer]]
    cyclic: frozenset[str] = frozenset()
    feedback: frozenset[str] = frozenset()

    def vertex(self, name: str) -> LogicalVertex:
        return self.flow.vertices[name]

    def chain(self, name: str) -> ChainPlan:
        return next(c for c in self.chains if c.name == name)

    def initial_pointstamps(self) -> list[tuple[tuple[Location, Timestamp], int]]:
        """The pointstamps held before anything runs: every input replica at epoch 0."""
        return [((Location.of_vertex(n), Timestamp(0)), self.parallelism[n]) for n in self.flow.inputs()]

    def is_fused(self, consumer: Consumer) -> bool:
        """Whether ``consumer`` runs in the same actor as its upstream (not a chain head)."""
        return self.chain(self.chain_of[consumer.vertex]).vertices[0] != consumer.vertex


def compile_plan(flow: Dataflow, parallelism: Optional[int] = None, chaining: bool = True) -> PhysicalPlan:
    """Validate ``flow`` and compile it.

    Args:
        flow: the logical dataflow.
        parallelism: default replicas per vertex, overriding the dataflow's default.
        chaining: fuse pipeline-connected vertices into one actor where possible.

    Raises:
        GraphError: on an invalid graph (no inputs, a dangling stream, a cycle outside a
            loop context, mismatched loop depths).
    """
    if not flow.inputs():
        raise GraphError(f"dataflow {flow.name!r} has no input: start it with flow.input(name)")
    default = parallelism or flow.parallelism or 1
    widths = {name: v.parallelism or default for name, v in flow.vertices.items()}
    consumers = _consumers(flow)
    _check_connected(flow, consumers)
    feedback = frozenset(n for n, v in flow.vertices.items() if v.role == "feedback")
    for name in feedback:
        if not flow.vertices[name].inputs[0]:
            raise GraphError(f"feedback {name!r} is never connected: close the loop with feedback.connect(stream)")
    graph = _progress_graph(flow)
    chains = _chains(flow, consumers, widths) if chaining else [ChainPlan(n, (n,), widths[n]) for n in flow.vertices]
    chain_of = {v: c.name for c in chains for v in c.vertices}
    return PhysicalPlan(flow, graph, widths, chains, chain_of, consumers, _on_cycles(flow, graph), feedback)


def _on_cycles(flow: Dataflow, graph: ProgressGraph) -> frozenset[str]:
    """Vertices whose output can come back to one of their inputs (they sit inside a loop)."""
    return frozenset(
        name for name, v in flow.vertices.items()
        if any(graph.summaries(Location.of_vertex(name), Location.of_input(name, p)) for p in range(len(v.inputs)))
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


def _chains(flow: Dataflow, consumers: dict[tuple[str, int], list[Consumer]], widths: dict[str, int]) -> list[ChainPlan]:
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
        upstream = _fusable_upstream(flow, flow.vertices[name], consumers, widths)
        head = head_of.get(upstream, name) if upstream is not None else name
        head_of[name] = head
        members.setdefault(head, []).append(name)
    return [ChainPlan("+".join(vs), tuple(vs), widths[head]) for head, vs in members.items()]


def _fusable_upstream(flow: Dataflow, vertex: LogicalVertex, consumers: dict[tuple[str, int], list[Consumer]],
                      widths: dict[str, int]) -> Optional[str]:
    if not vertex.chain or vertex.role == "input" or len(vertex.inputs) != 1 or len(vertex.inputs[0]) != 1:
        return None
    edge = vertex.inputs[0][0]
    source = flow.vertices.get(edge.source)
    if source is None or not source.chain or source.role == "feedback" or edge.channel.kind != "pipeline":
        return None
    if widths[edge.source] != widths[vertex.name] or len(consumers[(edge.source, edge.output)]) != 1:
        return None
    return edge.source
