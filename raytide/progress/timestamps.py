"""Timestamps of timely dataflow: an epoch and a tuple of loop counters, partially ordered.

A timestamp ``(epoch, (c1, ..., ck))`` carries one loop counter per loop context the
record is inside. ``t1 <= t2`` iff ``t1.epoch <= t2.epoch`` *and* the counters compare
lexicographically ``<=``. Each part alone is totally ordered, their product is not:

>>> a, b = Timestamp(0, (5,)), Timestamp(1, (2,))
>>> a <= b, b <= a
(False, False)
>>> Timestamp(0, (1, 9)) <= Timestamp(0, (2, 0))
True

Code must never assume totality: ``not (a <= b)`` does not imply ``b <= a``.
Timestamps compared with each other always live in the same scope (same number of
counters); comparing timestamps of different depths is a programming error.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class Timestamp(NamedTuple):
    """An epoch plus loop counters; immutable, hashable and partially ordered.

    A named tuple so that hashing and equality run at C speed on the tracker's hot
    path; the comparison operators are replaced by the partial order.

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

    __le__ = less_equal  # type: ignore[assignment]
    __lt__ = less_than  # type: ignore[assignment]

    def __ge__(self, other: object) -> bool:  # type: ignore[override]
        return isinstance(other, Timestamp) and other.less_equal(self)

    def __gt__(self, other: object) -> bool:  # type: ignore[override]
        return isinstance(other, Timestamp) and other.less_than(self)

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


def minimal_elements(times: Iterable[Timestamp]) -> list[Timestamp]:
    """The elements of ``times`` not strictly greater than another one, without duplicates."""
    distinct = list(dict.fromkeys(times))
    return [t for t in distinct if not any(o.less_than(t) for o in distinct)]
