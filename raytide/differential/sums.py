"""Sums per key kept up to date in time proportional to the changes: a linear aggregate.

A sum is linear in its input (DBSP's term): the change of a key's sum is the sum of its
records' changes, ``value(record) * diff``. So no key's records need be kept, only how many
it has and their total, and an epoch's updates cost what they are, whatever the key holds
(where ``reduce`` hands the whole group to its function at every change). The output is
a collection of ``(key, total)``, one record per key that has records:

>>> sums = Sums()
>>> sums.apply({"a": (2, 7)})
[(('a', 7), 1)]
>>> sums.apply({"a": (-1, -3), "b": (1, 1)})
[(('a', 7), -1), (('a', 4), 1), (('b', 1), 1)]
>>> sums.apply({"a": (-1, -4)})
[(('a', 4), -1)]

Totals of integers are exact; totals of floats are running sums, rounded at each change
(a ``reduce`` with ``math.fsum`` over the group is exact, and costs the group).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from raytide.differential.updates import Change
from raytide.errors import RecordError

#: A key's change, or what it holds: ``(copies, total)``.
KeyTotal = tuple[int, Any]


class Sums:
    """Per key, its records' copies and the total of their values (a key without copies is absent)."""

    def __init__(self) -> None:
        self.held: dict[Hashable, KeyTotal] = {}

    def apply(self, changes: Mapping[Hashable, Sequence[Any]]) -> list[Change]:
        """Add each key's ``(copies, total)`` change; the output's changes, old totals taken back.

        Raises:
            RecordError: A key would have fewer than zero copies (more removed than added).
        """
        out: list[Change] = []
        for key, (copies, total) in changes.items():
            old = self.held.get(key)
            count = copies + (old[0] if old else 0)
            if count < 0:
                raise RecordError(f"key {key!r} would have {count} records (more removed than added)")
            new = total + (old[1] if old else 0)
            if old is not None and (count == 0 or old[1] != new):
                out.append(((key, old[1]), -1))
            if count and (old is None or old[1] != new):
                out.append(((key, new), 1))
            if count:
                self.held[key] = (count, new)
            else:
                self.held.pop(key, None)
        return out

    def take(self, moving: Callable[[Hashable], bool]) -> dict[Hashable, KeyTotal]:
        """The keys ``moving`` selects, removed from here (a rescale's or a restore's split)."""
        taken = {key: held for key, held in self.held.items() if moving(key)}
        for key in taken:
            del self.held[key]
        return taken

    def put(self, taken: Mapping[Hashable, KeyTotal]) -> None:
        """Keys taken from another replica (none of them held here)."""
        self.held.update(taken)
