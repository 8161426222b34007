"""A consolidating batch of ``key -> delta`` changes, the unit in which progress travels.

Updates to the same key accumulate and cancel, so a batch never holds more entries than
distinct keys, and a ``+1`` followed by a ``-1`` costs nothing to ship:

>>> batch = ChangeBatch()
>>> batch.update("a", 1); batch.update("b", 2); batch.update("a", -1)
>>> batch.drain()
[('b', 2)]
>>> batch.is_empty()
True
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ChangeBatch(Generic[K]):
    """Accumulates integer deltas per key; zero entries disappear."""

    __slots__ = ("_deltas",)

    def __init__(self, changes: Iterable[tuple[K, int]] = ()) -> None:
        self._deltas: dict[K, int] = {}
        self.extend(changes)

    def update(self, key: K, delta: int) -> None:
        """Add ``delta`` to ``key``'s accumulated change."""
        self.extend(((key, delta),))

    def extend(self, changes: Iterable[tuple[K, int]]) -> None:
        """Add every ``(key, delta)`` of ``changes``, in one loop: the progress actor adds every
        change it takes, and a method call per change cost it a tenth of its work on them."""
        deltas = self._deltas
        for key, delta in changes:
            total = deltas.get(key, 0) + delta
            if total:
                deltas[key] = total
            else:
                deltas.pop(key, None)

    def drain(self) -> list[tuple[K, int]]:
        """Return the net non-zero changes and empty the batch."""
        changes = list(self._deltas.items())
        self._deltas = {}
        return changes

    def items(self) -> list[tuple[K, int]]:
        """The net non-zero changes, leaving the batch as it is."""
        return list(self._deltas.items())

    def is_empty(self) -> bool:
        """True when every key's changes cancelled out."""
        return not self._deltas

    def __len__(self) -> int:
        return len(self._deltas)

    def __repr__(self) -> str:
        return f"ChangeBatch({self._deltas!r})"
