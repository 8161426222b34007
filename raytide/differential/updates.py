"""Updates ``(record, diff)``: the unit of change of a collection, as in differential dataflow.

A collection at a time is a multiset of records; it changes by updates, each a record
and an integer ``diff`` (``+1`` adds a copy, ``-1`` removes one, any integer allowed).
Changes are *consolidated* by summing the diffs of equal records and dropping the zeros
(a Z-set in DBSP's terms):

>>> consolidate([("a", 1), ("b", 2), ("a", -1), ("b", 1)])
[('b', 3)]

A driver folds the changes an output yields into the collection's contents:

>>> contents = accumulate([("a", 1), ("b", 2)])
>>> accumulate({1: [("b", -1)], 0: [("c", 1)]}, contents)
{'a': 1, 'b': 1, 'c': 1}

Records of a collection must be hashable, since equal records must meet to cancel.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from raytide.errors import RecordError

__all__ = ["Change", "accumulate", "canonical", "check_updates", "consolidate"]

#: One change of a collection: a record and how many copies of it come (or go, if negative).
Change = tuple[Hashable, int]


def consolidate(updates: Iterable[Change]) -> list[Change]:
    """The updates with equal records summed, zero sums dropped, in first-seen order."""
    sums: dict[Hashable, int] = {}
    for record, diff in updates:
        sums[record] = sums.get(record, 0) + diff
    return [(record, diff) for record, diff in sums.items() if diff]


def accumulate(changes: Iterable[Change] | Mapping[int, Iterable[Change]],
               contents: dict[Hashable, int] | None = None) -> dict[Hashable, int]:
    """Fold changes into a collection's contents ``{record: copies}`` (updated in place and returned).

    ``changes`` is a list of ``(record, diff)`` updates (one epoch of ``job.results(name)``), or
    ``{epoch: updates}`` as ``job.collect(name)`` returns (applied in epoch order). A record whose
    copies fall to zero leaves the contents.

    Raises:
        RecordError: A record would have fewer than zero copies (more removed than added).
    """
    contents = {} if contents is None else contents
    batches = [changes[epoch] for epoch in sorted(changes)] if isinstance(changes, Mapping) else [changes]
    for batch in batches:
        for record, diff in batch:
            copies = contents.get(record, 0) + diff
            if copies < 0:
                raise RecordError(f"accumulate: record {record!r} would have {copies} copies (more removed than added)")
            if copies:
                contents[record] = copies
            else:
                contents.pop(record, None)
    return contents


def canonical(value: Any) -> Hashable:
    """A routing key for ``value``: equal values get equal keys (``1``, ``1.0`` and ``True`` too).

    Key groups take str, int, bytes and tuples of them; this maps any value onto those, so
    that records and keys of other types (floats, None) can be exchanged. Unequal values
    may share a key (values of types without a canonical form share one per type): that
    only costs balance, never correctness.

    >>> canonical((1.0, "a", None)), canonical(2.5)
    ((1, 'a', ('None',)), ('float', '2.5'))
    """
    kind = type(value)
    if kind is int or kind is str or kind is bytes:  # the common cases, without the ABC checks below
        return value
    if kind is tuple:
        return tuple(canonical(element) for element in value)
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, tuple):
        return tuple(canonical(element) for element in value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return int(number) if number.is_integer() else ("float", repr(number))
    if value is None:
        return ("None",)
    return ("object", type(value).__qualname__)


def check_updates(batch: list, where: str) -> list[Change]:
    """``batch`` as updates: each a pair ``(record, diff)`` with a hashable record and an integer diff.

    Raises:
        RecordError: An element is not such a pair; names ``where``, its position and what was wrong.
    """
    for position, update in enumerate(batch):
        problem = _update_problem(update)
        if problem:
            raise RecordError(f"{where}: update {position} of the batch, {update!r}, {problem}")
    return [(record, int(diff)) for record, diff in batch]


def _update_problem(update: Any) -> str | None:
    """Why ``update`` is not a ``(record, diff)`` pair, or None."""
    if not isinstance(update, (tuple, list)) or len(update) != 2:
        return "is not a pair (record, diff): a collection's input takes updates, e.g. (record, +1) or (record, -1)"
    record, diff = update
    if isinstance(diff, bool) or not isinstance(diff, numbers.Integral):
        return f"has a diff of type {type(diff).__name__}: the diff must be an integer (+1 adds, -1 removes)"
    try:
        hash(record)
    except TypeError:
        return f"has an unhashable record of type {type(record).__name__}: use tuples, not lists or dicts"
    return None
