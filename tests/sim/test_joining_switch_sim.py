"""A growing stepped rescale whose new replicas join the running job without a new
incarnation and without a hold (tests/sim/joining_world.py; docs/rescaling.md, "A growing
switch without a new incarnation"), under seeded interleavings, with crashes at any step.

Every trial must end with every key's state and every per-epoch count the plain-Python
reference's, the same as the failure-free run, every group at its new owner and nothing
stuck; and the job must keep processing while the replicas join. Planted (docs/rescaling.md
has the failed trials of each): the new replicas' pointstamps not counted by the progress
actor; the plan installed before every sender has a link to the new replicas; the plan's
first epoch chosen from the snapshot rather than after the latest epoch an input reached;
the inputs held while the replicas join; a retiring replica leaving before its hand-overs
are done; the snapshot after the steps taken of the old replicas only.
"""

from __future__ import annotations

import pytest

from tests.sim.joining_world import JoiningWorld, growing_trial, shrinking_trial
from tests.sim.seeds import seeds
from tests.sim.stepped_world import checked_run

#: Trials without and with crashes (about 50 ms each on a loaded machine; a crash trial runs its failure-free one too).
TRIALS = 20


def run_trial(seed: int, crashes: bool, draw=growing_trial) -> tuple[JoiningWorld, tuple]:
    world = JoiningWorld(draw(seed, crashes), seed)
    return world, checked_run(world, seed)


@pytest.mark.parametrize("seed", seeds(TRIALS, "joining switch"))
def test_new_replicas_join_the_running_job_and_every_record_counts_once_in_order(seed):
    world, _ = run_trial(seed, crashes=False)
    assert world.installed and world.plan.width == world.trial.width


@pytest.mark.parametrize("seed", seeds(TRIALS, "joining switch crashes"))
def test_a_crash_at_any_step_of_the_join_or_the_steps_gives_the_failure_free_result(seed):
    _, calm = run_trial(seed, crashes=False)
    _, final = run_trial(seed, crashes=True)
    assert final == calm, f"seed {seed}: differs from the failure-free run"


@pytest.mark.parametrize("seed", seeds(TRIALS // 2, "leaving switch crashes"))
def test_retiring_replicas_leave_once_their_hand_overs_are_done_without_a_hold(seed):
    """The shrink's mirror: the plan installed while the job runs, each retiring replica gone
    (its links and what was on its way to it dropped) once its steps are done."""
    calm_world, calm = run_trial(seed, crashes=False, draw=shrinking_trial)
    assert calm_world.left == set(range(calm_world.trial.width, calm_world.trial.old.parallelism))
    _, final = run_trial(seed, crashes=True, draw=shrinking_trial)
    assert final == calm, f"seed {seed}: differs from the failure-free run"


def test_the_job_runs_while_the_replicas_join_and_crashes_strike_then():
    """No hold: records are delivered between the rescale's start and the plan's install in
    every trial; and crashes strike during the join, and after the snapshot that follows the
    steps (the joined replicas' state in it), not only before or during the steps."""
    running = joining = after = 0
    for seed in range(TRIALS):
        calm = JoiningWorld(growing_trial(seed, crashes=False), seed)
        calm.run()
        running += calm.during_join > 0
        crashed = JoiningWorld(growing_trial(seed, crashes=True), seed)
        crashed.run()
        joining += crashed.crashed_joining
        after += crashed.crashed_after_steps
    assert running == TRIALS
    assert joining >= 10 and after >= 5  # 18 and 9 when last run
