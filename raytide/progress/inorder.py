"""Per-sender FIFO from numbered messages that may arrive out of order.

The progress protocol needs each replica's batches applied in the order it sent them.
Ray keeps that order only for a plain sequential actor; the progress actor has a
concurrency group for the driver's long poll, which makes it a threaded actor, and Ray
does not promise submission order for threaded or asyncio actors (a call whose argument
is still being fetched may let later ones pass). So every sender numbers its calls from
0 and the receiver releases them strictly in that order.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class InOrder(Generic[T]):
    """Releases each sender's items in sequence-number order, holding back early arrivals."""

    def __init__(self) -> None:
        self._next: dict[Hashable, int] = {}
        self._early: dict[Hashable, dict[int, tuple[T, int]]] = {}

    def offer(self, sender: Hashable, sequence: int, item: T, count: int = 1) -> list[T]:
        """Item number ``sequence`` of ``sender`` arrived, standing for ``count`` consecutive
        numbers (a relay's merged run); returns the items now due, in order.

        Raises:
            ValueError: a number it stands for was already released or is already waiting
                (a duplicate, alone or in a run).
        """
        expected = self._next.get(sender, 0)
        early = self._early.setdefault(sender, {})
        last = sequence + count - 1
        if sequence < expected or (early and any(first <= last and sequence < first + span
                                                 for first, (_, span) in early.items())):
            numbers = str(sequence) if count == 1 else f"{sequence}-{last}"
            raise ValueError(f"message {numbers} from {sender!r} arrived twice")
        early[sequence] = (item, count)
        due = []
        while expected in early:
            released, span = early.pop(expected)
            due.append(released)
            expected += span
        self._next[sender] = expected
        return due

    def restart(self, sender: Hashable, at: int) -> None:
        """``sender``'s next item is number ``at``: what it had waiting is forgotten (a replica
        recovered alone numbers again from ``at``, past everything its lost incarnation sent)."""
        self._next[sender] = at
        self._early.pop(sender, None)

    def applied(self, sender: Hashable) -> int:
        """How many of ``sender``'s numbers were released (the next one it is due)."""
        return self._next.get(sender, 0)

    def waiting(self) -> dict[Hashable, list[int]]:
        """Per sender, the sequence numbers held back because an earlier one is missing."""
        return {sender: sorted(early) for sender, early in self._early.items() if early}
