"""Several jobs with recovery in one Ray, driven from one driver: one of them loses a replica
(SIGKILL), another is rescaled while one of its snapshots is in flight, with
``output_commit="snapshot"``. Only the killed job recovers; the others' output is exact.

Decided (docs/recovery.md, docs/rescaling.md): a job's recovery touches only its own actors
and store (the driver's pool of warm hosts is shared: a replacement is an idle host, never
another job's), and a rescale asked for while a snapshot is in flight waits for that
snapshot to end, then takes its cut; the epochs a committed output holds back meanwhile
are handed out once the rescaled job's first snapshot commits, each once.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import raytide as rt
from tests.ray.jobs import committed_snapshots
from tests.ray.test_recovery import sigkill
from tests.ray.test_rescale import KEYS, PER_KEY, SequenceChecker
from tests.ray.test_snapshot_stalls import until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]


class SlowToSnapshot(SequenceChecker):
    """Checks each key's sequence (:class:`SequenceChecker`); its snapshot waits while the file
    ``brake`` exists, having said so in ``entered``: a snapshot in flight for as long as the test wants."""

    def __init__(self, brake: str, entered: str) -> None:
        super().__init__()
        self.brake, self.entered = brake, entered

    def snapshot(self) -> Any:
        if os.path.exists(self.brake):
            Path(self.entered).touch()
            while os.path.exists(self.brake):
                time.sleep(0.005)
        return super().snapshot()


class Fed:
    """Pushes epochs into a job from the test, the records of epoch ``e`` made by ``records(e)``."""

    def __init__(self, job: rt.Job, records) -> None:
        self.job, self.records, self.epoch = job, records, 0

    def step(self, epochs: int = 1) -> None:
        for _ in range(epochs):
            self.job.push(self.job.plan.inputs[0], self.records(self.epoch), self.epoch)
            self.epoch += 1
        self.job.advance(self.job.plan.inputs[0], self.epoch)

    def committed(self) -> int:
        self.job.collect("out")  # takes the job's events: commits, deaths
        return committed_snapshots(self.job)

    def outputs(self) -> dict[int, list]:
        self.job.close(self.job.plan.inputs[0])
        self.job.wait(timeout=60)
        return self.job.collect("out")


def times_ten(name: str) -> rt.Dataflow:
    flow = rt.Dataflow(name)
    flow.input("numbers").map(lambda n: n * 10, name="times-ten").output("out")
    return flow


def sequences(name: str, brake: Path, entered: Path) -> rt.Dataflow:
    flow = rt.Dataflow(name)
    flow.input("records").unary(lambda: SlowToSnapshot(str(brake), str(entered)), exchange=lambda r: r[0],
                                name="check").output("out")
    return flow


def keyed(epoch: int) -> list[tuple[int, int]]:
    return [(key, epoch * PER_KEY + i) for i in range(PER_KEY) for key in range(KEYS)]


def test_only_the_killed_job_recovers_while_another_is_rescaled_with_a_snapshot_in_flight(ray_session, tmp_path):
    brake, entered = tmp_path / "brake", tmp_path / "entered"
    recovery = {name: rt.Recovery(str(tmp_path / name), interval=0.1) for name in ("killed", "calm")}
    with rt.run(times_ten("killed"), parallelism=2, recovery=recovery["killed"]) as killed, \
            rt.run(times_ten("calm"), parallelism=1, recovery=recovery["calm"]) as calm, \
            rt.run(sequences("rescaled", brake, entered), parallelism=1, recovery=rt.Recovery(
                str(tmp_path / "rescaled"), interval=0.1, output_commit="snapshot")) as rescaled:
        jobs = {"killed": Fed(killed, lambda e: [e, e + 1000]), "calm": Fed(calm, lambda e: [e]),
                "rescaled": Fed(rescaled, keyed)}
        for fed in jobs.values():
            fed.step(3)
        until(lambda: all(fed.committed() for fed in jobs.values()), "a commit of every job")
        sigkill(killed, "numbers+times-ten+out/1")
        for fed in jobs.values():
            fed.step(3)
        others = [jobs["killed"], jobs["calm"]]
        record, in_flight = rescale_with_a_snapshot_in_flight(jobs["rescaled"], brake, entered, others)
        for fed in jobs.values():
            fed.step(3)
        until(lambda: len(rescaled.collect("out")) == jobs["rescaled"].epoch,  # released by a commit, not by the end
              "every epoch of the rescaled job handed out at its snapshots")
        outputs = {name: fed.outputs() for name, fed in jobs.items()}
        stats = {name: fed.job.stats() for name, fed in jobs.items()}
    epochs = {name: range(fed.epoch) for name, fed in jobs.items()}
    assert {e: sorted(r) for e, r in outputs["killed"].items()} == {e: [10 * e, 10 * (e + 1000)] for e in epochs["killed"]}
    assert outputs["calm"] == {e: [10 * e] for e in epochs["calm"]}
    counts = {e: collections.Counter(dict(pairs)) for e, pairs in outputs["rescaled"].items()}
    assert counts == {e: collections.Counter(dict.fromkeys(range(KEYS), PER_KEY)) for e in epochs["rescaled"]}, counts
    recoveries = {name: s["recoveries"] for name, s in stats.items()}
    assert recoveries["killed"]["count"] == 1 and recoveries["killed"]["recoveries"][0]["replaced"] == \
        [f"{killed.name}/numbers+times-ten+out/1"], recoveries
    killed_record = recoveries["killed"]["recoveries"][0]  # an output in the lost chain: the whole job, and why
    assert killed_record["kind"] == "job" and "vertex 'out' is an output" in killed_record["why"], killed_record
    restores = {name: {replica: s["restores"] for replica, s in stats[name]["replicas"].items()} for name in jobs}
    assert set(restores["killed"].values()) == {1} and set(restores["calm"].values()) == {0}, restores  # all reloaded
    assert [(r["count"], r["recoveries"]) for r in (recoveries["calm"], recoveries["rescaled"])] == [(0, [])] * 2, recoveries
    assert record["cut_id"] == in_flight + 1 and stats["rescaled"]["parallelism"]["check"] == 2, (record, in_flight)
    assert stats["rescaled"]["snapshots"]["last_id"] > record["cut_id"]


def rescale_with_a_snapshot_in_flight(fed: Fed, brake: Path, entered: Path, others) -> tuple[dict, int]:
    """Rescale ``fed``'s job (``check`` to 2) while its replica is held in a snapshot, fed
    meanwhile, the ``others``' events taken; the rescale's record and the id of the snapshot in flight."""
    job = fed.job
    brake.touch()
    until(entered.exists, "a snapshot reaching the braked vertex")
    in_flight = job.stats()["snapshots"]["in_flight"]
    answer: list[dict] = []
    rescaling = threading.Thread(target=lambda: answer.append(job.rescale({"check": 2}, timeout=60, stepped=False)),
                                 daemon=True)  # the whole job's cut, after the snapshot in flight
    rescaling.start()
    fed.step(2)
    for other in others:
        other.committed()
    time.sleep(0.2)
    assert not answer and job.stats()["snapshots"]["in_flight"] == in_flight, "the rescale waits for the snapshot"
    brake.unlink()
    rescaling.join(60)
    assert answer, "the rescale did not end within 60 s"
    return answer[0], in_flight
