"""The gate a stepped rescale's plan closes on the driver's inputs (raytide/driver/plan_gate.py):
the plan is installed while the inputs flow, and no input reaches the plan's first epoch before
every replica has it (each replica's own check, ``stepping.check_in_time``, is the judge)."""

from __future__ import annotations

import threading
import time
import types

import pytest

import raytide as rt
from raytide.core.keygroups import KeyGroupAssignment
from raytide.driver import plan_gate
from raytide.driver.plan_gate import MARGINS, PlanGate
from raytide.engine.replica import ReplicaCore
from raytide.engine.stepping import check_in_time
from raytide.errors import RescaleError
from raytide.physical.plan import compile_plan
from raytide.rescale.steps import plan_steps
from tests.unit.test_replica_core import Recorder

REPLICAS = 3


class Feeder(threading.Thread):
    """An input fed from another thread: each epoch's move through the gate, then each replica
    of the input told (as its advance reaches it), until ``upto``."""

    def __init__(self, gate: PlanGate, start: int, upto: int, replicas: list[dict[str, int | None]]) -> None:
        super().__init__(daemon=True)
        self.gate, self.epoch, self.upto, self.replicas = gate, start, upto, replicas
        self.trying: dict[int, threading.Event] = {epoch: threading.Event() for epoch in range(start, upto + 1)}

    def run(self) -> None:
        while self.epoch < self.upto:
            self.trying[self.epoch + 1].set()
            self.gate.move("records", self.epoch + 1)
            self.epoch += 1
            for replica in self.replicas:
                replica["records"] = self.epoch


def test_no_input_reaches_the_first_epoch_before_every_replica_has_the_plan():
    gate, replicas = PlanGate("j"), [{"records": 5} for _ in range(REPLICAS)]
    gate.move("records", 5)
    first = gate.close_ahead({"records": 5}, 2, time.monotonic() + 30)
    assert first == 7
    message = plan_steps(KeyGroupAssignment.contiguous(2), 3, first, 8).message("v")
    feeder = Feeder(gate, 5, first + 3, replicas)
    feeder.start()
    assert feeder.trying[first].wait(10), "the feeder never tried to reach the first epoch"
    feeder.join(0.05)  # a gate that let it through would have let the replicas reach the first epoch by now
    for index, replica in enumerate(replicas):  # the install: each replica checks the plan came in time
        check_in_time(message, dict(replica), f"replica {index}")
    assert feeder.epoch == first - 1, "the epochs below the first went on while the plan was installed"
    held = gate.open()
    feeder.join(10)
    assert feeder.epoch == first + 3 and held > 0


def test_the_first_epoch_counts_a_move_let_through_but_not_yet_in_the_drivers_epochs():
    gate = PlanGate("j")
    gate.move("records", 10)  # under the input's lock, before the driver's epochs say 10
    assert gate.close_ahead({"records": 5, "other": 3}, 1, time.monotonic() + 30) == 11
    gate.open()


def test_a_closed_input_is_refused_and_a_gate_past_its_deadline_says_who_waited():
    gate = PlanGate("j")
    with pytest.raises(RescaleError, match=r"job 'j': inputs \['a'\] closed"):
        gate.close_ahead({"a": None, "b": 4}, 1, time.monotonic() + 30)
    gate.close_ahead({"b": 4}, 1, time.monotonic())
    gate.move("b", 4)  # below the gate: never waits
    with pytest.raises(RescaleError, match=r"job 'j': input 'b' waited .* to move to epoch 5 .*first step at epoch 5"):
        gate.move("b", 5)
    assert gate.open() >= 0.0
    gate.move("b", None)  # open again: a close goes through


def test_the_margin_is_at_least_one_epoch_and_at_most_the_cap():
    gate = PlanGate("j")
    assert MARGINS[0] <= gate.margin() <= MARGINS[1]
    for epoch in range(20):
        gate.move("records", epoch)
    assert MARGINS[0] <= gate.margin() <= MARGINS[1]
    with pytest.raises(RescaleError, match="margin of 0"):
        gate.close_ahead({"records": 20}, 0, time.monotonic() + 30)


