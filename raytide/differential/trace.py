"""A trace: the history of a keyed collection, ``key -> {(value, time): diff}``, compacted as time passes.

Differential dataflow's arrangements: every update a keyed operator has seen, indexed by
key, with its time. The contents of a key at time ``t`` are the updates at times ``<= t``
(times are only partially ordered: an epoch and loop counters).

Once every time of epochs ``<= e`` is complete, no future time can tell those epochs apart:
:meth:`Trace.compact` moves their updates to epoch ``e + 1`` (keeping the loop counters:
iterations still differ) and cancels what sums to zero, so a trace's size follows its
collection, not its history. Only keys changed since their last compaction are visited.

>>> from raytide.progress.timestamps import Timestamp as T
>>> trace = Trace()
>>> trace.add("k", "x", T(0), 1); trace.add("k", "x", T(1), -1); trace.add("k", "y", T(1), 1)
>>> trace.accumulated("k", T(0)), trace.accumulated("k", T(1))
({'x': 1}, {'y': 1})
>>> trace.compact(1); trace.updates("k")
[('y', Timestamp(2), 1)]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from raytide.progress.timestamps import Timestamp

__all__ = ["EPOCH_DONE", "Trace", "epoch_done", "later_times"]

#: The loop counter of :func:`epoch_done`: larger than any iteration a loop runs.
EPOCH_DONE = 2**62


def epoch_done(epoch: int, depth: int) -> Timestamp:
    """The time after every time of ``epoch`` at loop depth ``depth``: a notification there
    comes once the epoch is over in the loop, every iteration of it."""
    return Timestamp(epoch, (EPOCH_DONE,) * depth)


def later_times(time: Timestamp, others: Iterable[Timestamp]) -> set[Timestamp]:
    """The times after ``time`` at which the contents accumulated from ``time`` and ``others`` may change.

    Those are the least upper bounds of ``time`` with any subset of ``others``: the epoch of
    one time and the loop counters of another (counters compare as a whole, so the order is
    a product of two total orders), each no later than the bound in the other part.

    >>> from raytide.progress.timestamps import Timestamp as T
    >>> sorted(later_times(T(1, (0,)), [T(0, (3,)), T(2, (1,))]), key=T.sort_key)
    [Timestamp(1, (3,)), Timestamp(2, (1,)), Timestamp(2, (3,))]
    """
    bounds = {time.join(other) for other in others}
    bounds.add(time)
    by_epoch: dict[int, list[tuple[int, ...]]] = {}
    for bound in bounds:
        by_epoch.setdefault(bound.epoch, []).append(bound.counters)
    found: set[Timestamp] = set()
    reachable: list[tuple[int, ...]] = []  # the counters of bounds at epochs up to the one at hand
    for epoch in sorted(by_epoch):
        counters = by_epoch[epoch]
        reachable.extend(counters)
        lowest = min(counters)
        found.update(Timestamp(epoch, c) for c in reachable if c >= lowest)
    found.discard(time)
    return found


class Trace:
    """Updates by key, each ``(value, time, diff)``; equal ``(value, time)`` are summed as they come."""

    def __init__(self) -> None:
        self.keys: dict[Hashable, dict[tuple[Any, Timestamp], int]] = {}
        self.changed: set[Hashable] = set()  # keys with updates not compacted yet
        self.size = 0  # how many updates it holds, kept as they come and go (read while it works)
        self.compacted_away = 0  # updates that compaction merged or cancelled, in all

    def add(self, key: Hashable, value: Any, time: Timestamp, diff: int) -> None:
        """Record one update."""
        updates = self.keys.get(key)
        if updates is None:
            updates = self.keys[key] = {}
        slot = (value, time)
        total = updates.get(slot, 0) + diff
        if total:
            self.size += slot not in updates
            updates[slot] = total
        else:
            self.size -= slot in updates
            updates.pop(slot, None)
            if not updates:
                del self.keys[key]
        self.changed.add(key)

    def accumulated(self, key: Hashable, time: Timestamp) -> dict[Any, int]:
        """The key's contents at ``time``: each value's copies, from the updates at times ``<= time``."""
        contents: dict[Any, int] = {}
        for (value, at), diff in self.keys.get(key, {}).items():
            if at.epoch <= time.epoch and at.counters <= time.counters:
                contents[value] = contents.get(value, 0) + diff
        return {value: copies for value, copies in contents.items() if copies}

    def times(self, key: Hashable) -> set[Timestamp]:
        """The times of the key's updates."""
        return {at for _, at in self.keys.get(key, ())}

    def updates(self, key: Hashable) -> list[tuple[Any, Timestamp, int]]:
        """The key's updates ``(value, time, diff)``."""
        return [(value, at, diff) for (value, at), diff in self.keys.get(key, {}).items()]

    def __len__(self) -> int:
        """How many updates the trace holds (its size after compaction follows the collection's)."""
        return self.size

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete: merge them into epoch ``done + 1``."""
        still = set()
        for key in self.changed:
            updates = self.keys.get(key)
            if updates is None:
                continue
            merged: dict[tuple[Any, Timestamp], int] = {}
            for (value, at), diff in updates.items():
                if at.epoch <= done:
                    at = Timestamp(done + 1, at.counters)
                elif at.epoch > done + 1:
                    still.add(key)
                merged[value, at] = merged.get((value, at), 0) + diff
            merged = {slot: diff for slot, diff in merged.items() if diff}
            self.size += len(merged) - len(updates)
            self.compacted_away += len(updates) - len(merged)
            if merged:
                self.keys[key] = merged
            else:
                del self.keys[key]
        self.changed = still

    def take(self, moving: Callable[[Hashable], bool]) -> dict[Hashable, dict[tuple[Any, Timestamp], int]]:
        """Remove and return the updates of the keys for which ``moving(key)`` is true."""
        taken = {key: updates for key, updates in self.keys.items() if moving(key)}
        for key, updates in taken.items():
            del self.keys[key]
            self.size -= len(updates)
        self.changed -= taken.keys()
        return taken

    def put(self, taken: dict[Hashable, dict[tuple[Any, Timestamp], int]]) -> None:
        """Add updates another trace's :meth:`take` returned."""
        for key, updates in taken.items():
            for (value, at), diff in updates.items():
                self.add(key, value, at, diff)
