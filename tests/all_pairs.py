"""The tracker as it was before incremental propagation: every change of a local frontier
goes, through the all-pairs minimal path summaries, to every location it reaches.

Kept as the oracle of the incremental :class:`raytide.progress.Tracker`
(``tests/unit/test_tracker_oracle.py``) and as its baseline in ``bench/bench_tracker.py``;
it shares only the data types with it, so that a slip in one is not repeated in the other.
For every active pointstamp ``(t, l')`` on the local frontier of ``l'`` and every minimal
summary ``s`` from ``l'`` to ``l``, the implications of ``l`` count ``s(t)``; then

* ``(t, l)`` has an active precursor iff some implication at ``l`` is ``< t``, or ``t``
  itself is implied more often than by ``(t, l)`` alone (through the identity summary).

A frontier change costs one implication update per reachable location, and building the
summaries costs O(locations^2) time and memory.
"""

from __future__ import annotations

from collections import defaultdict

from raytide.progress import ChangeBatch, Location, MutableAntichain, PathSummary, ProgressGraph, Timestamp
from raytide.progress.reachability import all_pairs
from raytide.progress.tracker import FrontierChanges, Pointstamp


class AllPairsTracker:
    """Occurrence counts of pointstamps and the implied frontier at every location (the interface of
    :class:`raytide.progress.Tracker`)."""

    def __init__(self, graph: ProgressGraph) -> None:
        self.graph = graph
        self._pending: ChangeBatch[Pointstamp] = ChangeBatch()
        self._pointstamps: dict[Location, MutableAntichain] = {loc: MutableAntichain() for loc in graph.locations}
        self._implications: dict[Location, MutableAntichain] = {loc: MutableAntichain() for loc in graph.locations}
        self._targets = {
            source: [
                (target, None if s == PathSummary.identity() else s.results_in)
                for target, antichain in reached.items()
                for s in antichain
            ]
            for source, reached in all_pairs(graph.location_edges, graph.locations).items()
        }
        self.touched: set[Location] = set()

    def update(self, location: Location, time: Timestamp, delta: int) -> None:
        """Buffer a change of the occurrence count of ``(time, location)``."""
        self._pending.update((location, time), delta)

    def update_all(self, changes: list[tuple[Pointstamp, int]]) -> None:
        """Buffer many ``((location, time), delta)`` changes at once."""
        self._pending.extend(changes)

    def propagate(self) -> FrontierChanges:
        """Apply the buffered changes: count changes location by location, the changes of each
        local frontier through the minimal summaries to every reachable location; return the
        changes of implication frontiers."""
        by_location: dict[Location, list[tuple[Timestamp, int]]] = defaultdict(list)
        for (location, time), delta in self._pending.drain():
            by_location[location].append((time, delta))
        implied: dict[Location, list[tuple[Timestamp, int]]] = defaultdict(list)
        for location, updates in by_location.items():
            for time, delta in self._pointstamps[location].update_iter(updates):
                for target, apply in self._targets[location]:
                    result = time if apply is None else apply(time)
                    if result is not None:
                        implied[target].append((result, delta))
        self.touched = {*by_location, *implied}
        changes: FrontierChanges = {}
        for target, updates in implied.items():
            moved = self._implications[target].update_iter(updates)
            if moved:
                changes[target] = moved
        return changes

    def frontier(self, location: Location) -> list[Timestamp]:
        """The minimal timestamps that may still appear at ``location`` (implications)."""
        return self._implications[location].frontier()

    def occurrence_count(self, location: Location, time: Timestamp) -> int:
        """The applied occurrence count of ``(time, location)``; may be negative transiently."""
        return self._pointstamps[location].count(time)

    def is_blocked(self, location: Location, time: Timestamp) -> bool:
        """Whether an active pointstamp other than ``(time, location)`` could-result-in it."""
        implications = self._implications[location]
        if implications.less_than(time):
            return True
        own = 1 if time in self._pointstamps[location].frontier() else 0
        return implications.count(time) > own

    def may_notify(self, vertex: str, time: Timestamp) -> bool:
        """Whether vertex ``vertex`` may be notified that ``time`` is complete."""
        return not self.is_blocked(Location.of_vertex(vertex), time)

    def active_pointstamps(self) -> dict[Pointstamp, int]:
        """Every applied pointstamp with a positive occurrence count."""
        return {
            (location, time): count
            for location, counts in self._pointstamps.items()
            for time, count in counts.counts().items()
            if count > 0
        }

    def frontier_pointstamps(self) -> set[Pointstamp]:
        """The active pointstamps with no active precursor (Naiad's frontier)."""
        return {p for p in self.active_pointstamps() if not self.is_blocked(*p)}

    def is_idle(self) -> bool:
        """True when no pointstamp is active anywhere: the computation has finished."""
        return all(counts.is_empty() for counts in self._pointstamps.values())

    def has_pending(self) -> bool:
        """Whether updates were buffered but not yet propagated."""
        return not self._pending.is_empty()
