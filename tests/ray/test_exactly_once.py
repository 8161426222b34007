"""Exactly-once where it can break, on a real Ray (issue 32): an epoch handed over twice is
an internal error, not a silent overwrite; rescales from two threads at once are made one
after the other."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import raytide as rt
from raytide.driver.outputs import OutputCollector
from raytide.errors import InternalError, RescaleError
from tests.delivery import assert_exactly_once, read_outputs
from tests.ray.jobs import wait_for_epoch
from tests.ray.test_recovery import keyed_numbers, running_sum, running_sums, sigkill

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]


def test_an_epoch_completed_again_after_it_was_handed_over_fails_the_job(ray_session, tmp_path, monkeypatch):
    """The driver is made to forget what it was handed (as a bug in the bookkeeping would):
    the restored progress actor completes epochs 1 and 2 again, and the job fails naming
    the output and the epoch, where the driver used to overwrite them and finish exactly."""
    flow = rt.Dataflow("shown-twice")
    flow.input("numbers").map(lambda x: x * 2, name="double").output("out")
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        job.push("numbers", [1, 2], epoch=0)
        job.advance("numbers", 1)
        wait_for_epoch(job, "out", 0)
        job.snapshot(timeout=60)
        for epoch in (1, 2):
            job.push("numbers", [epoch * 10], epoch=epoch)
        job.advance("numbers", 3)
        wait_for_epoch(job, "out", 2)
        monkeypatch.setattr(OutputCollector, "delivered", lambda self: {"out": 0})  # the planted bookkeeping bug
        victim = next(iter(job.placement.actors))  # SIGKILLed, dead at once (ray.kill is asynchronous: on a
        sigkill(job, f"{victim.chain}/{victim.replica}")  # loaded machine it once let epoch 3 finish first)
        job.push("numbers", [30], epoch=3)
        job.close("numbers")
        with pytest.raises(InternalError, match=r"output 'out' epoch 1 was completed again after epoch 2"):
            job.wait(timeout=60)


def paced(epochs: list[list[Any]], gates: dict[int, threading.Event], pace: float = 0.03) -> Iterator[list[Any]]:
    """The epochs of an input, one every ``pace`` seconds; before each epoch of ``gates`` the
    feed waits until its event is set."""
    for epoch, records in enumerate(epochs):
        if epoch in gates:
            assert gates[epoch].wait(200), f"the feed waited for epoch {epoch}'s gate in vain"
        time.sleep(pace)
        yield records


@pytest.mark.timeout(400)
def test_two_rescales_from_two_threads_are_made_one_after_the_other_and_nothing_breaks(ray_session, tmp_path):
    """Issue 32's trial: ``rescale({"total": 1})`` and ``rescale({"total": 2})`` at once from
    two threads of a job at 3 replicas, then 3 and 4, while the main thread reads the
    output; each is made (one waits for the other) or refused with a RescaleError, and the
    running sums are exactly the plain-Python ones. (With the lock planted out, a caller
    got a bare KeyError of a ReplicaKey, or the job failed with a ProgressError.) The rescales
    hold the whole job (``stepped=False``): the feed here waits for them, and a stepped shrink
    waits for the feed's epochs (docs/rescaling.md), so it would wait out its timeout."""
    flow = rt.Dataflow("two-threads")
    flow.input("numbers").stateful_map(lambda r: r[0], running_sum, name="total").output("out")
    records = keyed_numbers(40)
    outcomes: list[Any] = []
    rounds = {15: (threading.Event(), (1, 2)), 30: (threading.Event(), (3, 4))}  # the feed waits for each round

    def rescale(job: rt.Job, width: int, ready: threading.Barrier) -> None:
        ready.wait(30)
        try:
            outcomes.append(job.rescale({"total": width}, timeout=120, stepped=False)["after"])
        except RescaleError as error:
            outcomes.append(error)
        except Exception as error:  # anything else is the corruption this test looks for
            outcomes.append(("broke", repr(error)))

    with rt.run(flow, {"numbers": paced(records, {gate: done for gate, (done, _) in rounds.items()})},
                parallelism=3, recovery=rt.Recovery(str(tmp_path / "store"), interval=0.2)) as job:
        for gate, (done, widths) in rounds.items():
            wait_for_epoch(job, "out", gate - 10)
            ready = threading.Barrier(len(widths))
            threads = [threading.Thread(target=rescale, args=(job, width, ready)) for width in widths]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 250
            while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
                job.collect("out")  # the main thread reads on, as a notebook would
                time.sleep(0.05)
            done.set()
        out = read_outputs(job, ["out"])
        width = job.parallelism()["total"]
    assert not [o for o in outcomes if isinstance(o, tuple)], outcomes
    assert len(outcomes) == 4 and width in (3, 4), (outcomes, width)
    assert_exactly_once({"out": {e: Counter(r) for e, r in running_sums(records).items()}}, out)


