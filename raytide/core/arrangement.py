"""Arrangements: rows indexed by the slot of their key, in CSR segments; netted if they carry diffs.

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

An arrangement with a *diff* column (``Arrangement(names, diff="diff")``) holds a
collection's updates: a row counts ``diff`` times, and a negative diff takes copies back.
Every merge of segments nets them (rows equal but for the diff summed, zeros dropped), so
the arrangement's size follows the collection's, not its history; :meth:`Arrangement.expand`
nets what it gives when a segment it reads holds retractions, and :meth:`Arrangement.rows`
merges every segment into one netted segment first.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from raytide.core.keyindex import concat, group_by_first, is_dense, runs, stable_order

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

    def __init__(self, row_slots: np.ndarray, columns: Rows, size: int, offsets: np.ndarray | None = None,
                 retracts: bool = False) -> None:
        self.row_slots, self.columns, self.size = row_slots, columns, size
        self.retracts = retracts  # whether some row has a negative diff (its expansions need netting)
        self.netted = retracts  # with diffs: whether rows equal but for the diff are one row (zeros gone)
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
    offsets = None
    if CSR_ROWS_FACTOR * len(slots) < size:  # few rows (an epoch's new ones): a packed sort, no pass over the slots
        order = stable_order(slots)
    else:
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


def merged(older: Segment, newer: Segment, size: int, diff: str | None = None) -> Segment:
    """One segment of the rows of both (slots below ``size``): each slot's older rows first.
    Both are sorted already, so the stable sort is one merge of two runs. With a ``diff``
    column the rows are netted instead (:func:`netted`; two netted segments are two runs
    sorted as netting sorts, merged without a sort)."""
    slots = concat([older.row_slots, newer.row_slots])
    columns = {name: concat([older.columns[name], newer.columns[name]]) for name in older.columns}
    if diff is None:
        return _sorted(slots, columns, size)
    return netted_segment(slots, columns, size, diff, older.rows if older.netted and newer.netted else None)


def netted_segment(slots: np.ndarray, columns: Rows, size: int, diff: str, sorted_runs: int | None = None) -> Segment:
    """A segment of the rows netted (:func:`netted`)."""
    slots, columns = netted(slots, columns, diff, sorted_runs)
    made = Segment(slots, columns, size, retracts=bool((columns[diff] < 0).any()))
    made.netted = True
    return made


def netted(slots: np.ndarray, columns: Rows, diff: str, sorted_runs: int | None = None) -> tuple[np.ndarray, Rows]:
    """Rows equal in slot and every column but ``diff`` as one row with their diffs summed;
    rows summing to zero dropped. Sorted by slot (then by the other columns, by name).

    Integer columns that fit into 63 bits together are packed into one int64 first
    (:func:`packed_lexically`): one ``argsort`` and one comparison where ``np.lexsort`` takes
    a pass per column (about 15 times slower on a million rows); rows that are two runs
    already sorted so (``sorted_runs``: the first run's length) are merged without a sort.
    """
    if not len(slots):
        return slots, dict(columns)
    names = [name for name in sorted(columns) if name != diff]
    packed = packed_lexically([slots, *(np.asarray(columns[name]) for name in names)])
    if packed is None:
        order = np.lexsort((*(columns[name] for name in reversed(names)), slots))
    else:
        order = np.argsort(packed, kind="stable") if sorted_runs is None else merge_order(packed, sorted_runs)
    slots, columns = slots[order], {name: np.asarray(values)[order] for name, values in columns.items()}
    starts = np.ones(len(slots), dtype=bool)
    if packed is not None:
        packed = packed[order]
        starts[1:] = packed[1:] != packed[:-1]
    else:
        starts[1:] = slots[1:] != slots[:-1]
        for name in names:
            starts[1:] |= columns[name][1:] != columns[name][:-1]
    first = np.flatnonzero(starts)
    sums = np.add.reduceat(columns[diff], first)
    kept = sums != 0
    out = {name: values[first[kept]] for name, values in columns.items()}
    out[diff] = sums[kept]
    return slots[first[kept]], out


def packed_lexically(keys: list[np.ndarray]) -> np.ndarray | None:
    """Integer columns as one int64 column ordered as they are lexicographically (the first
    most significant): each less its minimum, in as many bits as its range takes. None if a
    column does not hold integers or they take more than 63 bits together."""
    spans = []
    for key in keys:
        if key.dtype.kind not in "iu":
            return None
        lo = int(key.min())
        spans.append((lo, (int(key.max()) - lo).bit_length()))
    if sum(bits for _, bits in spans) > 63:
        return None
    packed = np.zeros(len(keys[0]), dtype=np.int64)
    for key, (lo, bits) in zip(keys, spans):
        packed <<= bits
        packed |= (key - lo).astype(np.int64, copy=False)
    return packed


def merge_order(values: np.ndarray, split: int) -> np.ndarray:
    """The stable sorting order of ``values``, whose ``[:split]`` and ``[split:]`` are each sorted:
    where each of the second run goes among the first (``searchsorted``), no sort."""
    first, second = values[:split], values[split:]
    goes = np.searchsorted(first, second, side="right") + np.arange(len(second))
    from_second = np.zeros(len(values), dtype=bool)
    from_second[goes] = True
    order = np.empty(len(values), dtype=np.int64)
    order[goes] = split + np.arange(len(second))
    order[~from_second] = np.arange(split)
    return order


def _sorted(slots: np.ndarray, columns: Mapping[str, np.ndarray], size: int) -> Segment:
    """Two segments' rows, each run sorted: a timsort finds the runs and merges them."""
    order = np.argsort(slots, kind="stable")
    return Segment(slots[order], {name: np.asarray(values)[order] for name, values in columns.items()}, size)


class Arrangement:
    """Rows with columns ``names`` grouped by the slot of their key; rows are only ever added
    (with a ``diff`` column, one of ``names``, a negative diff takes rows back: see the module)."""

    def __init__(self, names: tuple[str, ...], diff: str | None = None) -> None:
        self.names, self.diff = names, diff
        self.segments: list[Segment] = []
        self.held = 0  # rows held, kept up to date (read by statistics from another thread)
        self.cancelled = 0  # rows netted away (with diffs): updates merged or cancelled
        self._rows: tuple[np.ndarray, Rows] | None = None  # rows(), until the next add
        self._distinct: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # distinct(name), until the next add

    def __len__(self) -> int:
        return sum(segment.rows for segment in self.segments)

    @property
    def retracts(self) -> bool:
        """Whether some row has a negative diff (with diffs; else False)."""
        return any(segment.retracts for segment in self.segments)

    def add(self, slots: np.ndarray, columns: Mapping[str, np.ndarray], size: int) -> None:
        """Add the rows ``columns`` whose keys have ``slots``; ``size`` is the number of slots now."""
        if not len(slots):
            return
        self._rows, self._distinct = None, {}
        rows = {name: columns[name] for name in self.names}
        if self.diff is not None and (rows[self.diff] <= 0).any():  # netted now: what is taken back, and zeros
            segment = netted_segment(np.asarray(slots, dtype=np.int64), rows, size, self.diff)
            self.cancelled += len(slots) - segment.rows
        else:  # only additions (a graph's first edges): netted when merged, no sort now
            segment = grouped(slots, rows, size)
        while self.segments and MERGE_RATIO * segment.rows >= self.segments[-1].rows:
            segment = self._merged(self.segments.pop(), segment, size)
        self.segments.append(segment)
        self.held = len(self)

    def _merged(self, older: Segment, newer: Segment, size: int) -> Segment:
        made = merged(older, newer, size, self.diff)
        self.cancelled += older.rows + newer.rows - made.rows
        return made

    def _net_all(self) -> None:
        """Every segment merged into one netted segment (an arrangement with diffs only)."""
        while len(self.segments) > 1:
            newer = self.segments.pop()
            self.segments.append(self._merged(self.segments.pop(), newer, newer.size))
        if self.segments and not self.segments[0].netted:  # one segment left, never netted
            only = self.segments[0]
            self.segments[0] = netted_segment(only.row_slots, only.columns, only.size, str(self.diff))
            self.cancelled += only.rows - self.segments[0].rows
        self.held = len(self)

    def rows(self) -> tuple[np.ndarray, Rows]:
        """Every row: ``(slot of each, columns)``, segment after segment; kept until rows are
        added, so that a step that reads every row each round (PageRank) builds them once.
        Read-only: the arrays are the arrangement's own. With diffs, netted first."""
        if self._rows is None:
            if self.diff is not None:
                self._net_all()
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

    def expand(self, slots: np.ndarray, net: bool = True) -> tuple[np.ndarray, Rows]:
        """Every row of every slot in ``slots``: ``(which, rows)``, where row ``k`` belongs to
        ``slots[which[k]]``; so ``values[which]`` repeats a value per slot along its rows.
        With diffs, netted (rows of a slot in no set order) if a segment read takes rows back,
        unless ``net`` is False (a caller that sums diffs itself)."""
        slots = np.asarray(slots, dtype=np.int64)
        retracts = False
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
            retracts |= segment.retracts
            for name in self.names:
                parts[name].append(segment.columns[name][positions])
        expanded = concat(which), {name: self._column(name, values) for name, values in parts.items()}
        return netted(*expanded, self.diff) if net and retracts and self.diff is not None else expanded

    def degrees(self, size: int) -> np.ndarray:
        """How many rows each slot ``0 .. size-1`` has."""
        counts = np.zeros(size, dtype=np.int64)
        for segment in self.segments:
            counts[: segment.size] += segment.counts()
        return counts
