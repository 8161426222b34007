"""Brute-force references the incremental algorithms are checked against."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

from raytide.progress import Location, PathSummary, Timestamp
from tests.strategies import RandomGraph

Pointstamp = tuple[Location, Timestamp]
Step = tuple[Location, PathSummary]


def steps_of(spec: RandomGraph) -> dict[Location, list[Step]]:
    """One step per hop a record can take, from the generator's own record of the graph.

    ``input(v, i) -> vertex(v)`` (a vertex processes what arrives at its inputs) and
    ``vertex(v) -> input(w, j)`` with the summary of the output port each edge leaves
    by, exactly as passed to ``add_edge``: nothing here comes from the compiled graph.
    """
    steps: dict[Location, list[Step]] = {}
    for name, vertex in spec.vertices.items():
        steps.setdefault(Location.of_vertex(name), [])
        for port in range(vertex.inputs):
            steps[Location.of_input(name, port)] = [(Location.of_vertex(name), PathSummary.identity())]
    for source, output, target, port in spec.edges:
        summary = spec.vertices[source].summaries[output]
        steps[Location.of_vertex(source)].append((Location.of_input(target, port), summary))
    return steps


class ReachabilityOracle:
    """could-result-in by exploring concrete timestamps along every path, one step at a time.

    With ``bounded`` the feedback bounds drop records as they would at run time (what can
    really happen); without, they are ignored (the over-approximation progress tracking
    documents, :mod:`raytide.progress.reachability`).

    Counters above ``cap`` are not explored: a timestamp whose counter exceeds every
    counter of the question plus one behaves, for every question asked, like one whose
    counter is exactly that (larger inner counters are either dropped by an egress or
    decide a lexicographic comparison no differently).
    """

    def __init__(self, spec: RandomGraph, cap: int, bounded: bool = False) -> None:
        self.steps = steps_of(spec)
        self.cap = cap
        self.bounded = bounded
        self._cache: dict[Pointstamp, set[Pointstamp]] = {}

    def next_times(self, location: Location, time: Timestamp) -> list[Pointstamp]:
        """Where a record at ``(location, time)`` goes in one step (within the cap)."""
        out = []
        for target, summary in self.steps[location]:
            result = (summary if self.bounded else summary.unbounded()).results_in(time)
            if result is not None and all(c <= self.cap for c in result.counters):
                out.append((target, result))
        return out

    def reachable(self, start: Pointstamp) -> set[Pointstamp]:
        """Every ``(location, timestamp)`` an event at ``start`` could lead to, itself included."""
        if start not in self._cache:
            seen = {start}
            queue = deque([start])
            while queue:
                for following in self.next_times(*queue.popleft()):
                    if following not in seen:
                        seen.add(following)
                        queue.append(following)
            self._cache[start] = seen
        return self._cache[start]

    def could_result_in(self, source: Pointstamp, target: Pointstamp) -> bool:
        location, time = target
        return any(loc == location and t.less_equal(time) for loc, t in self.reachable(source))


def frontier_from_scratch(oracle: ReachabilityOracle, counts: dict[Pointstamp, int]) -> set[Pointstamp]:
    """The active pointstamps with no other active pointstamp that could-result-in them."""
    active = [p for p, c in counts.items() if c > 0]
    return {p for p in active if not any(q != p and oracle.could_result_in(q, p) for q in active)}


def blocked_by(oracle: ReachabilityOracle, pending: Iterable[Pointstamp], target: Pointstamp) -> list[Pointstamp]:
    """The pending events other than ``target`` itself that could-result-in ``target``."""
    return [q for q in pending if q != target and oracle.could_result_in(q, target)]


def component_changes(epochs: list) -> dict[int, Counter]:
    """Per epoch, the changes ``{(node, label): ±1}`` of union-find's labels of the edges
    present after it (epochs of updates ``((u, v), diff)``): what connected components on a
    collection of edges must output."""
    from examples.connected_components import union_find

    present: Counter = Counter()
    before: dict = {}
    out = {}
    for epoch, updates in enumerate(epochs):
        for edge, diff in updates:
            present[edge] += diff
        after = union_find(list((+present).elements()))
        change = Counter(dict.fromkeys(after.items() - before.items(), 1))
        change.update(dict.fromkeys(before.items() - after.items(), -1))
        if change:
            out[epoch] = change
        before = after
    return out
