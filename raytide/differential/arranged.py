"""A shared arrangement: one trace of a collection by a key, read by every operator given it.

Differential dataflow's ``arrange_by_key``: a collection indexed by a key is held once, and
the joins and reductions that read it by that key use that one trace instead of a copy
each. The :class:`SharedArrangement` owns the trace: the arranged collection's updates first meet
every reading join's other side (so each pair is met once, as in :class:`~.join.Join`) and
are noted by every reading reduction, then are added to the trace once. The trace is
compacted once, moved by key once and saved once; each reader keeps only its own state
(a join its other side, a reduction its output and the keys due).

>>> from raytide.progress.timestamps import Timestamp as T
>>> shared = SharedArrangement()
>>> left, counts = shared.join(0), shared.reduce(lambda key, values: {(key, sum(values.values())): 1})
>>> shared.receive(T(0), [("k", "a", 1)])
[{}, True]
>>> left.receive(1, T(0), [("k", "b", 1)])
{Timestamp(0): [(('k', ('a', 'b')), 1)]}
>>> counts.run(T(0))[0], left.sides[0] is counts.input is shared.trace
([(('k', 1), 1)], True)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from raytide.differential.join import Join
from raytide.differential.reduce import Logic, Reduction
from raytide.differential.trace import Trace
from raytide.progress.timestamps import Timestamp

__all__ = ["SharedArrangement"]

#: A reader's answer to the arranged collection's updates: a join's changes by time, or
#: whether a reduction's time is new.
Answer = dict[Timestamp, list[tuple[Any, int]]] | bool


class SharedArrangement:
    """The shared trace and its readers, in the order they were added."""

    def __init__(self) -> None:
        self.trace = Trace()
        self.readers: list[Join | Reduction] = []

    @classmethod
    def of(cls, core: SharedArrangement | Join | Reduction) -> SharedArrangement:
        """``core`` as a shared arrangement: itself, or a lone join or reduction as a raytide
        before 2026-12 saved it (every keyed reader now reads an arrangement; a savepoint of
        that version restores), its input trace (a join's left) made the arrangement's."""
        if isinstance(core, SharedArrangement):
            return core
        shared = cls()
        if isinstance(core, Join):
            shared.trace, core.owned = core.sides[0], (1,)
        else:  # what it had received and not run yet goes into the trace, as a reader's would have
            shared.trace, core.owns_input = core.input, False
            for time, updates in core.pending.items():
                for key, value, diff in updates:
                    shared.trace.add(key, value, time, diff)
                core.pending[time] = [(key, None, 0) for key, _, _ in updates]
        shared.readers.append(core)
        return shared

    def join(self, side: int) -> Join:
        """A new reading join whose side ``side`` (0: left, 1: right) is the arranged collection."""
        reader = Join(self.trace, side)
        self.readers.append(reader)
        return reader

    def reduce(self, logic: Logic) -> Reduction:
        """A new reading reduction of the arranged collection by its key."""
        reader = Reduction(logic, self.trace)
        self.readers.append(reader)
        return reader

    def receive(self, time: Timestamp, updates: Sequence[tuple[Hashable, Any, int]]) -> list[Answer]:
        """The arranged collection's updates ``(key, value, diff)`` at ``time``: per reader, a
        join's output changes by time, or whether the time is new to a reduction (notify
        there); then the updates join the trace, once."""
        answers: list[Answer] = []
        for reader in self.readers:
            if isinstance(reader, Join):
                answers.append(reader.meet(1 - reader.owned[0], time, updates))  # its side not owned: ours
            else:
                answers.append(reader.receive(time, updates))
        for key, value, diff in updates:
            self.trace.add(key, value, time, diff)
        return answers

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete: compact the trace and the readers' own."""
        self.trace.compact(done)
        for reader in self.readers:
            reader.compact(done)

    def traces(self) -> list[Trace]:
        """Every trace held, each once: the shared one, then the readers' own."""
        return [self.trace, *(trace for reader in self.readers for trace in reader.kept())]

    def times(self) -> set[Timestamp]:
        """The times its reductions will run at (each needs its notification)."""
        return {time for reader in self.readers if isinstance(reader, Reduction) for time in reader.times()}

    def take(self, moving: Callable[[Hashable], bool]) -> dict[str, Any]:
        """Remove and return the state of the keys for which ``moving(key)`` is true: the
        trace's updates once, and each reader's own."""
        return {"trace": self.trace.take(moving), "readers": [reader.take(moving) for reader in self.readers]}

    def put(self, state: dict[str, Any]) -> None:
        """Add the state another arrangement's :meth:`take` returned (the same readers)."""
        self.trace.put(state["trace"])
        for reader, taken in zip(self.readers, state["readers"]):
            reader.put(taken)
