"""A store that fails writes and commits now and then, under crashes: the in-process runtime
abandons the snapshots it could not write (as the Ray writer thread and coordinator do), runs
on, and every trial still gives exactly the failure-free output."""

from __future__ import annotations

import random

import pytest

from raytide.snapshots.coordinator import Acknowledgement
from raytide.snapshots.recovery import part_name
from raytide.snapshots.store import PartInfo
from raytide.testing.local import LocalJob
from raytide.testing.outcome import FlakyStore, LocalRecovery
from tests.sim.chaos import calm_steps, exact_under_chaos
from tests.sim.scenarios import SCENARIOS

pytestmark = pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")  # one the store failed to commit

NAMES = ("word count", "keyed", "loop")
TRIALS = 20
FAILURE_RATE = 0.15


def faulty_trial(name: str, seed: int, directory: str) -> tuple[bool, int]:
    """Trial ``seed`` of scenario ``name`` on a :class:`FlakyStore`, with the crashes of a
    recovery trial; whether its output was exact, and how many store calls failed."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10]), "retain": rng.randint(1, 3), "max_restarts": 4,
               "detection": rng.randint(0, 6)}
    parallelism = rng.randint(1, 3)
    calm = calm_steps(scenario, parallelism, seed, options, directory)
    store = FlakyStore(directory, FAILURE_RATE, seed)
    job = LocalJob(scenario.flow, scenario.inputs, parallelism, seed, recovery=LocalRecovery(store, **options))
    return exact_under_chaos(job, scenario, rng, seed, calm, 100_000), store.failures


@pytest.mark.parametrize("name", NAMES)
def test_failed_writes_and_commits_are_abandoned_and_the_output_stays_exact(name, store_root):
    failures = 0
    for seed in range(TRIALS):
        exact, failed = faulty_trial(name, seed, str(store_root / str(seed)))
        assert exact, f"{name}, seed {seed}"
        failures += failed
    assert failures >= TRIALS, f"the store failed only {failures} times in {TRIALS} trials: the test proves little"


def _acknowledged_anyway(self: LocalJob, to: object = None) -> None:
    """A planted bug: a writer that acknowledges a part it could not write."""
    assert self.recovery is not None
    incarnation, snapshot = self.mail.writes.pop(self.rng.randrange(len(self.mail.writes)))
    name = part_name(snapshot.key)
    try:
        part = self.recovery.store.write_part(snapshot.snapshot_id, name, snapshot.data)
    except OSError:
        part = PartInfo(name, len(snapshot.data), "0" * 64)
    self.mail.acks.append((incarnation, Acknowledgement(snapshot.key, snapshot.snapshot_id, incarnation, (part,),
                                                        snapshot.summary)))


def test_a_failed_write_taken_for_a_written_one_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(LocalJob, "_write", _acknowledged_anyway)
    caught = next((seed for seed in range(TRIALS) if not faulty_trial("keyed", seed, str(store_root / str(seed)))[0]), None)
    assert caught is not None, "no trial caught a snapshot committed with a part that was never written"
