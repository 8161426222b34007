"""The gate a stepped rescale's plan closes on the driver's inputs (raytide/driver/plan_gate.py):
the plan is installed while the inputs flow, and no input reaches the plan's first epoch before
every replica has it (each replica's own check, ``stepping.check_in_time``, is the judge)."""

from __future__ import annotations

import threading
import time

import pytest

from raytide.core.keygroups import KeyGroupAssignment
from raytide.driver.plan_gate import MARGINS, PlanGate
from raytide.engine.stepping import check_in_time
from raytide.errors import RescaleError
from raytide.rescale.steps import plan_steps

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
