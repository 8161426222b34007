"""Brute-force references the incremental algorithms are checked against."""

from __future__ import annotations

from collections import deque
from typing import Iterable

from raytide.progress import Location, ProgressGraph, Timestamp

Pointstamp = tuple[Location, Timestamp]


class ReachabilityOracle:
    """could-result-in by exploring concrete timestamps along every path, one step at a time.

    Counters above ``cap`` are not explored: a timestamp whose counter exceeds every
    counter of the question plus one behaves, for every question asked, like one whose
    counter is exactly that (larger inner counters are either dropped by an egress or
    decide a lexicographic comparison no differently).
    """

    def __init__(self, graph: ProgressGraph, cap: int) -> None:
        self.graph = graph
        self.cap = cap
        self._cache: dict[Pointstamp, set[Pointstamp]] = {}

    def reachable(self, start: Pointstamp) -> set[Pointstamp]:
        """Every ``(location, timestamp)`` an event at ``start`` could lead to, itself included."""
        if start not in self._cache:
            seen = {start}
            queue = deque([start])
            while queue:
                location, time = queue.popleft()
                for target, summary in self.graph.location_edges[location]:
                    result = summary.unbounded().results_in(time)
                    if result is None or any(c > self.cap for c in result.counters):
                        continue
                    if (target, result) not in seen:
                        seen.add((target, result))
                        queue.append((target, result))
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
