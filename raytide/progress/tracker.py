"""The pointstamp tracker: which work is pending where, and which timestamps are complete.

A pointstamp ``(time, location)`` is *active* while its occurrence count is positive: a
message in flight to an input port, or a capability / notification request held at a
vertex. Naiad keeps, per active pointstamp, a precursor count (how many other active
pointstamps could-result-in it); the frontier is the active pointstamps whose precursor
count is zero.

This tracker keeps the same information the way timely dataflow's reachability tracker
does, edge by edge. Per location ``l`` it holds

* ``pointstamps[l]``, the occurrence counts of the pointstamps at ``l``;
* ``implications[l]``, counted timestamps: one for each element of the local frontier
  of ``pointstamps[l]``, and, for each edge ``k -> l`` with summary ``s``, one ``s(f)``
  for each element ``f`` of the frontier of ``implications[k]``.

The frontier of ``implications[l]`` is then the minimal timestamps that any active
pointstamp could result in at ``l``, the frontier at ``l``.

Propagation. :meth:`Tracker.propagate` applies the buffered counts location by location;
only the changes of a local frontier enter a worklist of ``(time, location, delta)``. The
worklist pops in the order of ``Timestamp.sort_key`` (then of the locations, upstream
first) and sums the entries for one time at one location; it applies the sum to that
location's implications, and only the changes of their frontier travel on, along the
location's edges through the edge's summary. So a change travels as far as it moves
frontiers, and costs nothing beyond: a message moving one hop while an earlier timestamp
holds both ends costs two count updates, whatever the size of the graph, and a frontier
change costs a step per location whose frontier it moves. Measured (``python -m bench
tracker``, 8 epochs in flight, CPU time; docs/benchmarks.md): 234,000 updates/s
at 20 locations, 137,000 at 1,000, where propagating each local frontier change to every
reachable location through all-pairs path summaries (``tests/all_pairs.py``, the oracle of
the tests) managed 184,000 and 1,500.

The order makes cycles finish (popped first in, first out, the oracle test does not). When
a frontier element ``t`` leaves a location on a loop, what it implied there through the
feedback (``t + 1``) is still counted and is the frontier for a moment; that phantom
travels on at ``t + 1``, but the retraction of ``t`` goes round the loop at ``t`` first and
comes back as the retraction of ``t + 1``. Everything at ``t + 1``, the phantom and its
retraction, is done before anything at ``t + 2`` is popped, and what the two push through
the feedback to ``t + 2`` cancels there. Across loop scopes too: summaries never change
the epoch, ingress and feedback move a time up in the sort order, and egress moves
``(c..., x)`` down to ``(c...)``, which still sorts before all that the enclosing loop's
feedback makes of it.

Iteration bounds are handled as :mod:`raytide.progress.reachability` does: an edge whose
summary drops every timestamp (a feedback bounded below its own increment,
``max_iterations=1``) is no edge, and other bounds are stripped, which over-approximates
could-result-in and keeps summaries monotone, as propagating only frontiers requires.
(The minimal path summaries of :class:`ProgressGraph` also drop a path on which two
bounded feedback steps of one loop together exceed a bound; the tracker cannot, as it
sees timestamps, not paths, and implies more there. That only holds notifications longer.)

Blocked pointstamps. ``(t, l)`` has an active precursor (another active pointstamp that
could-result-in it) iff

* some frontier element of ``implications[l]`` is strictly below ``t``, or
* ``implications[l]`` counts ``t`` more often than ``own``, where ``own`` is 1 if ``t`` is
  on the local frontier of ``pointstamps[l]`` and 0 otherwise.

Why. Say an active ``(t', l') != (t, l)`` could-result-in ``(t, l)``: some path ``p``
has ``p(t') <= t``. Unless something is implied at ``l`` strictly below ``t``,
``p(t') = t``, and ``p`` is not empty (else ``(t', l')`` would be ``(t, l)``); its last
edge ``k -> l`` maps a frontier element of ``implications[k]`` (at or below ``p``'s time
at ``k``) to at most ``t``, so to exactly ``t``: ``t`` is counted along an edge.
Conversely an implication below ``t``, or a count of ``t`` along an edge, comes through a
path from an active pointstamp, and not from ``(t, l)`` itself: a path from ``l`` back to
``l`` maps ``t`` strictly above ``t``. The counts of ``t`` beyond ``own`` are exactly the
counts along edges.

Negative counts. With batched progress a consumer's ``-1`` can reach the tracker before
the producer's ``+1``. Such a count is not active, and that is safe under Naiad's rule
that a batch retiring an event carries the ``+1`` of everything the event produced: the
producer's own pointstamp is then still active and could-result-in everything the
missing message could. Implication counts are never negative: they only follow frontier
changes, and a timestamp leaves a frontier only after it joined it.

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
from collections.abc import Callable
from heapq import heapify, heappop, heappush

from raytide.progress.antichain import MutableAntichain
from raytide.progress.change_batch import ChangeBatch
from raytide.progress.graph import ProgressGraph
from raytide.progress.reachability import Location, components
from raytide.progress.summaries import PathSummary
from raytide.progress.timestamps import Timestamp

Pointstamp = tuple[Location, Timestamp]
FrontierChanges = dict[Location, list[tuple[Timestamp, int]]]
#: What an edge does to a timestamp: None for the identity (nothing to compute).
Apply = Callable[[Timestamp], Timestamp | None] | None
#: A worklist entry: ``(epoch, counters, location rank, time, delta)``; the first three order it.
Work = tuple[int, tuple[int, ...], int, Timestamp, int]


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
        # upstream first: at one time, the worklist takes a location after those feeding it
        self._locations = [loc for component in components(graph.location_edges, graph.locations) for loc in component]
        self._rank = {loc: rank for rank, loc in enumerate(self._locations)}
        self._pointstamps = [MutableAntichain() for _ in self._locations]
        self._implications = [MutableAntichain() for _ in self._locations]
        # an edge whose summary drops every timestamp is no edge, as in reachability
        self._edges = [[(self._rank[target], _compile(step)) for target, step in graph.location_edges[loc]
                        if PathSummary.identity().followed_by(step) is not None]
                       for loc in self._locations]
        self.touched: set[Location] = set()

    def update(self, location: Location, time: Timestamp, delta: int) -> None:
        """Buffer a change of the occurrence count of ``(time, location)``."""
        self._pending.update((location, time), delta)

    def update_all(self, changes: list[tuple[Pointstamp, int]]) -> None:
        """Buffer many ``((location, time), delta)`` changes at once."""
        self._pending.extend(changes)

    def propagate(self) -> FrontierChanges:
        """Apply the buffered changes; return the changes of implication frontiers.

        Step 1 applies the count changes location by location and puts the changes of each
        local frontier on the worklist. Step 2 drains the worklist (see the module
        docstring), collecting the changes of every implication frontier.
        """
        by_rank: dict[int, list[tuple[Timestamp, int]]] = defaultdict(list)
        for (location, time), delta in self._pending.drain():
            by_rank[self._rank[location]].append((time, delta))
        work: list[Work] = []
        for rank, updates in by_rank.items():
            work += [(time.epoch, time.counters, rank, time, delta)
                     for time, delta in self._pointstamps[rank].update_iter(updates)]
        heapify(work)
        moved: dict[int, list[tuple[Timestamp, int]]] = {}
        touched = self._drain(work, moved)
        self.touched = {self._locations[rank] for rank in touched.union(by_rank)}
        changes = {self._locations[rank]: _net(steps) for rank, steps in moved.items()}
        return {location: steps for location, steps in changes.items() if steps}

    def _drain(self, work: list[Work], moved: dict[int, list[tuple[Timestamp, int]]]) -> set[int]:
        """Apply the worklist's changes to implications in order, pushing frontier changes along
        the edges; append each location's frontier changes to ``moved``. Returns the ranks of
        the locations whose implications changed."""
        implications, edges = self._implications, self._edges
        touched: set[int] = set()
        while work:
            _, _, rank, time, delta = heappop(work)
            while work and work[0][2] == rank and work[0][3] == time:
                delta += heappop(work)[4]
            if not delta:
                continue
            touched.add(rank)
            steps = implications[rank].update_iter(((time, delta),))
            if not steps:
                continue
            moved.setdefault(rank, []).extend(steps)
            for changed, change in steps:
                for target, apply in edges[rank]:
                    result = changed if apply is None else apply(changed)
                    if result is not None:
                        heappush(work, (result.epoch, result.counters, target, result, change))
        return touched

    def frontier(self, location: Location) -> list[Timestamp]:
        """The minimal timestamps that may still appear at ``location`` (implications)."""
        return self._implications[self._rank[location]].frontier()

    def occurrence_count(self, location: Location, time: Timestamp) -> int:
        """The applied occurrence count of ``(time, location)``; may be negative transiently."""
        return self._pointstamps[self._rank[location]].count(time)

    def is_blocked(self, location: Location, time: Timestamp) -> bool:
        """Whether an active pointstamp other than ``(time, location)`` could-result-in it.

        Some implication at ``location`` is below ``time``, or ``time`` is implied along an
        edge (more often than by its own presence on the local frontier); the module
        docstring says why that is exact.
        """
        rank = self._rank[location]
        implications = self._implications[rank]
        if implications.less_than(time):
            return True
        own = 1 if time in self._pointstamps[rank].frontier() else 0
        return implications.count(time) > own

    def may_notify(self, vertex: str, time: Timestamp) -> bool:
        """Whether vertex ``vertex`` may be notified that ``time`` is complete."""
        return not self.is_blocked(Location.of_vertex(vertex), time)

    def active_pointstamps(self) -> dict[Pointstamp, int]:
        """Every applied pointstamp with a positive occurrence count."""
        return {
            (location, time): count
            for location, counts in zip(self._locations, self._pointstamps)
            for time, count in counts.counts().items()
            if count > 0
        }

    def frontier_pointstamps(self) -> set[Pointstamp]:
        """The active pointstamps with no active precursor (Naiad's frontier)."""
        return {p for p in self.active_pointstamps() if not self.is_blocked(*p)}

    def is_idle(self) -> bool:
        """True when no pointstamp is active anywhere: the computation has finished."""
        return all(counts.is_empty() for counts in self._pointstamps)

    def has_pending(self) -> bool:
        """Whether updates were buffered but not yet propagated."""
        return not self._pending.is_empty()


def _compile(step: PathSummary) -> Apply:
    """What propagation applies along an edge with summary ``step``: None for the identity,
    else the ``results_in`` of the summary without its iteration bound."""
    unbounded = step.unbounded()
    return None if unbounded == PathSummary.identity() else unbounded.results_in


def _net(steps: list[tuple[Timestamp, int]]) -> list[tuple[Timestamp, int]]:
    """The net effect of successive frontier changes at one location: what left the frontier,
    then what joined it (a time that joined and left again, or left and joined, is not there)."""
    if len(steps) == 1:
        return steps
    total: dict[Timestamp, int] = {}
    for time, change in steps:
        total[time] = total.get(time, 0) + change
    return [(t, c) for t, c in total.items() if c < 0] + [(t, c) for t, c in total.items() if c > 0]
