"""The incremental tracker against a frontier recomputed from scratch after every batch."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.progress import Location, Timestamp, Tracker
from tests.oracles import ReachabilityOracle, frontier_from_scratch
from tests.strategies import random_graph, timestamps


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.data())
def test_frontier_equals_recomputation_from_scratch(seed, data):
    rg = random_graph(seed)
    graph = rg.graph
    tracker = Tracker(graph)
    oracle = ReachabilityOracle(rg, cap=3)
    counts: Counter = Counter()
    pointstamp = st.sampled_from(graph.locations).flatmap(
        lambda loc: st.tuples(st.just(loc), timestamps(graph.depth(loc), max_epoch=2, max_counter=2))
    )
    for _ in range(data.draw(st.integers(1, 6))):
        batch = data.draw(st.lists(st.tuples(pointstamp, st.integers(-2, 2)), min_size=1, max_size=6))
        for (location, time), delta in batch:
            tracker.update(location, time, delta)
            counts[(location, time)] += delta
        tracker.propagate()
        expected = frontier_from_scratch(oracle, counts)
        assert tracker.frontier_pointstamps() == expected
        for (location, time), count in counts.items():
            assert tracker.occurrence_count(location, time) == count
        query = data.draw(pointstamp)
        others = [p for p, c in counts.items() if c > 0 and p != query]
        assert tracker.is_blocked(*query) == any(oracle.could_result_in(q, query) for q in others)


def test_negative_counts_are_not_active_and_cancel_later():
    graph = random_graph(3).graph
    tracker = Tracker(graph)
    loc = graph.locations[1]
    t = Timestamp(0, (0,) * graph.depth(loc))
    tracker.update(loc, t, -1)
    tracker.propagate()
    assert tracker.frontier(loc) == [] and tracker.is_idle()
    tracker.update(loc, t, 1)
    assert tracker.propagate() == {}
    assert tracker.is_idle()


def test_frontier_changes_are_reported_only_when_frontiers_move():
    graph = random_graph(5).graph
    tracker = Tracker(graph)
    src = Location.of_vertex("src0")
    tracker.update(src, Timestamp(0), 1)
    first = tracker.propagate()
    assert first[src] == [(Timestamp(0), 1)]
    tracker.update(src, Timestamp(3), 1)
    assert tracker.propagate() == {}, "a pointstamp behind the frontier moves nothing"
    tracker.update(src, Timestamp(0), -1)
    moved = tracker.propagate()
    assert moved[src] == [(Timestamp(0), -1), (Timestamp(3), 1)]
