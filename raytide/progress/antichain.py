"""Antichains (sets of mutually incomparable elements) and their counted, mutable variant.

An :class:`Antichain` keeps only the minimal elements of what was inserted: it is how a
frontier ("the earliest timestamps that may still appear") and a set of minimal path
summaries are represented.

>>> a = Antichain()
>>> a.insert(Timestamp(1, (3,))), a.insert(Timestamp(2, (0,))), a.insert(Timestamp(1, (5,)))
(True, True, False)
>>> sorted(a, key=lambda t: (t.epoch, t.counters))
[Timestamp(1, (3,)), Timestamp(2, (0,))]

A :class:`MutableAntichain` counts occurrences of timestamps under ``+n`` / ``-n``
updates and reports only the changes of its frontier, the minimal elements among those
with a *positive* count. Counts may go negative transiently (a consumer's ``-1``
arriving before the producer's ``+1``); such elements are simply not part of the frontier.

>>> m = MutableAntichain()
>>> m.update_iter([(Timestamp(0), 1), (Timestamp(1), 1)])
[(Timestamp(0), 1)]
>>> m.update_iter([(Timestamp(0), -1)])
[(Timestamp(0), -1), (Timestamp(1), 1)]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, Self, TypeVar

from raytide.progress.timestamps import Timestamp


class PartiallyOrdered(Protocol):
    """Anything with a partial order ``less_equal`` (timestamps, path summaries)."""

    def less_equal(self, other: Self, /) -> bool: ...  # noqa: D102


E = TypeVar("E", bound=PartiallyOrdered)


class Antichain(Generic[E]):
    """A set of mutually incomparable elements: the minimal ones of everything inserted."""

    __slots__ = ("_elements",)

    def __init__(self, elements: Iterable[E] = ()) -> None:
        self._elements: list[E] = []
        for element in elements:
            self.insert(element)

    def insert(self, element: E) -> bool:
        """Add ``element`` unless some member is ``<=`` it; drop members it is ``<=`` to.

        Returns:
            Whether the antichain changed.
        """
        if any(e.less_equal(element) for e in self._elements):
            return False
        self._elements = [e for e in self._elements if not element.less_equal(e)]
        self._elements.append(element)
        return True

    def less_equal(self, element: E) -> bool:
        """Whether some member is ``<=`` ``element`` (the element is "beyond" the frontier)."""
        return any(e.less_equal(element) for e in self._elements)

    def less_than(self, element: E) -> bool:
        """Whether some member is strictly less than ``element``."""
        return any(e.less_equal(element) and e != element for e in self._elements)

    def elements(self) -> list[E]:
        """The members, in insertion order."""
        return list(self._elements)

    def __iter__(self) -> Iterator[E]:
        return iter(self._elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __bool__(self) -> bool:
        return bool(self._elements)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Antichain):
            return NotImplemented
        return set(self._elements) == set(other._elements)

    def __repr__(self) -> str:
        return f"Antichain({self._elements!r})"


class MutableAntichain:
    """Counted timestamps whose frontier is the minimal timestamps with a positive count.

    ``update_iter`` applies a batch of count changes and returns the frontier changes as
    ``(time, +1)`` for a timestamp that joined it and ``(time, -1)`` for one that left, so
    that nothing downstream does work unless the frontier really moved.
    """

    __slots__ = ("_counts", "_frontier")

    def __init__(self) -> None:
        self._counts: dict[Timestamp, int] = {}
        self._frontier: list[Timestamp] = []

    def update_iter(self, updates: Iterable[tuple[Timestamp, int]]) -> list[tuple[Timestamp, int]]:
        """Apply ``(time, delta)`` updates; return the changes of the frontier.

        Only a frontier element losing its positive count makes the frontier be recomputed
        from all counts; a time gaining one, not above the frontier, joins it directly.
        """
        counts, frontier = self._counts, self._frontier
        removed = False
        joined: list[Timestamp] = []
        for time, delta in updates:
            if not delta:
                continue
            before = counts.get(time, 0)
            after = before + delta
            if after:
                counts[time] = after
            else:
                del counts[time]
            if before > 0 >= after:
                removed = removed or time in frontier
            elif after > 0 >= before and not _covers(frontier, time):
                joined.append(time)
        if removed:
            return self._rebuild()
        return self._join(joined) if joined else []

    def _join(self, joined: list[Timestamp]) -> list[tuple[Timestamp, int]]:
        """The frontier with ``joined`` (times that gained a positive count) added, when no
        frontier element lost its count: every other positive time is above the old frontier."""
        frontier = self._frontier
        for time in joined:
            if self._counts.get(time, 0) > 0 and not _covers(frontier, time):
                frontier = [f for f in frontier if not time.less_equal(f)] + [time]
        return self._replace(frontier)

    def _rebuild(self) -> list[tuple[Timestamp, int]]:
        """The frontier recomputed from every positive count."""
        positive = [t for t, c in self._counts.items() if c > 0]
        if len(positive) > 1:
            positive.sort(key=Timestamp.sort_key)
        frontier: list[Timestamp] = []
        for time in positive:
            if not _covers(frontier, time):
                frontier.append(time)
        return self._replace(frontier)

    def _replace(self, frontier: list[Timestamp]) -> list[tuple[Timestamp, int]]:
        """Make ``frontier`` the frontier; return what left (-1) and what joined (+1)."""
        old = self._frontier
        self._frontier = frontier
        return [(t, -1) for t in old if t not in frontier] + [(t, 1) for t in frontier if t not in old]

    def frontier(self) -> list[Timestamp]:
        """The minimal timestamps with a positive count."""
        return list(self._frontier)

    def count(self, time: Timestamp) -> int:
        """The accumulated count of exactly ``time`` (may be negative transiently)."""
        return self._counts.get(time, 0)

    def less_equal(self, time: Timestamp) -> bool:
        """Whether some frontier element is ``<=`` ``time``."""
        return _covers(self._frontier, time)

    def less_than(self, time: Timestamp) -> bool:
        """Whether some frontier element is strictly less than ``time``."""
        return any(f.less_than(time) for f in self._frontier)

    def is_empty(self) -> bool:
        """True when no timestamp has a positive count."""
        return not self._frontier

    def counts(self) -> dict[Timestamp, int]:
        """A copy of the non-zero counts."""
        return dict(self._counts)


def _covers(frontier: list[Timestamp], time: Timestamp) -> bool:
    """Whether some element of ``frontier`` is ``<=`` ``time``: a loop, as frontiers are short
    and this runs on the tracker's hot path (cheaper than ``any`` over a generator)."""
    for f in frontier:
        if f.less_equal(time):
            return True
    return False
