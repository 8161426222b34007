"""A stepped rescale on a real Ray (issue 74; docs/rescaling.md, "Stepped migration"): a keyed
job under a steady feed rescaled 2 -> 4 -> 1 -> 3 with ``stepped=True``, each rescale's key
groups moved in steps while the others flow. Checked against plain Python (every record once,
in order per key), and a key group the plan does not move produced output while the steps ran:
no whole-job hold covered them; growing, the new replicas join in place, shrinking, the emptied
ones retire in place (no hold, no new incarnation). A replica SIGKILLed as new replicas join: the
job recovers in the old widths and the rescale is made with a new incarnation; one SIGKILLed as
the steps start, or as the emptied replicas retire: the job recovers and the rescale is made
holding the whole job; each record says why. After a retirement in place, a snapshot commits
(the coordinator waits for the replicas left alone)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

import raytide as rt
from raytide.core.keygroups import key_group
from raytide.driver import joining, stepped
from raytide.driver.placement import JobPlacement
from raytide.driver.stepped import SteppedRescale
from tests.delivery import assert_exactly_once
from tests.ray.jobs import SequenceFeed, committed_snapshots, next_in_sequence, until

pytestmark = [pytest.mark.ray]

KEYS, PER_KEY = 256, 2  # keys over every key group
WIDTHS = (4, 1, 3)


def stamped(last: int | None, record: tuple[int, int]) -> tuple[int, tuple[int, int, float]]:
    """The keyed vertex: the record must follow the last of its key; it leaves with when it was processed."""
    number, _ = next_in_sequence(last, record)
    return number, (record[0], record[1], time.time())


def steady_feed() -> SequenceFeed:
    return SequenceFeed(KEYS, PER_KEY, 0.005)


def flow_checking_sequences(name: str) -> rt.Dataflow:
    """A keyed ``stateful_map`` checking every key's sequence, its output fused behind it."""
    flow = rt.Dataflow(name)
    flow.input("records", parallelism=1).stateful_map(lambda r: r[0], stamped, name="check").output("out")
    return flow


def without_times(out: list[tuple[int, list]]) -> list[tuple[int, list]]:
    """The output as the reference has it: ``(key, (key, number))``, when it was processed left out."""
    return [(epoch, [(key, (key, n)) for key, (_, n, _) in part]) for epoch, part in out]


def flowed_during(out: list[tuple[int, list]], record: dict[str, Any]) -> int:
    """How many records of key groups the plan did not move were processed while its steps ran."""
    start, end = record["stepped"]["window"]
    moved = set(record["stepped"]["moved"])
    return sum(start < at < end and key_group(key) not in moved for _, part in out for key, (_, _, at) in part)


class CallerFeed:
    """The calling thread feeds ``job`` itself: ``feed(n)`` pushes ``n`` epochs of ``fed``'s numbers, advancing
    past each; :meth:`push` pushes the inputs' epoch's without advancing, :meth:`advance` moves on."""

    def __init__(self, job: rt.Job, fed: SequenceFeed) -> None:
        self.job, self.fed = job, fed

    def __call__(self, epochs: int) -> None:
        for _ in range(epochs):
            self.push()
            self.advance()

    def push(self) -> None:
        epoch = self.fed.fed
        self.job.push("records", [(key, epoch * PER_KEY + i) for i in range(PER_KEY) for key in range(KEYS)], epoch)

    def advance(self) -> None:
        self.fed.fed += 1
        self.job.advance("records", self.fed.fed)


def run_out(job: Any, feed: SequenceFeed, results: Any, out: list) -> tuple[list, dict[str, Any]]:
    """One more epoch out, then the feed stopped and the job run out: every epoch's output and the job's stats."""
    out.append(next(results))
    feed.stop()
    job.wait(timeout=120)
    return out + list(results), job.stats()


