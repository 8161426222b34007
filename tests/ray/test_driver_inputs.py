"""The driver's pushes on a real local Ray: spread over an input's replicas, epochs checked."""

from __future__ import annotations

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
