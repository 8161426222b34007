"""A replica's pending windows, per key, as plain data: records folded in, windows closed
at their end, the state split by key and merged back (a change of parallelism).

A key's windows are kept by their end (``windows[key][end] = (start, acc)``): a tumbling or
sliding spec gives a key one window per end, and a key's sessions never overlap, so their
ends differ too. ``ends[end]`` is the keys with a window ending there: what a notification
at ``Timestamp(end - 1)`` closes, and whether one is needed at all.

The accumulators fold with a function that must be associative and commutative: records
arrive in any order (an epoch's records before an earlier epoch's, partial results of one
epoch from several replicas), and a merge of sessions, or of two replicas' states, folds
accumulators in any grouping. Only the set of records folded into a window decides its
value.

>>> import operator
>>> from raytide.windows.specs import Tumbling
>>> pending, spec = Pending(), Tumbling(2)
>>> for key, epoch in [("a", 0), ("b", 1), ("a", 1), ("a", 2)]:
...     add(pending, spec, key, epoch, 1, operator.add)
>>> sorted(pending.ends)
[2, 4]
>>> moved = split(pending, lambda key: key == "b")
>>> sorted(close(pending, 2)), close(moved, 2)
([('a', 0, 2, 2)], [('b', 0, 2, 1)])
>>> merge(pending, moved, spec, operator.add)
>>> close(pending, 4)
[('a', 2, 4, 1)]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from raytide.windows.specs import WindowSpec

#: Folds two accumulators (or values) of one key and window into one; associative and commutative.
Fold = Callable[[Any, Any], Any]
#: A closed window: ``(key, start, end, accumulator)``.
Closed = tuple[Hashable, int, int, Any]

@dataclass
class Pending:
    """The open windows of a replica's keys.

    Attributes:
        windows: per key, its open windows by end: ``{end: (start, accumulator)}``.
        ends: per end, the keys with an open window ending there (never an empty set).
    """

    windows: dict[Hashable, dict[int, tuple[int, Any]]] = field(default_factory=dict)
    ends: dict[int, set[Hashable]] = field(default_factory=dict)


def add(pending: Pending, spec: WindowSpec, key: Hashable, epoch: int, value: Any, fold: Fold) -> None:
    """Fold ``value`` (a record's, or a partial result of the key at ``epoch``) into every
    window of ``key`` that ``epoch`` is in; a session's window merges with the key's
    sessions it overlaps."""
    for start, end in spec.windows_of(epoch):
        _put(pending, spec, key, start, end, value, fold)


def close(pending: Pending, end: int) -> list[Closed]:
    """Remove and return every window ending at ``end`` (complete once epoch ``end - 1`` is)."""
    closed = []
    for key in pending.ends.pop(end, ()):
        mine = pending.windows[key]
        start, acc = mine.pop(end)
        if not mine:
            del pending.windows[key]
        closed.append((key, start, end, acc))
    return closed


def split(pending: Pending, moving: Callable[[Hashable], bool]) -> Pending:
    """Remove and return the windows of every key ``moving`` selects (an end left without
    keys goes from ``pending.ends``)."""
    taken = Pending()
    for key in [key for key in pending.windows if moving(key)]:
        mine = taken.windows[key] = pending.windows.pop(key)
        for end in mine:
            _unindex(pending, key, end)
            taken.ends.setdefault(end, set()).add(key)
    return taken


def merge(pending: Pending, other: Pending, spec: WindowSpec, fold: Fold) -> None:
    """Add ``other``'s windows (another replica's :func:`split`) to ``pending``, which takes
    them over. A key held by both folds its windows of equal bounds; its sessions merge where
    they overlap."""
    for key, theirs in other.windows.items():
        for end, (start, acc) in theirs.items():
            _put(pending, spec, key, start, end, acc, fold)


def _put(pending: Pending, spec: WindowSpec, key: Hashable, start: int, end: int, value: Any, fold: Fold) -> None:
    """Fold ``value`` into ``key``'s window ``[start, end)``, made if new; with a session spec,
    first merged with every session of the key it overlaps (one pass is enough: a key's
    sessions do not overlap one another, so one that overlaps the merged window overlaps
    ``[start, end)`` itself)."""
    mine = pending.windows.setdefault(key, {})
    if spec.merges:
        for other_end, (other_start, acc) in list(mine.items()):
            if other_start < end and start < other_end:
                del mine[other_end]
                _unindex(pending, key, other_end)
                start, end, value = min(start, other_start), max(end, other_end), fold(acc, value)
    held = mine.get(end)
    if held is None:
        mine[end] = (start, value)
        pending.ends.setdefault(end, set()).add(key)
    else:
        mine[end] = (start, fold(held[1], value))


def _unindex(pending: Pending, key: Hashable, end: int) -> None:
    keys = pending.ends[end]
    keys.discard(key)
    if not keys:
        del pending.ends[end]
