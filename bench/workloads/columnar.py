"""Vectorised building blocks for a vertex that owns a set of graph nodes: pure NumPy, no raytide.

A replica of such a vertex gets node ids of any size and spread; it gives each node a
local *slot* (:class:`NodeIndex`, which is :class:`raytide.core.keyindex.KeyIndex`), keeps out-edges per slot in CSR form
(:class:`Adjacency`, built by :func:`group_by_first`) and folds ``(key, value)`` pairs
to the minimum per key (:class:`MinCombiner`). Every operation is a handful of NumPy
calls over whole arrays, never a Python loop per node or edge.

Dense ids (non-negative, not much larger than their number, see :func:`is_dense`) index
plain lookup tables; any other ids take a sorted array and ``searchsorted``. Ids travel as
int32 when they fit (:func:`narrow`).
"""

from __future__ import annotations

import numpy as np

from raytide.core.keyindex import EMPTY, INF, concat, covering, group_by_first, is_dense, runs
from raytide.core.keyindex import KeyIndex as NodeIndex

__all__ = ["EMPTY", "INF", "Adjacency", "MinCombiner", "NodeIndex", "concat", "covering", "group_by_first",
           "is_dense", "narrow"]

MAX_SEGMENTS = 8


def narrow(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays as int32 if all their values fit (half the bytes to serialise and route), else unchanged."""
    if all(not len(a) or (int(a.min()) >= -(1 << 31) and int(a.max()) < (1 << 31)) for a in arrays):
        return tuple(a.astype(np.int32, copy=False) for a in arrays)
    return arrays




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
            targets.append(segment[runs(starts, lengths)])
            spread.append(np.repeat(values[inside], lengths))
        return concat(targets), concat(spread)



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
