"""Snapshots and recovery in the in-process runtime: seeded trials that crash a replica, the
progress core or the coordinator at a random moment (before any snapshot, after some,
while one is being aligned or written, during a recovery, twice in a row), and check
that every trial finishes with exactly the output of a run that never failed: each
epoch handed over once (the runtime refuses a second time) with the reference's records.

Snapshots go to a real store in a temporary directory. The planted bugs at the end show
that these trials catch a broken piece of the protocol.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from raytide.engine.delivery import Deliveries
from raytide.engine.replica import ReplicaCore
from raytide.progress.outputs import OutputLog
from raytide.snapshots import replica_state
from raytide.snapshots.barriers import SnapshotComplete
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import PROGRESS, LocalJob, LocalRecovery, LocalRun
from tests.sim.chaos import BROKEN, MODES, Chaos, caught_by
from tests.sim.frontier_oracle import check_frontiers_cover_the_truth
from tests.sim.scenarios import SCENARIOS, Scenario, as_counters
from tests.sim.seeds import seeds

#: Trials per scenario: 850 in all. The loops cost 4-5 times as much per trial as the others
#: and get fewer: as many as it takes to crash progress and the coordinator (one target among
#: a dozen replicas) 5 times each, with a margin (the nested loop's 5th coordinator crash is in
#: trial 98, the loop's in trial 35; the loop's first 60 seeds are also the ones
#: test_the_trials_restore_from_committed_snapshots looks at). Every planted bug below fails
#: the loops' trials by seed 6 (nested loop: seed 1).
TRIALS = {"word count": 220, "keyed": 220, "join": 220, "loop": 80, "nested loop": 110}
#: Of those, the first trials per scenario also run the frontier oracle at every step (a trial
#: with the oracle fails wherever the same trial without it does, so the planted bugs below
#: fail these too, by seed 6).
ORACLE_TRIALS = {"word count": 30, "keyed": 30, "join": 30, "loop": 15, "nested loop": 15}


@dataclass
class Trial:
    """One seeded trial: its scenario, the job and what happened."""

    scenario: Scenario
    job: LocalJob
    mode: str
    run: LocalRun | None = None
    error: BaseException | None = None

    @property
    def exact(self) -> bool:
        run = self.run
        return (self.error is None and run is not None and run.failure is None and run.finished
                and as_counters(run.outputs) == self.scenario.expected)

    def describe(self) -> str:
        run = self.run
        if self.error is not None:
            return f"{self.mode}: raised {self.error!r}"
        assert run is not None
        return (f"{self.mode}: failure={run.failure!r} finished={run.finished} recoveries={run.recoveries} "
                f"snapshots={run.snapshots}\n got {as_counters(run.outputs)}\n expected {self.scenario.expected}")


def trial(name: str, seed: int, store_dir: str, seen: collections.Counter | None = None,
          oracle: Callable[[LocalJob], None] | None = None, nodes: int | None = None, numbered: bool = False,
          alone: bool = False) -> Trial:
    """Trial ``seed`` of scenario ``name``: the same job is run without a crash first (which
    must give the reference output too) to learn how many steps it takes. ``nodes``: the
    replicas' progress goes through a relay per node (``LocalJob(nodes=)``), and a group's relay
    per two nodes. ``numbered``, ``alone``: ``LocalRecovery(numbered=, alone=)``."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10, 30]), "retain": rng.randint(1, 3), "max_restarts": 4,
               "detection": rng.randint(0, 6)}
    parallelism, chaining = rng.randint(1, 3), rng.random() < 0.8

    def job(directory: str) -> LocalJob:
        recovery = LocalRecovery(SnapshotStore(directory), **options, numbered=numbered, alone=alone)
        return LocalJob(scenario.flow, scenario.inputs, parallelism, seed, chaining, recovery=recovery, nodes=nodes,
                        relay_fanin=2)

    calm = job(store_dir + "-calm").run()
    assert calm.finished and as_counters(calm.outputs) == scenario.expected, f"{name}, seed {seed}, no crash"
    mode = MODES[seed % len(MODES)]
    result = Trial(scenario, job(store_dir), mode)
    chaos = Chaos(result.job, rng, mode, seen if seen is not None else collections.Counter(), calm.steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "skipping snapshot k: not committed" after a crash
        try:
            result.run = result.job.run(max_steps=100_000, after_step=lambda job: [chaos.after_step(job),
                                                                                  oracle and oracle(job)])
        except BROKEN as error:  # a hang, a livelock or an epoch handed over twice
            result.error = error
    return result


#: Trials per scenario with the progress relayed per node; a relay is a replica's host, so a
#: replica's crash is also its relay's when it is the first of its node (and its group's
#: relay's, on 3 and 4 nodes, a group per two nodes).
RELAYED_TRIALS = {"word count": 200, "keyed": 200, "join": 200, "loop": 80, "nested loop": 100}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_crash_recovers_exactly_with_progress_relayed_per_node(name, store_root):
    """With the replicas on 1 to 4 nodes, each node's progress through a relay (on 3 and 4
    nodes, some through a group's relay) that loses what it gathered when its host dies,
    every trial still ends with the failure-free output."""
    recoveries = 0
    for seed in seeds(RELAYED_TRIALS[name], f"recovery relayed {name}"):
        result = trial(name, seed, str(store_root / str(seed)), nodes=1 + seed % 4)
        assert result.exact, f"{name}, seed {seed}, {1 + seed % 4} nodes: {result.describe()}"
        recoveries += len(result.run.recoveries) if result.run else 0
    assert recoveries >= RELAYED_TRIALS[name] * 3 // 4, recoveries


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_crash_recovers_with_exactly_the_failure_free_output(name, store_root):
    """Every trial ends with the failure-free output; in the first :data:`ORACLE_TRIALS`, the
    rebuilt tracker (restored capabilities, logged back-edge records) also covers the truth
    at every step once a recovery is over, as the hold-back rule's oracle checks."""
    seen: collections.Counter = collections.Counter()
    recoveries = 0
    for seed in seeds(TRIALS[name], f"recovery {name}"):
        oracle = check_frontiers_cover_the_truth if seed < ORACLE_TRIALS[name] else None
        result = trial(name, seed, str(store_root / str(seed)), seen, oracle=oracle)
        assert result.exact, f"{name}, seed {seed}: {result.describe()}"
        recoveries += len(result.run.recoveries) if result.run else 0
    # The trials reached the states they are meant to crash in (or this test proves little).
    assert recoveries >= TRIALS[name] * 3 // 4, recoveries
    for state in ("crash during a recovery", "crash while a snapshot is being taken",
                  "crash after a committed snapshot", "crash of progress", "crash of coordinator", "crash of a replica"):
        assert seen[state] >= 5, dict(seen)
    assert seen["two crashes at the same step"] >= 1, dict(seen)


def test_restarts_are_bounded_and_the_error_names_every_failure(store_root):
    scenario = SCENARIOS["word count"](random.Random(1))
    job = LocalJob(scenario.flow, scenario.inputs, parallelism=2, seed=1,
                   recovery=LocalRecovery(SnapshotStore(str(store_root)), max_restarts=1, detection=0))
    victim = next(iter(job.replicas))
    job.crash(victim, at_step=5)
    job.crash(PROGRESS, at_step=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run = job.run()
    error = run.failure
    assert type(error).__name__ == "RecoveryError", run.failure
    assert "max_restarts=1" in str(error) and f"{victim} died at step 5" in str(error)
    assert "progress died at step 30" in str(error)


# -- planted bugs: each must make some trial give a wrong output, fail, or hang ----------------


def keep_nothing(self, marker, alignment_s):
    """A planted bug: output replicas drop the records they received at every snapshot."""
    for epochs in self.kept.values():
        epochs.clear()
    return original_take(self, marker, alignment_s)


original_take = ReplicaCore._take


def no_incarnation_check(self, key, incarnation):
    """A planted bug: messages from before a rollback are delivered."""
    return key not in self.dead


def forget_delivered(self, outputs, delivered=None):
    """A planted bug: the new progress core releases epochs the driver already has."""
    original_output_log_init(self, outputs, None)


original_output_log_init = OutputLog.__init__


def uncounted_log(snapshot_id, key, taken, logged):
    """A planted bug: the tracker is rebuilt without the logged back-edge records' pointstamps."""
    snapshot = original_complete(snapshot_id, key, taken, logged)
    summary = dataclasses.replace(snapshot.summary, capabilities=taken.capabilities)
    return dataclasses.replace(snapshot, summary=summary)


original_complete = replica_state.complete


PLANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], tuple[str, ...]]] = {
    "logged records not counted": (lambda mp: mp.setattr(replica_state, "complete", uncounted_log),
                                   ("loop", "nested loop")),
    "back-edge records not logged": (
        lambda mp: mp.setattr(ReplicaCore, "_apply_barrier_effects", _logging_nothing()),
        ("loop", "nested loop")),
    "kept outputs dropped": (lambda mp: mp.setattr(ReplicaCore, "_take", keep_nothing), ("join",)),
    "no incarnation check": (lambda mp: mp.setattr(LocalJob, "_current", no_incarnation_check),
                             ("word count", "keyed", "loop")),
    "delivered epochs forgotten": (lambda mp: mp.setattr(OutputLog, "__init__", forget_delivered),
                                   ("word count", "keyed")),
    # The same, with the driver's own check off: the simulator counts hand-outs itself.
    "delivered epochs forgotten, unchecked": (
        lambda mp: [mp.setattr(OutputLog, "__init__", forget_delivered),
                    mp.setattr(Deliveries, "expect", lambda self, name, epoch: None)], ("word count", "keyed")),
}


