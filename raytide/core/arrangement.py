"""Arrangements: insert-only rows indexed by the slot of their key, in CSR segments.

An arrangement holds what enters a loop once and stays visible at every later iteration
and epoch (a graph's out-edges, say): rows of NumPy columns, grouped by the local slot of
their key (:class:`~raytide.core.keyindex.KeyIndex`). Each :meth:`Arrangement.add` sorts
only its own rows into a new CSR segment, so an epoch that adds 1% more rows costs 1% of
the first. Segments are merged by size, as an LSM tree's runs are: the newest with the one
before it while it holds at least half as many rows (:data:`MERGE_RATIO`). So every
segment holds more than twice the rows of the next, there are at most about
log2(rows / smallest add) of them, and a row is merged that many times at most: the cost
of merging spreads over the adds, where merging everything every few adds made every
few epochs cost as much as the first. :meth:`Arrangement.expand` gives, for a set of
slots, every row of each (the join of a column of keys with the arrangement), a handful
of NumPy calls however many rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from raytide.core.keyindex import concat, group_by_first, is_dense, runs

#: The newest segment is merged with the one before it while it holds at least 1/MERGE_RATIO of its rows.
MERGE_RATIO = 2
#: A segment keeps CSR offsets (one per slot) when it holds at least one row per this many slots.
CSR_ROWS_FACTOR = 4

Rows = dict[str, np.ndarray]


class Segment:
    """Rows sorted by slot: ``row_slots[k]`` is the slot of row ``k`` (non-decreasing), for
    slots below ``size``.

    A segment with many rows for its slots (at least ``size / CSR_ROWS_FACTOR``) also keeps
    CSR ``offsets`` (the rows of slot ``s`` are ``offsets[s]:offsets[s + 1]``), found with one
    lookup per slot; a smaller one (an epoch's few new rows) is searched with
    ``np.searchsorted`` instead, so that adding it, and merging it later, costs its own rows
    and not a pass over every slot.
    """

    def __init__(self, row_slots: np.ndarray, columns: Rows, size: int, offsets: np.ndarray | None = None) -> None:
        self.row_slots, self.columns, self.size = row_slots, columns, size
        if offsets is None and CSR_ROWS_FACTOR * len(row_slots) >= size:
            offsets = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(np.bincount(row_slots, minlength=size), out=offsets[1:])
        self.offsets = offsets

    @property
    def rows(self) -> int:
        """How many rows the segment holds."""
        return len(self.row_slots)

    def counts(self) -> np.ndarray:
        """How many rows each slot ``0 .. size-1`` has."""
        return np.diff(self.offsets) if self.offsets is not None else np.bincount(self.row_slots, minlength=self.size)

    def bounds(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the rows of each of ``slots`` (all below ``size``) start, and how many there are."""
        if self.offsets is not None:
            starts = self.offsets[slots]
            return starts, self.offsets[slots + 1] - starts
        starts = np.searchsorted(self.row_slots, slots, side="left")
        return starts, np.searchsorted(self.row_slots, slots, side="right") - starts


def grouped(slots: np.ndarray, columns: Mapping[str, np.ndarray], size: int) -> Segment:
    """A segment of the rows ``columns`` whose keys have slots ``slots`` (all below ``size``),
    each slot's rows in their input order."""
    slots = slots.astype(np.int64, copy=False)
    if CSR_ROWS_FACTOR * len(slots) < size:
        return _sorted(slots, columns, size)
    offsets, order = group_by_first(slots, np.arange(len(slots)), size)  # counting, and one packed sort
    return Segment(slots[order], {name: np.asarray(values)[order] for name, values in columns.items()}, size, offsets)


def distinct_with_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``; dense non-negative integers through a
    table as long as their range, without the sort."""
    if values.dtype.kind not in "iu" or not len(values):
        return np.unique(values, return_inverse=True)
    lo, hi = int(values.min()), int(values.max())
    if not is_dense(lo, hi, len(values)):
        return np.unique(values, return_inverse=True)
    present = np.zeros(hi + 1, dtype=bool)
    present[values] = True
    position = np.cumsum(present) - 1
    return np.flatnonzero(present).astype(values.dtype, copy=False), position[values]


def merged(older: Segment, newer: Segment, size: int) -> Segment:
    """One segment of the rows of both (slots below ``size``): each slot's older rows first.
    Both are sorted already, so the stable sort is one merge of two runs."""
    return _sorted(concat([older.row_slots, newer.row_slots]),
                   {name: concat([older.columns[name], newer.columns[name]]) for name in older.columns}, size)


def _sorted(slots: np.ndarray, columns: Mapping[str, np.ndarray], size: int) -> Segment:
    order = np.argsort(slots, kind="stable")
    return Segment(slots[order], {name: np.asarray(values)[order] for name, values in columns.items()}, size)


class Arrangement:
    """Rows with columns ``names`` grouped by the slot of their key; rows are only ever added."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.segments: list[Segment] = []
        self._rows: tuple[np.ndarray, Rows] | None = None  # rows(), until the next add
        self._distinct: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # distinct(name), until the next add

    def __len__(self) -> int:
        return sum(segment.rows for segment in self.segments)

    def add(self, slots: np.ndarray, columns: Mapping[str, np.ndarray], size: int) -> None:
        """Add the rows ``columns`` whose keys have ``slots``; ``size`` is the number of slots now."""
        if not len(slots):
            return
        self._rows, self._distinct = None, {}
        segment = grouped(slots, {name: columns[name] for name in self.names}, size)
        while self.segments and MERGE_RATIO * segment.rows >= self.segments[-1].rows:
            segment = merged(self.segments.pop(), segment, size)
        self.segments.append(segment)

    def rows(self) -> tuple[np.ndarray, Rows]:
        """Every row: ``(slot of each, columns)``, segment after segment; kept until rows are
        added, so that a step that reads every row each round (PageRank) builds them once.
        Read-only: the arrays are the arrangement's own."""
        if self._rows is None:
            slots = concat([segment.row_slots for segment in self.segments])
            self._rows = slots, {name: self._column(name, [s.columns[name] for s in self.segments]) for name in self.names}
        return self._rows

    def distinct(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Column ``name``'s distinct values over every row, sorted, and where each row of
        :meth:`rows` finds its value among them; kept until rows are added. A step that sums
        along every row each round (PageRank: ``np.bincount(inverse, weights, len(values))``)
        so sends one row per value, in key order, with no sort and no fold per round."""
        if name not in self._distinct:
            self._distinct[name] = distinct_with_inverse(self.rows()[1][name])
        return self._distinct[name]

    def _column(self, name: str, parts: list[np.ndarray]) -> np.ndarray:
        return concat(parts)  # one segment's part as it is: no copy

    def expand(self, slots: np.ndarray) -> tuple[np.ndarray, Rows]:
        """Every row of every slot in ``slots``: ``(which, rows)``, where row ``k`` belongs to
        ``slots[which[k]]``; so ``values[which]`` repeats a value per slot along its rows."""
        slots = np.asarray(slots, dtype=np.int64)
        which: list[np.ndarray] = []
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.names}
        for segment in self.segments:
            inside = np.flatnonzero(slots < segment.size)
            starts, lengths = segment.bounds(slots[inside])
            some = np.flatnonzero(lengths)
            if not len(some):
                continue
            inside, starts, lengths = inside[some], starts[some], lengths[some]
            positions = runs(starts, lengths)
            which.append(np.repeat(inside, lengths))
            for name in self.names:
                parts[name].append(segment.columns[name][positions])
        return concat(which), {name: self._column(name, values) for name, values in parts.items()}

    def degrees(self, size: int) -> np.ndarray:
        """How many rows each slot ``0 .. size-1`` has."""
        counts = np.zeros(size, dtype=np.int64)
        for segment in self.segments:
            counts[: segment.size] += segment.counts()
        return counts