def running_sums_of(records: list[list[tuple[int, int]]], first: int) -> dict[str, dict[int, Counter]]:
    """The reference of :func:`running_sums` from epoch ``first`` on, as the checker takes it."""
    return {"out": {e: Counter(r) for e, r in running_sums(records).items() if e >= first}}


def savepoint_after(flow: rt.Dataflow, recovery: rt.Recovery, records: list[list[tuple[int, int]]]) -> int:
    """Run ``flow`` on ``records`` (one push per epoch, the input left at the last), stop it
    with a savepoint once every epoch but the last is complete; the savepoint's id."""
    with rt.run(flow, parallelism=1, recovery=recovery) as job:
        for epoch, batch in enumerate(records):
            job.push("numbers", batch, epoch)
        wait_for_epoch(job, "out", len(records) - 2)
        return job.stop(timeout=60)


def test_pushes_after_a_restore_that_continue_the_stream_are_new_data(ray_session, tmp_path):
    """Issue 32's trial: a savepoint after epochs 0-9, a new job restored from it, the driver
    pushes epochs 10-19; they come out exactly (with the old skip planted back, they were
    dropped as replays: no output past epoch 9, and no error)."""
    flow = rt.Dataflow("continued")
    flow.input("numbers").stateful_map(lambda r: r[0], running_sum, name="sums").output("out")
    records, recovery = keyed_numbers(20), rt.Recovery(str(tmp_path / "store"), interval=None)
    savepoint = savepoint_after(flow, recovery, records[:10])
    with rt.run(flow, parallelism=1, recovery=recovery, restore=savepoint) as job:
        for epoch, batch in enumerate(records[10:], start=10):
            job.push("numbers", batch, epoch)
        job.close("numbers")
        after = read_outputs(job, ["out"], timeout=60)
    assert_exactly_once(running_sums_of(records, 10), {"out": [(e, r) for e, r in after["out"] if e >= 10]})


def test_a_feed_that_replays_part_of_the_savepoint_then_moves_on_is_refused_saying_what_to_push(ray_session,
                                                                                               tmp_path):
    flow = rt.Dataflow("half-replayed")
    flow.input("numbers").stateful_map(lambda r: r[0], running_sum, name="sums").output("out")
    records, recovery = keyed_numbers(8), rt.Recovery(str(tmp_path / "store"), interval=None)
    savepoint = savepoint_after(flow, recovery, records[:5])
    with rt.run(flow, parallelism=1, recovery=recovery, restore=savepoint) as job:
        for epoch, batch in enumerate(records[:2]):
            job.push("numbers", batch, epoch)
        with pytest.raises(rt.RecoveryError, match=r"input 'numbers' replica 0: the restored snapshot had consumed "
                                                   r"\d+ commands, up to epoch 4; this feed replayed only \d+ of them "
                                                   r"before moving on to epoch 6: .* push only epochs after 4"):
            job.push("numbers", records[6], 6)


def large(record: int) -> tuple[int, np.ndarray]:
    """A 160 KB output record: each epoch's output part goes to the object store."""
    return record, np.full(20_000, record, dtype=np.float64)


def test_large_outputs_of_completed_epochs_outlive_the_output_replicas(ray_session, tmp_path):
    """Issue 32's trial: output parts over 64 KiB go to the object store; six epochs complete
    and are handed to the driver (as refs, not fetched), every output replica is SIGKILLed,
    the job recovers without computing them again, and every epoch reads back whole (they
    used to be owned by the dead replica: Ray's OwnerDiedError)."""
    flow = rt.Dataflow("large-outputs")
    flow.input("numbers").map(large, name="big").output("out")
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        for epoch in range(6):
            job.push("numbers", [epoch * 10, epoch * 10 + 1], epoch)
        job.advance("numbers", 6)
        deadline = time.monotonic() + 60
        while len(job.output_parts("out")) < 6:  # handed over as object refs, not fetched
            assert time.monotonic() < deadline, "six epochs did not complete within 60 s"
            time.sleep(0.05)
        for key in [key for key in job.placement.actors if "out" in key.chain]:
            os.kill(job.hosts()[f"{job.name}/{key.chain}/{key.replica}"], signal.SIGKILL)
        job.push("numbers", [60], 6)
        job.close("numbers")
        job.wait(timeout=60)  # the recovery, then the end: nothing fetched yet
        got = read_outputs(job, ["out"], timeout=60)["out"]
        assert job.stats()["recoveries"]["count"] >= 1
    assert [epoch for epoch, _ in got] == list(range(7))
    for epoch, records in got:
        expected = [epoch * 10, epoch * 10 + 1] if epoch < 6 else [60]
        assert sorted(n for n, _ in records) == expected
        assert all(array.shape == (20_000,) and (array == n).all() for n, array in records)
