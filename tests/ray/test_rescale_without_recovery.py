"""Live rescales of jobs started without ``recovery=``, on a real Ray (issue 74): the cut is
taken by a coordinator the first rescale leases, the state moves replica to replica as with
recovery, and nothing is written. Checked against plain Python: a keyed job whose state checks
every key's sequence (and a vertex of its own with pending notifications), fed all along and
rescaled up and down; a loop (connected components) rescaled up and down between epochs and
in the middle of one."""

from __future__ import annotations

import collections
import os
import random
import signal
import time

import pytest

import raytide as rt
from examples.connected_components import build_flow, union_find
from raytide.driver.rescale import RayRescale
from tests.delivery import assert_exactly_once
from tests.ray.jobs import next_in_sequence
from tests.ray.test_rescale import SequenceChecker, labels_through_rescales
from tests.ray.test_rescale_deaths import kill_after, new_feed

pytestmark = [pytest.mark.ray]

WIDTHS = (3, 1, 2)


@pytest.mark.timeout(600)
def test_a_keyed_job_without_recovery_rescaled_up_and_down_sees_every_record_once_in_order(ray_session):
    feed = new_feed()
    flow = rt.Dataflow("sequence-unrecovered")
    keyed = flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check")
    keyed.output("out")
    keyed.map(lambda pair: pair[1], name="unpaired").exchange(lambda r: r[0], name="by_key").unary(
        SequenceChecker, name="notified").output("counts")
    with rt.run(flow, {"records": feed.epochs()}, parallelism=1) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        records, calls = [], []
        for width in WIDTHS:
            started = time.monotonic()  # the first call also leases the coordinator of the cuts
            records.append(job.rescale({"check": width, "notified": width}, timeout=120))
            calls.append(time.monotonic() - started)
            assert job.parallelism()["check"] == width and job.parallelism()["notified"] == width
            out.append(next(results))
        feed.stop()
        job.wait(timeout=120)
        out += list(results)
        counts, stats = job.collect("counts"), job.stats()
    print(f"rescales without recovery: calls {[round(c, 3) for c in calls]} s, "
          f"seconds {[round(r['seconds'], 3) for r in records]}, "
          f"cut_s {[round(r['cut_s'], 3) for r in records]}, pause_s {[round(r['pause_s'], 3) for r in records]}, "
          f"first's steps {records[0]['steps']}")
    assert_exactly_once(feed.reference(), {"out": out})
    assert sorted(counts) == list(range(feed.fed))
    for epoch, pairs in counts.items():
        per_key: collections.Counter = collections.Counter()
        for key, n in pairs:
            per_key[key] += n
        assert per_key == {key: 3 for key in range(8)}, f"epoch {epoch}"
    assert [r["after"]["check"] for r in stats["rescales"]] == list(WIDTHS) and "recoveries" not in stats
    assert all(r["pause_s"] > 0 for r in records)
    assert "lease the coordinator of the cuts" in records[0]["steps"] and calls[0] - records[0]["seconds"] < 0.5
    assert not any("lease the coordinator of the cuts" in r["steps"] for r in records[1:])


@pytest.mark.timeout(600)
def test_a_loop_without_recovery_rescaled_up_and_down_gives_the_union_find_labels(ray_session):
    rng = random.Random(5)
    edges = [(rng.randrange(300), rng.randrange(300)) for _ in range(400)]
    epochs = [edges[i::8] for i in range(8)]
    with rt.run(build_flow(2), parallelism=2) as job:
        labels = labels_through_rescales(job, epochs, {2: 3, 4: 1, 6: 2})
        assert job.parallelism()["label-propagation"] == 2
    assert labels == union_find(edges)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stepped", [False, True])
