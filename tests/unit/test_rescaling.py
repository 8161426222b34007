"""The rescale machine (:mod:`raytide.rescale.rescaling`) on its own: the order of its steps,
deaths in each phase (in the old widths before the hand-over, in the new ones after it),
the deadline, a hand-over that fails, the restart budget, and an executor interrupted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.errors import RecoveryError, RescaleError, SnapshotError
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale import rescaling as rs
from raytide.rescale.layout import cut_point
from raytide.rescale.widths import new_widths
from raytide.snapshots import recovering as rc
from raytide.snapshots.recovery import RestartBudget
from raytide.snapshots.replica_state import HeldReport, ReplicaSummary
from tests.unit.test_recovering import drive as drive_recovery


def _flow() -> rt.Dataflow:
    flow = rt.Dataflow("counts")
    flow.input("lines").flat_map(str.split, name="words").count_by_key(lambda w: w, name="count").output("out")
    return flow


OLD = compile_plan(_flow(), 1)
NEW = compile_plan(_flow(), 1, widths=new_widths(OLD, {"count": 3}))
REPORTS = {key: HeldReport(ReplicaSummary([], {"lines": 5} if "lines" in OLD.chain(key.chain).vertices else {}, {}), {})
           for key in OLD.replica_keys()}
CUT = 7


def machine(budget: int = 3, incarnation: int = 0) -> rs.Rescaling:
    return rs.Rescaling.between("job", RestartBudget(budget), incarnation, OLD, NEW)


def pieces(old: ReplicaKey, plan: PhysicalPlan) -> dict[ReplicaKey, Any]:
    """What a well-behaved old replica ``old`` hands over: a piece for every new replica."""
    return {new: f"{old} -> {new}" for new in plan.replica_keys()}


def answer(effect: rs.RescaleEffect) -> rs.RescaleEvent | None:
    """What a well-behaved executor answers to ``effect`` (a recovery runs to its end)."""
    if isinstance(effect, (rs.Recover, rs.Adopt)):
        drive_recovery(effect.machine)
        return rs.Recovered(effect.machine.incarnation) if effect.machine.phase is rc.RecoveryPhase.DONE else None
    if isinstance(effect, rs.HandOver):
        return rs.HandedOver([pieces(old, effect.plan) for old in OLD.replica_keys()])
    return {
        rs.StartHosts: rs.HostsStarted,
        rs.HoldAtCut: lambda: rs.Held(CUT, REPORTS),
        rs.Switch: rs.Switched,
    }.get(type(effect), lambda: None)()  # type: ignore[operator]


def drive(rescale: rs.Rescaling, instead: dict[int, rs.RescaleEvent] | None = None,
          mishap: Callable[[int, rs.RescaleEffect], rs.RescaleEvent | None] = lambda k, effect: None,
          ) -> list[rs.RescaleEffect]:
    """Every effect of ``rescale`` in order, the ``k``-th answer replaced by ``instead[k]``
    (or by what ``mishap(k, effect)`` returns, if anything)."""
    instead = instead or {}
    done: list[rs.RescaleEffect] = []
    pending = rescale.start()
    answers = 0
    while pending:
        effect = pending.pop(0)
        done.append(effect)
        event = answer(effect)
        if event is not None:
            event = instead.get(answers) or mishap(answers, effect) or event
            answers += 1
            pending += rescale.on(event)
    return done


def kinds(effects: list[rs.RescaleEffect]) -> list[str]:
    return [type(effect).__name__ for effect in effects]


def test_a_rescale_takes_its_steps_in_order():
    rescale = machine()
    effects = drive(rescale)
    assert kinds(effects) == ["StartHosts", "HoldAtCut", "HandOver", "RollBackOutputs", "Switch", "Adopt", "Rescaled"]
    start, hold, hand_over, _, switch, adopt, done = effects
    assert start == rs.StartHosts(NEW) and hold == rs.HoldAtCut(0, 1)
    assert isinstance(hand_over, rs.HandOver) and (hand_over.incarnation, hand_over.into) == (0, 1)
    assert hand_over.old_widths == dict.fromkeys(OLD.vertices, 1) and hand_over.plan is NEW
    assert set(hand_over.tables) == set(NEW.vertices) and hand_over.tables["count"].parallelism == 3
    assert switch == rs.Switch(NEW, 1)
    assert isinstance(adopt, rs.Adopt) and adopt.machine.pieces is not None and adopt.machine.incarnation == 1
    assert adopt.machine.pieces.refs == {new: [f"{old} -> {new}" for old in OLD.replica_keys()]
                                         for new in NEW.replica_keys()}, "every piece goes to its new owner"
    assert adopt.machine.point == cut_point(NEW, REPORTS)
    assert done == rs.Rescaled(1, CUT) and rescale.phase is rs.RescalePhase.DONE
    assert rescale.widths == {**dict.fromkeys(OLD.vertices, 1), "count": 3, "out": 3}
    assert rescale.on(rs.Switched()) == [], "a rescale that is done takes nothing more"


def recoveries(effects: list[rs.RescaleEffect]) -> list[rc.Recovering]:
    return [effect.machine for effect in effects if isinstance(effect, rs.Recover)]


@pytest.mark.parametrize(("answer_index", "event", "cause"), [
    (1, rs.CutMissed("cut 3 was abandoned"), "job 'job': a rescale cut was not complete: cut 3 was abandoned"),
    (1, rc.Died("a/0 died"), "a/0 died"),
    (2, rc.Died("a/0 died while it split its state"), "a/0 died while it split its state"),
])
def test_before_the_hand_over_the_job_recovers_in_its_old_widths_and_the_cut_is_taken_again(answer_index, event,
                                                                                              cause):
    effects = drive(machine(), {answer_index: event})
    (recover,) = recoveries(effects)
    assert recover.causes == [cause] and recover.incarnation == 1, "a recovery of the job, into incarnation 1"
    assert "RollBackOutputs" not in kinds(effects)[:kinds(effects).index("Recover")], "nothing switched before it"
    after = effects[kinds(effects).index("Recover") + 1:]
    assert after[0] == rs.HoldAtCut(1, 2), "the cut again, in the recovered incarnation"
    assert kinds(after) == ["HoldAtCut", "HandOver", "RollBackOutputs", "Switch", "Adopt", "Rescaled"]
    assert after[-1] == rs.Rescaled(2, CUT)


def test_after_the_hand_over_a_death_is_recovered_from_in_the_new_widths():
    """A death during the switch does not stop it, and the job comes up in the new widths
    from its last committed snapshot (a recovery, not an adoption)."""
    effects = drive(machine(), {3: rc.Died("the coordinator died")})
    assert kinds(effects) == ["StartHosts", "HoldAtCut", "HandOver", "RollBackOutputs", "Switch", "Adopt", "Rescaled"]
    adopt = effects[5]
    assert isinstance(adopt, rs.Adopt) and adopt.machine.pieces is None
    assert adopt.machine.causes == ["the coordinator died"] and adopt.machine.incarnation == 2
    assert effects[-1] == rs.Rescaled(1, CUT), "switched in incarnation 1, whatever came after"


def test_a_cut_asked_again_past_the_deadline_refuses_the_rescale_naming_why_the_last_one_missed():
    rescale = machine()
    effects = drive(rescale, {1: rs.CutMissed("still waiting for 1 replicas (slow/0)"),
                              3: rc.TimedOut("no rescale cut was complete in time")})
    assert kinds(effects)[-2:] == ["KeepOldWidths", "Refused"] and "HandOver" not in kinds(effects)
    error = effects[-1].error  # type: ignore[union-attr]
    assert isinstance(error, SnapshotError)
    assert str(error) == ("job 'job': no rescale cut was complete in time: job 'job': a rescale cut was not complete: "
                          "still waiting for 1 replicas (slow/0)")
    assert rescale.phase is rs.RescalePhase.FAILED and rescale.on(rs.Held(CUT, REPORTS)) == []


def test_no_cut_started_in_time_refuses_the_rescale_without_a_recovery():
    effects = drive(machine(), {1: rc.TimedOut("the snapshot in flight did not complete in time")})
    assert kinds(effects) == ["StartHosts", "HoldAtCut", "KeepOldWidths", "Refused"]
    assert str(effects[-1].error) == "job 'job': the snapshot in flight did not complete in time"  # type: ignore[union-attr]


@pytest.mark.parametrize("ended_at", [1, 3], ids=["the first cut", "the cut again after a recovery"])
def test_a_job_that_finished_before_its_cut_was_held_refuses_the_rescale_saying_so(ended_at):
    """The job's last epoch completed before the cut was held (after a recovery near the job's
    end, say): the rescale is refused with a ``RescaleError`` naming the job's finish, no
    recovery is started for it and nothing is handed over (until 2026-11-29 such a rescale
    ended neither made nor refused)."""
    rescale = machine()
    ended = rs.JobEnded("its last epoch completed while the rescale's cut was taken")
    effects = drive(rescale, {1: rc.Died("a/0 died"), ended_at: ended} if ended_at == 3 else {ended_at: ended})
    assert kinds(effects)[-2:] == ["KeepOldWidths", "Refused"] and "HandOver" not in kinds(effects)
    assert len(recoveries(effects)) == (ended_at == 3), "only the death's recovery"
    error = effects[-1].error  # type: ignore[union-attr]
    assert isinstance(error, RescaleError)
    assert str(error) == ("job 'job' has finished: its last epoch completed while the rescale's cut was taken; there "
                          "is nothing to rescale, the rescale to {'count': 3, 'out': 3} was not made")
    assert rescale.phase is rs.RescalePhase.FAILED and rescale.on(rs.Held(CUT, REPORTS)) == []


def test_a_hand_over_that_fails_is_recovered_from_then_raised():
    error = ValueError("take_keys of count failed")
    effects = drive(machine(), {2: rs.HandOverFailed(error)})
    assert kinds(effects) == ["StartHosts", "HoldAtCut", "HandOver", "Recover", "KeepOldWidths", "Refused"]
    assert recoveries(effects)[0].causes == [f"job 'job': handing the state over for a rescale failed: {error}"]
    assert effects[-1] == rs.Refused(error), "the very error, once the held replicas run again"


def test_every_recovery_spends_the_jobs_restart_budget():
    """The recoveries a rescale starts count against ``max_restarts`` like any other: with
    the budget spent, the recovery machine fails the job (its executor does) and the rescale
    ends; an executor interrupted that way gives the fresh hosts back."""
    rescale = machine(budget=1)
    rescale.start()
    rescale.on(rs.HostsStarted())
    (first,) = rescale.on(rc.Died("a/0 died"))
    assert isinstance(first, rs.Recover) and kinds(drive_recovery(first.machine))[-1] == "Finished"  # type: ignore[arg-type]
    rescale.on(rs.Recovered(first.machine.incarnation))
    (second,) = rescale.on(rc.Died("a/0 died again"))
    assert isinstance(second, rs.Recover)
    (failed,) = second.machine.start()
    assert isinstance(failed, rc.Failed) and isinstance(failed.error, RecoveryError)
    assert rescale.on(rs.Aborted(repr(failed.error))) == [rs.KeepOldWidths()]


@pytest.mark.parametrize("died_at", [3, 4], ids=["during the switch", "while the new widths adopt"])
def test_a_job_without_recovery_that_meets_a_death_after_the_hand_over_fails_saying_so(died_at):
    """A job started without ``recovery=`` has a budget of no restart (``RestartBudget.none``):
    a death after the hand-over, whose recovery would be in the new widths, fails the job with
    an error that says what happened (no recovery configured, the rescale met a death), not
    "more than max_restarts=0" (before 2026-11-29 on Ray: a replica killed as the job switched)."""
    rescale = rs.Rescaling.between("job", RestartBudget.none("job"), 0, OLD, NEW)
    pending, failed, answers = rescale.start(), None, 0
    while pending and failed is None:
        effect = pending.pop(0)
        if isinstance(effect, rs.Adopt):  # the adoption's recovery, its answers until it fails
            effects = effect.machine.start()
            if died_at == 4 and not isinstance(effects[0], rc.Failed):
                effects = effect.machine.on(rc.Died("job 'job': check/1 died"))
            failed = effects[0]
            break
        event = answer(effect)
        if event is not None:
            pending += rescale.on(rc.Died("job 'job': check/1 died") if answers == died_at == 3 else event)
            answers += 1
    assert isinstance(failed, rc.Failed) and isinstance(failed.error, RecoveryError), failed
    assert str(failed.error) == ("job 'job' was started without recovery=, and its rescale met a failure only a "
                                 "recovery could undo: job 'job': check/1 died; start it with recovery=rt.Recovery(store) "
                                 "to have it recovered")


@pytest.mark.parametrize(("answers", "undo"), [
    (0, []),  # the hosts did not start: nothing to give back
    (1, [rs.KeepOldWidths()]),  # holding at the cut
    (2, [rs.KeepOldWidths()]),  # handing over
    (3, []),  # switched: the job is in the new widths, the hosts are its own
])
def test_an_interrupted_executor_gives_the_fresh_hosts_back_only_before_the_switch(answers, undo):
    rescale = machine()
    effects = rescale.start()
    for _ in range(answers):
        effects = rescale.on(answer(effects[-1]))  # type: ignore[arg-type]
    assert rescale.on(rs.Aborted("KeyboardInterrupt()")) == undo
    assert rescale.phase is rs.RescalePhase.FAILED


def test_an_answer_out_of_turn_is_a_bug_not_a_step():
    rescale = machine()
    rescale.start()
    with pytest.raises(AssertionError, match="STARTING got Switched"):
        rescale.on(rs.Switched())
    rescale.on(rs.HostsStarted())
    with pytest.raises(AssertionError, match="HOLDING got Recovered"):
        rescale.on(rs.Recovered(1))


class Unsplittable(rt.Vertex):
    """Keeps state, but cannot say how it splits by key."""

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        self.send_by(0, message, time)

    def snapshot(self) -> Any:
        return {}


def test_a_vertex_that_cannot_split_its_state_is_refused_before_anything_starts():
    flow = rt.Dataflow("unsplittable")
    flow.input("lines").unary(Unsplittable, exchange=str, name="mine").output("out")
    old = compile_plan(flow, 1)
    with pytest.raises(RescaleError, match="mine"):
        rs.Rescaling.between("job", RestartBudget(3), 0, old, compile_plan(flow, 1, widths=new_widths(old, {"mine": 2})))


#: What may go wrong instead of each answer.
MISHAPS: dict[type, list[rs.RescaleEvent]] = {
    rs.HoldAtCut: [rc.Died("a death while holding"), rs.CutMissed("abandoned"), rc.TimedOut("too late")],
    rs.HandOver: [rc.Died("a death while handing over"), rs.HandOverFailed(ValueError("take_keys"))],
    rs.Switch: [rc.Died("a death while switching")],
}


@settings(max_examples=300, deadline=None)
@given(mishaps=st.dictionaries(st.integers(0, 12), st.integers(0, 2), max_size=4), budget=st.integers(0, 4))
def test_whatever_happens_the_job_ends_in_one_configuration(mishaps, budget):
    """The hand-over comes only after a complete cut; outputs are rolled back and the switch
    made only after a complete hand-over, and never undone; before it every mishap is
    recovered from in the old widths and the cut taken again, in the recovered incarnation."""
    rescale = machine(budget=budget)

    def mishap(k: int, effect: rs.RescaleEffect) -> rs.RescaleEvent | None:
        choices = MISHAPS.get(type(effect), [])
        return choices[mishaps[k] % len(choices)] if k in mishaps and choices else None

    effects = drive(rescale, mishap=mishap)
    names = kinds(effects)
    if "Switch" in names:
        switched = names.index("Switch")
        assert names[switched - 2:switched + 1] == ["HandOver", "RollBackOutputs", "Switch"]
        assert not {"HoldAtCut", "HandOver", "Recover", "KeepOldWidths", "Refused"} & set(names[switched:])
    else:
        assert "RollBackOutputs" not in names and "Adopt" not in names
    holds = [effect for effect in effects if isinstance(effect, rs.HoldAtCut)]
    assert [hold.attempt for hold in holds] == list(range(1, len(holds) + 1))
    for before, after in zip(effects, effects[1:]):
        if isinstance(after, rs.HandOver):
            assert isinstance(before, rs.HoldAtCut) and after.incarnation == before.incarnation
        if isinstance(before, rs.Recover) and isinstance(after, rs.HoldAtCut):
            assert after.incarnation == before.machine.incarnation, "the cut again, in the recovered incarnation"
    if rescale.phase is rs.RescalePhase.DONE:
        assert names[-3:] == ["Switch", "Adopt", "Rescaled"]
    elif rescale.phase is rs.RescalePhase.FAILED:
        assert names[-2:] == ["KeepOldWidths", "Refused"] and "Switch" not in names
    else:  # a recovery failed the job (the budget is spent): the executor stops there
        last = effects[-1]
        assert isinstance(last, (rs.Recover, rs.Adopt)) and last.machine.phase is rc.RecoveryPhase.FAILED
