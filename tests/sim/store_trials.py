"""Seeded recovery trials on a :class:`~raytide.testing.store_faults.FaultyStore`: the crashes
of a recovery trial (:mod:`tests.sim.chaos`), the store failing beneath them, and what each
trial ended with, for the checks of ``test_store_fault_kinds_sim.py``."""

from __future__ import annotations

import collections
import functools
import random
import tempfile
from dataclasses import dataclass

from raytide.testing.local import LocalJob
from raytide.testing.outcome import LocalRecovery, LocalRun
from raytide.testing.store_faults import FaultyStore, StoreFaults
from tests.sim.chaos import BROKEN, MODES, Chaos, calm_steps
from tests.sim.conftest import MEMORY_FS
from tests.sim.scenarios import SCENARIOS, as_counters

NAMES = ("word count", "keyed", "loop")


@dataclass
class Trial:
    """One trial (scenario ``name``, ``seed``): whether its output was exactly the failure-free
    one, the error it ended with (None: none), its store (what the faults did, what is left)
    and its run."""

    name: str
    seed: int
    exact: bool
    error: BaseException | None
    store: FaultyStore
    run: LocalRun | None


def store_trial(name: str, seed: int, directory: str, faults: StoreFaults, output_commit: str = "epoch") -> Trial:
    """Trial ``seed`` of scenario ``name``: a recovery trial's crashes on a store failing as ``faults`` draws."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10]), "retain": rng.randint(1, 3), "max_restarts": 4,
               "detection": rng.randint(0, 6)}
    parallelism = rng.randint(1, 3)
    calm = _calm(name, seed, parallelism, options["interval"], options["retain"], options["detection"])
    store = FaultyStore(directory, faults, seed)
    recovery = LocalRecovery(store, output_commit=output_commit, **options)  # type: ignore[arg-type]
    job = LocalJob(scenario.flow, scenario.inputs, parallelism, seed, recovery=recovery)
    chaos = Chaos(job, rng, MODES[seed % len(MODES)], collections.Counter(), calm)
    try:
        run = job.run(max_steps=100_000, after_step=chaos.after_step)
    except BROKEN as error:  # a hang, an epoch handed over twice, a store that cannot be read
        return Trial(name, seed, False, error, store, None)
    exact = run.failure is None and run.finished and as_counters(run.outputs) == scenario.expected
    return Trial(name, seed, exact, run.failure, store, run)


@functools.cache
def _calm(name: str, seed: int, parallelism: int, interval: int, retain: int, detection: int) -> int:
    """The steps trial ``seed`` of ``name`` takes with no crash and no fault (the same for
    every kind of fault: the trials of one process measure it once)."""
    options = {"interval": interval, "retain": retain, "max_restarts": 4, "detection": detection}
    with tempfile.TemporaryDirectory(dir=MEMORY_FS if MEMORY_FS.is_dir() else None) as directory:
        return calm_steps(SCENARIOS[name](random.Random(seed)), parallelism, seed, options, directory + "/store")