@pytest.mark.timeout(300)
def test_a_keyed_job_rescaled_2_4_1_3_in_steps_is_exact_and_unmoved_groups_flow_meanwhile(ray_session):
    feed = steady_feed()
    with rt.run(flow_checking_sequences("stepped"), {"records": feed.epochs()}, parallelism=2) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        records = []
        for width in WIDTHS:
            records.append(job.rescale({"check": width}, timeout=60, stepped=True))
            assert job.parallelism()["check"] == width
            out.append(next(results))
        feed.stop()
        job.wait(timeout=120)
        out += list(results)
        stats = job.stats()
    print("stepped rescales: " + "; ".join(
        f"{r['before']} -> {r['after']}: {r['seconds']:.3f} s, pause {r['pause_s']:.3f} s, {r['stepped']['steps']} "
        f"steps over {r['steps'].get('move the groups in steps', 0):.3f} s, "
        f"{flowed_during(out, r)} unmoved records meanwhile ({r['stepped']['switch']}; {r['steps']})" for r in records))
    assert_exactly_once(feed.reference(), {"out": without_times(out)})
    assert [r["mode"] for r in records] == ["stepped"] * 3, [r["why"] for r in records]
    assert [r["after"]["check"] for r in stats["rescales"]] == list(WIDTHS)
    assert all(r["stepped"]["steps"] > 1 and r["stepped"]["ended"] == "done" for r in records)
    assert all(flowed_during(out, r) > 0 for r in records), "a key group that did not move stood still"
    # 2 -> 4 and 1 -> 3 joined, 4 -> 1 retired in place: no hold, no new incarnation at all
    assert [r["stepped"]["switch"].split(" in place")[0] for r in records] == ["joined", "retired", "joined"], records
    assert [(r["cut_id"], r["pause_s"]) for r in records] == [(None, 0.0)] * 3
    assert [r["incarnation"] for r in records] == [0, 0, 0]


@pytest.mark.timeout(300)
def test_a_replica_killed_as_replicas_join_or_as_the_steps_start_falls_back_to_the_whole_job_and_stays_exact(
        ray_session, tmp_path, monkeypatch):
    feed, killed, started = steady_feed(), [], []  # started: the second rescale is under way
    install = SteppedRescale._install

    def killing_first(self: SteppedRescale, width: int, shrinking: bool) -> Any:  # the plan installed: its steps are under way
        message = install(self, width, shrinking)
        if not killed and started:  # the second rescale's (after the first's steps were waited for)
            killed.append(job.hosts()[f"{job.name}/check+out/1"])
            os.kill(killed[0], signal.SIGKILL)
        return message

    monkeypatch.setattr(SteppedRescale, "_install", killing_first)
    admit, killed_joining = JobPlacement.admit, []

    def killing_as_they_join(self: JobPlacement, *args: Any) -> Any:  # the new replicas took their roles: the join is under way
        answer = admit(self, *args)
        if killed_joining:
            return answer
        killed_joining.append(job.hosts()[f"{job.name}/check+out/1"])
        os.kill(killed_joining[-1], signal.SIGKILL)
        return answer

    monkeypatch.setattr(JobPlacement, "admit", killing_as_they_join)
    with rt.run(flow_checking_sequences("stepped-killed"), {"records": feed.epochs()}, parallelism=2,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=0.2)) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        while committed_snapshots(job) < 1:
            out.append(next(results))
        grown = job.rescale({"check": 3}, timeout=60, stepped=True)
        started.append(True)
        record = job.rescale({"check": 1}, timeout=60, stepped=True)
        out, stats = run_out(job, feed, results, out)
    assert_exactly_once(feed.reference(), {"out": without_times(out)})
    assert killed_joining and grown["mode"] == "stepped" and grown["cut_id"] is not None, (grown["why"], grown["stepped"])
    assert grown["stepped"]["ended"] == "done", grown  # its steps ended before the next rescale planned
    assert grown["stepped"]["switch"].startswith("a new incarnation: a death during the join"), grown
    assert killed and record["mode"] == "whole job" and "a death during the steps" in record["why"], record
    assert stats["recoveries"]["count"] >= 2 and stats["parallelism"]["check"] == 1


