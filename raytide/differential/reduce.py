"""Group-and-reduce kept up to date: the pure core of ``Collection.reduce``, ``count`` and ``distinct``.

For every key, the output's contents at every time must be ``logic(key, input contents at
that time)``. A :class:`Reduction` keeps both traces (input and output, by key). When a
time ``t`` is complete it applies that time's input, and for each key whose input changed
at ``t`` (or that an earlier change scheduled for ``t``) it computes what the output should
hold, subtracts what the output trace holds, and emits the difference at ``t``. A change
at ``t`` may also change the output at later times that ``t`` is not below: the least upper
bounds of ``t`` with the key's other update times (an iteration of a later epoch, say).
Those keys are scheduled there (differential dataflow's "interesting times"). Work is
proportional to the keys that changed, not to the collection.

>>> from raytide.progress.timestamps import Timestamp as T
>>> counts = Reduction(lambda key, values: {(key, sum(values.values())): 1})
>>> counts.receive(T(0), [("a", "x", 1), ("a", "y", 1)])
True
>>> counts.run(T(0))
([(('a', 2), 1)], [])
>>> _ = counts.receive(T(1), [("a", "x", -1)]); counts.run(T(1))
([(('a', 1), 1), (('a', 2), -1)], [])
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from raytide.differential.trace import Trace, later_times
from raytide.errors import RecordError
from raytide.progress.timestamps import Timestamp

__all__ = ["Logic", "Reduction"]

#: ``logic(key, contents) -> contents``: a key's input ``{value: copies}`` to its output ``{record: copies}``.
Logic = Callable[[Hashable, dict[Any, int]], dict[Any, int]]


class Reduction:
    """Input and output traces of a keyed reduction, the input not applied yet, and the keys due later."""

    def __init__(self, logic: Logic, shared: Trace | None = None) -> None:
        self.logic = logic
        #: The input trace: its own, or a shared arrangement's (``shared``), which its owner
        #: fills as updates come and compacts and moves (only times complete are read from it).
        self.input, self.output = shared if shared is not None else Trace(), Trace()
        self.owns_input = shared is None
        #: Per time not run yet, the input updates ``(key, value, diff)`` to apply then (with a
        #: shared input, already applied: ``(key, None, 0)``, only which keys changed).
        self.pending: dict[Timestamp, list[tuple[Hashable, Any, int]]] = {}
        self.scheduled: dict[Timestamp, set[Hashable]] = {}

    def receive(self, time: Timestamp, updates: Sequence[tuple[Hashable, Any, int]]) -> bool:
        """Input updates ``(key, value, diff)`` at ``time``; True if ``time`` is new (notify there)."""
        new = time not in self.pending and time not in self.scheduled
        if self.owns_input:
            self.pending.setdefault(time, []).extend(updates)
        else:
            self.pending.setdefault(time, []).extend((key, None, 0) for key, _, _ in updates)
        return new

    def run(self, time: Timestamp) -> tuple[list[tuple[Any, int]], list[Timestamp]]:
        """``time`` is complete: the output's changes at ``time``, and the later times now due (notify there).

        Raises:
            RecordError: A value of a key has fewer than zero copies at ``time``.
        """
        changed = []
        for key, value, diff in self.pending.pop(time, ()):
            if self.owns_input:
                self.input.add(key, value, time, diff)
            changed.append(key)
        keys = dict.fromkeys(changed)
        keys.update(dict.fromkeys(self.scheduled.pop(time, ())))
        out: list[tuple[Any, int]] = []
        for key in keys:
            out.extend(self._settle(key, time))
        return out, self._schedule(dict.fromkeys(changed), time)

    def _settle(self, key: Hashable, time: Timestamp) -> list[tuple[Any, int]]:
        """Make the output's contents of ``key`` at ``time`` what the logic says; the changes that took."""
        contents = self.input.accumulated(key, time)
        negative = {value: copies for value, copies in contents.items() if copies < 0}
        if negative:
            value, copies = next(iter(negative.items()))
            raise RecordError(f"key {key!r} at {time}: value {value!r} has {copies} copies (more removed than added)")
        wanted = self.logic(key, contents) if contents else {}
        held = self.output.accumulated(key, time)
        changes = [(record, copies - held.get(record, 0)) for record, copies in wanted.items()
                   if copies != held.get(record, 0)]
        changes.extend((record, -copies) for record, copies in held.items() if record not in wanted)
        for record, diff in changes:
            self.output.add(key, record, time, diff)
        return changes

    def _schedule(self, keys: dict[Hashable, None], time: Timestamp) -> list[Timestamp]:
        """Schedule ``keys`` at the later times their change at ``time`` reaches; the times new here."""
        new = []
        for key in keys:
            for later in later_times(time, {*self.input.times(key), *self.output.times(key)}):
                due = self.scheduled.get(later)
                if due is None:
                    due = self.scheduled[later] = set()
                    if later not in self.pending:
                        new.append(later)
                due.add(key)
        return new

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete: compact the traces it keeps."""
        for trace in self.kept():
            trace.compact(done)

    def kept(self) -> list[Trace]:
        """The traces this reduction keeps (a shared input is its owner's)."""
        return [self.input, self.output] if self.owns_input else [self.output]

    def times(self) -> set[Timestamp]:
        """The times this reduction will run at (each needs its notification)."""
        return set(self.pending) | set(self.scheduled)

    def take(self, moving: Callable[[Hashable], bool]) -> dict[str, Any]:
        """Remove and return the state of the keys for which ``moving(key)`` is true."""
        pending: dict[Timestamp, list] = {}
        for time, updates in self.pending.items():
            pending[time] = [update for update in updates if moving(update[0])]
            self.pending[time] = [update for update in updates if not moving(update[0])]
        scheduled = {time: {key for key in keys if moving(key)} for time, keys in self.scheduled.items()}
        for time, keys in scheduled.items():
            self.scheduled[time] -= keys
        self._drop_empty()
        return {"input": self.input.take(moving) if self.owns_input else {}, "output": self.output.take(moving),
                "pending": {t: u for t, u in pending.items() if u}, "scheduled": {t: k for t, k in scheduled.items() if k}}

    def put(self, state: dict[str, Any]) -> None:
        """Add the state another reduction's :meth:`take` returned."""
        if self.owns_input:
            self.input.put(state["input"])
        self.output.put(state["output"])
        for time, updates in state["pending"].items():
            self.pending.setdefault(time, []).extend(updates)
        for time, keys in state["scheduled"].items():
            self.scheduled.setdefault(time, set()).update(keys)

    def _drop_empty(self) -> None:
        self.pending = {time: updates for time, updates in self.pending.items() if updates}
        self.scheduled = {time: keys for time, keys in self.scheduled.items() if keys}