def test_a_host_whose_replica_a_rescale_retires_keeps_the_input_seated_in_it(ray_session, stepped):
    """Input replica 1 sits in the host of ``check`` replica 1 (docs/hosts.md): a rescale to one
    ``check`` replica keeps that host with the job (its input goes on in its seat, nothing lost),
    the rescale back to three gives it a replica again, and the job's end gives every host back;
    by the short switch, or stepped (the replica retired and the new ones joined in place)."""
    feed = new_feed()
    flow = rt.Dataflow("seated-input")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    with rt.run(flow, {"records": feed.epochs()}, parallelism=2) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        seat = job.hosts()[f"{job.name}/records/1"]
        assert seat == job.hosts()[f"{job.name}/check+out/1"], job.hosts()
        records = []
        for width in (1, 3):
            records.append(job.rescale({"check": width}, timeout=60, stepped=stepped))
            out.append(next(results))
            assert job.hosts()[f"{job.name}/records/1"] == seat
        feed.stop()
        job.wait(timeout=120)
        out += list(results)
        pool = job.placement.pool
    assert_exactly_once(feed.reference(), {"out": out})
    if stepped:
        assert [r["stepped"]["switch"].split(" in place")[0] for r in records] == ["retired", "joined"], records
    else:
        assert [(r["hosts"]["kept"], r["hosts"]["returned"]) for r in records] == [(2, 0), (2, 0)], records
    assert seat in set(job.hosts().values()), "the seat's host played a check replica again"
    assert not pool.describe().get("vertex leased"), "every host given back"


@pytest.mark.timeout(300)
def test_a_death_during_a_rescale_without_recovery_fails_the_job_at_once_naming_it(ray_session):
    """Nothing can bring such a job back: ``job.rescale`` raises the death (or a
    ``RecoveryError`` naming it) within seconds, and so does the job's next call."""
    feed = new_feed()
    flow = rt.Dataflow("killed-unrecovered")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    with rt.run(flow, {"records": feed.epochs()}, parallelism=1) as job:
        results = job.results("out", timeout=120)
        next(results)
        job.rescale({"check": 2}, timeout=60)  # the coordinator of the cuts is there from now on
        killer = kill_after(job, "check+out/1", 0.01)
        started = time.monotonic()
        with pytest.raises(rt.RaytideError, match=r"died|without recovery="):
            job.rescale({"check": 3}, timeout=60)
        took = time.monotonic() - started
        killer.join(10)
        feed.stop()
        with pytest.raises(rt.RaytideError):
            job.wait(timeout=60)
    assert took < 20, took


@pytest.mark.timeout(300)
def test_a_death_as_a_job_without_recovery_switches_widths_fails_it_saying_no_recovery_was_configured(
        ray_session, monkeypatch):
    """A replica SIGKILLed just before the switch (the driver's ``RayRescale.switch``, the
    kill made there: the moment is exact) must be recovered in the new widths, which a job
    without recovery cannot: the error says so (before 2026-11-29: "the job failed 1 times,
    more than max_restarts=0 allows", a budget the user never set)."""
    feed = new_feed()
    flow = rt.Dataflow("switch-killed")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    with rt.run(flow, {"records": feed.epochs()}, parallelism=1) as job:
        next(job.results("out", timeout=120))
        pid, switch = job.hosts()[f"{job.name}/check+out/0"], RayRescale.switch

        def killed_first(self, effect, run):
            os.kill(pid, signal.SIGKILL)
            gone_by = time.monotonic() + 5
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < gone_by:
                time.sleep(0.02)
            return switch(self, effect, run)

        monkeypatch.setattr(RayRescale, "switch", killed_first)
        with pytest.raises(rt.RecoveryError) as caught:
            job.rescale({"check": 2}, timeout=60, stepped=False)  # the whole job's switch
        feed.stop()
        with pytest.raises(rt.RecoveryError):
            job.wait(timeout=60)
    message = str(caught.value)
    assert f"job {job.name!r} was started without recovery=, and its rescale met a failure only a recovery could " \
           f"undo: job {job.name!r}: an actor died during the rescale" in message, message
    assert "max_restarts" not in message, message
