"""Joins across time, pure: a replica's state of an interval join and of a join with the
latest value of a table, per key, as plain data (records in, matches out, state trimmed or
settled at a complete epoch, split by key and merged back for a change of parallelism).

**Interval join**: a record of the left side at time ``a`` and one of the right side at ``b``
with equal keys match when ``lower <= b - a <= upper`` (inclusive, as Flink's
``intervalJoin``); the match ``(key, left, right)`` belongs to the later of the two records'
epochs. A record's *time* is its epoch (``granularity`` None: epochs as time, integer bounds),
or, on event-time inputs, its own timestamp in seconds, its epoch ``floor(time / granularity)``
(the side's granularity) and the bounds in seconds. Each pair is found once, by whichever of
the two came second (a symmetric hash join), so arrival order does not matter. A left record
can meet no more right records once the right side's epoch of time ``a + upper`` is complete
(and a right record no left ones once the left side's epoch of ``b - lower`` is): the frontier,
converted to time, trims the state then.

>>> state = IntervalState(lower=0, upper=1)
>>> add(state, LEFT, "k", 3, "l3"), add(state, RIGHT, "k", 4, "r4"), add(state, RIGHT, "k", 2, "r2")
([], [(4, ('k', 'l3', 'r4'))], [])
>>> sorted(state.ends)
[2, 4]
>>> expire(state, 3); sorted(state.ends)
[4]
>>> timed = IntervalState(lower=-0.5, upper=2.0, granularity=(10.0, 10.0))
>>> add(timed, LEFT, "k", 0, "l", 9.0), add(timed, RIGHT, "k", 1, "r", 11.0), add(timed, RIGHT, "k", 0, "s", 8.0)
([], [(1, ('k', 'l', 'r'))], [])
>>> sorted(timed.ends)
[0, 1]

**Latest join**: records of epoch ``t`` meet the value of their key in the table as of
epoch ``t``: the updates of the latest epoch ``<= t`` that has any for the key (a table's
updates of an epoch apply before that epoch's records). A key with several updates in that
epoch gives a match with each; a record whose key has no value yet comes with ``None``.

>>> table = LatestState()
>>> add_update(table, 1, "k", "v1"); add_record(table, 1, "k", "r1"); add_record(table, 0, "k", "r0")
>>> settle(table, 0), settle(table, 1)
([('k', 'r0', None)], [('k', 'r1', 'v1')])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from raytide.errors import ArgumentError

#: The sides of an interval join: the stream's own records, and the other stream's.
LEFT, RIGHT = 0, 1
#: A match found by an interval join: the epoch it belongs to and ``(key, left, right)``.
Match = tuple[int, tuple[Hashable, Any, Any]]
#: Seconds a match's time may be past the sum the state is trimmed by (the rounding of a
#: float sum near 2**31 s is well under it): a record is kept one epoch longer rather than
#: miss a match at a boundary.
SLACK = 1e-6


def interval_bounds(vertex: str, lower: Any, upper: Any, seconds: bool) -> None:
    """Check an interval join's bounds: numbers of seconds (``seconds``: on event-time inputs)
    or whole numbers of epochs, ``lower <= upper``.

    Raises:
        ArgumentError: naming ``vertex`` (how the join is named) and what was wrong.
    """
    unit = "a number of seconds (its inputs have event time)" if seconds else \
        "a whole number of epochs (its inputs have no event time)"
    for what, value in (("lower", lower), ("upper", upper)):
        number = isinstance(value, numbers.Real) if seconds else isinstance(value, numbers.Integral)
        if not number or isinstance(value, bool) or (seconds and not math.isfinite(value)):
            raise ArgumentError(f"{vertex}: {what} must be {unit}, not {value!r} ({type(value).__name__})")
    if lower > upper:
        raise ArgumentError(f"{vertex}: lower={lower!r} must be at most upper={upper!r}")


@dataclass
class IntervalState:
    """The records an interval join still needs (see the module docstring).

    Attributes:
        granularity: per side, seconds per epoch of its times (None: its times are epochs).
        sides: per side, per key, per epoch after whose completion they leave, its records
            as ``(time, epoch, record)``.
        ends: per epoch, the ``(side, key)`` whose records of that end leave once it is complete.
    """

    lower: float
    upper: float
    granularity: tuple[float | None, float | None] = (None, None)
    sides: tuple[dict[Hashable, dict[int, list]], dict[Hashable, dict[int, list]]] = field(
        default_factory=lambda: ({}, {}))
    ends: dict[int, set[tuple[int, Hashable]]] = field(default_factory=dict)

    def end_of(self, side: int, epoch: int, time: float) -> int:
        """The epoch after whose completion a record of ``side`` at ``epoch`` and ``time``
        can match nothing more: the other side's epoch of the latest time it matches."""
        latest = time + self.upper if side == LEFT else time - self.lower
        grain = self.granularity[1 - side]
        return max(epoch, int(latest) if grain is None else math.floor((latest + SLACK) / grain))