def test_the_epochs_within_a_time_follow_the_inputs_recent_pace(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(plan_gate, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    gate = PlanGate("j")
    gate.move("records", 1)
    assert gate.epochs_within(1.0) is None  # one move: no pace yet
    for epoch in range(2, 50):  # 64 epochs a second, then (the last 20) 4 (times exact in binary)
        clock[0] += 1 / 64 if epoch < 30 else 0.25
        gate.move("records", epoch)
    assert gate.epochs_within(1.0) == 4  # the recent moves only: 4 epochs a second
    for epoch in range(50, 70):
        clock[0] += 1 / 64
        gate.move("records", epoch)
    assert gate.epochs_within(1.0) == 64 and gate.epochs_within(0.15) == 10  # 9.6 rounded up


def test_a_plan_cut_at_the_inputs_own_epoch_only_while_nothing_was_pushed_at_it():
    """A caller that feeds the job itself shrinks it with one step at its inputs' epoch (no other epoch
    need come for it) if it pushed nothing at that epoch yet: the gate knows each push (``feed``), holds
    pushes at that epoch while the plan is installed, and each replica refuses a plan at an epoch its
    input took records at (a restored input's epoch, not moved through this gate, is never cut at)."""
    gate = PlanGate("j")
    assert gate.close_at_frontier({"records": 0}, time.monotonic() + 30) is None  # never moved here: unknown
    gate.move("records", 3)
    gate.feed("records", 3)
    assert gate.close_at_frontier({"records": 3}, time.monotonic() + 30) is None  # records of 3 went out
    gate.move("records", 4)
    assert gate.close_at_frontier({"records": 4, "other": 2}, time.monotonic() + 30) is None  # 'other' unknown
    gate.move("other", 2)
    assert gate.close_at_frontier({"records": 4, "other": 2}, time.monotonic() + 30) == 4
    pushing = threading.Thread(target=gate.feed, args=("records", 4), daemon=True)
    pushing.start()
    pushing.join(0.05)
    assert pushing.is_alive(), "a push at the plan's first epoch went on while the plan was installed"
    gate.feed("other", 2)  # below the gate: never waits
    message = plan_steps(KeyGroupAssignment.contiguous(2), 1, 4, 128).message("v")
    check_in_time(message, {"records": 4}, "replica 0", {"records": 3})  # at the epoch, nothing taken at it: in time
    gate.open()
    pushing.join(10)
    assert not pushing.is_alive()
    with pytest.raises(RescaleError, match=r"input 'records' is at epoch 4 and took records at it"):
        check_in_time(message, {"records": 4}, "replica 0", {"records": 4})
    with pytest.raises(RescaleError, match=r"input 'records' is at epoch 5"):
        check_in_time(message, {"records": 5}, "replica 0", {})


def test_an_input_replica_takes_a_plan_at_its_epoch_only_before_records_of_it():
    """The replica's side of the cut at the inputs' epoch: its core knows whether its input took records
    at its epoch (``ReplicaCore.fed``) and refuses the plan then."""
    flow = rt.Dataflow("keyed")
    flow.input("n", parallelism=1).stateful_map(lambda r: r[0], lambda s, r: (s, r), name="sum").output("out")
    plan = compile_plan(flow, 2)
    message = plan_steps(KeyGroupAssignment.contiguous(2), 1, 3, 128).message("sum")
    cores = [ReplicaCore(plan, plan.chain_of("n").name, 0, Recorder()) for _ in range(2)]
    for core in cores:
        core.push_input("n", [(1, 1)], 0)
        core.advance_input("n", 3)
    cores[0].install_plan(message)  # nothing of epoch 3 taken: in time
    cores[1].push_input("n", [(2, 2)], 3)
    with pytest.raises(RescaleError, match=r"input 'n' is at epoch 3 and took records at it"):
        cores[1].install_plan(message)
