"""The supervisor's stall rule (:mod:`raytide.supervisor.stalls`) in the simulator: an actor
frozen for good (a process stopped by ``SIGSTOP``: alive to Ray, answering nothing) holds the
job up until the rule pings every actor and declares the silent one failed; it is killed and
recovered from, and the output is exactly the failure-free run's. The Ray driver runs the same
rule (``tests/ray/test_stall_ping.py``)."""

from __future__ import annotations

import random

import pytest

from raytide.snapshots.store import SnapshotStore
from raytide.supervisor import stalls
from raytide.testing.local import COORDINATOR, PROGRESS, LocalJob
from raytide.testing.outcome import Hang, LocalRecovery
from tests.sim.chaos import calm_steps
from tests.sim.scenarios import SCENARIOS, as_counters
from tests.sim.seeds import seeds

pytestmark = pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")

NAMES = ("keyed", "join", "loop")
TRIALS = 8


def stopped_trial(name: str, seed: int, directory: str) -> tuple[bool, LocalJob]:
    """Trial ``seed``: a replica, the progress actor or the coordinator frozen for good at a random
    step of the job, a crash of another actor now and then, stall bounds of a few dozen steps;
    whether the output was exact (a hang is not), and the job."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10]), "timeout": rng.choice([40, 200]), "retain": rng.randint(1, 3),
               "detection": rng.randint(0, 3)}
    parallelism = rng.randint(2, 3)
    calm = calm_steps(scenario, parallelism, seed, options, directory)
    recovery = LocalRecovery(SnapshotStore(directory), stall=rng.choice([10, 50]), ping=rng.choice([1, 20]), **options)
    job = LocalJob(scenario.flow, scenario.inputs, parallelism, seed, recovery=recovery)
    targets = [*job.replica_keys(), PROGRESS, COORDINATOR]
    job.slow_down(rng.choice(targets), 0.0, at_step=rng.randrange(max(1, calm)), steps=10**9)
    if rng.random() < 0.3:
        job.crash(rng.choice(targets), at_step=rng.randrange(max(1, calm)))
    try:
        run = job.run(max_steps=20 * calm + 2_000)
    except Hang:
        return False, job
    return run.failure is None and run.finished and as_counters(run.outputs) == scenario.expected, job


def _declared(job: LocalJob) -> int:
    return sum("the supervisor's ping" in cause or "frozen: no answer" in cause for cause in job.result.recoveries)


@pytest.mark.parametrize("name", NAMES)
def test_an_actor_frozen_for_good_is_declared_failed_and_recovered_from(name, store_root):
    declared = 0
    for seed in seeds(TRIALS, f"stopped {name}"):
        exact, job = stopped_trial(name, seed, str(store_root / str(seed)))
        assert exact, f"{name}, seed {seed}"
        declared += _declared(job)
    assert declared >= 3, f"only {declared} frozen actors were declared failed: the trials froze nothing that mattered"


def test_a_stall_rule_that_declares_nobody_failed_hangs_and_is_caught(store_root, monkeypatch):
    """A planted bug: the rule never declares a silent actor failed (the same plant fails the Ray test)."""
    monkeypatch.setattr(stalls.StallWatch, "silent", lambda self, now: [])
    caught = next(((name, seed) for seed in range(TRIALS) for name in NAMES
                   if not stopped_trial(name, seed, str(store_root / f"{name}-{seed}"))[0]), None)
    assert caught is not None, "no trial caught a stall rule that declares nobody failed"
