"""The Ray driver's runtime of the recovery machine (``JobRecovery.execute`` on
:class:`~raytide.driver.recovery_runtime.RayRecovery`), without Ray: its actions replaced by
answers, so that what it does with the machine's failures shows."""

from __future__ import annotations

from typing import Any

import pytest

from raytide.driver.recovery import JobRecovery
from raytide.errors import JobTimeout
from raytide.snapshots import recovering as rc
from raytide.snapshots.recovery import RestartBudget, RestorePoint


def test_a_recovery_step_that_takes_too_long_fails_the_job_instead_of_being_taken_for_an_answer(monkeypatch):
    """Before 2026-11-29 the executor raised the machine's ``Failed(JobTimeout)`` where it
    catches a step's timeout, took it for another timeout of the finished machine, and
    returned as if the job ran again."""
    recovery = object.__new__(JobRecovery)
    recovery.incarnation = 0

    def restore(self: Any, refs: list, what: str) -> list:
        raise JobTimeout("restoring the replicas took longer than 120 s")

    monkeypatch.setattr(JobRecovery, "wait", restore)
    monkeypatch.setattr(JobRecovery, "placement", type("Placement", (), {"peers": {}, "name": "job"})(), raising=False)
    monkeypatch.setattr(JobRecovery, "coordinator", None, raising=False)
    machine = rc.Recovering.from_point("job", RestartBudget(3), RestorePoint(4, []))
    with pytest.raises(JobTimeout, match="took longer than 120 s took too long in recovery 1"):
        recovery.execute(machine)
    assert machine.phase is rc.RecoveryPhase.FAILED
