"""What a stepped ``job.rescale`` decides before anything moves (pure): which rescales can step
(:func:`~raytide.rescale.steps.stepped_vertex`, each refusal saying why; who feeds the job,
:func:`~raytide.driver.stepped.feed_refusal`), and the short switch's
tables (:func:`~raytide.rescale.layout.new_tables` with ``kept``): the owners widened or
narrowed, no key group moving, a narrowing past an owner refused."""

from __future__ import annotations

import collections
import threading
import time

import pytest

import raytide as rt
from examples.connected_components import build_flow
from raytide.core.keygroups import KeyGroupAssignment
from raytide.driver import stepped
from raytide.driver.coordination import RescaleRecord
from raytide.driver.plan_gate import PlanGate
from raytide.driver.stepped import feed_refusal, stepping_default
from raytide.driver.steps_left import MOVE_STEP, PendingPlan, StepsLeft
from raytide.errors import RescaleError
from raytide.physical.plan import compile_plan
from raytide.rescale.layout import new_tables
from raytide.rescale.steps import plan_steps, stepped_vertex
from raytide.rescale.widths import new_widths


def keyed() -> rt.Dataflow:
    flow = rt.Dataflow("keyed")
    flow.input("n", parallelism=1).stateful_map(lambda r: r[0], lambda s, r: (s, r), name="sum").output("out")
    return flow


def rescaled(flow: rt.Dataflow, width: int, widths: dict[str, int]) -> tuple:
    plan = compile_plan(flow, width)
    return plan, compile_plan(flow, width, widths=new_widths(plan, widths))


def test_a_keyed_vertex_with_its_output_fused_behind_steps():
    assert stepped_vertex(*rescaled(keyed(), 2, {"sum": 4})) == ("sum", "")


def test_rescales_steps_do_not_serve_are_refused_saying_why():
    two = rt.Dataflow("two")
    n = two.input("n", parallelism=1)
    n.stateful_map(lambda r: r[0], lambda s, r: (s, r), name="a").output("oa")
    n.stateful_map(lambda r: r[0], lambda s, r: (s, r), name="b").output("ob")
    assert "the widths of 2 chains change" in stepped_vertex(*rescaled(two, 2, {"a": 3, "b": 3}))[1]
    fused = rt.Dataflow("fused")
    fused.input("n", parallelism=1).stateful_map(lambda r: r[0], lambda s, r: (s, r), name="a").map(
        lambda r: r, name="after").output("out")
    assert stepped_vertex(*rescaled(fused, 2, {"a": 3}))[1] == \
        "vertices ['after'] are fused behind 'a': only its state moves in steps"
    loop = build_flow(2)
    vertex, why = stepped_vertex(*rescaled(loop, 2, {"label-propagation": 3}))
    assert vertex is None and "loop" in why


def test_the_short_switch_widens_the_owners_and_moves_no_group():
    plan, grown = rescaled(keyed(), 2, {"sum": 4})
    old = KeyGroupAssignment.contiguous(2)
    routes = [{("n", 0, 0): old}]
    tables = new_tables(grown, {name: plan.width(name) for name in plan.vertices}, routes, kept={"sum", "out"})
    assert tables["sum"].owners == old.owners and tables["sum"].parallelism == 4
    assert new_tables(grown, {name: plan.width(name) for name in plan.vertices}, routes)["sum"].owners != old.owners
    steps = plan_steps(tables["sum"], 4, first_epoch=5, groups_per_step=8)  # then the steps balance them
    assert sorted(collections.Counter(steps.after.owners).values()) == [32] * 4


def test_the_short_switch_narrows_only_emptied_replicas():
    plan, shrunk = rescaled(keyed(), 4, {"sum": 1})
    widths = {name: plan.width(name) for name in plan.vertices}
    emptied = plan_steps(KeyGroupAssignment.contiguous(4), 1, first_epoch=3, groups_per_step=8).after
    tables = new_tables(shrunk, widths, [{("n", 0, 0): KeyGroupAssignment(emptied.owners, 4)}], kept={"sum", "out"})
    assert tables["sum"].owners == emptied.owners and tables["sum"].parallelism == 1
    with pytest.raises(RescaleError, match=r"owned by replicas \[1, 2, 3\] outside \[0, 1\)"):
        new_tables(shrunk, widths, [{("n", 0, 0): KeyGroupAssignment.contiguous(4)}], kept={"sum", "out"})


