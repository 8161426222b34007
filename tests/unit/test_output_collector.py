"""The driver's output collector without Ray: an epoch is held in one form, and forgotten once taken."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.driver.outputs import OutputCollector
from raytide.errors import InternalError
from raytide.physical.pickled import pack_records
from raytide.physical.protocol import EpochComplete, JobFinished, OutputFrontier
from raytide.physical.wire import output_records, unpack_records


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


@pytest.mark.parametrize("taken", [False, True])
def test_an_epoch_shown_twice_is_an_internal_error_not_an_overwrite(taken):
    collector = collector_with(0, 1)
    if taken:
        collector.take("out", 1)
    with pytest.raises(InternalError, match="output 'out' epoch 1 was completed again after epoch 1"):
        collector.apply([EpochComplete("out", 1, [pack_records([Record(9)])])])
    assert [r.value for r in collector.records("out", 0)] == [0], "what was shown stays as it was"


def test_an_epoch_an_earlier_run_handed_over_is_not_shown_again():
    collector = OutputCollector(progress=None, outputs=["out"])
    collector.resume_after({"out": 3})
    with pytest.raises(InternalError, match="epoch 2 was completed again after epoch 3"):
        collector.apply([EpochComplete("out", 2, [pack_records([Record(2)])])])
    collector.apply([EpochComplete("out", 4, [pack_records([Record(4)])])])
    assert collector.epochs("out") == [4]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_every_epoch_with_records_or_opened_by_the_driver_is_shown_once_in_order_through_gates_and_rollbacks(data):
    """A brute-force oracle: whatever the order of opens, completions, snapshot commits and
    recoveries, the epochs shown are exactly the opened ones and those with records, in
    order, each once, with its records (an opened epoch with none: ``[]``)."""
    count = data.draw(st.integers(1, 10), label="epochs")
    epochs = st.sets(st.integers(0, count - 1))
    opened, with_records = data.draw(epochs, label="opened"), data.draw(epochs, label="with records")
    commit = data.draw(st.sampled_from(["epoch", "snapshot"]), label="commit")
    collector = OutputCollector(progress=None, outputs=["out"], commit=commit)
    shown: list[tuple[int, list]] = []
    low = 0  # the progress core's frontier at the output: epochs before it are complete
    while low < count:
        for epoch in sorted(opened):  # the driver opens an epoch before it can complete
            if epoch >= low and data.draw(st.booleans()):
                collector.open(epoch)
        action = data.draw(st.sampled_from(["complete", "commit", "recover"]), label="action")
        if action == "complete":
            upto = data.draw(st.integers(low + 1, count), label="frontier")
            for epoch in sorted(e for e in opened if low <= e < upto):
                collector.open(epoch)  # at the latest now
            collector.apply([EpochComplete("out", e, [pack_records([e])]) for e in sorted(with_records)
                             if low <= e < upto] + [OutputFrontier("out", upto)])
            low = upto
        elif action == "commit" and low > 0:
            collector.release({"out": data.draw(st.integers(0, low - 1), label="committed")})
        elif action == "recover":  # the restored job completes again what was not shown
            collector.rollback()
            low = collector.delivered()["out"] + 1
        shown += [(epoch, collector.take("out", epoch)) for epoch in iter(lambda: collector.first("out"), None)]
    collector.apply([OutputFrontier("out", float("inf")), JobFinished()])
    shown += [(epoch, collector.take("out", epoch)) for epoch in iter(lambda: collector.first("out"), None)]
    assert shown == [(e, [e] if e in with_records else []) for e in sorted(opened | with_records)]
    assert not collector.opened, "opened epochs are forgotten once shown"


def test_a_streamed_output_counts_delivered_what_its_consumer_had_a_collected_one_what_the_driver_had():
    collector = collector_with(0, 1, 2, 3)
    assert collector.durable() == collector.delivered() == {"out": 3}, "only collected: what the driver was handed"
    collector.stream("out")
    assert collector.durable() == {"out": -1}, "read with job.results: epochs received, not yet consumed"
    told = []
    collector.on_consumed = told.append
    collector.hand("out", 0)
    collector.hand("out", 1)
    assert collector.durable() == {"out": -1}, "epochs in the consumer's hands are not delivered"
    collector.acknowledge("out", 1)
    assert told == [{"out": -1}], "epoch 0 is still in hand"
    collector.acknowledge("out", 0)
    assert told[-1] == {"out": 1} and collector.durable() == {"out": 1}
    collector.resume_after({"out": 5})
    assert collector.durable() == {"out": 5}, "what an earlier run's consumer had stays delivered"


def test_an_epoch_of_arrays_is_taken_as_one_array_or_as_its_records():
    parts = [pack_records(output_records(np.array([[1, 10], [2, 20]]))), pack_records([(3, 30)])]
    collector = OutputCollector(progress=None, outputs=["out"])
    collector.apply([EpochComplete("out", 0, parts), EpochComplete("out", 1, parts), EpochComplete("out", 2, [])])
    assert collector.take("out", 0, "numpy").tolist() == [[1, 10], [2, 20], [3, 30]]
    assert collector.hand_first("out") == (1, [[1, 10], [2, 20], (3, 30)])
    assert collector.hand_first("out", "numpy")[1].shape == (0,)  # an empty epoch: the format's empty batch
    assert collector.hand_first("out") is None and collector.epochs("out") == []


def test_an_epoch_whose_batches_do_not_concatenate_is_refused_naming_output_and_epoch_and_kept():
    parts = [pack_records(output_records(np.array([[1, 2]]))), pack_records(output_records({"a": np.array([1])}))]
    collector = OutputCollector(progress=None, outputs=["out"])
    collector.apply([EpochComplete("out", 4, parts)])
    with pytest.raises(ValueError, match="output 'out' epoch 4: 2 batches do not make one 'numpy' batch"):
        collector.take("out", 4, "numpy")
    assert collector.take("out", 4) == [[1, 2], {"a": 1}]


def test_an_unknown_batch_format_is_refused_before_anything_is_taken():
    collector = collector_with(0)
    with pytest.raises(ValueError, match="batch_format must be 'numpy', 'pyarrow', 'list' or None, not 'pandas'"):
        collector.stream("out", "pandas")
    assert collector.epochs("out") == [0]
