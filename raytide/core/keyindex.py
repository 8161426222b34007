"""Integer keys to dense local slots, and grouping by slot (CSR): the index behind columnar keyed state.

A replica of a vertex with columnar state (:mod:`raytide.core.columnar`) gets keys of any
size and spread; :class:`KeyIndex` gives each a local *slot* ``0 .. n-1``, so that the
state is NumPy columns indexed by slot, and :func:`group_by_first` sorts rows by slot into
CSR form (the arrangements of :mod:`raytide.core.arrangement`). Every operation is a
handful of NumPy calls over whole arrays, never a Python loop per key.

Dense keys (non-negative, not much larger than their number, see :func:`is_dense`) index
a plain lookup table; any other keys take a sorted array and ``searchsorted``.
"""

from __future__ import annotations

import numpy as np

INF = np.iinfo(np.int64).max
EMPTY = np.empty(0, dtype=np.int64)


def covering(array: np.ndarray, high: int, fill: int) -> np.ndarray:
    """``array`` if it has an index ``high``, else a copy grown to it (at least doubled), new cells ``fill``."""
    if high < len(array):
        return array
    grown = np.full(max(high + 1, 2 * len(array)), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


#: A pass over a table (or an array as long as a key range) costs about what sorting the
#: rows does when it is this many times as long as the rows: fewer rows are sorted instead
#: (measured with keys up to 200,000: 3,000 rows break even; 100 rows, a loop's late round,
#: sort in 20 us where the table took 180).
TABLE_ROWS_FACTOR = 64


def is_dense(lo: int, hi: int, count: int) -> bool:
    """Whether ``count`` ids in ``[lo, hi]`` are dense enough to index a lookup table directly."""
    return lo >= 0 and hi < 8 * count + (1 << 20)


def concat(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays concatenated (the one array itself if there is only one; EMPTY if none)."""
    if not arrays:
        return EMPTY
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


class KeyIndex:
    """Integer keys (ids) to local slots ``0 .. n-1`` (batch after batch), vectorised.

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
        if TABLE_ROWS_FACTOR * len(ids) < len(table):  # few ids (a later epoch's): sorting them beats a pass over the table
            distinct = np.unique(ids)
            new = distinct[table[distinct] < 0]
        else:
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


def stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``, for integer keys several times faster: each key
    (less the smallest) packed above its row number into one int64 and the packed values
    sorted (``np.sort``, SIMD); the row numbers then come out in the stable order. An epoch's
    few thousand rows sort in about 60 us instead of 300 (a timsort). Keys whose range and
    row count take more than 63 bits together are argsorted as they are."""
    count = len(keys)
    if keys.dtype.kind in "iu" and count > 1:
        smallest = keys.min()
        lo, hi = int(smallest), int(keys.max())
        shift = (count - 1).bit_length()
        if shift + (hi - lo).bit_length() <= 63:
            # less the smallest: unsigned keys in their own type (they may pass 2**63), signed ones as int64
            packed = (keys - smallest).astype(np.int64) if keys.dtype.kind == "u" else keys.astype(np.int64) - lo
            packed <<= shift
            packed |= np.arange(count, dtype=np.int64)
            packed.sort()
            packed &= (1 << shift) - 1
            return packed
    return np.argsort(keys, kind="stable")


def runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``starts[k] .. starts[k] + lengths[k] - 1`` for every k in turn (lengths positive).

    One cumulative sum over steps of 1, with a jump at the start of every run.
    """
    ends = np.cumsum(lengths)
    steps = np.ones(int(ends[-1]), dtype=np.int64)
    steps[0] = starts[0]
    steps[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1]) + 1
    return np.cumsum(steps, out=steps)

