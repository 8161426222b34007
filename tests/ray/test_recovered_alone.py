"""A replica recovered alone on a real Ray (``rt.Recovery(alone=True)``, :mod:`raytide.driver.alone_recovery`):
one replica of a 4-replica keyed stage SIGKILLed mid-stream; the output must be exactly the
plain-Python reference (records lost, duplicated and in the wrong epoch counted; each key's
running counts show a reorder), the survivors must keep their processes and never reload their
state, and the recovery's record must say ``"alone"``. (That snapshots commit again after it is
the coordinator core's ``lose``, tested in ``tests/unit/test_coordinator.py``: waiting here for a
commit after the job ends would race the driver's silence rule for a coordinator it no longer syncs.)
And the same job's sink SIGKILLed: the rule sends a replica fed by 4 channels to a whole-job rollback,
which numbered sends (on in this job) survive exactly; and ``count/1`` SIGKILLed with a cap of 8
messages on the logs (``Recovery(upstream_log_cap=8)``): the input's log dropped past it, so its
replay is refused and the whole job rolls back, exactly."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import raytide as rt
from raytide.testing.alone import reference, running_counts_flow
from tests.ray.test_recovery import EPOCHS, check, run_and_kill, sigkill
from tests.sim.scenarios import Scenario

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]

WIDTH = 4


def _counting() -> Scenario:
    """The model's job fed 30 epochs of 60 records of 40 keys, and its plain-Python reference."""
    rng = random.Random(74)
    epochs = [[rng.randrange(40) for _ in range(60)] for _ in range(EPOCHS)]
    return Scenario("running counts", running_counts_flow(WIDTH), {"x": epochs},
                    {"out": {epoch: Counter(records) for epoch, records in reference(epochs).items() if records}})


def test_a_replica_sigkilled_in_a_keyed_stage_is_recovered_alone_exactly(ray_session, tmp_path):
    counting = _counting()
    before: dict[str, int] = {}

    def kill(job: rt.Job) -> None:
        before.update(job.hosts())
        sigkill(job, "count/1")

    got, stats = run_and_kill(counting, tmp_path, [kill], alone=True)
    check(counting, got)
    [record] = stats["recoveries"]["recoveries"]
    assert record["kind"] == "alone" and len(record["replaced"]) == 1 and record["replaced"][0].endswith("/count/1"), record
    survivors = {name: pid for name, pid in before.items() if name in stats["replicas"] and name not in record["replaced"]}
    assert len(survivors) == len(stats["replicas"]) - 1 and sum("/count/" in name for name in survivors) == WIDTH - 1
    assert {name: stats["hosts"][name] for name in survivors} == survivors, "a survivor's process changed"
    assert {name: stats["replicas"][name]["restores"] for name in survivors} == dict.fromkeys(survivors, 0)
    assert stats["replicas"][record["replaced"][0]]["restores"] == 1


def test_numbered_sends_survive_a_whole_job_rollback_exactly(ray_session, tmp_path):
    """The same job with ``alone=True`` (numbering on: its ``count`` replicas may be recovered alone), its
    sink SIGKILLed: fed by the 4 ``count`` replicas, it rolls the whole job back (the record says why), every
    sender restarts at the numbers its receivers' snapshot positions expect, and the output is
    still exactly the reference."""
    counting = _counting()

    def kill(job: rt.Job) -> None:
        sigkill(job, f"{job.plan.chain_of('sink').name}/0")

    got, stats = run_and_kill(counting, tmp_path, [kill], alone=True)
    check(counting, got)
    [record] = stats["recoveries"]["recoveries"]
    assert record["kind"] == "job" and "replica sink[0]: vertex 'sink' takes 4 channels" in record["why"], record


def test_a_log_past_the_jobs_cap_refuses_the_replay_and_the_job_rolls_back_exactly(ray_session, tmp_path):
    """``Recovery(upstream_log_cap=8)`` reaches the Ray workers' logs: the input replica's log
    (about four messages an epoch into ``count``) drops what it keeps past 8 messages, the replay
    ``count/1``'s replacement needs is refused, and the job rolls back whole, its record saying
    why; the output is still exactly the reference. Planted: the setting ignored on Ray (the
    module's cap of 65,536): nothing dropped, recovered alone, the test fails."""
    counting = _counting()
    got, stats = run_and_kill(counting, tmp_path, [lambda job: sigkill(job, "count/1")], alone=True, upstream_log_cap=8)
    check(counting, got)
    [record] = stats["recoveries"]["recoveries"]
    assert record["kind"] == "job" and "past its cap of 8 messages" in record["why"], record
    assert sum(replica["log_dropped"] for replica in stats["replicas"].values()) > 0, stats["replicas"]
