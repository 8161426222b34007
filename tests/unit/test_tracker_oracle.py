"""The incremental tracker against the all-pairs tracker it replaced (``tests/all_pairs.py``).

Random graphs with loops, nested loops and bounded feedback (bound 0, which drops every
record, included), random batches of count changes, negative counts and retirements of
whole pointstamps included: after every ``propagate()`` both trackers report the same
frontier changes and give the same answers at every location, for every timestamp up to
one past the counters drawn. The generator's loops have one feedback each, where the
tracker's per-edge view of iteration bounds and the path summaries agree (the module
docstring of :mod:`raytide.progress.tracker`); the last test pins where they do not.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.progress import GraphBuilder, Location, PathSummary, ProgressGraph, Timestamp, Tracker
from tests.all_pairs import AllPairsTracker
from tests.strategies import random_graph, timestamps

MAX_EPOCH, MAX_COUNTER = 2, 2


def query_times(graph: ProgressGraph, location: Location) -> list[Timestamp]:
    """Every timestamp of the location's depth with counters up to one past those drawn."""
    counters = itertools.product(range(MAX_COUNTER + 2), repeat=graph.depth(location))
    return [Timestamp(e, c) for c in counters for e in range(MAX_EPOCH + 1)]


def answers(tracker: Tracker | AllPairsTracker, queries: dict[Location, list[Timestamp]]) -> dict[Location, tuple]:
    """Per location, what a cache of per-location answers holds: the frontier and whether each time is blocked."""
    return {location: (frozenset(tracker.frontier(location)), tuple(tracker.is_blocked(location, t) for t in times))
            for location, times in queries.items()}


def net(changes: dict[Location, list[tuple[Timestamp, int]]]) -> dict[Location, Counter]:
    """Frontier changes as a multiset per location (their order within a location is not part of the contract)."""
    return {location: Counter(moved) for location, moved in changes.items()}


def draw_batch(data, graph: ProgressGraph, counts: Counter) -> list:
    """Count changes at random pointstamps, some of them retiring an active pointstamp whole."""
    fresh = st.sampled_from(graph.locations).flatmap(
        lambda loc: st.tuples(st.just(loc), timestamps(graph.depth(loc), max_epoch=MAX_EPOCH, max_counter=MAX_COUNTER)))
    active = sorted((p for p, c in counts.items() if c > 0), key=lambda p: (str(p[0]), p[1].sort_key()))
    retire = st.sampled_from(active).map(lambda p: (p, -counts[p])) if active else st.nothing()
    return data.draw(st.lists(st.one_of(st.tuples(fresh, st.integers(-2, 2)), retire), min_size=1, max_size=8))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.data())
def test_the_incremental_tracker_answers_as_the_all_pairs_tracker(seed, data):
    graph = random_graph(seed, bounds=(0, 3)).graph
    tracker, oracle = Tracker(graph), AllPairsTracker(graph)
    queries = {location: query_times(graph, location) for location in graph.locations}
    counts: Counter = Counter()
    for _ in range(data.draw(st.integers(1, 8))):
        batch = draw_batch(data, graph, counts)
        for pointstamp, delta in batch:
            counts[pointstamp] += delta
        before = answers(tracker, queries)
        tracker.update_all(batch)
        oracle.update_all(batch)
        assert tracker.has_pending() == oracle.has_pending()
        assert net(tracker.propagate()) == net(oracle.propagate())
        after = answers(tracker, queries)
        assert after == answers(oracle, queries)
        assert {location for location in graph.locations if before[location] != after[location]} <= tracker.touched, \
            "a location whose answers changed is not in touched: a cache would keep stale answers"
        assert tracker.active_pointstamps() == oracle.active_pointstamps()
        assert tracker.frontier_pointstamps() == oracle.frontier_pointstamps()
        assert tracker.is_idle() == oracle.is_idle() and not tracker.has_pending()
        for (location, time), count in counts.items():
            assert tracker.occurrence_count(location, time) == count
            if location.port is None:
                assert tracker.may_notify(location.vertex, time) == oracle.may_notify(location.vertex, time)


@pytest.mark.parametrize("seed", range(40))
def test_each_pointstamp_alone_implies_what_the_all_pairs_tracker_implies(seed):
    """Systematically what random batches reach only by chance: every location on its own, at
    counters zero and at counters beyond the smallest iteration bounds (so a bound applied where
    it should be stripped shows), joins an empty tracker (the same frontiers everywhere, blocked
    the same at each frontier element) and leaves it again."""
    graph = random_graph(seed, bounds=(0, 3)).graph
    tracker, oracle = Tracker(graph), AllPairsTracker(graph)
    for location in graph.locations:
        for counter in (0, MAX_COUNTER):
            time = Timestamp(1, (counter,) * graph.depth(location))
            tracker.update(location, time, 1)
            oracle.update(location, time, 1)
            implied = oracle.propagate()
            assert net(tracker.propagate()) == net(implied), (location, time)
            for target, frontier in implied.items():
                assert all(tracker.is_blocked(target, t) == oracle.is_blocked(target, t) for t, _ in frontier)
            tracker.update(location, time, -1)
            oracle.update(location, time, -1)
            assert net(tracker.propagate()) == net(oracle.propagate()), (location, time)
            assert tracker.is_idle() and not any(tracker.frontier(target) for target in graph.locations)


def test_two_bounded_feedbacks_in_a_row_imply_more_than_the_path_summaries_never_less():
    """The one place the two differ: a path through two feedback steps of one loop whose
    increments together pass the second one's bound carries no record, and the minimal path
    summaries drop it (``followed_by`` knows the path's increment so far); the tracker sees
    a timestamp per edge, strips the bound (``max_iterations=2`` here) and implies more.
    That is on the safe side: frontiers lower, never higher."""
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("enter", summaries=[PathSummary.ingress()])
    b.add_vertex("head", inputs=2, depth=1)
    b.add_vertex("body", depth=1)
    b.add_vertex("first", depth=1, summaries=[PathSummary.feedback()])
    b.add_vertex("second", depth=1, summaries=[PathSummary.feedback(1)])
    for edge in [("src", 0, "enter", 0), ("enter", 0, "head", 0), ("head", 0, "body", 0), ("body", 0, "first", 0),
                 ("first", 0, "second", 0), ("second", 0, "head", 1)]:
        b.add_edge(*edge)
    graph = b.build()
    tracker, oracle = Tracker(graph), AllPairsTracker(graph)
    for each in (tracker, oracle):
        each.update(Location.of_vertex("body"), Timestamp(0, (0,)), 1)
        each.propagate()
    back = Location.of_input("head", 1)
    assert oracle.frontier(back) == [] and tracker.frontier(back) == [Timestamp(0, (2,))]
    for location in graph.locations:
        assert all(any(t.less_equal(o) for t in tracker.frontier(location)) for o in oracle.frontier(location))
