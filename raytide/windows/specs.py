"""Window specs over epochs: which windows ``[start, end)`` an epoch's records fall in.

The time axis is the epoch: a window ``[start, end)`` holds the records of epochs
``start .. end - 1`` and is complete once epoch ``end - 1`` is (the dataflow emits it at
the notification of ``Timestamp(end - 1)``).

>>> Tumbling(3).windows_of(7)
[(6, 9)]
>>> Sliding(4, every=2).windows_of(5)
[(2, 6), (4, 8)]

A session is not assigned alone: a record at epoch ``t`` opens ``[t, t + gap)`` and a
key's overlapping windows merge (:func:`raytide.windows.pending.add`):

>>> Session(gap=2).windows_of(5)
[(5, 7)]

Bad arguments are refused when the spec is made, naming what was wrong:

>>> Sliding(2, every=3)
Traceback (most recent call last):
...
raytide.errors.ArgumentError: Sliding(size=2, every=3): every must be at most size (a larger step would skip epochs)
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, ClassVar

from raytide.errors import ArgumentError

#: A window ``(start, end)`` over epochs: epochs ``start .. end - 1``.
Window = tuple[int, int]


def _positive(value: Any, what: str) -> int:
    """``value`` as an int if it is an integer of at least 1 (a bool is refused: ``True`` is not a size)."""
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            pass
        else:
            if number >= 1:
                return number
    raise ArgumentError(f"{what} must be a positive integer (a number of epochs), not {value!r} "
                        f"({type(value).__name__})")


@dataclass(frozen=True)
class Tumbling:
    """Windows of ``size`` epochs, one after the other: ``[0, size)``, ``[size, 2 size)``, ...

    Each epoch is in exactly one window.
    """

    size: int
    merges: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _positive(self.size, "Tumbling(size)"))

    def windows_of(self, epoch: int) -> list[Window]:
        """The window holding ``epoch``."""
        start = epoch - epoch % self.size
        return [(start, start + self.size)]


@dataclass(frozen=True)
class Sliding:
    """Windows of ``size`` epochs starting every ``every`` epochs (at multiples of ``every``).

    An epoch is in every window that covers it: ``size / every`` of them when ``size`` is a
    multiple of ``every``, else the floor or the ceiling of that. ``every`` may not exceed
    ``size`` (epochs between two windows would belong to none). As in Flink, the first
    windows start before epoch 0 (``[-2, 2)`` for ``Sliding(4, every=2)``), so that every
    epoch is in as many windows as any other.
    """

    size: int
    every: int
    merges: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _positive(self.size, "Sliding(size)"))
        object.__setattr__(self, "every", _positive(self.every, "Sliding(every)"))
        if self.every > self.size:
            raise ArgumentError(f"Sliding(size={self.size}, every={self.every}): every must be at most size "
                                "(a larger step would skip epochs)")

    def windows_of(self, epoch: int) -> list[Window]:
        """The windows holding ``epoch``, by increasing start."""
        last = epoch - epoch % self.every
        return [(start, start + self.size) for start in reversed(range(last, epoch - self.size, -self.every))]


@dataclass(frozen=True)
class Session:
    """Per key, runs of activity: a record at epoch ``t`` keeps its key's session open
    through epoch ``t + gap - 1`` (it opens the window ``[t, t + gap)``), and a key's
    overlapping windows merge into one, as Flink's session windows do.

    So two record epochs ``a < b`` of a key are in one session when ``b - a < gap`` (or a
    chain of such steps links them), and a session whose last record is at epoch ``last``
    is ``[first, last + gap)``, complete once epoch ``last + gap - 1`` is: ``gap - 1`` epochs
    without a record of the key close it. ``Session(1)`` is one epoch's records. Flink also
    merges windows that only touch (``b - a == gap``); over epochs that would make the
    result depend on whether epoch ``last + gap``'s records arrive before the window fires,
    so here they do not.

    >>> from raytide.windows.pending import Pending, add, close
    >>> pending, spec = Pending(), Session(gap=3)
    >>> for epoch in (1, 3, 7, 9, 12):
    ...     add(pending, spec, "k", epoch, 1, operator.add)
    >>> [close(pending, end) for end in sorted(pending.ends)]
    [[('k', 1, 6, 2)], [('k', 7, 12, 2)], [('k', 12, 15, 1)]]
    """

    gap: int
    merges: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "gap", _positive(self.gap, "Session(gap)"))

    def windows_of(self, epoch: int) -> list[Window]:
        """The window a record at ``epoch`` opens, before it merges with its key's others."""
        return [(epoch, epoch + self.gap)]


#: Every window spec.
WindowSpec = Tumbling | Sliding | Session
