"""Snapshots that stop committing while a job runs on a real Ray: its store made unwritable
(and writable again), its coordinator's process stopped (SIGSTOP, then SIGCONT).

Decided (docs/recovery.md, "When snapshots stop committing"): neither stalls a job in
silence. With ``output_commit="epoch"`` the job runs on without new snapshots and says so
(a warning naming the store and what failed, ``job.stats()["snapshots"]["failing"]``),
and snapshots commit again once the store can be written; with ``output_commit="snapshot"``,
whose output waits for commits, the job fails with a ``SnapshotError`` naming the store
once they have failed for longer than ``Recovery(timeout=)``. A stopped coordinator is
named in a warning and in ``job.stats()`` (answered at once, not after a minute),
``job.snapshot()`` fails at its timeout naming it, the job's output goes on, and snapshots
resume when it runs again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import raytide as rt
from raytide.driver import snapshot_health
from raytide.errors import SnapshotError
from tests.ray.jobs import until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


@contextlib.contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """Nothing can be created in or removed from ``directory`` (a store's root) meanwhile:
    read-only for a user; immutable (``chattr +i``) for root, whom permissions do not stop."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"root cannot make {directory} immutable here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


class Fed:
    """A job fed one epoch at a time from the test, its output read with one ``results``
    iterator: every epoch ``e`` must come back once as ``[10 * e]``."""

    def __init__(self, job: rt.Job) -> None:
        self.job, self.epoch, self.got = job, 0, []
        self.results = job.results("out", timeout=120, progress=False)

    def step(self) -> None:
        """Feed the next epoch and read it back (this pumps the job's events)."""
        self.job.push("numbers", [self.epoch], self.epoch)
        self.job.advance("numbers", self.epoch + 1)
        self.got.append(next(self.results))
        self.epoch += 1

    def snapshots(self) -> dict:
        self.step()
        return self.job.stats()["snapshots"]

    def finish(self) -> None:
        self.job.close("numbers")
        self.got += list(self.results)
        expected = [(epoch, [10 * epoch]) for epoch in range(self.epoch)]
        assert self.got in (expected, [*expected, (self.epoch, [])]), self.got  # the epoch the input was closed at


def flow(name: str) -> rt.Dataflow:
    numbers = rt.Dataflow(name)
    numbers.input("numbers").map(lambda n: n * 10, name="times-ten").output("out")
    return numbers


def test_an_unwritable_store_is_said_and_survived_or_fails_a_committed_output_and_a_stopped_coordinator_is_named(
        ray_session, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(snapshot_health, "SILENT_AFTER", 1.0)
    caplog.set_level(logging.WARNING, logger="raytide.driver")
    stores = {commit: tmp_path / commit for commit in ("epoch", "snapshot")}
    jobs = {commit: rt.run(flow(f"stall-{commit}"), parallelism=1, recovery=rt.Recovery(
        str(store), interval=0.1, timeout=1.0, output_commit=commit)) for commit, store in stores.items()}  # type: ignore[arg-type]
    with jobs["epoch"] as job, jobs["snapshot"] as held:
        fed, fed_held = Fed(job), Fed(held)
        until(lambda: fed.snapshots()["committed"] and fed_held.snapshots()["committed"], "a first commit of each job")
        with unwritable(stores["epoch"]), unwritable(stores["snapshot"]):
            started = time.monotonic()
            held.push("numbers", [fed_held.epoch], fed_held.epoch)
            with pytest.raises(SnapshotError, match="output_commit='snapshot'") as failed:
                held.wait(timeout=30)
            assert str(stores["snapshot"]) in str(failed.value) and time.monotonic() - started < 10, failed.value
            fed_held.results.close()
            failing = until(lambda: (fed.snapshots()["failing"] or {}).get("in_a_row", 0) >= 2,
                            "two failed snapshots of the job committing per epoch")
            snapshots = job.stats()["snapshots"]
            assert str(stores["epoch"]) in snapshots["failing"]["last"] and "consumed_record" in snapshots, snapshots
            assert failing and job.stats()["recoveries"]["count"] == 0
        committed = job.stats()["snapshots"]["committed"]
        until(lambda: (s := fed.snapshots())["committed"] > committed and s["failing"] is None and
              "consumed_record" not in s and "again, after" in caplog.text, "a commit once the store can be written again")
        said = caplog.text
        assert f"a snapshot could not be taken (store {str(stores['epoch'])!r})" in said, said
        assert f"a snapshot committed to store {str(stores['epoch'])!r} again" in said, said
        assert "consumers had could not be written" in said, said
        stopped_coordinator(job, fed, caplog)
        fed.finish()


def stopped_coordinator(job: rt.Job, fed: Fed, caplog) -> None:
    """Stop ``job``'s coordinator (SIGSTOP) while the job is fed: it is named in a warning, in
    ``job.stats()`` and by ``job.snapshot()``'s error, output goes on, snapshots resume on SIGCONT."""
    pid = job.hosts()[f"{job.name}/coordinator"]
    committed = job.stats()["snapshots"]["committed"]
    os.kill(pid, signal.SIGSTOP)
    try:
        until(lambda: "silent_s" in fed.snapshots(), "the stopped coordinator said silent in job.stats()")
        started = time.monotonic()
        with pytest.raises(SnapshotError, match=f"coordinator {job.name}/coordinator \\(process {pid}\\) has not answered"):
            job.snapshot(timeout=0.5)
        assert time.monotonic() - started < 5
        epoch = fed.epoch
        fed.step()
        assert fed.got[-1] == (epoch, [10 * epoch]), "the job's output goes on without its coordinator"
        assert f"(process {pid}) has not answered for" in caplog.text
    finally:
        os.kill(pid, signal.SIGCONT)
    until(lambda: (s := fed.snapshots()).get("committed", 0) > committed and "silent_s" not in s,
          "a commit once the coordinator runs again")
    assert "the snapshot coordinator answers again" in caplog.text


def test_a_rescale_cut_the_coordinator_does_not_answer_is_missed_after_its_deadline_not_waited_for_forever(
        ray_session, monkeypatch):
    """The driver's wait for a rescale's cut (``RayRescale._hold``) ends at the rescale's deadline
    plus the slack for a late answer, with the cut missed (the rescale machine then recovers
    the job in its old widths), naming the coordinator: before, a coordinator that never
    answered (its process stopped) kept ``job.rescale`` waiting forever."""
    import threading
    from types import SimpleNamespace

    import ray

    from raytide.driver import rescale
    from raytide.rescale.rescaling import CutMissed, HoldAtCut

    @ray.remote(num_cpus=0)
    class Stopped:  # a coordinator that does not answer the cut (as one whose process is stopped)
        def hold_now(self, incarnation: int, timeout: float, delivered: dict) -> None:
            time.sleep(30)

    monkeypatch.setattr(rescale, "POLL_SLACK", 0.3)
    recovery = SimpleNamespace(coordinator=Stopped.remote(), outputs=SimpleNamespace(durable=dict),
                               coordinator_name=lambda: "the snapshot coordinator j/coordinator (process 7)")
    on_ray = rescale.RayRescale(recovery, SimpleNamespace(watch=lambda timeout: None), rescale._RescaleRun(time.monotonic() + 0.5))
    answer: list = []
    waiting = threading.Thread(target=lambda: answer.append(on_ray._hold(HoldAtCut(0, 1))), daemon=True)
    waiting.start()
    waiting.join(10)
    assert answer and isinstance(answer[0], CutMissed), "the wait for the cut did not end"
    assert "(process 7) did not answer the rescale's cut" in answer[0].reason
    ray.kill(recovery.coordinator)
