"""Vectorised building blocks for a vertex that owns a set of graph nodes: pure NumPy, no raytide.

A replica of such a vertex gets node ids of any size and spread; it gives each node a
local *slot* (:class:`NodeIndex`), keeps out-edges per slot in CSR form
(:class:`Adjacency`, built by :func:`group_by_first`) and folds ``(key, value)`` pairs
to the minimum per key (:class:`MinCombiner`). Every operation is a handful of NumPy
calls over whole arrays, never a Python loop per node or edge.

Dense ids (non-negative, not much larger than their number, see :func:`is_dense`) index
plain lookup tables; any other ids take a sorted array and ``searchsorted``. Ids travel as
int32 when they fit (:func:`narrow`).
"""

from __future__ import annotations

import numpy as np

INF = np.iinfo(np.int64).max
EMPTY = np.empty(0, dtype=np.int64)
#: Merge the adjacency's CSR segments (one per batch of edges) once there are more than this many.
MAX_SEGMENTS = 8


def narrow(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays as int32 if all their values fit (half the bytes to serialise and route), else unchanged."""
    if all(not len(a) or (int(a.min()) >= -(1 << 31) and int(a.max()) < (1 << 31)) for a in arrays):
        return tuple(a.astype(np.int32, copy=False) for a in arrays)
    return arrays


def covering(array: np.ndarray, high: int, fill: int) -> np.ndarray:
    """``array`` if it has an index ``high``, else a copy grown to it (at least doubled), new cells ``fill``."""
    if high < len(array):
        return array
    grown = np.full(max(high + 1, 2 * len(array)), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def is_dense(lo: int, hi: int, count: int) -> bool:
    """Whether ``count`` ids in ``[lo, hi]`` are dense enough to index a lookup table directly."""
    return lo >= 0 and hi < 8 * count + (1 << 20)


def concat(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays concatenated (the one array itself if there is only one; EMPTY if none)."""
    if not arrays:
        return EMPTY
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


class NodeIndex:
    """Global node ids to local slots ``0 .. n-1`` (batch after batch), vectorised.

    Dense ids go through a lookup table; once a batch is not dense, every id goes through
    a sorted array and ``searchsorted`` from then on.
    """

    def __init__(self) -> None:
        self.ids = EMPTY  # the id of every slot
        self._table: np.ndarray | None = np.empty(0, dtype=np.int64)  # id -> slot, -1 if absent
        self._keys, self._slots = EMPTY, EMPTY  # sparse mode: sorted ids and their slots

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dense(self) -> bool:
        """Whether the ids seen so far index a lookup table (else a sorted array)."""
        return self._table is not None

    def add(self, ids: np.ndarray) -> np.ndarray:
        """Give the ids not indexed yet the next slots (in id order); returns those new ids, distinct and sorted."""
        if not len(ids):
            return EMPTY
        if self._table is not None and is_dense(int(ids.min()), int(ids.max()), len(self.ids) + len(ids)):
            new = self._add_dense(ids)
        else:
            self._to_sparse()
            new = self._add_sparse(ids)
        self.ids = np.concatenate([self.ids, new])
        return new

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """The slots of ``ids`` (all of which must have been added)."""
        if self._table is not None:
            return self._table[ids]
        return self._slots[np.searchsorted(self._keys, ids)]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The slots of ``ids``, -1 for ids never added."""
        if not len(ids):
            return EMPTY
        if self._table is not None:
            return self._lookup_dense(self._table, ids)
        if not len(self._keys):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._keys, ids), len(self._keys) - 1)
        return np.where(self._keys[pos] == ids, self._slots[pos], -1)

    @staticmethod
    def _lookup_dense(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if int(ids.min()) >= 0 and int(ids.max()) < len(table):
            return table[ids]
        out = np.full(len(ids), -1, dtype=np.int64)
        inside = (ids >= 0) & (ids < len(table))
        out[inside] = table[ids[inside]]
        return out

    def _add_dense(self, ids: np.ndarray) -> np.ndarray:
        table = self._table
        assert table is not None
        table = self._table = covering(table, int(ids.max()), -1)
        fresh = np.zeros(len(table), dtype=bool)  # a mark per id: little memory, no sort
        fresh[ids] = True
        np.logical_and(fresh, table < 0, out=fresh)
        new = np.flatnonzero(fresh)
        table[new] = len(self.ids) + np.arange(len(new))
        return new

    def _to_sparse(self) -> None:
        if self._table is not None:
            self._table = None
            order = np.argsort(self.ids, kind="stable")
            self._keys, self._slots = self.ids[order], order

    def _add_sparse(self, ids: np.ndarray) -> np.ndarray:
        distinct = np.unique(ids)
        if len(self._keys):
            pos = np.minimum(np.searchsorted(self._keys, distinct), len(self._keys) - 1)
            distinct = distinct[self._keys[pos] != distinct]
        keys = np.concatenate([self._keys, distinct])
        slots = np.concatenate([self._slots, len(self.ids) + np.arange(len(distinct))])
        order = np.argsort(keys, kind="stable")
        self._keys, self._slots = keys[order], slots[order]
        return distinct


def group_by_first(firsts: np.ndarray, seconds: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort pairs by their first element (slots in ``[0, groups)``); returns ``(offsets, seconds)``.

    CSR: the seconds of group ``g`` are ``seconds[offsets[g]:offsets[g + 1]]``. When both
    fit into 63 bits together, the pairs are packed into one int64 and sorted with
    ``np.sort`` (SIMD, several times faster than ``argsort``); the seconds of a group
    then come out sorted, otherwise in their input order.
    """
    counts = np.bincount(firsts, minlength=groups)
    offsets = np.zeros(groups + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not len(seconds):
        return offsets, EMPTY
    lo, hi = int(seconds.min()), int(seconds.max())
    shift = max(hi.bit_length(), 1)
    if lo >= 0 and shift + max(groups.bit_length(), 1) <= 63:
        packed = firsts.astype(np.int64)  # one array, packed and unpacked in place
        packed <<= shift
        packed |= seconds
        packed.sort()
        packed &= (1 << shift) - 1
        return offsets, packed
    return offsets, seconds[np.argsort(firsts, kind="stable")]


class Adjacency:
    """Out-edges of local slots as CSR segments, one per batch of edges (merged when many)."""

    def __init__(self) -> None:
        self.segments: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, slots: np.ndarray, targets: np.ndarray, nodes: int) -> np.ndarray:
        """Add the edges ``slots[k] -> targets[k]``; ``nodes`` is the number of local slots.

        Returns the smallest new target of every slot (INF for slots without new edges).
        """
        smallest = np.full(nodes, INF, dtype=np.int64)
        if len(slots):
            offsets, grouped = group_by_first(slots, targets, nodes)
            grouped, = narrow(grouped)  # half the memory to keep and to gather from, when ids fit
            self.segments.append((offsets, grouped))
            some = np.flatnonzero(np.diff(offsets))
            smallest[some] = np.minimum.reduceat(grouped, offsets[some])
        if len(self.segments) > MAX_SEGMENTS:
            sources = [np.repeat(np.arange(len(o) - 1), np.diff(o)) for o, _ in self.segments]
            targets_all = [t for _, t in self.segments]
            self.segments = [group_by_first(np.concatenate(sources), np.concatenate(targets_all), nodes)]
        return smallest

    def spread(self, slots: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``values[k]`` along every out-edge of ``slots[k]`` (slots distinct): ``(targets, values)``, vectorised."""
        targets, spread = [], []
        for offsets, segment in self.segments:
            inside = np.flatnonzero(slots < len(offsets) - 1)
            starts = offsets[slots[inside]]
            lengths = offsets[slots[inside] + 1] - starts
            some = np.flatnonzero(lengths)
            if not len(some):
                continue
            inside, starts, lengths = inside[some], starts[some], lengths[some]
            targets.append(segment[_runs(starts, lengths)])
            spread.append(np.repeat(values[inside], lengths))
        return concat(targets), concat(spread)


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``starts[k] .. starts[k] + lengths[k] - 1`` for every k in turn (lengths positive).

    One cumulative sum over steps of 1, with a jump at the start of every run.
    """
    ends = np.cumsum(lengths)
    steps = np.ones(int(ends[-1]), dtype=np.int64)
    steps[0] = starts[0]
    steps[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1]) + 1
    return np.cumsum(steps, out=steps)


class MinCombiner:
    """The minimum value per key of ``(keys, values)`` arrays, with a reusable dense scratch array."""

    def __init__(self) -> None:
        self.scratch = np.empty(0, dtype=np.int64)  # all INF between calls

    def combine(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(distinct keys, minimum value of each)``; the keys come out sorted."""
        if not len(keys):
            return EMPTY, EMPTY
        lo, hi = int(keys.min()), int(keys.max())
        if not is_dense(lo, hi, len(keys)):
            distinct, inverse = np.unique(keys, return_inverse=True)
            best = np.full(len(distinct), INF, dtype=np.int64)
            np.minimum.at(best, inverse, values)
            return distinct, best
        self.cover(hi)
        scratch = self.scratch
        np.minimum.at(scratch, keys, values)
        if 4 * len(keys) >= hi - lo:  # many keys for their range: scan the range
            touched = lo + np.flatnonzero(scratch[lo : hi + 1] < INF)
        else:  # few keys in a wide range: find them without scanning
            touched = np.unique(keys)
        best = scratch[touched]
        scratch[touched] = INF  # clean for the next call
        return touched, best

    def cover(self, high: int) -> None:
        """Grow the scratch array (all INF between calls) to index keys up to ``high``."""
        self.scratch = covering(self.scratch, high, INF)
