"""How a push is cut into the messages the driver sends its input replicas
(:func:`raytide.driver.push_batches.push_pieces`, issue 71): records in pieces of
``batch_size``; a column batch in one piece per replica, at least ``batch_size`` rows and
at most ``COLUMN_PIECE_BYTES`` each. Checked against the batch itself (the pieces put back
together in order) and a brute-force count of the pieces the rule allows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.core.batches import batch_length
from raytide.driver import inputs, push_batches
from raytide.driver.push_batches import push_pieces
from raytide.physical.plan import compile_plan


def columns(rows: int) -> dict[str, np.ndarray]:
    return {"key": np.arange(rows, dtype=np.int64), "diff": np.ones(rows, dtype=np.int64)}


def piece_rows(rows: int, replicas: int, batch_size: int, rows_per_cap: int) -> int:
    """By brute force: the fewest rows a piece may hold for the batch to go in at most one
    piece per replica, then kept within ``batch_size`` (below) and the byte cap (above)."""
    fewest = next(length for length in range(1, rows + 1) if -(-rows // length) <= replicas)
    return max(batch_size, min(fewest, rows_per_cap))


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(0, 5000), replicas=st.integers(1, 5), batch_size=st.integers(1, 3000),
       cap_rows=st.integers(1, 4000), arrow=st.booleans())
def test_a_column_batch_goes_in_one_piece_per_replica_within_the_byte_cap(rows, replicas, batch_size, cap_rows, arrow):
    batch = columns(rows)
    pieces = push_pieces(pa.table(batch) if arrow else batch, replicas, batch_size, cap_rows * 16)  # 16 bytes a row
    lengths = [batch_length(piece) for piece in pieces]
    keys = [np.asarray(piece["key"]) for piece in pieces]
    assert np.array_equal(np.concatenate(keys) if keys else np.empty(0, np.int64), batch["key"]), "in order, none lost"
    if rows <= batch_size:
        assert lengths == ([rows] if rows else [])
        return
    length = piece_rows(rows, replicas, batch_size, cap_rows)
    assert lengths == [length] * (rows // length) + ([rows % length] if rows % length else []), length


@given(rows=st.integers(0, 3000), replicas=st.integers(1, 4), batch_size=st.integers(1, 1000))
def test_records_go_in_pieces_of_batch_size_whatever_the_replicas(rows, replicas, batch_size):
    pieces = push_pieces(list(range(rows)), replicas, batch_size)
    assert [r for piece in pieces for r in piece] == list(range(rows))
    assert all(len(piece) == batch_size for piece in pieces[:-1]) and all(len(piece) <= batch_size for piece in pieces)


def test_a_pushed_column_update_is_held_as_one_piece_per_input_replica():
    """A 20k-row update into a two-replica input: two pieces (one per replica), held for the
    advance, where a cut at ``batch_size`` made five."""
    flow = rt.Dataflow("updates", parallelism=2)
    flow.collection("orders").output("out")
    feeds = inputs.InputFeeds(compile_plan(flow), {"orders": [object(), object()]}, max_inflight=1, batch_size=4096,
                              raise_if_failed=lambda: None)
    feeds.held_pushes.held = lambda: None  # nothing is sent: no Ray here
    feeds.push("orders", columns(20_000), 0)
    assert sorted(feeds.held) == [("orders", 0), ("orders", 1)]


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_large_column_batch_is_cut_by_bytes(replicas):
    rows = 3 * push_batches.COLUMN_PIECE_BYTES // 16 + 1  # over three caps of two int64 columns
    lengths = [batch_length(piece) for piece in push_pieces(columns(rows), replicas, 4096)]
    assert len(lengths) == 4 and max(lengths) * 16 <= push_batches.COLUMN_PIECE_BYTES
