"""Timestamps of timely dataflow: an epoch and a tuple of loop counters, partially ordered.

A timestamp ``(epoch, (c1, ..., ck))`` carries one loop counter per loop context the
record is inside. ``t1 <= t2`` iff ``t1.epoch <= t2.epoch`` *and* the counters compare
lexicographically ``<=``. Each part alone is totally ordered, their product is not:

>>> a, b = Timestamp(0, (5,)), Timestamp(1, (2,))
>>> a <= b, b <= a
(False, False)
>>> Timestamp(0, (1, 9)) <= Timestamp(0, (2, 0))
True

Code must never assume totality: ``not (a <= b)`` does not imply ``b <= a``. So ``<=``
and ``>=`` are the partial order, while ``<`` and ``>`` (what ``sorted()``, ``min()`` and
``max()`` use) raise: with a partial order they would return an order that depends on
the input's order. Use :meth:`Timestamp.less_than` for the strict partial order, and
``key=Timestamp.sort_key`` for a deterministic total order (display, iteration order):

>>> sorted([b, a])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
TypeError: timestamps are only partially ordered: ... pass key=Timestamp.sort_key ...
>>> sorted([b, a], key=Timestamp.sort_key)
[Timestamp(0, (5,)), Timestamp(1, (2,))]

Timestamps compared with each other always live in the same scope (same number of
counters); comparing timestamps of different depths is a programming error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Timestamp(NamedTuple):
    """An epoch plus loop counters; immutable, hashable and partially ordered.

    A named tuple so that hashing and equality run at C speed on the tracker's hot
    path; ``<=`` and ``>=`` are replaced by the partial order, ``<`` and ``>`` raise
    (see the module docstring), and none of them accepts a plain tuple.

    Attributes:
        epoch: the input epoch, a non-negative integer.
        counters: one counter per enclosing loop context, outermost first.
    """

    epoch: int
    counters: tuple[int, ...] = ()

    @property
    def depth(self) -> int:
        """The number of loop contexts the timestamp is inside."""
        return len(self.counters)

    def less_equal(self, other: Timestamp) -> bool:
        """The partial order: epoch ``<=`` and counters lexicographically ``<=``."""
        return self.epoch <= other.epoch and self.counters <= other.counters

    def less_than(self, other: Timestamp) -> bool:
        """Strictly less in the partial order."""
        return self.less_equal(other) and self != other

    def sort_key(self) -> tuple[int, tuple[int, ...]]:
        """A total order extending the partial order: ``t1 < t2`` implies ``sort_key(t1) < sort_key(t2)``.

        For a deterministic order of display or iteration (``sorted(times,
        key=Timestamp.sort_key)``); never for deciding progress, which the partial order does.
        """
        return (self.epoch, self.counters)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Timestamp):
            raise TypeError(_not_a_timestamp("<=", other))
        return self.less_equal(other)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Timestamp):
            raise TypeError(_not_a_timestamp(">=", other))
        return other.less_equal(self)

    def __lt__(self, other: object) -> bool:
        raise TypeError(_NOT_TOTAL)

    def __gt__(self, other: object) -> bool:
        raise TypeError(_NOT_TOTAL)

    def __repr__(self) -> str:
        if not self.counters:
            return f"Timestamp({self.epoch})"
        return f"Timestamp({self.epoch}, {self.counters})"

    def join(self, other: Timestamp) -> Timestamp:
        """The least upper bound: the smallest timestamp ``>=`` both."""
        return Timestamp(max(self.epoch, other.epoch), max(self.counters, other.counters))

    def meet(self, other: Timestamp) -> Timestamp:
        """The greatest lower bound: the largest timestamp ``<=`` both."""
        return Timestamp(min(self.epoch, other.epoch), min(self.counters, other.counters))


_NOT_TOTAL = (
    "timestamps are only partially ordered: sorted(), min() and max() would depend on the input order; "
    "pass key=Timestamp.sort_key for a deterministic total order, or use a.less_than(b) for the partial order"
)


def _not_a_timestamp(op: str, other: object) -> str:
    """Why ``op`` refuses ``other``: with a plain tuple it would silently fall back to tuple order."""
    return f"'{op}' compares a Timestamp only with another Timestamp, not with {type(other).__name__} {other!r}"


def minimal_elements(times: Iterable[Timestamp]) -> list[Timestamp]:
    """The elements of ``times`` not strictly greater than another one, without duplicates, in their order.

    The order is a product of two total orders (epochs, and counters compared as a whole),
    so one pass in ``sort_key`` order finds them: a time is minimal unless one before it
    there has counters ``<=`` its own (an earlier epoch, or the same epoch and smaller
    counters), i.e. unless the smallest counters seen so far are. ``O(n log n)``, not
    ``O(n^2)``: a vertex in a loop may wait on many times at once.

    >>> minimal_elements([Timestamp(1, (0,)), Timestamp(0, (3,)), Timestamp(2, (1,)), Timestamp(0, (3,))])
    [Timestamp(1, (0,)), Timestamp(0, (3,))]
    """
    distinct = list(dict.fromkeys(times))
    minimal, lowest = set(), None
    for time in sorted(distinct, key=Timestamp.sort_key):
        if lowest is None or not lowest <= time.counters:
            minimal.add(time)
        if lowest is None or time.counters < lowest:
            lowest = time.counters
    return [time for time in distinct if time in minimal]
