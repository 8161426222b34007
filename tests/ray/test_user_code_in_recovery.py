"""User code that fails only inside a recovery, on a real Ray after a real SIGKILL: a
``restore()`` that raises, and an ``on_notify`` that raises only when its epoch is
replayed. The job fails at once with a ``UserCodeError`` that says which recovery step it
was raised in, never restarting again nor hanging (docs/recovery.md, "User code failing in
a recovery"; the interleavings are in tests/sim/test_user_code_in_recovery_sim.py).

Before 2026-11-29 a ``restore()`` that raised was reported to the progress actor in the new
incarnation before the actor was restored into it, and so dropped about one run in two:
the job then hung until the caller's timeout."""

from __future__ import annotations

import pytest

import raytide as rt
from tests.failing_vertices import brittle_flow, poison_flow
from tests.ray.jobs import wait_for_epoch
from tests.ray.test_recovery import sigkill

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]


def replica_of(job: rt.Job, vertex: str, replica: int = 0) -> str:
    """``chain/replica`` of ``vertex``'s replica, for :func:`sigkill`."""
    return f"{job.plan.chain_of(vertex).name}/{replica}"


def test_a_restore_that_raises_after_a_sigkill_fails_the_job_at_once_naming_the_recovery(ray_session, tmp_path):
    recovery = rt.Recovery(str(tmp_path / "store"), interval=None, max_restarts=3)
    with pytest.raises(rt.UserCodeError) as caught:
        with rt.run(brittle_flow(), parallelism=2, recovery=recovery) as job:
            job.push("numbers", [1, 2, 3, 4], epoch=0)
            snapshot = job.snapshot(timeout=60)
            sigkill(job, replica_of(job, "totals", 1))
            job.push("numbers", list(range(12)), epoch=1)  # every key: to the dead replica too
            job.close("numbers")
            job.wait(timeout=60)
    error = caught.value
    assert (error.vertex, error.where, error.time) == ("totals", "its restore()", None), str(error)
    assert error.during.startswith(f"during the recovery of job {job.name!r} to incarnation 1, restoring snapshot "
                                   f"{snapshot} (after: replica {job.name}/{replica_of(job, 'totals', 1)} "), str(error)
    assert "the saved totals cannot be read back" in str(error)


def test_a_poison_record_that_fails_only_on_its_replay_after_a_sigkill_names_the_replay(ray_session, tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    recovery = rt.Recovery(str(tmp_path / "store"), interval=None, max_restarts=3)
    with pytest.raises(rt.UserCodeError) as caught:
        with rt.run(poison_flow(str(memory)), parallelism=2, recovery=recovery) as job:
            job.push("numbers", list(range(10)), epoch=0)
            job.advance("numbers", 1)
            wait_for_epoch(job, "per_epoch", 0, timeout=60)
            snapshot = job.snapshot(timeout=60)  # after epoch 0: epoch 1 is what a recovery computes again
            job.push("numbers", list(range(10)), epoch=1)
            job.advance("numbers", 2)
            wait_for_epoch(job, "per_epoch", 1, timeout=60)
            sigkill(job, replica_of(job, "poison", 0))
            job.close("numbers")
            job.wait(timeout=60)
    error = caught.value
    assert (error.vertex, error.time) == ("poison", rt.Timestamp(1)), str(error)
    assert "poison record in epoch 1" in error.original
    assert error.during.startswith(f"during the replay of the recovery of job {job.name!r} to incarnation 1 "
                                   f"(epochs 1 to 2 computed again from snapshot {snapshot}, after: replica "), str(error)
