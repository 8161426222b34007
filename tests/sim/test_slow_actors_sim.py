"""Slow but alive replicas under crashes: a replica whose mailboxes drain slowly keeps
snapshots from completing within their timeout, so the coordinator abandons them and their
acknowledgements come late; every trial still gives exactly the failure-free output."""

from __future__ import annotations

import random

import pytest

from raytide.snapshots import coordinator
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob
from raytide.testing.outcome import LocalRecovery
from tests.sim.chaos import BROKEN, calm_steps, exact_under_chaos
from tests.sim.scenarios import SCENARIOS
from tests.sim.seeds import seeds

pytestmark = pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")

NAMES = ("keyed", "join", "loop")
TRIALS = 12


def slow_trial(name: str, seed: int, directory: str) -> tuple[bool, int]:
    """Trial ``seed`` of scenario ``name`` with one replica slowed down and a snapshot timeout
    of a few dozen steps, and the crashes of a recovery trial; whether its output was exact,
    and how many snapshots were abandoned."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10]), "timeout": rng.choice([20, 40, 80]), "retain": rng.randint(1, 3),
               "max_restarts": 4, "detection": rng.randint(0, 6)}
    parallelism = rng.randint(2, 3)
    try:
        calm = calm_steps(scenario, parallelism, seed, options, directory)
    except BROKEN:  # the run without crashes broke already (a planted bug): not exact
        return False, 0
    job = LocalJob(scenario.flow, scenario.inputs, parallelism, seed,
                   recovery=LocalRecovery(SnapshotStore(directory), **options))
    job.slow_down(rng.choice(job.replica_keys()), rng.choice([0.02, 0.05, 0.1]))
    abandoned = 0

    def count(job: LocalJob) -> None:
        nonlocal abandoned
        if job.coordinator is not None:
            abandoned = max(abandoned, job.coordinator.stats.abandoned)

    return exact_under_chaos(job, scenario, rng, seed, calm, 200_000, watch=count), abandoned


@pytest.mark.parametrize("name", NAMES)
def test_a_slow_replica_costs_snapshots_never_the_output(name, store_root):
    abandoned = 0
    for seed in seeds(TRIALS, f"slow actors {name}"):
        exact, lost = slow_trial(name, seed, str(store_root / str(seed)))
        assert exact, f"{name}, seed {seed}"
        abandoned += lost
    assert abandoned >= 3, f"only {abandoned} snapshots timed out: the slow replica slowed nothing down"


def _taking_late_acknowledgements(original):
    """A planted bug: the coordinator counts a late acknowledgement of an abandoned snapshot
    for the one in flight (its part is of another cut)."""
    def acknowledge(self, ack, now):
        flight = self.in_flight
        if flight is not None and ack.incarnation == self.incarnation and ack.snapshot_id < flight.snapshot_id:
            ack = coordinator.Acknowledgement(ack.replica, flight.snapshot_id, ack.incarnation, ack.parts, ack.summary)
        return original(self, ack, now)
    return acknowledge


def test_late_acknowledgements_taken_for_current_ones_are_caught(store_root, monkeypatch):
    monkeypatch.setattr(coordinator.CoordinatorCore, "acknowledge",
                        _taking_late_acknowledgements(coordinator.CoordinatorCore.acknowledge))
    caught = next(((name, seed) for name in NAMES for seed in range(TRIALS)
                   if not slow_trial(name, seed, str(store_root / f"{name}-{seed}"))[0]), None)
    assert caught is not None, "no trial caught a snapshot committed from parts of two cuts"