def add(state: IntervalState, side: int, key: Hashable, epoch: int, record: Any, time: float | None = None) -> list[Match]:
    """Keep ``record`` (of ``epoch``, at ``time``: its epoch if None) and return its matches
    with the other side's records of its key."""
    at = epoch if time is None else time
    matches: list[Match] = []
    for entries in state.sides[1 - side].get(key, {}).values():
        for when, their_epoch, other in entries:
            if state.lower <= (when - at if side == LEFT else at - when) <= state.upper:
                pair = (key, record, other) if side == LEFT else (key, other, record)
                matches.append((max(epoch, their_epoch), pair))
    end = state.end_of(side, epoch, at)
    state.sides[side].setdefault(key, {}).setdefault(end, []).append((at, epoch, record))
    state.ends.setdefault(end, set()).add((side, key))
    return matches


def expire(state: IntervalState, epoch: int) -> None:
    """Epoch ``epoch`` is complete: drop the records that can match nothing more."""
    for end in [end for end in state.ends if end <= epoch]:
        for side, key in state.ends.pop(end):
            mine = state.sides[side].get(key)
            if mine is None:
                continue
            mine.pop(end, None)
            if not mine:
                del state.sides[side][key]


def split_interval(state: IntervalState, moving: Callable[[Hashable], bool]) -> IntervalState:
    """Remove and return the records of the keys ``moving`` selects."""
    taken = IntervalState(state.lower, state.upper, state.granularity)
    for side in (LEFT, RIGHT):
        for key in [key for key in state.sides[side] if moving(key)]:
            taken.sides[side][key] = state.sides[side].pop(key)
    state.ends, taken.ends = _ends(state), _ends(taken)
    return taken


def merge_interval(state: IntervalState, other: IntervalState) -> None:
    """Take over another replica's records (its keys are not this replica's)."""
    for side in (LEFT, RIGHT):
        for key, epochs in other.sides[side].items():
            mine = state.sides[side].setdefault(key, {})
            for end, records in epochs.items():
                mine.setdefault(end, []).extend(records)
    state.ends = _ends(state)


def _ends(state: IntervalState) -> dict[int, set[tuple[int, Hashable]]]:
    ends: dict[int, set[tuple[int, Hashable]]] = {}
    for side in (LEFT, RIGHT):
        for key, by_end in state.sides[side].items():
            for end in by_end:
                ends.setdefault(end, set()).add((side, key))
    return ends


@dataclass
class LatestState:
    """A latest join's table and what waits for its epoch to complete.

    Attributes:
        table: per key, its values as of the last settled epoch (the updates of the latest epoch that had any).
        updates: per epoch not settled yet, per key, its updates.
        records: per epoch not settled yet, the records ``(key, record)`` to join.
    """

    table: dict[Hashable, list] = field(default_factory=dict)
    updates: dict[int, dict[Hashable, list]] = field(default_factory=dict)
    records: dict[int, list[tuple[Hashable, Any]]] = field(default_factory=dict)

    def epochs(self) -> set[int]:
        """The epochs with something waiting (each needs settling once complete)."""
        return set(self.updates) | set(self.records)


def add_update(state: LatestState, epoch: int, key: Hashable, value: Any) -> None:
    """A table update of ``key`` at ``epoch``."""
    state.updates.setdefault(epoch, {}).setdefault(key, []).append(value)


def add_record(state: LatestState, epoch: int, key: Hashable, record: Any) -> None:
    """A record of ``key`` at ``epoch``, to join once the epoch is complete."""
    state.records.setdefault(epoch, []).append((key, record))


def settle(state: LatestState, epoch: int) -> list[tuple[Hashable, Any, Any]]:
    """Epoch ``epoch`` is complete: apply the table's updates up to it, in epoch order, then
    join its records (and any earlier ones) with the table."""
    for when in sorted(e for e in state.updates if e <= epoch):
        state.table.update(state.updates.pop(when))
    out: list[tuple[Hashable, Any, Any]] = []
    for when in sorted(e for e in state.records if e <= epoch):
        for key, record in state.records.pop(when):
            values = state.table.get(key) or [None]
            out.extend((key, record, value) for value in values)
    return out


def split_latest(state: LatestState, moving: Callable[[Hashable], bool]) -> LatestState:
    """Remove and return the table values, updates and records of the keys ``moving`` selects."""
    taken = LatestState({key: state.table.pop(key) for key in [k for k in state.table if moving(k)]})
    for epoch, by_key in list(state.updates.items()):
        going = {key: by_key.pop(key) for key in [k for k in by_key if moving(k)]}
        if going:
            taken.updates[epoch] = going
        if not by_key:
            del state.updates[epoch]
    for epoch, records in list(state.records.items()):
        going_records = [pair for pair in records if moving(pair[0])]
        if going_records:
            taken.records[epoch] = going_records
            state.records[epoch] = [pair for pair in records if not moving(pair[0])]
        if not state.records[epoch]:
            del state.records[epoch]
    return taken


def merge_latest(state: LatestState, other: LatestState) -> None:
    """Take over another replica's keys (not this replica's)."""
    state.table.update(other.table)
    for epoch, by_key in other.updates.items():
        mine = state.updates.setdefault(epoch, {})
        for key, values in by_key.items():
            mine.setdefault(key, []).extend(values)
    for epoch, records in other.records.items():
        state.records.setdefault(epoch, []).extend(records)
