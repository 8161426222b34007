"""Join kept up to date across all times: the pure core of ``Collection.join``.

Each side keeps a trace of what it has received, by key. An update that arrives on one
side meets every update of the other side's trace with its key; the pair's change comes
at the least upper bound of their times with the product of their diffs (a record of epoch
5 meets one of epoch 4, at epoch 5). Every pair is met exactly once: by whichever of its
two updates arrives second, since the first is in its trace by then.

>>> from raytide.progress.timestamps import Timestamp as T
>>> join = Join()
>>> join.receive(0, T(0), [("k", "a", 1)])
{}
>>> join.receive(1, T(1), [("k", "b", 2)])
{Timestamp(1): [(('k', ('a', 'b')), 2)]}
>>> join.receive(0, T(1), [("k", "a", -1)])
{Timestamp(1): [(('k', ('a', 'b')), -2)]}
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from raytide.differential.trace import Trace
from raytide.progress.timestamps import Timestamp

__all__ = ["Join"]


class Join:
    """The two sides' traces (0: left, 1: right)."""

    def __init__(self) -> None:
        self.sides = (Trace(), Trace())

    def receive(self, side: int, time: Timestamp, updates: Sequence[tuple[Hashable, Any, int]]
                ) -> dict[Timestamp, list[tuple[Any, int]]]:
        """Updates ``(key, value, diff)`` on ``side`` at ``time``: the output's changes, by time."""
        other = self.sides[1 - side].keys
        out: dict[Timestamp, list[tuple[Any, int]]] = {}
        bounds: dict[Timestamp, list[tuple[Any, int]]] = {}  # an update time of the other side -> the list at its bound
        for key, value, diff in updates:
            for at, matches in other.get(key, {}).items():
                changes = bounds.get(at)
                if changes is None:
                    when = time if at.epoch <= time.epoch and at.counters <= time.counters else time.join(at)
                    changes = bounds[at] = out.setdefault(when, [])
                if side == 0:
                    changes.extend(((key, (value, match)), diff * copies) for match, copies in matches.items())
                else:
                    changes.extend(((key, (match, value)), diff * copies) for match, copies in matches.items())
        mine = self.sides[side]
        for key, value, diff in updates:
            mine.add(key, value, time, diff)
        return out

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete: compact both traces."""
        for trace in self.sides:
            trace.compact(done)

    def take(self, moving: Callable[[Hashable], bool]) -> tuple[dict, dict]:
        """Remove and return both sides' updates of the keys for which ``moving(key)`` is true."""
        return self.sides[0].take(moving), self.sides[1].take(moving)

    def put(self, taken: tuple[dict, dict]) -> None:
        """Add what another join's :meth:`take` returned."""
        for trace, updates in zip(self.sides, taken):
            trace.put(updates)
