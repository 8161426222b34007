"""Indexes held as sorted int64 keys of node pairs, read and changed without a pass over them:
the helpers of the replicated spanning forest (``bench.workloads.spanning_forest``).

A pair ``(high, low)`` of node indices (or ids below ``2**31``) is the key ``high << SHIFT |
low``; sorted, the keys run by ``high``, so the keys of one ``high`` (a node's children, its
edges) are one run, found by two binary searches (:func:`ranges`) or, for many nodes at
once, by a count per node (:func:`offsets`).
"""

from __future__ import annotations

import numpy as np

from raytide.core.keyindex import concat

#: An edge ``(a, b)`` of node indices, ``a < b``, is the key ``a << SHIFT | b``.
SHIFT = 32
LOW = (1 << SHIFT) - 1
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


def patched(keys: np.ndarray, gone: np.ndarray, came: np.ndarray) -> np.ndarray:
    """The sorted ``keys`` less ``gone`` (each held) plus ``came`` (none held): a binary search
    each and one copy of what is held, no sort of it."""
    if len(gone):
        keys = np.delete(keys, np.searchsorted(keys, gone))
    if len(came):
        came = np.sort(came)
        keys = np.insert(keys, np.searchsorted(keys, came), came)
    return keys


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


def subtrees(kids: np.ndarray, tops: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, top)``: every node of the subtrees under ``tops`` (roots in the children index
    ``kids`` of ``count`` nodes), ``tops`` first, and the index in ``tops`` of the one each is
    under; level by level from all of them at once, each level's children read at their offsets."""
    nodes, top = [tops], [np.arange(len(tops))]
    start = None
    for _ in range(len(kids) + 1):
        front = nodes[-1]
        if start is None and len(front) * 1024 < count:  # few: a binary search each
            at, owner = ranges(kids, front)
        else:
            start = offsets(kids, count) if start is None else start
            at, owner = runs(start[front], start[front + 1] - start[front])
        if not len(at):
            return concat(nodes), concat(top)
        nodes.append(kids[at] & LOW)
        top.append(top[-1][owner])
    raise ValueError(f"the children index of {len(kids)} links holds a cycle: it is not a forest's")
