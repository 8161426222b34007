"""A slow or frozen driver: the supervisor's turn (its pushes to the inputs, its polls and
hand-outs, noticing deaths, a recovery's steps, learning of commits) stops for a while and
resumes. Every trial's output is exactly the failure-free run's, never a hang; a death while the
driver is frozen is handled when it thaws, and a planted bug that forgets it is caught."""

from __future__ import annotations

import random

import pytest

from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import DRIVER, LocalJob
from raytide.testing.outcome import LocalRecovery
from tests.sim.scenarios import SCENARIOS, as_counters
from tests.sim.seeds import seeds
from tests.sim.test_zombies_sim import NAMES, TRIALS, trial

pytestmark = pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")


def driver_trial(name: str, seed: int, directory: str) -> tuple[bool, LocalJob]:
    """A crash trial (:func:`tests.sim.test_zombies_sim.trial`) whose driver is slowed down throughout
    or frozen a few times for a stretch of steps, its output committed per epoch or at snapshots."""
    commit = random.Random(-seed - 1).choice(["epoch", "snapshot"])
    return trial(name, seed, directory, frozen=(DRIVER,), output_commit=commit)


@pytest.mark.parametrize("name", NAMES)
def test_a_frozen_driver_delays_never_breaks(name, store_root):
    for seed in seeds(TRIALS, f"frozen driver {name}"):
        exact, _ = driver_trial(name, seed, str(store_root / str(seed)))
        assert exact, f"{name}, seed {seed}"


def _frozen_job(store_root, freeze_at: int, freeze_for: int) -> LocalJob:
    scenario = SCENARIOS["keyed"](random.Random(3))
    job = LocalJob(scenario.flow, scenario.inputs, 2, 3,
                   recovery=LocalRecovery(SnapshotStore(str(store_root)), interval=3, detection=0))
    job.slow_down(DRIVER, 0.0, at_step=freeze_at, steps=freeze_for)
    job.crash(job.replica_keys()[0], at_step=freeze_at + 5)
    return job


def test_a_death_while_the_driver_is_frozen_is_handled_when_it_thaws(store_root):
    """Noticed at once on a live driver (``detection=0``), the death waits for the thaw; nothing is
    pushed, polled or recovered meanwhile; the output is exact."""
    scenario = SCENARIOS["keyed"](random.Random(3))
    job = _frozen_job(store_root, 40, 300)
    started: list[int] = []
    polled: list[int] = []

    def watch(job: LocalJob) -> None:
        if job.recovering is not None and not started:
            started.append(job.result.steps)
        polled.append(len(job.result.events))

    run = job.run(max_steps=100_000, after_step=watch)
    assert run.finished and as_counters(run.outputs) == scenario.expected
    assert started and started[0] > 340, f"the recovery started at step {started}, while the driver was frozen"
    assert len(set(polled[45:339])) == 1, "the frozen driver polled job events"


def test_deaths_forgotten_while_the_driver_is_frozen_are_caught(store_root, monkeypatch):
    """A planted bug: the supervisor's turn skipped while the driver is frozen drops the deaths
    noticed meanwhile (as a driver that polls the failures away without acting on them): the job
    waits for the dead replica, which a trial catches as a hang."""
    original = LocalJob._supervise

    def forgetting(self: LocalJob) -> None:
        if not self._driver_awake:
            self.failures = [(step, cause) for step, cause in self.failures if step > self.result.steps]
        original(self)

    monkeypatch.setattr(LocalJob, "_supervise", forgetting)
    caught = next(((name, seed) for seed in range(TRIALS) for name in NAMES
                   if not driver_trial(name, seed, str(store_root / f"{name}-{seed}"))[0]), None)
    assert caught is not None, "no trial caught a death forgotten while the driver was frozen"
