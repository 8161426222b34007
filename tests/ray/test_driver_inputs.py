"""The driver's pushes on a real local Ray: spread over an input's replicas, epochs checked."""

from __future__ import annotations

import time

import numpy as np
import pytest

import raytide as rt

pytestmark = pytest.mark.ray


def records_per_input_replica(job, name):
    return {key.replica: stats["vertices"][name]["records_in"]
            for key, stats in job.placement.replica_stats().items() if name in stats["vertices"]}


def test_many_small_pushes_spread_over_the_input_replicas(ray_session):
    flow = rt.Dataflow("spread")
    flow.input("numbers").map(lambda x: x, name="copy").output("out")
    with rt.run(flow, parallelism=2, batch_size=4096) as job:
        for _ in range(100):
            job.push("numbers", list(range(1000)))
        job.close("numbers")
        job.wait(timeout=120)
        assert records_per_input_replica(job, "numbers") == {0: 50_000, 1: 50_000}
        assert len(job.collect("out")[0]) == 100_000


def test_records_pushed_into_an_epoch_left_open_reach_the_job_without_another_call(ray_session):
    """The driver holds a push's last batch per replica for the advance after it (one call
    for both); with no advance and nothing else from the driver, it goes on its own."""
    flow = rt.Dataflow("left-open")
    flow.input("numbers").output("out")
    with rt.run(flow, parallelism=2) as job:
        job.push("numbers", [1, 2, 3])
        deadline = time.monotonic() + 10
        while records_per_input_replica(job, "numbers") != {0: 3, 1: 0}:
            assert time.monotonic() < deadline, f"the push did not reach the job in 10 s: {records_per_input_replica(job, 'numbers')}"
            time.sleep(0.01)
        job.close("numbers")
        assert dict(job.results("out", timeout=60)) == {0: [1, 2, 3]}


def test_small_epochs_of_an_input_iterable_spread_too(ray_session):
    flow = rt.Dataflow("spread-epochs")
    flow.input("numbers").output("out")
    epochs = [[epoch] for epoch in range(30)]
    with rt.run(flow, inputs={"numbers": epochs}, parallelism=3) as job:
        job.wait(timeout=120)
        assert records_per_input_replica(job, "numbers") == {0: 10, 1: 10, 2: 10}
        assert job.collect("out") == {epoch: [epoch] for epoch in range(30)}


def test_integer_like_epochs_are_taken_and_bad_ones_named(ray_session):
    flow = rt.Dataflow("epochs")
    flow.input("numbers").output("out")
    with rt.run(flow, parallelism=1) as job:
        job.push("numbers", [1], epoch=np.int64(0))
        job.push("numbers", [2], epoch=np.int32(2))
        with pytest.raises(rt.GraphError, match=r"input 'numbers': epoch 2.5 is not an integer \(got float\)"):
            job.push("numbers", [3], epoch=2.5)
        with pytest.raises(rt.GraphError, match="input 'numbers' is at epoch 2; epoch 1 is in its past"):
            job.push("numbers", [3], epoch=1)
        with pytest.raises(rt.GraphError, match=r"'nmae' is not an input of dataflow 'epochs'; inputs: \['numbers'\]"):
            job.push("nmae", [3])
        job.close("numbers")
        job.wait(timeout=60)
        assert job.collect("out") == {0: [1], 2: [2]}


@pytest.mark.parametrize("recovery", [False, True], ids=["plain", "output committed at snapshots"])
def test_an_epoch_that_completes_empty_is_yielded_so_a_consumer_waiting_for_it_goes_on(ray_session, tmp_path, recovery):
    """Feed one epoch, wait for it, feed the next: the epochs whose records are all filtered
    out come as ``(epoch, [])``; an epoch the input skipped over (2) is not one of the job's."""
    flow = rt.Dataflow("empty-epochs")
    flow.input("numbers").filter(lambda n: n > 0, name="positive").output("out")
    options = {"recovery": rt.Recovery(str(tmp_path), interval=0.2, output_commit="snapshot")} if recovery else {}
    fed = {0: [1, -1], 1: [-2], 3: [5], 4: []}
    with rt.run(flow, parallelism=2, **options) as job:
        results = job.results("out", timeout=120)
        seen = []
        for epoch, records in fed.items():
            job.push("numbers", records, epoch)
            if epoch:  # epoch 0 stays open until the input moves on
                seen.append(next(results))
        job.close("numbers")
        seen += list(results)
        assert seen == [(0, [1]), (1, []), (3, [5]), (4, [])]
        assert job.collect("out") == {}, "everything was consumed"
