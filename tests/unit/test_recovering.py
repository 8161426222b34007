"""The recovery machine (:mod:`raytide.snapshots.recovering`) on its own: the order of its
steps, starting over after a death, the restart budget, timeouts, and the ways in."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.errors import JobTimeout, RecoveryError
from raytide.snapshots import recovering as rc
from raytide.snapshots.recovery import RestartBudget, RestorePoint

POINT = RestorePoint(snapshot_id=4, pointstamps=[])
PIECES = rc.Pieces({}, {"v": 1}, {})


def answer(effect: rc.RecoveryEffect) -> rc.RecoveryEvent | None:
    """What a well-behaved executor answers to ``effect``."""
    return {
        rc.ReplaceDead: lambda: rc.Replaced(["job/a/0"]),
        rc.ReadPoint: lambda: rc.PointRead(POINT),
        rc.RestoreReplicas: lambda: rc.Restored({}),
        rc.RestartProgress: rc.ProgressRestarted,
        rc.ResumeReplicas: rc.Resumed,
        rc.ReplayInputs: rc.Replayed,
    }.get(type(effect), lambda: None)()


def drive(machine: rc.Recovering, deaths_at: frozenset[int] = frozenset()) -> list[rc.RecoveryEffect]:
    """Every effect of ``machine`` in order, a death injected instead of the ``k``-th answer for each k in ``deaths_at``."""
    done: list[rc.RecoveryEffect] = []
    pending = machine.start()
    answers = 0
    while pending:
        effect = pending.pop(0)
        done.append(effect)
        event = answer(effect)
        if event is not None:
            event = rc.Died(f"death {answers}") if answers in deaths_at else event
            answers += 1
            pending += machine.on(event)
    return done


def kinds(effects: list[rc.RecoveryEffect]) -> list[str]:
    return [type(effect).__name__ for effect in effects]


def test_a_recovery_takes_its_steps_in_order():
    machine = rc.Recovering.after_death("job", RestartBudget(3), 0, "a/0 died")
    effects = drive(machine)
    assert kinds(effects) == ["RollBackOutputs", "PauseCoordinator", "ReplaceDead", "ReadPoint", "RestoreReplicas",
                              "RestartProgress", "ResumeReplicas", "ReplayInputs", "ResetCoordinator", "Finished"]
    assert {getattr(e, "incarnation", 1) for e in effects} == {1}
    assert effects[-2] == rc.ResetCoordinator(1, "recovered")
    assert effects[-1] == rc.Finished(1, 4, ["a/0 died"])
    assert machine.phase is rc.RecoveryPhase.DONE and machine.on(rc.Replayed()) == []


def test_a_start_from_a_savepoint_and_a_rescale_enter_at_the_restore():
    restored = drive(rc.Recovering.from_point("job", RestartBudget(3), POINT))
    assert kinds(restored)[0] == "RestoreReplicas" and restored[-2] == rc.ResetCoordinator(1, "restored")
    rescaled = drive(rc.Recovering.adopting("job", RestartBudget(3), POINT, PIECES, 7))
    assert rescaled[0] == rc.RestoreReplicas(7, POINT, PIECES)
    assert rescaled[-2] == rc.ResetCoordinator(7, "rescaled") and rescaled[-1] == rc.Finished(7, 4, [])


def test_pieces_bring_their_own_pointstamps_to_the_progress_actor():
    machine = rc.Recovering.adopting("job", RestartBudget(3), POINT, PIECES, 2)
    machine.start()
    held = [(("loc", "t"), 1)]
    (restart,) = machine.on(rc.Restored({"k": ["l"]}, held))  # type: ignore[arg-type]
    assert restart == rc.RestartProgress(2, held, POINT.kept, {"k": ["l"]})  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(deaths=st.frozensets(st.integers(0, 12), max_size=4), budget=st.integers(1, 5), rescale=st.booleans())
def test_every_death_starts_over_in_a_new_incarnation_until_the_budget_is_spent(deaths, budget, rescale):
    machine = (rc.Recovering.adopting("job", RestartBudget(budget), POINT, PIECES, 3) if rescale
               else rc.Recovering.after_death("job", RestartBudget(budget), 3, "first"))
    effects = drive(machine, deaths)
    restarts = kinds(effects).count("ReplaceDead")
    incarnations = [e.incarnation for e in effects if isinstance(e, rc.ReplaceDead)]
    assert incarnations == list(range(4, 4 + restarts)), "each start over is the next incarnation"
    if kinds(effects)[-1] == "Failed":
        assert isinstance(effects[-1].error, RecoveryError)  # type: ignore[union-attr]
        assert restarts == budget, "the job fails only once every restart the budget allows is spent"
    else:
        assert restarts <= budget
        assert kinds(effects)[-2:] == ["ResetCoordinator", "Finished"]
        last = effects[-1]
        assert isinstance(last, rc.Finished) and last.incarnation == (incarnations[-1] if incarnations else 3)
        every = kinds(effects)
        tail = every[len(every) - every[::-1].index("RestoreReplicas") - 1:]
        assert tail == ["RestoreReplicas", "RestartProgress", "ResumeReplicas", "ReplayInputs", "ResetCoordinator",
                        "Finished"], "after the last death, the whole restore in order"


def test_a_step_that_takes_too_long_fails_the_job_naming_it():
    machine = rc.Recovering.after_death("job", RestartBudget(3), 0, "a/0 died")
    machine.start()
    (failed,) = machine.on(rc.TimedOut("restoring the replicas took longer than 120 s"))
    assert isinstance(failed, rc.Failed) and isinstance(failed.error, JobTimeout)
    assert "restoring the replicas" in str(failed.error) and "recovery 1" in str(failed.error)
    assert machine.phase is rc.RecoveryPhase.FAILED and machine.on(rc.Died("late")) == []


@pytest.mark.parametrize("raised", [ValueError("boom"), JobTimeout("a replica's own timeout")])
def test_a_replica_whose_restore_raises_fails_the_job_at_once_whatever_the_budget(raised):
    """User code (or anything) raising in a replica's restore is no death: restarting would
    restore the same snapshot and raise again, so the machine fails at once, budget untouched."""
    budget = RestartBudget(5)
    machine = rc.Recovering.after_death("job", budget, 0, "a/0 died")
    pending = machine.start()
    while not any(isinstance(effect, rc.RestoreReplicas) for effect in pending):
        pending = [follow for effect in pending if (event := answer(effect)) for follow in machine.on(event)]
    (failed,) = machine.on(rc.Raised(raised))
    assert isinstance(failed, rc.Failed) and machine.phase is rc.RecoveryPhase.FAILED
    if isinstance(raised, JobTimeout):  # raytide's own error names its place already
        assert failed.error is raised
    else:
        assert str(failed.error) == "restoring the replicas raised ValueError('boom'), during the recovery of job " \
                                    "'job' to incarnation 1, restoring snapshot 4 (after: a/0 died)"
    assert budget.causes == ["a/0 died"]


def test_an_answer_out_of_turn_is_a_bug_not_a_step():
    machine = rc.Recovering.after_death("job", RestartBudget(3), 0, "a/0 died")
    machine.start()
    with pytest.raises(AssertionError, match="REPLACING got Resumed"):
        machine.on(rc.Resumed())
