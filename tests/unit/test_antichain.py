"""Antichain minimality, MutableAntichain frontier maintenance and ChangeBatch consolidation."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from raytide.progress import Antichain, ChangeBatch, MutableAntichain, Timestamp
from raytide.progress.timestamps import minimal_elements
from tests.strategies import timestamps


@given(st.lists(timestamps(2, max_epoch=3, max_counter=3), max_size=30))
def test_minimal_elements_are_those_no_other_is_strictly_below_in_their_first_order(times):
    distinct = list(dict.fromkeys(times))
    assert minimal_elements(times) == [t for t in distinct if not any(o.less_than(t) for o in distinct)]


@given(st.lists(timestamps(2, max_epoch=3, max_counter=3), max_size=30))
def test_antichain_holds_exactly_the_minimal_elements(times):
    chain = Antichain(times)
    members = chain.elements()
    assert set(members) == set(minimal_elements(times))
    assert all(not a.less_equal(b) for a in members for b in members if a != b)
    for t in times:
        assert chain.less_equal(t)


updates = st.lists(st.tuples(timestamps(1, max_epoch=3, max_counter=3), st.integers(-2, 2)), max_size=12)


@given(st.lists(updates, max_size=8))
def test_mutable_antichain_reports_exactly_the_frontier_changes(batches):
    m = MutableAntichain()
    counts: Counter = Counter()
    frontier: set[Timestamp] = set()
    for batch in batches:
        changes = m.update_iter(batch)
        for t, d in batch:
            counts[t] += d
        expected = set(minimal_elements(t for t, c in counts.items() if c > 0))
        for t, d in changes:
            assert d in (1, -1)
            if d == 1:
                assert t not in frontier
                frontier.add(t)
            else:
                frontier.remove(t)
        assert frontier == expected == set(m.frontier())
        assert all(m.count(t) == c for t, c in counts.items())


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(-3, 3))))
def test_change_batch_consolidates(changes):
    batch = ChangeBatch(changes)
    totals: Counter = Counter()
    for key, delta in changes:
        totals[key] += delta
    assert dict(batch.drain()) == {k: v for k, v in totals.items() if v}
    assert batch.is_empty()
