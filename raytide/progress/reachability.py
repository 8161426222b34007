"""Could-result-in: the minimal path summaries between locations, and the graph's cycles.

The location graph has an edge ``input(v, i) -> vertex(v)`` with the identity summary
(a message at an input of ``v`` is processed by ``v``) and an edge
``vertex(v) -> input(w, j)`` with the summary of the output port of ``v`` that feeds
``w``'s input ``j`` (identity for ordinary vertices; ingress, egress or feedback for the
loop vertices). From a source location a worklist composes each summary reaching a
location with every outgoing edge, and keeps it when no summary known there is below it.
Summaries only get larger around a cycle that strictly advances timestamps, so the
worklist stops. Every cycle lies inside one strongly connected component
(:func:`components`); a cycle that does not advance is found by
:func:`non_advancing_cycle` on the summaries inside a component, and rejected by the
graph builder.

Iteration bounds are stripped from the summaries kept here: bounds only drop records, so
ignoring them over-approximates could-result-in (safe: at worst a notification waits
for a record that will be dropped), and it keeps ``results_in`` monotone, which
lexicographic counters with a bound on an inner counter would not be. A path is dropped
only where a bound drops every timestamp the path can carry (``followed_by`` is None:
a feedback bounded at 0, or one whose bound the path's own increments already pass).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from raytide.errors import GraphError
from raytide.progress.antichain import Antichain
from raytide.progress.summaries import PathSummary


class Location(NamedTuple):
    """A place where pointstamps live: a vertex (``port is None``) or one of its input ports."""

    vertex: str
    port: int | None = None

    @staticmethod
    def of_vertex(vertex: str) -> Location:
        """The vertex itself: its capabilities and notification requests."""
        return Location(vertex, None)

    @staticmethod
    def of_input(vertex: str, port: int) -> Location:
        """Input port ``port`` of ``vertex``: messages in flight towards it."""
        return Location(vertex, port)

    def __str__(self) -> str:
        return self.vertex if self.port is None else f"{self.vertex}[in {self.port}]"


Edges = Mapping[Location, Sequence[tuple[Location, PathSummary]]]
Reachability = dict[Location, dict[Location, Antichain[PathSummary]]]


def minimal_summaries(edges: Edges, source: Location) -> dict[Location, Antichain[PathSummary]]:
    """The antichain of minimal summaries from ``source`` to every location it reaches.

    Raises:
        GraphError: if more than ``64 * (locations + 1) ** 2`` summaries are explored, which
            only a cycle that does not advance timestamps can cause.
    """
    max_steps = 64 * (len(edges) + 1) ** 2
    found: dict[Location, Antichain[PathSummary]] = {source: Antichain([PathSummary.identity()])}
    work: deque[tuple[Location, PathSummary]] = deque([(source, PathSummary.identity())])
    steps = 0
    while work:
        location, summary = work.popleft()
        for target, step in edges.get(location, ()):
            steps += 1
            if steps > max_steps:
                raise GraphError(f"progress summaries from {source} do not converge: a cycle does not advance timestamps")
            combined = summary.followed_by(step)
            if combined is None:
                continue
            combined = combined.unbounded()
            if found.setdefault(target, Antichain()).insert(combined):
                work.append((target, combined))
    return found


def all_pairs(edges: Edges, locations: Iterable[Location]) -> Reachability:
    """Minimal summaries between every pair of locations (absent pairs are unreachable)."""
    return {source: minimal_summaries(edges, source) for source in locations}


def components(edges: Edges, locations: Iterable[Location]) -> list[list[Location]]:
    """The strongly connected components, each listed before every component it has edges into.

    Tarjan's algorithm, with an explicit stack so that long pipelines do not hit Python's
    recursion limit. Tarjan finishes a component after every component it reaches, so the
    list is reversed at the end; within a component, locations keep the order in which the
    search found them, which follows the edges.
    """
    index: dict[Location, int] = {}
    low: dict[Location, int] = {}
    stack: list[Location] = []
    found: list[list[Location]] = []
    for root in locations:
        if root in index:
            continue
        calls = [(root, _enter(root, edges, index, low, stack))]
        while calls:
            node, targets = calls[-1]
            for target, _ in targets:
                if target not in index:
                    calls.append((target, _enter(target, edges, index, low, stack)))
                    break
                if target in low:
                    low[node] = min(low[node], index[target])
            else:
                calls.pop()
                if calls:
                    parent = calls[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    found.append(_pop_component(node, stack, low))
    found.reverse()
    return found


def _enter(node: Location, edges: Edges, index: dict[Location, int], low: dict[Location, int],
           stack: list[Location]) -> Iterator[tuple[Location, PathSummary]]:
    """Number ``node``, push it on Tarjan's stack; return an iterator over its outgoing edges."""
    index[node] = low[node] = len(index)
    stack.append(node)
    return iter(edges.get(node, ()))


def _pop_component(root: Location, stack: list[Location], low: dict[Location, int]) -> list[Location]:
    """Pop the component whose root is ``root`` off Tarjan's stack, in the order it was found.

    Its members leave ``low``, which holds exactly the locations still on the stack.
    """
    component: list[Location] = []
    while not component or component[-1] != root:
        member = stack.pop()
        del low[member]
        component.append(member)
    return component[::-1]


def non_advancing_cycle(edges: Edges, reach: Reachability) -> list[Location] | None:
    """A cycle whose summary does not strictly advance timestamps, or None.

    Every cycle closes with some edge ``a -> b`` followed by a path ``b -> a``; checking
    the minimal summaries of the latter suffices, since larger ones only advance more.
    """
    for origin, outgoing in edges.items():
        for target, step in outgoing:
            back = reach.get(target, {}).get(origin)
            if back is None:
                continue
            for summary in back:
                cycle = step.unbounded().followed_by(summary)
                if cycle is not None and not cycle.strictly_advances():
                    return [origin] + _path(edges, target, origin)
    return None


def _path(edges: Edges, start: Location, goal: Location) -> list[Location]:
    """Some path of locations from ``start`` to ``goal`` (breadth first), for error messages."""
    parents: dict[Location, Location | None] = {start: None}
    queue: deque[Location] = deque([start])
    while queue:
        location = queue.popleft()
        if location == goal:
            break
        for target, _ in edges.get(location, ()):
            if target not in parents:
                parents[target] = location
                queue.append(target)
    path: list[Location] = []
    node: Location | None = goal
    while node is not None:
        path.append(node)
        node = parents[node]
    return path[::-1]
