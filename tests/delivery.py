"""Exactly-once, counted: what a job handed the driver against a plain-Python reference.

Flink's exactly-once ITCases count, per sink, the records lost and duplicated instead
of comparing whole outputs, so that a failure says how it broke. :func:`count_delivery`
does the same for one output, from the epochs in the order the driver was handed them
(``job.results(name)``, which yields each epoch as it completes): an epoch handed over
twice counts its records as duplicated, an epoch handed over after a later one counts as
out of order. Records are compared as multisets per epoch (the order of an epoch's
records is not defined). Used by the Ray fault tests and by ``bench chaos``.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """What one output got wrong against its reference (all zero: exactly once, in order).

    Attributes:
        lost: records of the reference the output did not hold.
        duplicated: copies of reference records beyond the reference's count (an epoch
            handed over twice counts here).
        unexpected: records the reference does not have in that epoch at all.
        out_of_order: epochs handed over after a later epoch had been.
    """

    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    out_of_order: int = 0

    @property
    def exact(self) -> bool:
        """Every record once, in its epoch, the epochs in order."""
        return self == Delivery()

    def __add__(self, other: Delivery) -> Delivery:
        return Delivery(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


Handed = list[tuple[int, list]]


def count_delivery(expected: Mapping[int, Counter], handed: Iterable[tuple[int, Iterable[Any]]]) -> Delivery:
    """Count one output's losses, duplicates, strays and reorderings.

    ``expected``: per epoch the multiset of records it must hold (epochs without records
    may be left out). ``handed``: ``(epoch, records)`` in the order the driver got them.
    """
    got: dict[int, Counter] = {}
    out_of_order, latest = 0, -1
    for epoch, records in handed:
        out_of_order += epoch < latest
        latest = max(latest, epoch)
        got.setdefault(epoch, Counter()).update(records)
    lost = duplicated = unexpected = 0
    for epoch in set(expected) | set(got):
        want, have = expected.get(epoch, Counter()), got.get(epoch, Counter())
        lost += sum((want - have).values())
        extra = have - want
        duplicated += sum(n for record, n in extra.items() if record in want)
        unexpected += sum(n for record, n in extra.items() if record not in want)
    return Delivery(lost, duplicated, unexpected, out_of_order)


def count_outputs(expected: Mapping[str, Mapping[int, Counter]], handed: Mapping[str, Handed]) -> dict[str, Delivery]:
    """:func:`count_delivery` per output of ``expected`` (an output never read lost everything)."""
    return {name: count_delivery(epochs, handed.get(name, [])) for name, epochs in expected.items()}


def assert_exactly_once(expected: Mapping[str, Mapping[int, Counter]], handed: Mapping[str, Handed]) -> None:
    """Fail, with the counts per output, unless every output got every record once, in order."""
    counts = count_outputs(expected, handed)
    assert all(c.exact for c in counts.values()), f"not exactly once: {counts}"


def read_outputs(job: Any, outputs: Iterable[str], timeout: float = 120.0) -> dict[str, Handed]:
    """Every output of ``job`` through ``job.results`` until the job finishes: per output
    ``(epoch, records)`` in the order handed over. The first output is read as the job
    runs; the others, once it has finished, yield what they hold."""
    deadline = time.monotonic() + timeout
    return {name: list(job.results(name, timeout=max(1.0, deadline - time.monotonic()))) for name in outputs}
