"""Indexes held as sorted int64 keys of node pairs, read and changed without a pass over them:
the helpers of the replicated spanning forest (``raytide.graph.spanning_forest``).

A pair ``(high, low)`` of node indices (or ids below ``2**31``) is the key ``high << SHIFT |
low``; sorted, the keys run by ``high``, so the keys of one ``high`` (a node's children, its
edges) are one run. :class:`Runs` keeps, beside the keys, where each ``high``'s run starts,
counted once when the index is built: a node's run is then read without a search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raytide.core.keyindex import EMPTY

#: An edge ``(a, b)`` of node indices, ``a < b``, is the key ``a << SHIFT | b``.
SHIFT = 32
LOW = (1 << SHIFT) - 1
#: :class:`Runs` keeps its starts while the highs it covers are at most this many a key (plus
#: :data:`SLACK`); sparser (node ids far apart), it finds runs by binary search instead.
DENSE = 4
SLACK = 4096


@dataclass(frozen=True)
class Runs:
    """Sorted pair keys (:func:`pair`) and where each ``high``'s run starts: the keys of ``high``
    are ``keys[start[high]:start[high + 1]]``, for the highs below ``len(start) - 1`` (none
    above): a node's run found without a search. ``start`` is empty while the highs are
    sparse (see :data:`DENSE`): runs are then found by two binary searches each."""

    keys: np.ndarray
    start: np.ndarray

    @classmethod
    def of(cls, keys: np.ndarray) -> Runs:
        """The index of the sorted pair keys ``keys`` (one count over them); with starts if they are dense."""
        bound = int(keys[-1] >> SHIFT) + 1 if len(keys) else 0
        return cls(keys, offsets(keys, bound) if dense(bound, len(keys)) else EMPTY)

    @classmethod
    def sparse(cls, keys: np.ndarray) -> Runs:
        """The index of the sorted pair keys ``keys`` without starts (runs found by binary search): for a
        few keys over many highs, as an epoch's new edges, where counting the starts would cost a
        pass over the highs at every change."""
        return cls(keys, EMPTY)

    def at(self, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(at, owner)``: the positions of the keys whose ``high`` is one of ``heads``, and for each
        the index in ``heads`` of its own."""
        if not len(self.start):
            return ranges(self.keys, heads)
        first, end = self.bounds(heads)
        return runs(first, end - first)

    def bounds(self, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(first, end)``: where the run of each of ``heads`` starts and ends (the index keeps its
        starts; a head past them has an empty run at the end)."""
        top = len(self.start) - 1
        return self.start[np.minimum(heads, top)], self.start[np.minimum(heads + 1, top)]

    def find(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(spot, found)``: where each of the pair keys ``values`` is, or would go, in :attr:`keys`
        (``np.searchsorted``'s left position), and a mask of those held. With starts, each value
        is searched only in its ``high``'s run, every value a step at once (a bisection as many
        steps long as the longest run's bits): its loads do not wait on one another as those of
        a binary search over all the keys do (half the time on an index of a million edges)."""
        if not len(self.start):
            spot = np.searchsorted(self.keys, values)
        else:
            spot, end = self.bounds(values >> SHIFT)
            last = len(self.keys) - 1
            for _ in range(int((end - spot).max()).bit_length() if len(values) else 0):
                middle = (spot + end) >> 1
                below = (middle < end) & (self.keys[np.minimum(middle, last)] < values)
                spot, end = np.where(below, middle + 1, spot), np.where(below, end, middle)
        found = spot < len(self.keys)
        found[found] = self.keys[spot[found]] == values[found]
        return spot, found


def dense(bound: int, size: int) -> bool:
    """Whether an index of ``size`` keys over highs below ``bound`` keeps its starts."""
    return bound <= DENSE * size + SLACK


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort and a comparison: ``np.unique``'s hashing is far slower
    on int64 keys here)."""
    values = np.sort(values)
    return values[np.concatenate([[True], values[1:] != values[:-1]])] if len(values) else values


def pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The keys of the edges ``{a, b}`` (node indices, in either order)."""
    return (np.minimum(a, b) << SHIFT) | np.maximum(a, b)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``, ``a < b``, of packed edge keys."""
    return keys >> SHIFT, keys & LOW


def pair(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The keys of the ordered pairs ``(high, low)``: sorted, they run by ``high`` (an index by it)."""
    return (high << SHIFT) | low


def ranges(keys: np.ndarray, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(at, owner)``: the positions in the sorted pair keys ``keys`` of those whose ``high`` is one
    of ``heads``, and for each the index in ``heads`` of its own (two binary searches a head:
    no pass over ``keys``)."""
    start = np.searchsorted(keys, heads << SHIFT)
    return runs(start, np.searchsorted(keys, (heads + 1) << SHIFT) - start)


def runs(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(at, owner)``: the positions ``start[i] .. start[i] + count[i] - 1`` laid out one after
    another, and for each its ``i``."""
    owner = np.repeat(np.arange(len(start)), count)
    return np.arange(len(owner)) + np.repeat(start - np.cumsum(count) + count, count), owner


def offsets(keys: np.ndarray, count: int) -> np.ndarray:
    """Where each ``high`` in ``0 .. count - 1`` starts in the sorted pair keys ``keys``, and their end
    last (a count and a running sum: one pass, no search)."""
    start = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys >> SHIFT, minlength=count), out=start[1:])
    return start


def renumbered(values: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct, dense)``: the distinct ``values`` (in ``0 .. count - 1``), sorted, and each value's
    index among them; by a sort when they are few, by a mark per value and a running count
    when they are many (no sort)."""
    if len(values) * 16 < count:
        return np.unique(values, return_inverse=True)
    seen = np.zeros(count, dtype=bool)
    seen[values] = True
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[values]


def member(values: np.ndarray, sorted_few: np.ndarray) -> np.ndarray:
    """A mask of ``values`` found in the sorted array ``sorted_few`` (a binary search each)."""
    if not len(sorted_few):
        return np.zeros(len(values), dtype=bool)
    found = np.minimum(np.searchsorted(sorted_few, values), len(sorted_few) - 1)
    return sorted_few[found] == values
