"""Cutting batches of numbered records at epoch boundaries, against a record-by-record oracle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raytide.sources.numbering import epoch_slices


@given(st.integers(0, 10_000), st.integers(0, 60), st.integers(1, 25))
def test_slices_give_every_record_its_epoch_once_in_order(first, length, per_epoch):
    slices = list(epoch_slices(first, length, per_epoch))
    labelled = [epoch for epoch, start, stop in slices for _ in range(start, stop)]
    assert labelled == [(first + i) // per_epoch for i in range(length)]
    assert [start for _, start, _ in slices] == [0, *(stop for _, _, stop in slices)][:len(slices)]  # consecutive
    epochs = [epoch for epoch, _, _ in slices]
    assert epochs == sorted(set(epochs))  # one slice per epoch, increasing
    assert all(start < stop for _, start, stop in slices)  # never an empty slice
