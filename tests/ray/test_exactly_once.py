"""Exactly-once where it can break, on a real Ray (issue 32): an epoch handed over twice is
an internal error, not a silent overwrite."""

from __future__ import annotations

import time

import pytest
import ray

import raytide as rt
from raytide.errors import InternalError

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]


def wait_for_epoch(job: rt.Job, output: str, epoch: int, timeout: float = 60.0) -> None:
    """Wait until ``output`` of ``job`` has completed ``epoch``."""
    deadline = time.monotonic() + timeout
    while max(job.collect(output), default=-1) < epoch:
        assert time.monotonic() < deadline, f"epoch {epoch} of {output!r} not complete within {timeout:g} s"
        time.sleep(0.02)


def test_an_epoch_completed_again_after_it_was_handed_over_fails_the_job(ray_session, tmp_path):
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
        job.delivered = lambda: {"out": 0}  # type: ignore[method-assign]  # the planted bookkeeping bug
        ray.kill(job.actors[next(iter(job.actors))])
        job.push("numbers", [30], epoch=3)
        job.close("numbers")
        with pytest.raises(InternalError, match=r"output 'out' epoch 1 was completed again after epoch 2"):
            job.wait(timeout=60)
