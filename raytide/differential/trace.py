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


#: One key's updates: ``{time: {value: diff}}``, no zero diff and no empty time kept.
History = dict[Timestamp, dict[Any, int]]


class Trace:
    """Updates by key and time, ``key -> {time: {value: diff}}``; equal ``(value, time)`` summed as they come.

    Grouped by time because every question asked of a key is about times: its contents at a
    time add up the values of the times at or before it, and the times a change reaches are
    bounds of its update times. A key has few times (one per epoch in flight, and inside a
    loop one per iteration at which it changed) and may have many values at each.
    """

    def __init__(self) -> None:
        self.keys: dict[Hashable, History] = {}
        self.changed: set[Hashable] = set()  # keys with updates not compacted yet
        self.size = 0  # how many updates it holds, kept as they come and go (read while it works)
        self.compacted_away = 0  # updates that compaction merged or cancelled, in all
        #: Per key, the last contents asked for and their time, while no update at or before that time came
        #: since: a key asked at iteration after iteration adds only the new iterations' values (see accumulated).
        self._last: dict[Hashable, tuple[Timestamp, dict[Any, int]]] = {}

    def add(self, key: Hashable, value: Any, time: Timestamp, diff: int) -> None:
        """Record one update."""
        history = self.keys.get(key)
        if history is None:
            history = self.keys[key] = {}
        last = self._last.get(key)
        if last is not None and time.epoch <= last[0].epoch and time.counters <= last[0].counters:
            del self._last[key]
        values = history.get(time)
        if values is None:
            values = history[time] = {}
        total = values.get(value, 0) + diff
        if total:
            self.size += value not in values
            values[value] = total
        else:
            self.size -= value in values
            values.pop(value, None)
            if not values:
                del history[time]
                if not history:
                    del self.keys[key]
        self.changed.add(key)

    def accumulated(self, key: Hashable, time: Timestamp) -> dict[Any, int]:
        """The key's contents at ``time``: each value's copies, from the updates at times ``<= time``.

        The answer is kept until an update at or before its time comes: asked again at a later
        time, only the values of the times up to it that the kept answer did not cover are added.
        """
        history = self.keys.get(key)
        if not history:
            return {}
        last = self._last.get(key)
        if last is not None and last[0].epoch <= time.epoch and last[0].counters <= time.counters:
            seen, contents = last[0], dict(last[1])
            reached = [values for at, values in history.items() if at.epoch <= time.epoch and at.counters <= time.counters
                       and not (at.epoch <= seen.epoch and at.counters <= seen.counters)]
        else:
            contents = {}
            reached = [values for at, values in history.items() if at.epoch <= time.epoch and at.counters <= time.counters]
        for values in reached:
            for value, diff in values.items():
                total = contents.get(value, 0) + diff
                if total:
                    contents[value] = total
                else:
                    del contents[value]
        self._last[key] = (time, contents)
        return dict(contents)

    def times(self, key: Hashable) -> Iterable[Timestamp]:
        """The times of the key's updates."""
        return self.keys.get(key, {}).keys()

    def history(self, key: Hashable) -> History:
        """The key's updates by time (not to be changed by the caller)."""
        return self.keys.get(key, {})

    def updates(self, key: Hashable) -> list[tuple[Any, Timestamp, int]]:
        """The key's updates ``(value, time, diff)``."""
        return [(value, at, diff) for at, values in self.keys.get(key, {}).items() for value, diff in values.items()]

    def __len__(self) -> int:
        """How many updates the trace holds (its size after compaction follows the collection's)."""
        return self.size

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete: merge them into epoch ``done + 1``."""
        still, advanced = set(), _Advanced(done + 1)
        self._last.clear()  # times move: and what was kept is let go once an epoch is over
        for key in self.changed:
            history = self.keys.get(key)
            if history is None:
                continue
            if any(at.epoch > done + 1 for at in history):
                still.add(key)
            if sum(at.epoch <= done for at in history) == 0:
                continue  # nothing to merge: its times are all of epochs still open
            before = sum(map(len, history.values()))
            merged = _merged(history, done, advanced)
            after = sum(map(len, merged.values()))
            self.size += after - before
            self.compacted_away += before - after
            if merged:
                self.keys[key] = merged
            else:
                del self.keys[key]
        self.changed = still

    def take(self, moving: Callable[[Hashable], bool]) -> dict[Hashable, History]:
        """Remove and return the updates of the keys for which ``moving(key)`` is true."""
        taken = {key: history for key, history in self.keys.items() if moving(key)}
        for key, history in taken.items():
            del self.keys[key]
            self._last.pop(key, None)
            self.size -= sum(map(len, history.values()))
        self.changed -= taken.keys()
        return taken

    def put(self, taken: dict[Hashable, History]) -> None:
        """Add updates another trace's :meth:`take` returned."""
        for key, history in taken.items():
            for at, values in history.items():
                for value, diff in values.items():
                    self.add(key, value, at, diff)


class _Advanced(dict):
    """Loop counters -> the time at epoch ``epoch`` with them, each made once per compaction."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def __missing__(self, counters: tuple[int, ...]) -> Timestamp:
        time = self[counters] = Timestamp(self.epoch, counters)
        return time


def _merged(history: History, done: int, advanced: _Advanced) -> History:
    """``history`` with its times of epochs ``<= done`` moved to ``done + 1``, equal values summed, zeros gone."""
    merged: History = {}
    for at, values in history.items():
        target = advanced[at.counters] if at.epoch <= done else at
        into = merged.get(target)
        if into is None:
            merged[target] = dict(values)
            continue
        for value, diff in values.items():
            total = into.get(value, 0) + diff
            if total:
                into[value] = total
            else:
                into.pop(value, None)
    return {at: values for at, values in merged.items() if values}