@pytest.mark.timeout(300)
def test_a_snapshot_commits_after_a_retirement_in_place_and_a_replica_killed_as_replicas_retire_recovers_exactly(
        ray_session, tmp_path, monkeypatch):
    """3 -> 2 retires replica 2 in place, then a snapshot commits (the coordinator's set narrowed); 2 -> 1
    with the retiring replica SIGKILLed as the driver asks it to leave: the job recovers from its last
    snapshot and the rescale holds the whole job, saying why; exact throughout."""
    feed, killed = steady_feed(), []
    emptied = joining._emptied

    def killing_first(recovery: Any, keys: list, deadline: float) -> Any:  # the steps done: the retirement starts
        if len(killed) < 1 and recovery.placement.plan.width("check") == 2:
            killed.append(job.hosts()[f"{job.name}/check+out/1"])
            os.kill(killed[0], signal.SIGKILL)
        return emptied(recovery, keys, deadline)

    monkeypatch.setattr(joining, "_emptied", killing_first)
    with rt.run(flow_checking_sequences("stepped-retired"), {"records": feed.epochs()}, parallelism=3,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=0.2)) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        retired = job.rescale({"check": 2}, timeout=60, stepped=True)
        job.snapshot(timeout=30)  # waits for replica 2 if the coordinator was not narrowed past it
        out.append(next(results))
        record = job.rescale({"check": 1}, timeout=60, stepped=True)
        out, stats = run_out(job, feed, results, out)
    assert_exactly_once(feed.reference(), {"out": without_times(out)})
    assert retired["stepped"]["switch"].startswith("retired in place") and retired["cut_id"] is None, retired
    assert killed and record["mode"] == "whole job" and "a death during the retirement" in record["why"], record
    assert stats["recoveries"]["count"] >= 1 and stats["parallelism"]["check"] == 1


@pytest.mark.timeout(300)
def test_a_caller_that_feeds_the_job_itself_grows_it_in_one_step_and_shrinks_it_in_place(ray_session):
    """The thread that rescales is the one feeding: the growth (1 -> 3) returns once its plan is installed
    (one step, at the epoch after the inputs'), the caller's next advance makes it, and its waits on
    the job see it end (the record's ``ended``). Its shrink (3 -> 2), with nothing pushed at the inputs'
    epoch yet, is one step at that epoch, made without another epoch, and the emptied replica retires in
    place within the call. A shrink (2 -> 1) after records were pushed at the inputs' epoch holds nothing
    either: it returns with its one step at the epoch after, the old width still running, and once the
    caller's next advance has made the step its reads retire the emptied replica in place. Exact
    throughout."""
    fed = SequenceFeed(KEYS, PER_KEY, 0.0)
    with rt.run(flow_checking_sequences("stepped-by-the-caller"), parallelism=1) as job:
        results = job.results("out", timeout=120)
        feed = CallerFeed(job, fed)
        feed(3)
        grown = job.rescale({"check": 3}, timeout=60, stepped=True)
        assert grown["mode"] == "stepped", grown["why"]
        assert (grown["stepped"]["steps"], grown["stepped"]["ended"]) == (1, None), grown
        feed(2)
        out = [next(results) for _ in range(fed.fed)]  # the caller's waits on the job see the step end
        assert job.stats()["rescales"][0]["stepped"]["ended"] == "done", job.stats()["rescales"]
        feed(1)  # an epoch moved just now: a job whose inputs moved none within QUIET_S holds the whole job
        shrunk = job.rescale({"check": 2}, timeout=60, stepped=True)
        assert shrunk["mode"] == "stepped" and shrunk["cut_id"] is None, shrunk
        assert shrunk["stepped"]["switch"].startswith("retired in place"), shrunk
        assert (shrunk["stepped"]["epochs"], shrunk["stepped"]["ended"]) == ([fed.fed, fed.fed], "done"), shrunk
        assert job.parallelism()["check"] == 2
        feed(1)
        feed.push()  # the inputs' epoch took records: the step is at the next
        later = job.rescale({"check": 1}, timeout=60, stepped=True)
        assert later["mode"] == "stepped" and later["cut_id"] is None and later["pause_s"] == 0, later
        assert (later["stepped"]["epochs"], later["stepped"]["ended"]) == ([fed.fed + 1] * 2, None), later
        assert later["stepped"]["switch"] == stepped.RETIRING and job.parallelism()["check"] == 2, later
        feed.advance()
        feed(2)
        out += [next(results) for _ in range(fed.fed - len(out))]  # the caller's reads see the step: they retire
        retired = job.stats()["rescales"][-1]["stepped"]
        assert (retired["ended"], retired["switch"][:16]) == ("done", "retired in place"), retired
        assert job.parallelism()["check"] == 1 and len(job.stats()["rescales"]) == 3
        feed(1)
        job.close("records")
        job.wait(timeout=120)
        out += list(results)
    assert_exactly_once(fed.reference(), {"out": without_times(out)})


