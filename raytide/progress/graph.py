"""The logical graph as progress tracking sees it: vertices, ports, edges and loop depths.

:class:`GraphBuilder` collects vertices and edges; :meth:`GraphBuilder.build` validates
them and compiles an immutable :class:`ProgressGraph` that answers could-result-in.

>>> b = GraphBuilder()
>>> b.add_vertex("in", inputs=0)
>>> b.add_vertex("enter", summaries=[PathSummary.ingress()])
>>> b.add_vertex("body", inputs=2, outputs=2, depth=1)
>>> b.add_vertex("back", depth=1, summaries=[PathSummary.feedback()])
>>> b.add_vertex("leave", depth=1, outputs=1, summaries=[PathSummary.egress()])
>>> b.add_vertex("out", outputs=0)
>>> for src, out, dst, inp in [("in", 0, "enter", 0), ("enter", 0, "body", 0), ("body", 0, "back", 0),
...                            ("back", 0, "body", 1), ("body", 1, "leave", 0), ("leave", 0, "out", 0)]:
...     b.add_edge(src, out, dst, inp)
>>> g = b.build()
>>> g.could_result_in(Location.of_vertex("body"), Timestamp(0, (3,)), Location.of_input("body", 1), Timestamp(0, (4,)))
True
>>> g.could_result_in(Location.of_vertex("body"), Timestamp(0, (3,)), Location.of_input("body", 1), Timestamp(0, (3,)))
False
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from raytide.errors import GraphError
from raytide.progress.antichain import Antichain
from raytide.progress.reachability import Location, Reachability, all_pairs, components, minimal_summaries, non_advancing_cycle
from raytide.progress.summaries import PathSummary
from raytide.progress.timestamps import Timestamp


@dataclass(frozen=True)
class VertexShape:
    """What progress tracking needs to know of a vertex.

    Attributes:
        name: unique vertex name.
        inputs: number of input ports.
        outputs: number of output ports.
        depth: number of loop counters of the timestamps at the vertex's inputs.
        summaries: per output port, what the vertex does to timestamps on the way out.
    """

    name: str
    inputs: int
    outputs: int
    depth: int
    summaries: tuple[PathSummary, ...]


@dataclass(frozen=True)
class Edge:
    """A connection from an output port of one vertex to an input port of another."""

    source: str
    output: int
    target: str
    input: int


@dataclass
class GraphBuilder:
    """Collects vertices and edges; ``build()`` validates and compiles them."""

    vertices: dict[str, VertexShape] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)

    def add_vertex(
        self,
        name: str,
        *,
        inputs: int = 1,
        outputs: int = 1,
        depth: int = 0,
        summaries: Sequence[PathSummary] | None = None,
    ) -> None:
        """Declare a vertex; ``summaries`` defaults to the identity on every output."""
        if name in self.vertices:
            raise GraphError(f"vertex {name!r} is declared twice")
        summaries = tuple(summaries) if summaries is not None else (PathSummary.identity(),) * outputs
        if len(summaries) != outputs:
            raise GraphError(f"vertex {name!r} has {outputs} outputs but {len(summaries)} summaries")
        self.vertices[name] = VertexShape(name, inputs, outputs, depth, summaries)

    def add_edge(self, source: str, output: int, target: str, input: int) -> None:
        """Connect output port ``output`` of ``source`` to input port ``input`` of ``target``."""
        self.edges.append(Edge(source, output, target, input))

    def build(self) -> ProgressGraph:
        """Validate the graph and compile it.

        Raises:
            GraphError: unknown vertices or ports, mismatched loop depths, or a cycle that
                does not pass through a feedback vertex (a cycle outside a loop context).
        """
        for edge in self.edges:
            self._check_edge(edge)
        return ProgressGraph(dict(self.vertices), tuple(self.edges))

    def _check_edge(self, edge: Edge) -> None:
        source, target = self.vertices.get(edge.source), self.vertices.get(edge.target)
        if source is None or target is None:
            missing = edge.source if source is None else edge.target
            raise GraphError(f"edge {edge.source} -> {edge.target} names an unknown vertex {missing!r}")
        if not 0 <= edge.output < source.outputs:
            raise GraphError(f"vertex {source.name!r} has no output port {edge.output}")
        if not 0 <= edge.input < target.inputs:
            raise GraphError(f"vertex {target.name!r} has no input port {edge.input}")
        arriving = source.depth + source.summaries[edge.output].depth_change
        if arriving != target.depth:
            raise GraphError(
                f"edge {source.name} -> {target.name} carries timestamps with {arriving} loop counters "
                f"into a vertex expecting {target.depth}: streams must enter and leave loops explicitly"
            )


class ProgressGraph:
    """A validated graph: its locations, the edges between them, and their minimal path summaries.

    The summaries from a location are computed the first time they are asked for and kept:
    the tracker needs none of them, and building all pairs costs O(locations^2). Building
    the graph computes the strongly connected components and, to reject a cycle that does
    not advance timestamps, the summaries inside each component that has a cycle.
    """

    def __init__(self, vertices: dict[str, VertexShape], edges: tuple[Edge, ...]) -> None:
        self.vertices = vertices
        self.edges = edges
        self.locations: list[Location] = [
            loc for v in vertices.values() for loc in [Location.of_vertex(v.name)] + [Location.of_input(v.name, i) for i in range(v.inputs)]
        ]
        self.location_edges = self._location_edges()
        self.components = components(self.location_edges, self.locations)
        #: The locations on some cycle: only these can reach themselves, or be reached from a location they reach.
        self.cyclic = frozenset(loc for component in self.components if len(component) > 1 for loc in component)
        self._reached: Reachability = {}
        for component in self.components:
            if len(component) > 1:
                self._reject_non_advancing_cycle(component)

    def _location_edges(self) -> dict[Location, list[tuple[Location, PathSummary]]]:
        out: dict[Location, list[tuple[Location, PathSummary]]] = {loc: [] for loc in self.locations}
        for vertex in self.vertices.values():
            for port in range(vertex.inputs):
                out[Location.of_input(vertex.name, port)].append((Location.of_vertex(vertex.name), PathSummary.identity()))
        for edge in self.edges:
            summary = self.vertices[edge.source].summaries[edge.output]
            out[Location.of_vertex(edge.source)].append((Location.of_input(edge.target, edge.input), summary))
        return out

    def _reject_non_advancing_cycle(self, component: list[Location]) -> None:
        """Raise GraphError for a cycle in ``component`` that does not advance timestamps.

        Every path between two locations of a component stays inside it, so the summaries
        over the component's own edges are the graph's.
        """
        members = set(component)
        inside = {loc: [(target, step) for target, step in self.location_edges[loc] if target in members] for loc in component}
        cycle = non_advancing_cycle(inside, all_pairs(inside, component))
        if cycle is not None:
            names = " -> ".join(dict.fromkeys(loc.vertex for loc in cycle))
            raise GraphError(
                f"cycle {names} -> {cycle[0].vertex} does not advance timestamps: "
                "build it inside a loop context, with its back edge through a feedback stream"
            )

    def reached_from(self, source: Location) -> dict[Location, Antichain[PathSummary]]:
        """The minimal summaries from ``source`` to every location it reaches (itself: the identity)."""
        reached = self._reached.get(source)
        if reached is None:
            reached = self._reached[source] = minimal_summaries(self.location_edges, source)
        return reached

    def summaries(self, source: Location, target: Location) -> Antichain[PathSummary]:
        """The minimal summaries of the paths from ``source`` to ``target`` (empty if none)."""
        return self.reached_from(source).get(target, Antichain())

    def could_result_in(self, source: Location, time: Timestamp, target: Location, target_time: Timestamp) -> bool:
        """Whether an event at ``(time, source)`` could lead to one at ``(target_time, target)``."""
        for summary in self.summaries(source, target):
            result = summary.results_in(time)
            if result is not None and result.less_equal(target_time):
                return True
        return False

    def depth(self, location: Location) -> int:
        """The number of loop counters of timestamps at ``location``."""
        return self.vertices[location.vertex].depth
