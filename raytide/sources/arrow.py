"""Parquet and other Arrow datasets, read fragment by fragment inside the input replicas.

Fragments (files) are dealt out round robin to the readers. Epochs are one per file, one
per ``rows_per_epoch`` rows (counted over the files in order, from their metadata), or
taken from an integer column: a reader then reads just that column to learn its epochs
and scans its fragments once per epoch with a filter, so memory stays bounded and its
epochs never decrease. A reader's position (:class:`ArrowPosition`) is a scan and a row
count within it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads

from raytide.errors import SourceError
from raytide.sources.base import Reader, Source
from raytide.sources.epoch_column import EpochColumn
from raytide.sources.numbering import epoch_slices


@dataclass(frozen=True)
class ArrowDatasetSource(Source):
    """Rows of an Arrow dataset (Parquet, Feather, CSV... anything ``pyarrow.dataset`` reads).

    Args:
        source: a path, a list of paths or a ``pyarrow.dataset.Dataset``.
        epoch_column: take each row's epoch from this integer column.
        rows_per_epoch: otherwise start a new epoch every this many rows.
        format: the file format when ``source`` is a path (default parquet).
        columns: read only these columns.
        batch_rows: rows per message.
        event_time: each row's epoch by its own time instead: the name of a timestamp,
            date or seconds column, a function of a row (a dict), or an ``rt.EventTime``
            (docs/windows.md).

    Without ``epoch_column``, ``rows_per_epoch`` and ``event_time`` every file is one epoch.
    """

    source: str | Sequence[str] | pads.Dataset
    epoch_column: str | None = None
    rows_per_epoch: int | None = None
    format: str = "parquet"
    columns: Sequence[str] | None = None
    batch_rows: int = 65_536
    event_time: Any = None

    def event_time_schema(self) -> tuple[str, pa.Schema]:
        """How errors name this source, and the schema of the rows it reads."""
        where = self.source if isinstance(self.source, (str, list, tuple)) else type(self.source).__name__
        if self.event_time is not None and (self.epoch_column or self.rows_per_epoch):
            raise SourceError(f"Arrow dataset {where!r}: give epoch_column, rows_per_epoch or event_time, not two")
        schema = self.dataset().schema
        if self.columns:
            schema = pa.schema([schema.field(name) for name in self.columns if name in schema.names])
        return f"Arrow dataset {where!r}", schema

    def dataset(self) -> pads.Dataset:
        """The ``pyarrow.dataset.Dataset`` to read."""
        if isinstance(self.source, pads.Dataset):
            return self.source
        return pads.dataset(self.source if isinstance(self.source, str) else list(self.source), format=self.format)

    def epochs_column(self) -> EpochColumn | None:
        """The epoch column, named for error messages, if epochs come from one."""
        if self.epoch_column is None:
            return None
        where = self.source if isinstance(self.source, (str, list, tuple)) else type(self.source).__name__
        return EpochColumn(self.epoch_column, f"Arrow dataset {where!r}")

    def epochs_known(self) -> int | None:
        """With one epoch per file, the number of files; with ``rows_per_epoch``, the rows (from the files'
        metadata, Parquet only: other formats would be read to count them) over it, rounded up; None
        with ``epoch_column`` or ``event_time``."""
        if self.epoch_column is not None or self.event_time is not None:
            return None
        dataset = self.dataset()
        if not self.rows_per_epoch:
            return len(list(dataset.get_fragments()))
        if not isinstance(getattr(dataset, "format", None), pads.ParquetFileFormat):
            return None
        return -(-dataset.count_rows() // self.rows_per_epoch)

    def readers(self, parallelism: int) -> list[Reader[ArrowPosition]]:
        """One reader per replica, each with every ``parallelism``-th fragment."""
        if self.epoch_column and self.rows_per_epoch:
            raise ValueError("give epoch_column or rows_per_epoch, not both")
        dataset = self.dataset()
        column = self.epochs_column()
        if column is not None:
            column.check_schema(dataset.schema)
        fragments = list(dataset.get_fragments())
        first_rows = [0] * len(fragments)
        if self.rows_per_epoch:
            counts = [f.count_rows() for f in fragments]  # from file metadata where the format has it
            for i in range(1, len(fragments)):
                first_rows[i] = first_rows[i - 1] + counts[i - 1]
        numbered = [(i, f, first_rows[i]) for i, f in enumerate(fragments)]
        return [ArrowReader(self, numbered[r::parallelism]) for r in range(parallelism)]


@dataclass(frozen=True)
class ArrowPosition:
    """Where an Arrow reader has got to: its scans before ``scan`` and ``rows`` rows of scan ``scan`` are read.

    A reader's scans are its fragments in order or, with an epoch column, one per epoch and
    fragment holding rows of it, in epoch order (the rows of that epoch in that fragment).
    Resuming reads again the rows of the scan before the position, at most one fragment.
    """

    scan: int
    rows: int


@dataclass
class ArrowReader(Reader[ArrowPosition]):
    """One replica's fragments, as ``(epoch, Arrow table)`` pairs.

    Attributes:
        source: the dataset source.
        fragments: ``(index in the dataset, fragment, number of its first row in the dataset)``.
    """

    source: ArrowDatasetSource
    fragments: list[tuple[int, Any, int]]

    def start(self) -> ArrowPosition:
        return ArrowPosition(scan=0, rows=0)

    def check_position(self, position: ArrowPosition) -> None:
        if position.scan < 0 or position.rows < 0:
            raise SourceError(f"Arrow reader of {len(self.fragments)} fragments: {position} is not a position")

    def read_from(self, position: ArrowPosition) -> Iterator[tuple[int, pa.Table, ArrowPosition]]:
        scans = self._scans()
        for scan in range(position.scan, len(scans)):
            epoch, ordinal = scans[scan]
            index, fragment, first_row = self.fragments[ordinal]
            row = position.rows if scan == position.scan else 0  # rows of this scan read
            for table in self._batches(fragment, epoch, skip=row):
                for batch_epoch, start, stop in self._epochs(index, epoch, first_row + row, table.num_rows):
                    row += stop - start
                    yield batch_epoch, table.slice(start, stop - start), ArrowPosition(scan, row)

    def _scans(self) -> list[tuple[int | None, int]]:
        """``(epoch or None, fragment ordinal)`` in reading order; an epoch filters the fragment's rows."""
        column = self.source.epochs_column()
        if column is None:
            return [(None, ordinal) for ordinal in range(len(self.fragments))]
        holding: dict[int, list[int]] = {}  # epoch -> the fragments with rows of it, in order
        for ordinal, (_, fragment, _) in enumerate(self.fragments):
            for epoch in column.epochs(fragment.to_table(columns=[column.name])):
                holding.setdefault(epoch, []).append(ordinal)
        return [(epoch, ordinal) for epoch in sorted(holding) for ordinal in holding[epoch]]

    def _batches(self, fragment: Any, epoch: int | None, skip: int) -> Iterator[pa.Table]:
        """The fragment's rows (of ``epoch`` only, if given) but the first ``skip``, in batches."""
        columns = list(self.source.columns) if self.source.columns else None
        where = None if epoch is None else pads.field(self.source.epoch_column) == epoch
        for batch in fragment.to_batches(columns=columns, filter=where, batch_size=self.source.batch_rows):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            batch, skip = batch.slice(skip), 0
            yield pa.Table.from_batches([batch])

    def _epochs(self, index: int, epoch: int | None, row: int, length: int) -> Iterator[tuple[int, int, int]]:
        """``(epoch, start, stop)`` of ``length`` rows of fragment ``index``, the first being row ``row`` overall."""
        if epoch is not None:
            yield epoch, 0, length
        elif self.source.rows_per_epoch:
            yield from epoch_slices(row, length, self.source.rows_per_epoch)
        else:
            yield index, 0, length
