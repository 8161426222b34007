"""Parquet and other Arrow datasets, read fragment by fragment inside the input replicas.

Fragments (files) are dealt out round robin to the readers. Epochs are one per file, one
per ``rows_per_epoch`` rows (counted over the files in order, from their metadata), or
taken from an integer column: a reader then reads just that column to learn its epochs
and scans its fragments once per epoch with a filter, so memory stays bounded and its
epochs never decrease.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from raytide.sources.numbering import epoch_slices

EpochRule = Union[str, None]


def epochs_in_column(table: pa.Table, column: str) -> list[int]:
    """The distinct epochs of ``table``'s integer ``column``, sorted (a clear error if the column is unfit)."""
    values = table.column(column)
    if not pa.types.is_integer(values.type):
        raise TypeError(f"epoch column {column!r} must hold integers, it holds {values.type}")
    if values.null_count:
        raise ValueError(f"epoch column {column!r} has {values.null_count} null values")
    epochs = sorted(pc.unique(values).to_pylist())
    if epochs and epochs[0] < 0:
        raise ValueError(f"epoch column {column!r} has a negative epoch {epochs[0]}")
    return epochs


def rows_of_epoch(table: pa.Table, column: str, epoch: int) -> pa.Table:
    """The rows of ``table`` whose ``column`` is ``epoch``."""
    return table.filter(pc.equal(table.column(column), epoch))


@dataclass(frozen=True)
class ArrowDatasetSource:
    """Rows of an Arrow dataset (Parquet, Feather, CSV... anything ``pyarrow.dataset`` reads).

    Args:
        source: a path, a list of paths or a ``pyarrow.dataset.Dataset``.
        epoch_column: take each row's epoch from this integer column.
        rows_per_epoch: otherwise start a new epoch every this many rows.
        format: the file format when ``source`` is a path (default parquet).
        columns: read only these columns.
        batch_rows: rows per message.

    Without ``epoch_column`` and ``rows_per_epoch`` every file is one epoch.
    """

    source: Union[str, Sequence[str], pads.Dataset]
    epoch_column: Optional[str] = None
    rows_per_epoch: Optional[int] = None
    format: str = "parquet"
    columns: Optional[Sequence[str]] = None
    batch_rows: int = 65_536

    def dataset(self) -> pads.Dataset:
        if isinstance(self.source, pads.Dataset):
            return self.source
        return pads.dataset(self.source if isinstance(self.source, str) else list(self.source), format=self.format)

    def readers(self, parallelism: int) -> list[ArrowReader]:
        """One reader per replica, each with every ``parallelism``-th fragment."""
        if self.epoch_column and self.rows_per_epoch:
            raise ValueError("give epoch_column or rows_per_epoch, not both")
        fragments = list(self.dataset().get_fragments())
        first_rows = [0] * len(fragments)
        if self.rows_per_epoch:
            counts = [f.count_rows() for f in fragments]  # from file metadata where the format has it
            for i in range(1, len(fragments)):
                first_rows[i] = first_rows[i - 1] + counts[i - 1]
        mine = [[(i, f, first_rows[i]) for i, f in enumerate(fragments) if i % parallelism == r] for r in range(parallelism)]
        return [ArrowReader(self, m) for m in mine]


@dataclass(frozen=True)
class ArrowReader:
    """One replica's fragments, as ``(epoch, Arrow table)`` pairs."""

    source: ArrowDatasetSource
    fragments: list[tuple[int, Any, int]]

    def _batches(self, fragment: Any, filter: Any = None) -> Iterator[pa.Table]:
        columns = list(self.source.columns) if self.source.columns else None
        for batch in fragment.to_batches(columns=columns, filter=filter, batch_size=self.source.batch_rows):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])

    def __iter__(self) -> Iterator[tuple[int, pa.Table]]:
        column = self.source.epoch_column
        if column:
            yield from self._by_column(column)
            return
        for index, fragment, first_row in self.fragments:
            row = first_row
            for table in self._batches(fragment):
                if self.source.rows_per_epoch:
                    for epoch, start, stop in epoch_slices(row, table.num_rows, self.source.rows_per_epoch):
                        yield epoch, table.slice(start, stop - start)
                else:
                    yield index, table
                row += table.num_rows

    def _by_column(self, column: str) -> Iterator[tuple[int, pa.Table]]:
        holding: dict[int, list] = {}  # epoch -> the fragments with rows of it, in order
        for _, fragment, _ in self.fragments:
            for epoch in epochs_in_column(fragment.to_table(columns=[column]), column):
                holding.setdefault(epoch, []).append(fragment)
        for epoch in sorted(holding):
            for fragment in holding[epoch]:
                yield from ((epoch, t) for t in self._batches(fragment, pc.field(column) == epoch))
