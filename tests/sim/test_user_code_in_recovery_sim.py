"""User code that fails only inside a recovery, in the in-process runtime: a ``restore()``
that raises (in a recovery after a crash, at a start from ``restore=``, at a rescale's
hand-over) and an ``on_notify`` that raises only when its epoch is replayed (a poison
record). Each fails the job at once with a ``UserCodeError`` naming the vertex, the replica,
the epoch (or ``restore()``) and the recovery step it was raised in: never a loop through
``max_restarts``, never a hang (docs/recovery.md, "User code failing in a recovery")."""

from __future__ import annotations

import pickle
import random
import warnings
from collections import Counter
from pathlib import Path

import pytest

import raytide as rt
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob, LocalRecovery, LocalRun
from tests.failing_vertices import brittle_flow, poison_flow
from tests.sim.seeds import seeds

EPOCHS = 6


def numbers(rng: random.Random) -> dict[str, list[list[int]]]:
    return {"numbers": [[rng.randrange(30) for _ in range(rng.randint(1, 6))] for _ in range(EPOCHS)]}


def crashed_after_a_commit(job: LocalJob, rng: random.Random, chain: str) -> LocalRun:
    """Run ``job``, crashing a replica of ``chain`` a few steps after its first committed snapshot."""
    victim = rng.choice([key for key in job.replica_keys() if chain in key.chain])
    planned: list[int] = []

    def after_step(job: LocalJob) -> None:
        if job.result.snapshots and not planned:
            planned.append(job.result.steps + rng.randint(1, 30))
            job.crash(victim, planned[0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "skipping snapshot k: not committed" after a crash
        return job.run(max_steps=100_000, after_step=after_step)


def recovery(store: Path, rng: random.Random) -> LocalRecovery:
    return LocalRecovery(SnapshotStore(str(store)), interval=rng.choice([3, 10, 30]), max_restarts=5)


def test_a_restore_that_raises_in_a_recovery_fails_the_job_at_once_naming_the_vertex_and_the_recovery(store_root):
    failed = 0
    for seed in seeds(20, "restore raises"):
        rng = random.Random(seed)
        job = LocalJob(brittle_flow(), numbers(rng), parallelism=2, seed=seed, recovery=recovery(store_root / str(seed), rng))
        run = crashed_after_a_commit(job, rng, "totals")
        if not run.recoveries:  # the job finished before the crash: nothing to restore
            assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
            continue
        failed += 1
        error = run.failure
        assert isinstance(error, rt.UserCodeError), f"seed {seed}: {error!r}, recoveries {run.recoveries}"
        assert (error.vertex, error.where) == ("totals", "its restore()") and error.replica in (0, 1)
        assert error.during.startswith("during the recovery of job 'brittle' to incarnation 1, restoring snapshot "), \
            f"seed {seed}: {error}"
        restored = int(error.during.split("restoring snapshot ")[1].split()[0])
        assert restored in run.snapshots and "died at step" in error.during
        assert "the saved totals cannot be read back" in str(error) and "ValueError" in error.original
        assert len(run.recoveries) == 1 and not run.finished, f"seed {seed}: restarted {run.recoveries}"
    assert failed >= 15, f"only {failed} trials crashed before the job finished"


def test_a_restore_that_raises_at_a_start_from_a_snapshot_or_a_rescale_names_that_step(store_root):
    rng = random.Random(3)
    inputs = numbers(rng)
    first = LocalJob(brittle_flow(), inputs, parallelism=2, seed=3, recovery=recovery(store_root / "s", rng)).run()
    assert first.finished and first.snapshots
    restored = LocalJob(brittle_flow(), inputs, parallelism=2, seed=4, recovery=recovery(store_root / "s", rng),
                        restore="latest").run()
    error = restored.failure
    assert isinstance(error, rt.UserCodeError) and error.where == "its restore()", repr(error)
    assert error.during == f"restoring job 'brittle' from snapshot {max(first.snapshots)} (restore=)"

    rescaled = LocalJob(brittle_flow(), inputs, parallelism=2, seed=5, recovery=recovery(store_root / "r", rng))
    rescaled.rescale({"count": 3}, at_step=20)
    error = rescaled.run(max_steps=100_000).failure
    assert isinstance(error, rt.UserCodeError) and error.vertex == "totals", repr(error)
    assert error.during == "adopting the state handed over in the rescale of job 'brittle' to incarnation 1"
    assert not rescaled.result.recoveries and rescaled.result.rescales == []


def test_a_poison_record_that_fails_only_on_its_replay_names_the_replay_and_fails_at_once(store_root, tmp_path):
    replayed = 0
    for seed in seeds(30, "poison replay"):
        rng = random.Random(seed)
        memory = tmp_path / str(seed)
        memory.mkdir()
        inputs = numbers(rng)
        job = LocalJob(poison_flow(str(memory)), inputs, parallelism=2, seed=seed,
                       recovery=recovery(store_root / str(seed), rng))
        run = crashed_after_a_commit(job, rng, "poison")
        if run.failure is None:  # no epoch notified before the crash came round again
            assert run.finished
            counts = Counter({epoch: sum(n for _, n in records) for epoch, records in run.outputs["per_epoch"].items()})
            assert counts == Counter({e: len(xs) for e, xs in enumerate(inputs["numbers"])}), f"seed {seed}"
            continue
        replayed += 1
        error = run.failure
        assert isinstance(error, rt.UserCodeError) and error.vertex == "poison", f"seed {seed}: {error!r}"
        epoch = error.time.epoch
        assert f"poison record in epoch {epoch}" in error.original
        first = int(error.during.split("(epochs ")[1].split()[0])
        assert error.during.startswith("during the replay of the recovery of job 'poison' to incarnation 1 (epochs "
                                       f"{first} to {EPOCHS - 1} computed again from "), f"seed {seed}: {error}"
        assert first <= epoch <= EPOCHS - 1 and "died at step" in error.during
        assert len(run.recoveries) == 1, f"seed {seed}: restarted {run.recoveries}"
    assert replayed >= 10, f"only {replayed} trials replayed an epoch the poison vertex was notified of"


@pytest.mark.parametrize("during", ["", "during the replay of the recovery of job 'j' to incarnation 2"])
def test_a_user_code_error_keeps_what_raytide_was_doing_when_pickled(during):
    error = rt.UserCodeError("v", 1, rt.Timestamp(4), ValueError("x")).in_context(during) if during else \
        rt.UserCodeError("v", 1, rt.Timestamp(4), ValueError("x"))
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.during, str(copy), copy.time) == (during, str(error), rt.Timestamp(4))
    assert ("failed at epoch 4, during the replay" in str(copy)) == bool(during)
