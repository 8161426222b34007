"""The pointstamp tracker: which work is pending where, and which timestamps are complete.

A pointstamp ``(time, location)`` is *active* while its occurrence count is positive: a
message in flight to an input port, or a capability / notification request held at a
vertex. Naiad keeps, per active pointstamp, a precursor count (how many other active
pointstamps could-result-in it); the frontier is the active pointstamps whose precursor
count is zero.

This tracker keeps the same information in the form timely dataflow uses, which costs
less per update: for every location ``l`` a counted antichain of *implications*, the
timestamps ``s(t)`` for each active pointstamp ``(t, l')`` on the local frontier of its
location and each minimal summary ``s`` from ``l'`` to ``l``. Then

* ``(t, l)`` has an active precursor iff some implication at ``l`` is ``< t``, or ``t``
  itself is implied more often than by ``(t, l)`` alone;
* a vertex ``v`` may be notified at ``t`` iff no active pointstamp other than
  ``(t, v)`` could-result-in ``(t, v)``: the same test at ``vertex(v)``.

Only changes of a location's local frontier are propagated (a pointstamp above another
active one at the same location implies nothing new, by monotonicity of summaries), so an
update that does not move a frontier costs a dictionary update. A frontier change costs
one implication update per reachable location.

Negative counts. With batched progress a consumer's ``-1`` can reach the tracker before
the producer's ``+1``. Such a count is not active, and that is safe under Naiad's rule
that a batch retiring an event carries the ``+1`` of everything the event produced: the
producer's own pointstamp is then still active and could-result-in everything the
missing message could.

>>> from raytide.progress.graph import GraphBuilder
>>> b = GraphBuilder(); b.add_vertex("src", inputs=0); b.add_vertex("sink", outputs=0)
>>> b.add_edge("src", 0, "sink", 0)
>>> tracker = Tracker(b.build())
>>> src, sink = Location.of_vertex("src"), Location.of_vertex("sink")
>>> tracker.update(src, Timestamp(0), 1); tracker.update(sink, Timestamp(0), 1)
>>> changes = tracker.propagate()
>>> tracker.may_notify("sink", Timestamp(0))
False
>>> tracker.update(src, Timestamp(0), -1); tracker.update(src, Timestamp(1), 1)
>>> changes = tracker.propagate()
>>> tracker.may_notify("sink", Timestamp(0)), tracker.frontier(sink)
(True, [Timestamp(0)])
"""

from __future__ import annotations

from collections import defaultdict

from raytide.progress.antichain import MutableAntichain
from raytide.progress.change_batch import ChangeBatch
from raytide.progress.graph import ProgressGraph
from raytide.progress.reachability import Location
from raytide.progress.summaries import PathSummary
from raytide.progress.timestamps import Timestamp

Pointstamp = tuple[Location, Timestamp]
FrontierChanges = dict[Location, list[tuple[Timestamp, int]]]


class Tracker:
    """Occurrence counts of pointstamps and the implied frontier at every location.

    Use :meth:`update` to buffer count changes and :meth:`propagate` to apply them; it
    returns, per location, how the implication frontier changed, and leaves in
    :attr:`touched` every location whose counts or implications it changed (what a cache of
    per-location answers must drop).
    """

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
            for source, reached in graph.reach.items()
        }
        self.touched: set[Location] = set()

    def update(self, location: Location, time: Timestamp, delta: int) -> None:
        """Buffer a change of the occurrence count of ``(time, location)``."""
        self._pending.update((location, time), delta)

    def update_all(self, changes: list[tuple[Pointstamp, int]]) -> None:
        """Buffer many ``((location, time), delta)`` changes at once."""
        self._pending.extend(changes)

    def propagate(self) -> FrontierChanges:
        """Apply the buffered changes; return the changes of implication frontiers.

        Step 1 applies the count changes location by location and keeps the changes of
        each local frontier. Step 2 pushes those through the minimal summaries into the
        implications of every reachable location. Step 3 applies them and reports which
        implication frontiers moved.
        """
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