#: Trials per scenario a planted bug has to show in (where not :data:`PLANT_SEEDS`). Dropped
#: kept outputs show only when a crash comes between a snapshot and the driver's receipt of
#: an epoch shipped before it, a narrow window: it first shows at join's seed 9 (2026-11-27;
#: 122 before), and at word count's 253, past what is run, so word count is not tried.
PLANT_SEEDS, PLANT_SEEDS_FOR = 120, {"kept outputs dropped": 200}


def _logging_nothing() -> Callable:
    """A planted bug: the records in flight on a back edge at the cut are not saved
    (``_apply_barrier_effects`` whose SnapshotComplete carries no logged records)."""
    original = ReplicaCore._apply_barrier_effects

    def apply(self, effects):
        return original(self, [SnapshotComplete(e.snapshot_id, {}) if isinstance(e, SnapshotComplete) else e
                               for e in effects])
    return apply


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_bug_in_recovery_is_caught(monkeypatch, store_root, plant):
    apply, names = PLANTS[plant]
    apply(monkeypatch)
    caught = caught_by(names, PLANT_SEEDS_FOR.get(plant, PLANT_SEEDS),
                       lambda name, seed: not trial(name, seed, str(store_root / f"{name}-{seed}")).exact)
    assert caught, f"no trial caught the planted bug {plant!r}"


def test_the_trials_restore_from_committed_snapshots(store_root):
    """The trials are not all restarts from scratch: recoveries restore committed snapshots
    whose back-edge logs are not empty, in the loops."""
    restored_with_log = 0
    original_load = replica_state.load

    def counting_load(data):
        nonlocal restored_with_log
        state, batches = original_load(data)
        restored_with_log += bool(batches)
        return state, batches

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replica_state, "load", counting_load)
        for seed in range(60):  # stops at the first such trial: the main test runs all of these seeds
            assert trial("loop", seed, str(store_root / str(seed))).exact
            if restored_with_log:
                break
    assert restored_with_log > 0

