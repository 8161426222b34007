"""Updates as columns: arrangements netted by a diff column against a multiset oracle, and
column batches of updates pushed into collections, read as pairs or as columns."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.arrangement import MERGE_RATIO, Arrangement
from raytide.core.collection_ops import CheckUpdates
from raytide.differential import DIFF, update_columns, update_records
from raytide.errors import RecordError
from raytide.progress.timestamps import Timestamp
from tests.unit.harness import RecordingContext, bound

ROWS = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 4), st.integers(-2, 2)), max_size=25)


def net(pairs: Counter) -> Counter:
    """The multiset of ``(slot, x)`` with nonzero net copies (negative ones kept: a retraction of nothing)."""
    return Counter({pair: copies for pair, copies in pairs.items() if copies})


@settings(max_examples=150, deadline=None)
@given(st.lists(ROWS, max_size=10), st.lists(st.integers(0, 14), max_size=10))
def test_an_arrangement_with_diffs_holds_the_net_copies_of_every_row(batches, asked):
    """Whatever the order of additions and retractions, expanding slots gives each row's net
    copies, rows() is the netted whole, and what merges cancel is counted, not kept."""
    arrangement, size, seen = Arrangement(("x", DIFF), diff=DIFF), 0, Counter()
    for batch in batches:
        size = max([size] + [slot + 1 for slot, _, _ in batch])
        arrangement.add(np.array([s for s, _, _ in batch], dtype=np.int64),
                        {"x": np.array([x for _, x, _ in batch], dtype=np.int64),
                         DIFF: np.array([d for _, _, d in batch], dtype=np.int64)}, size)
        for slot, x, diff in batch:
            seen[(slot, x)] += diff
        wanted = sorted({s for s in asked if s < size})
        which, rows = arrangement.expand(np.array(wanted, dtype=np.int64))
        got: Counter = Counter()
        for k, slot in enumerate(np.array(wanted, dtype=np.int64)[which].tolist()):
            got[(slot, int(rows["x"][k]))] += int(rows[DIFF][k])
        assert net(got) == net(Counter({p: c for p, c in seen.items() if p[0] in wanted}))
    slots, rows = arrangement.rows()
    assert Counter(dict(zip(zip(slots.tolist(), rows["x"].tolist()), rows[DIFF].tolist()))) == net(seen)
    assert len(slots) == len(set(zip(slots.tolist(), rows["x"].tolist()))), "rows() is netted: one row per pair"
    assert 0 not in rows[DIFF].tolist()
    assert arrangement.held == len(arrangement) == len(slots)
    assert arrangement.cancelled == sum(map(len, batches)) - len(slots)


def test_a_hundred_batches_that_cancel_leave_an_arrangement_no_larger_than_the_first():
    arrangement = Arrangement(("x", DIFF), diff=DIFF)
    slots, xs = np.arange(50, dtype=np.int64) % 7, np.arange(50, dtype=np.int64)
    arrangement.add(slots, {"x": xs, DIFF: np.ones(50, dtype=np.int64)}, 7)
    for epoch in range(100):
        some = slice(epoch % 5, None, 5)
        arrangement.add(slots[some], {"x": xs[some], DIFF: np.full(10, -1 if epoch % 2 == 0 else 1)}, 7)
        sizes = [segment.rows for segment in arrangement.segments]
        assert all(bigger > MERGE_RATIO * smaller for bigger, smaller in zip(sizes, sizes[1:])), sizes
        assert len(arrangement) <= 2 * 50 + 10
    assert len(arrangement.rows()[0]) == 50


def test_update_columns_read_pairs_and_columns_alike():
    columns = {"src": np.array([1, 2]), "dst": np.array([3, 4]), DIFF: np.array([1, -1])}
    assert update_records(columns) == [((1, 3), 1), ((2, 4), -1)]
    assert update_records({"node": np.array([7]), DIFF: np.array([2])}) == [(7, 2)]
    from_pairs = update_columns([((1, 3), 1), ((2, 4), -1)], ("u", "v"))
    assert {name: values.tolist() for name, values in from_pairs.items()} == {"u": [1, 2], "v": [3, 4], DIFF: [1, -1]}
    renamed = update_columns(columns, ("u", "v"))
    assert renamed["u"] is columns["src"] and renamed[DIFF] is columns[DIFF], "columns stay the pushed arrays"
    assert update_columns([], ("u", "v"))["u"].dtype == np.int64
    with pytest.raises(RecordError, match="read as 3 columns"):
        update_columns([((1, 3), 1)], ("a", "b", "c"))


def test_a_collections_input_passes_a_column_batch_on_as_columns_and_pairs_as_pairs():
    """Pushed arrays stay arrays behind the input's check (pushes as columns, end to end on
    Ray, are in tests/ray/test_collections.py); record operators read them as pairs."""
    check, context = bound(CheckUpdates("edges"))
    columns = {"src": [1, 2], "dst": np.array([3, 4]), DIFF: np.array([1, -1], dtype=np.int32)}
    check.on_recv(0, columns, Timestamp(0))
    check.on_recv(0, [((5, 6), 2)], Timestamp(1))
    (_, sent), (_, pairs) = context.sent
    assert isinstance(sent["src"], np.ndarray) and sent[DIFF] is columns[DIFF]
    assert update_records(sent) == [((1, 3), 1), ((2, 4), -1)] and pairs == [((5, 6), 2)]


@pytest.mark.parametrize(("batch", "says"), [
    ({"src": np.array([1]), DIFF: np.array([0.5])}, "column 'diff' holds float64 values"),
    ({DIFF: np.array([1])}, "needs record columns beside 'diff'"),
    ({"src": np.array([1, 2]), DIFF: np.array([1])}, "unequal lengths"),
])
def test_a_bad_column_batch_of_updates_is_refused_naming_the_vertex_and_time(batch, says):
    context = RecordingContext()
    context.vertex, context.replica = "rows.updates", 1
    check, _ = bound(CheckUpdates("rows"), context)
    with pytest.raises(RecordError, match=r"vertex 'rows.updates' replica 1 at Timestamp\(3\): collection 'rows'") as caught:
        check.on_recv(0, batch, Timestamp(3))
    assert says in str(caught.value)
