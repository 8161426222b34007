"""A replica recovered alone, as a protocol in one process (:mod:`raytide.testing.alone`):
seeded trials with crashes of the input or a counting replica at any step, exactly once
against the plain-Python reference and the failure-free run, the survivors never restored;
and a planted bug each the trials catch (a replay that skips or repeats a call; dedup off;
progress figures summed, or a lost replica's dues forgotten)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from raytide.errors import RecoveryError
from raytide.physical.protocol import ReplicaKey
from raytide.supervisor.alone import decide
from raytide.testing.alone import AloneRun, AloneWorld, reference, running_counts
from tests.sim.seeds import seeds

WIDTH = 4


def epochs_of(seed: int) -> list[list[int]]:
    """Eight epochs of up to eleven records over six keys: keys come back, so a count off by one shows."""
    rng = random.Random(seed)
    return [[rng.randrange(6) for _ in range(rng.randrange(12))] for _ in range(8)]


def exact(run: AloneRun, seed: int) -> bool:
    """Every epoch once with its records, each key's counts in order, only the lost replicas restored."""
    return run.epochs == reference(epochs_of(seed)) and not run.order_breaks and run.restores == run.crashed


def trial(seed: int, plant: str | None = None) -> bool:
    """One seeded trial with up to three crashes; a refused replay (a gap), or a job that never
    finishes (progress figures that never balance), counts as not exact."""
    try:
        return exact(AloneWorld(epochs_of(seed), WIDTH, seed, crashes=3, plant=plant).run(5_000), seed)  # type: ignore[arg-type]
    except (RecoveryError, AssertionError):
        return False


@pytest.mark.parametrize("seed", seeds(300, "alone", rotate=3))
def test_a_replica_recovered_alone_gives_every_epoch_once(seed):
    run = AloneWorld(epochs_of(seed), WIDTH, seed, crashes=3).run()
    calm = AloneWorld(epochs_of(seed), WIDTH, seed, crashes=0).run()
    assert exact(run, seed) and run.epochs == calm.epochs, f"seed {seed}: {run.order_breaks}"
    assert set(run.kinds) <= {"alone"} and len(run.kinds) == sum(run.crashed.values()), f"seed {seed}"


def test_the_survivors_run_on_while_a_replica_is_lost():
    """They take messages, and the sink completes epochs the lost replica owes nothing of."""
    runs = [AloneWorld(epochs_of(seed), WIDTH, seed, crashes=3).run() for seed in range(40)]
    assert sum(run.survivor_steps > 0 for run in runs) >= 20
    assert sum(run.completed_while_lost > 0 for run in runs) >= 5
    assert sum(sum(run.crashed.values()) for run in runs) >= 40


@pytest.mark.parametrize("plant", ["skip", "repeat", "nodedup", "sum", "forget"])
def test_each_planted_bug_is_caught(plant):
    caught = [seed for seed in range(30) if not trial(seed, plant)]
    assert caught, f"no trial caught the plant {plant!r}"
    assert all(trial(seed) for seed in caught[:3]), "the same trials without the plant are exact"


def consistent(run: AloneRun, epochs: list[list[int]]) -> bool:
    """With two input replicas a key's running counts depend on how its replica interleaved them,
    so there is no one reference: every epoch, each key's records in their epoch, each key's
    counts exactly 1..n, arriving in order, only the lost replicas restored."""
    if set(run.epochs) != set(range(len(epochs))) or run.order_breaks or run.restores != run.crashed:
        return False
    placed = Counter((key, epoch) for epoch, records in run.epochs.items() for key, _ in records)
    counts: dict[int, list[int]] = {}
    for records in run.epochs.values():
        for key, count in records:
            counts.setdefault(key, []).append(count)
    return placed == Counter((key, epoch) for epoch, keys in enumerate(epochs) for key in keys) and \
        all(sorted(seen) == list(range(1, len(seen) + 1)) for seen in counts.values())


def two_inputs(seed: int, plant: str | None = None) -> bool:
    """A trial with two input replicas: a counting replica takes two channels."""
    try:
        run = AloneWorld(epochs_of(seed), WIDTH, seed, crashes=3, plant=plant, inputs=2).run(5_000)  # type: ignore[arg-type]
    except (RecoveryError, AssertionError):
        return False
    return consistent(run, epochs_of(seed))


@pytest.mark.parametrize("seed", seeds(100, "alone-two-inputs", rotate=1))
def test_with_two_inputs_their_replicas_are_recovered_alone(seed):
    assert two_inputs(seed), f"seed {seed}"


def test_a_replica_of_two_channels_recovered_alone_anyway_is_caught():
    """The rule's reason, shown: its replay interleaves the channels otherwise, and the numbers
    the sink drops by name other messages (records in the wrong epoch, counts twice or missing)."""
    plan = running_counts(WIDTH, inputs=2)
    assert "takes 2 channels" in decide(plan, [ReplicaKey(plan.chain_of("count").name, 1)]).why
    assert sum(not two_inputs(seed, "several") for seed in range(30)) >= 5


def test_the_models_job_is_recovered_alone_but_its_output_is_not():
    plan = running_counts(WIDTH)
    assert decide(plan, [ReplicaKey(plan.chain_of("count").name, 2)]).kind == "alone"
    assert decide(plan, [ReplicaKey(plan.chain_of("x").name, 0)]).kind == "alone"
    assert "is an output" in decide(plan, [ReplicaKey(plan.chain_of("out").name, 0)]).why
