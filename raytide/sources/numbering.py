"""Epochs by record number, shared by the sources that start a new epoch every N records."""

from __future__ import annotations

from collections.abc import Iterator


def epoch_slices(first: int, length: int, per_epoch: int) -> Iterator[tuple[int, int, int]]:
    """Cut a batch at the epoch boundaries of numbered records.

    Record ``i`` of the batch has global number ``first + i`` and belongs to epoch
    ``(first + i) // per_epoch``.

    Args:
        first: Global number of the batch's first record.
        length: Number of records in the batch.
        per_epoch: Records per epoch (positive).

    Yields:
        ``(epoch, start, stop)``: records ``[start, stop)`` of the batch, all of ``epoch``;
        consecutive, covering the batch, epochs increasing.
    """
    start = 0
    while start < length:
        epoch = (first + start) // per_epoch
        stop = min(length, (epoch + 1) * per_epoch - first)
        yield epoch, start, stop
        start = stop
