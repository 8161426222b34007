"""The actions one step of the in-process runtime offers its scheduler, each made only if chosen.

:meth:`~raytide.testing.world.World._mailboxes` offers one action per mailbox with something
to deliver, at every step, of which the seeded scheduler takes one. Making every one of them
(a ``functools.partial`` per link, per status push, per command queue...) to use one cost a
tenth of a simulation's CPU. :class:`Offers` is the same list, in the same order and of the same
length, kept as runs of items with the maker of their action: ``rng.choice(offers)`` draws the
same index as from the list (``random.Random.choice`` asks only ``len`` and one item), so a
seed picks the same action as it would from the list, and only that action is made.

>>> offers = Offers()
>>> offers.add(print)
>>> offers.each(["a", "b"], lambda item: item.upper)
>>> len(offers), offers[0] is print, offers[2]()
(3, True, 'B')
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

Action = Callable[[], Any]


class Offers(Sequence[Action]):
    """The actions of one step, in order: runs of items, each run with the maker of an item's action."""

    __slots__ = ("runs", "size")

    def __init__(self) -> None:
        self.runs: list[tuple[Sequence[Any], Callable[[Any], Action] | None]] = []  # (items, maker; None: actions)
        self.size = 0

    def add(self, action: Action) -> None:
        """Offer ``action`` next."""
        self.runs.append(((action,), None))
        self.size += 1

    def extend(self, actions: Sequence[Action]) -> None:
        """Offer ``actions`` next, in order."""
        if actions:
            self.runs.append((actions, None))
            self.size += len(actions)

    def each(self, items: Sequence[Any], make: Callable[[Any], Action]) -> None:
        """Offer next, in order, the action ``make(item)`` of every one of ``items`` (made if chosen)."""
        if items:
            self.runs.append((items, make))
            self.size += len(items)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Action:  # type: ignore[override]  # one action, never a slice
        """The action at ``index`` (from 0), made now."""
        if not 0 <= index < self.size:
            raise IndexError(f"no action {index} among the {self.size} offered")
        for items, make in self.runs:
            if index < len(items):
                return items[index] if make is None else make(items[index])
            index -= len(items)
        raise AssertionError("unreachable: the runs add up to the count")

    def __iter__(self) -> Iterator[Action]:
        for items, make in self.runs:
            yield from (items if make is None else map(make, items))
