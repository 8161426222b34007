"""``None``, bytes and non-ASCII keys (tests/odd_keys.py) on a real Ray: routed by the same
key groups in every process (Python's own ``hash`` of a str or bytes differs per process),
pickled between them, kept in a snapshot restored after a real SIGKILL, and moved by a live
rescale; the output is exactly the plain-Python reference's. The interleavings are in
tests/sim/test_odd_keys_sim.py."""

from __future__ import annotations

import random

import pytest

import raytide as rt
from tests.odd_keys import odd_keys_flow, odd_pairs, reference
from tests.ray.jobs import wait_for_epoch
from tests.ray.test_recovery import sigkill
from tests.sim.scenarios import as_counters

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]


def test_odd_keys_through_a_snapshot_a_sigkill_and_a_rescale_give_the_plain_reference(ray_session, tmp_path):
    inputs = odd_pairs(random.Random(10), epochs=8, most=20)
    recovery = rt.Recovery(str(tmp_path / "store"), interval=None, max_restarts=2)
    with rt.run(odd_keys_flow(), parallelism=2, recovery=recovery) as job:
        for epoch in range(5):
            job.push("pairs", inputs[epoch], epoch=epoch)
            if epoch == 2:
                job.advance("pairs", 3)
                job.snapshot(timeout=60)
        job.advance("pairs", 5)
        wait_for_epoch(job, "running", 4, timeout=60)  # epochs 3 and 4 are computed again after the kill
        sigkill(job, f"{job.plan.chain_of('seen').name}/1")
        job.push("pairs", inputs[5], epoch=5)
        job.rescale({"seen": 3, "sums": 1}, timeout=60)
        for epoch in (6, 7):
            job.push("pairs", inputs[epoch], epoch=epoch)
        job.close("pairs")
        job.wait(timeout=60)
        got = {name: job.collect(name) for name in ("per_epoch", "running")}
        recoveries, widths = job.stats()["recoveries"], job.parallelism()
    assert as_counters(got) == reference(inputs)
    assert recoveries["count"] == 1 and recoveries["recoveries"][0]["snapshot_id"] is not None, recoveries
    assert (widths["seen"], widths["sums"]) == (3, 1), widths