@pytest.mark.timeout(300)
def test_a_replica_killed_before_a_shrink_left_to_the_pumps_retires_has_it_made_again_holding_the_whole_job(
        ray_session, tmp_path):
    """The caller feeds a job with recovery and shrinks it (2 -> 1) after pushing at the inputs' epoch: the call
    returns with the step at the next epoch; the retiring replica (the old owner of the moving groups) is
    SIGKILLed before the caller advances. The caller's reads notice the death: the job recovers from its last
    snapshot (from before the plan, in the old widths), and the shrink is made again holding the whole job,
    saying why; exact."""
    fed = SequenceFeed(KEYS, PER_KEY, 0.0)
    with rt.run(flow_checking_sequences("stepped-left-to-the-pumps"), parallelism=2,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=0.2)) as job:
        results, feed, out = job.results("out", timeout=120), CallerFeed(job, fed), []
        deadline = time.monotonic() + 60
        while committed_snapshots(job) < 1 and time.monotonic() < deadline:
            feed(1)
            out.append(next(results))
        feed(1)
        feed.push()
        later = job.rescale({"check": 1}, timeout=60, stepped=True)
        assert later["stepped"]["switch"] == stepped.RETIRING, later
        os.kill(job.hosts()[f"{job.name}/check+out/1"], signal.SIGKILL)
        feed.advance()
        feed(2)
        out += [next(results) for _ in range(fed.fed - len(out))]  # the reads notice the death, and remake the shrink
        rescales = job.stats()["rescales"]
        feed(1)
        job.close("records")
        job.wait(timeout=120)
        out += list(results)
        stats = job.stats()
    assert_exactly_once(fed.reference(), {"out": without_times(out)})
    assert rescales[0]["stepped"]["ended"].startswith("a death during the steps"), rescales
    assert rescales[-1]["mode"] == "whole job" and "a death during the steps" in rescales[-1]["why"], rescales
    assert stats["recoveries"]["count"] >= 1 and stats["parallelism"]["check"] == 1


@pytest.mark.timeout(300)
def test_a_snapshot_commits_after_a_growth_joined_in_place_just_after_a_recovery(ray_session, tmp_path):
    """A replica SIGKILLed and the job recovered (incarnation 1), then 2 -> 3 joined in place: the joined
    replica's snapshots are written and acknowledged in incarnation 1, so snapshots commit again (its writer
    skipped them as another incarnation's, and each snapshot waited out its 60 s for it and was abandoned); exact."""
    feed = steady_feed()
    with rt.run(flow_checking_sequences("stepped-joined-after-a-recovery"), {"records": feed.epochs()},
                parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"), interval=0.2)) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        while committed_snapshots(job) < 1:
            out.append(next(results))
        os.kill(job.hosts()[f"{job.name}/check+out/0"], signal.SIGKILL)
        while job.stats()["recoveries"]["count"] < 1:
            out.append(next(results))
        grown = job.rescale({"check": 3}, timeout=60, stepped=True)
        assert grown["stepped"]["switch"].startswith("joined in place") and grown["incarnation"] == 1, grown
        before = committed_snapshots(job)  # the reads below pump the steps to their end, then the snapshots resume
        # with the bug no snapshot of incarnation 1 ever commits (each waits out 60 s); the steps' end (and the
        # snapshots' resume) once waited for this loop to take the backlog the recovery left (CI, 2026-12-01)
        until(lambda: out.append(next(results)) or committed_snapshots(job) > before + 1, "two snapshots committed after the join", 90)

        out, stats = run_out(job, feed, results, out)
    assert_exactly_once(feed.reference(), {"out": without_times(out)})
    assert stats["parallelism"]["check"] == 3