def test_only_an_idle_feed_keeps_a_rescale_from_stepping(monkeypatch):
    """``job.rescale`` steps whoever feeds: a growth returns once its plan is installed, a shrink waits
    for its steps while another thread feeds or while the caller has pushed nothing at the inputs' epoch
    (its step is cut there), and otherwise returns once its plan is installed, its retirement left to the
    pumps; an idle job holds the whole job, saying why. It steps by default; ``stepped=False`` or
    ``RAYTIDE_STEPPED_RESCALE=0`` holds the whole job."""
    gate = PlanGate("j")
    assert "no input moved" in feed_refusal(gate, time.monotonic())  # never fed
    gate.move("records", 1)  # fed by this thread, the one that rescales
    assert feed_refusal(gate, time.monotonic()) == ""
    gate.feed("records", 1)  # records pushed at the inputs' epoch: still stepped (the pumps retire)
    assert feed_refusal(gate, time.monotonic()) == ""
    other = threading.Thread(target=gate.move, args=("records", 2))
    other.start()
    other.join()
    assert feed_refusal(gate, time.monotonic()) == ""
    monkeypatch.setattr(stepped, "QUIET_S", 0.0)  # the last move is now older than the quiet time
    assert "no input moved to a new epoch within 0 s" in feed_refusal(gate, time.monotonic())
    monkeypatch.delenv(stepped.STEPPED_ENV, raising=False)
    assert stepping_default()
    monkeypatch.setenv(stepped.STEPPED_ENV, "0")
    assert not stepping_default()
    monkeypatch.setenv(stepped.STEPPED_ENV, "1")
    assert stepping_default()


def test_the_steps_left_end_once_the_output_behind_shows_the_last_step_or_the_job_ends_or_a_death():
    """A growth's steps are seen done by the pumps (driver/steps_left.py): once the output fused
    behind the vertex has shown the last step's epoch (its holds kept that epoch open until the
    state came), or the job finished; then the record is filled and the snapshots resume. A
    death ends the plan: the record names it, and the recovery (not this) restarts the snapshots; a
    shrink's plan left to the pumps is made again by the caller once it has recovered the job."""
    message = plan_steps(KeyGroupAssignment.contiguous(1), 2, first_epoch=4, groups_per_step=8).message("sum")
    last, resumed = message.steps[-1][0], []

    def pending() -> tuple[PendingPlan, RescaleRecord]:
        record = RescaleRecord(0, {}, {}, None, 0.0, 0.0, 0.0, 0.0, {}, {}, mode="stepped", stepped={"ended": None})
        return PendingPlan("j", "sum", [], message, lambda: resumed.append(1), record, frozenset({"out"})), record

    left = StepsLeft()
    plan, record = pending()
    left.start(plan)
    assert plan.epochs == (4, last) and last > 4
    assert left.poll(shown={"out": last, "other": None}) and left.plan is None
    assert record.stepped["ended"] == "done" and MOVE_STEP in record.steps and resumed == [1]
    plan, record = pending()
    left.start(plan)
    assert left.poll(finished=True) and record.stepped["ended"] == "done" and resumed == [1]
    plan, record = pending()
    left.start(plan)
    left.abandon("replica check/1 died")()  # a growth's plan: nothing follows the recovery
    assert left.plan is None and resumed == [1]
    assert record.stepped["ended"].startswith("a death during the steps (replica check/1 died)"), record.stepped
    redone: list[str] = []  # a shrink left to the pumps: made again once the caller has recovered the job
    left.start(PendingPlan("j", "sum", [], message, lambda: resumed.append(1), None, frozenset({"out"}), redone.append))
    redo = left.abandon("replica check/2 died")
    assert redone == [] and resumed == [1]
    redo()
    assert redone == ["replica check/2 died"]
