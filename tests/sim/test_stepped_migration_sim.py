"""A stepped rescale's message flow under seeded interleavings, with crashes at any step
(tests/sim/stepped_world.py; docs/rescaling.md, "Stepped migration").

Every trial must end with every key's state what the plain-Python reference says (each
record and each loop round processed once, a key's records in sequence), the same as the
failure-free run of the same trial, every group at its new owner and nothing stuck. Planted
bugs these trials catch (docs/rescaling.md, and the report of the commit that added them):
a group routed to its old owner after its step; a new owner that does not keep a group's
records until its state comes; an old owner that hands a group over before its frontier
passes the step.
"""

from __future__ import annotations

import pytest

from tests.sim.seeds import seeds
from tests.sim.stepped_world import SteppedWorld, Trial, checked_run

#: Trials without and with crashes (about 10 ms each, a crash trial runs its failure-free one too).
TRIALS = 100


def run_trial(seed: int, crashes: bool) -> tuple[SteppedWorld, tuple]:
    world = SteppedWorld(Trial.draw(seed, crashes), seed)
    return world, checked_run(world, seed)


@pytest.mark.parametrize("seed", seeds(TRIALS, "stepped migration"))
def test_a_stepped_rescale_keeps_every_key_in_order_and_every_record_once(seed):
    world, _ = run_trial(seed, crashes=False)
    assert world.snapshot is not None


@pytest.mark.parametrize("seed", seeds(TRIALS, "stepped migration crashes"))
def test_a_crash_at_any_step_rolls_back_and_the_rescale_made_again_gives_the_failure_free_result(seed):
    _, calm = run_trial(seed, crashes=False)
    world, final = run_trial(seed, crashes=True)
    assert final == calm, f"seed {seed}: differs from the failure-free run"


def test_crashes_strike_in_the_middle_of_steps():
    """Enough crashes strike while a plan has steps left to make (not only before or after)."""
    struck = 0
    for seed in range(60):
        world = SteppedWorld(Trial.draw(seed, crashes=True), seed)
        world.run()
        struck += world.crashed_mid_plan
    assert struck >= 50  # 84 when last run
