"""The driver's output collector without Ray: an epoch is held in one form, and forgotten once taken."""

from __future__ import annotations

import gc
import weakref

import pytest

from raytide.driver.outputs import OutputCollector
from raytide.physical.protocol import EpochComplete, JobFinished
from raytide.physical.wire import pack_records, unpack_records


class Record:
    """A record that can be watched with a weak reference."""

    def __init__(self, value: int) -> None:
        self.value = value


def collector_with(*epochs: int) -> OutputCollector:
    """A collector of output ``out`` that has seen ``epochs`` complete, each with one inline part."""
    collector = OutputCollector(progress=None, outputs=["out"])
    collector.apply([EpochComplete("out", epoch, [pack_records([Record(epoch)])]) for epoch in epochs])
    return collector


def test_a_taken_epoch_is_forgotten_and_still_counts_as_the_latest():
    collector = collector_with(0, 1)
    taken = collector.take("out", 1)
    watched = weakref.ref(taken[0])
    del taken
    gc.collect()
    assert watched() is None, "the collector still holds a taken epoch's records"
    assert collector.epochs("out") == [0] and collector.first("out") == 0
    assert collector.latest() == {"out": 1}
    with pytest.raises(KeyError):
        collector.take("out", 1)


def test_fetched_records_replace_their_parts():
    collector = collector_with(0)
    records = collector.records("out", 0)
    assert collector.parts["out"] == {}, "the driver would hold the epoch twice: parts and records"
    assert collector.records("out", 0) is records, "collect keeps what it returned"
    [part] = collector.packed("out", kept=False)[0]
    assert [r.value for r in unpack_records(part)] == [0], "an epoch fetched is packed again when its parts are asked for"


def test_epochs_are_taken_earliest_first_whatever_was_fetched_before():
    collector = collector_with(3, 5, 8)
    collector.records("out", 8)
    collector.records("out", 5)
    order = [(epoch, collector.take("out", epoch)[0].value) for epoch in (collector.first("out") for _ in range(3))]
    assert order == [(3, 3), (5, 5), (8, 8)]
    assert collector.first("out") is None and collector.latest() == {"out": 8}


def test_the_end_and_nothing_else_yet():
    collector = OutputCollector(progress=None, outputs=["out", "other"])
    assert collector.apply([JobFinished()]) == []
    assert collector.finished and collector.latest() == {"out": None, "other": None}
    assert collector.first("out") is None and collector.epochs("other") == []
