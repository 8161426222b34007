"""A replica whose actor dies is named as the one that died; no healthy vertex's user code is blamed."""

from __future__ import annotations

import time

import pytest
import ray

import raytide as rt

pytestmark = pytest.mark.ray


def test_a_dead_downstream_replica_is_named_and_user_code_is_not_blamed(ray_session):
    flow = rt.Dataflow("lost")
    flow.input("numbers").map(lambda x: x, name="stage1").exchange(lambda x: x, name="stage2").output("out")
    with rt.run(flow, parallelism=2) as job:
        victim = next(key for key in job.placement.actors if key.chain.startswith("stage2") and key.replica == 1)
        job.push("numbers", list(range(100)), epoch=0)
        ray.kill(job.placement.actors[victim])
        with pytest.raises(rt.ReplicaLost) as caught:
            deadline = time.monotonic() + 60
            epoch = 1
            while time.monotonic() < deadline:
                job.push("numbers", list(range(1000)), epoch=epoch)
                job.collect("out")
                epoch += 1
    error = caught.value
    assert not isinstance(error, rt.UserCodeError)
    assert error.replica == f"{job.name}/{victim.chain}/1"
    assert "stage2" in error.vertices and "stage1" not in error.vertices
    assert f"replica {job.name}/{victim.chain}/1" in str(error)


def test_a_fed_input_whose_replica_dies_fails_the_job_naming_the_replica_not_the_feed(ray_session):
    """A job without recovery fed from the driver (a thread pushing its source's batches): the
    death of the host seating an input replica stops the feed and the liveness watch at once; the
    job fails with the watch's ReplicaLost naming it, not the feed's bare ActorDiedError."""
    flow = rt.Dataflow("lost-fed")
    flow.input("numbers").map(lambda x: x, name="stage1").output("out")

    def batches():
        for _ in range(100_000):  # one batch per epoch
            yield list(range(50))
            time.sleep(0.002)

    with rt.run(flow, {"numbers": batches()}, parallelism=2) as job:
        next(job.results("out", timeout=60))
        victim = next(key for key in job.placement.actors if key.replica == 1)
        assert victim.chain == "numbers+stage1+out", victim  # the input's replica is in the chain that dies
        ray.kill(job.placement.actors[victim])
        time.sleep(1)  # the feed has met the death by now: the job's next call must still name the replica
        with pytest.raises(rt.ReplicaLost) as caught:
            job.wait(timeout=60)
    assert caught.value.replica == f"{job.name}/{victim.chain}/1", caught.value
