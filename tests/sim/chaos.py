"""Fault injection for the in-process runtime's recovery trials: where and when to crash."""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Iterable

from raytide.errors import RaytideError
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import COORDINATOR, PROGRESS, LocalJob
from raytide.testing.outcome import Hang, LocalRecovery
from tests.sim.scenarios import Scenario, as_counters

#: When a trial crashes something: at a random step, once snapshots are committed, during a
#: recovery, or twice close together.
MODES = ("anytime", "after snapshots", "during recovery", "twice in a row")

#: What a run that raises counts as having caught: the runtime's own errors (an epoch handed
#: over twice, a snapshot that cannot commit or be read; the progress core's ValueError for a
#: message that arrived twice), the simulator's checks (AssertionError) and a hang. Anything
#: else (an AttributeError, a TypeError, a KeyError) is a bug in the test or in a plant, and
#: propagates: it is no catch.
BROKEN = (RaytideError, ValueError, AssertionError, Hang)


class Chaos:
    """Schedules the crashes of one trial, some of them only once the job reached a state."""

    def __init__(self, job: LocalJob, rng: random.Random, mode: str, seen: collections.Counter, length: int) -> None:
        """``length``: the steps the same job takes without a crash."""
        self.job, self.rng, self.mode, self.seen = job, rng, mode, seen
        self.targets = [*job.replicas, PROGRESS, COORDINATOR]
        self.snapshots_wanted = rng.randint(1, 2)
        self.armed = True
        if mode in ("anytime", "twice in a row", "during recovery"):
            first = rng.randrange(1, max(2, length))
            self._crash_at(first)
            if mode == "twice in a row":  # a quarter of the time at the very same step
                self._crash_at(first + (0 if rng.random() < 0.25 else rng.randrange(1, 30)))

    def _crash_at(self, step: int) -> None:
        self.job.crash(self.rng.choice(self.targets), at_step=step)

    def after_step(self, job: LocalJob) -> None:
        steps = job.result.steps
        if self.mode == "after snapshots" and self.armed and len(job.result.snapshots) >= self.snapshots_wanted:
            self.armed = False
            self._crash_at(steps + self.rng.randrange(1, 40))
        if self.mode == "during recovery" and self.armed and job.recovery_steps:
            self.armed = False
            self._crash_at(steps + 1 + self.rng.randrange(len(job.recovery_steps)))
        if steps in job.crashes:  # about to happen: note what the job was doing
            if job.recovery_steps:
                self.seen["crash during a recovery"] += 1
            if job.coordinator is not None and job.coordinator.in_flight is not None:
                self.seen["crash while a snapshot is being taken"] += 1
            if job.mail.writes:
                self.seen["crash while local snapshots wait for their writer"] += 1
            if job.result.snapshots:
                self.seen["crash after a committed snapshot"] += 1
            for target in job.crashes[steps]:
                self.seen[f"crash of {'a replica' if target not in (PROGRESS, COORDINATOR) else target}"] += 1
            if len(job.crashes[steps]) > 1:
                self.seen["two crashes at the same step"] += 1


def caught_by(names: Iterable[str], seeds: int, failed: Callable[[str, int], bool]) -> list[tuple[str, int]]:
    """Per scenario in ``names``, the first of ``seeds`` trials that ``failed(name, seed)``
    (where a planted bug shows); a scenario with none is left out."""
    caught = []
    for name in names:
        seed = next((seed for seed in range(seeds) if failed(name, seed)), None)
        if seed is not None:
            caught.append((name, seed))
    return caught


def exact_under_chaos(job: LocalJob, scenario: Scenario, rng: random.Random, seed: int, calm_steps: int,
                      max_steps: int, watch: Callable[[LocalJob], None] | None = None) -> bool:
    """Run ``job`` (of ``scenario``) with the crashes of a recovery trial, in the mode ``seed``
    picks (``calm_steps``: how long the same job runs without a crash; ``watch(job)`` after
    every step); whether it finished with exactly the scenario's output."""
    chaos = Chaos(job, rng, MODES[seed % len(MODES)], collections.Counter(), calm_steps)

    def after(job: LocalJob) -> None:
        chaos.after_step(job)
        if watch is not None:
            watch(job)

    try:
        run = job.run(max_steps=max_steps, after_step=after)
    except BROKEN:  # a hang, a livelock, an epoch handed over twice, a snapshot that cannot be read
        return False
    return run.failure is None and run.finished and as_counters(run.outputs) == scenario.expected


def calm_steps(scenario: Scenario, parallelism: int, seed: int, options: dict, directory: str) -> int:
    """How many steps ``scenario``'s job takes with no crash (where a trial's crashes are drawn from)."""
    recovery = LocalRecovery(SnapshotStore(directory + "-calm"), **options)
    return LocalJob(scenario.flow, scenario.inputs, parallelism, seed, recovery=recovery).run().steps
