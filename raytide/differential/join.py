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
    """The two sides' traces (0: left, 1: right).

    One side may be a shared arrangement's trace (``shared`` at ``side``,
    :class:`~raytide.differential.arranged.SharedArrangement`): its owner fills it, after this
    join has :meth:`meet` its updates; the join keeps, compacts and moves only its other side.
    """

    def __init__(self, shared: Trace | None = None, side: int = 0) -> None:
        sides = [Trace(), Trace()]
        if shared is not None:
            sides[side] = shared
        self.sides = (sides[0], sides[1])
        #: The sides this join keeps (both, or the one that is not shared).
        self.owned = (0, 1) if shared is None else (1 - side,)

    def receive(self, side: int, time: Timestamp, updates: Sequence[tuple[Hashable, Any, int]]
                ) -> dict[Timestamp, list[tuple[Any, int]]]:
        """Updates ``(key, value, diff)`` on ``side`` at ``time``: the output's changes, by time."""
        out = self.meet(side, time, updates)
        mine = self.sides[side]
        for key, value, diff in updates:
            mine.add(key, value, time, diff)
        return out

    def meet(self, side: int, time: Timestamp, updates: Sequence[tuple[Hashable, Any, int]]
             ) -> dict[Timestamp, list[tuple[Any, int]]]:
        """The output's changes, by time, of updates on ``side`` meeting the other side's trace
        (``side``'s trace is not changed: :meth:`receive` adds them)."""
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
        return out

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete: compact the traces it keeps."""
        for side in self.owned:
            self.sides[side].compact(done)

    def take(self, moving: Callable[[Hashable], bool]) -> tuple[dict, dict]:
        """Remove and return its sides' updates of the keys for which ``moving(key)`` is true
        (nothing of a shared side: its owner moves it)."""
        taken = [self.sides[side].take(moving) if side in self.owned else {} for side in (0, 1)]
        return taken[0], taken[1]

    def put(self, taken: tuple[dict, dict]) -> None:
        """Add what another join's :meth:`take` returned."""
        for side in self.owned:
            self.sides[side].put(taken[side])

    def kept(self) -> list[Trace]:
        """The traces this join keeps (a shared side is its owner's)."""
        return [self.sides[side] for side in self.owned]
