"""Rescaling a running job, on the in-process runtime, with crashes before, during and after.

Each seeded trial starts a scenario's dataflow at 1 to 5 replicas and asks, at random
steps, for one to three rescales of random vertices to 1 to 5 replicas (keyed and
stateless vertices, vertices inside loops; inputs keep their width). In half the trials
something crashes: a replica, the progress core or the coordinator, at a random step,
while the replicas align on a rescale's cut, while the held replicas hand their state over
(one replica per step, so between two), or while the rescaled replicas adopt their state.
The rescale runs in the steps of the Ray driver: both execute
:class:`~raytide.rescale.rescaling.Rescaling`. Every trial must hand out exactly the output
of the scenario's plain-Python reference, each epoch once, and most trials must really have
rescaled.
"""

from __future__ import annotations

import collections
import random
import warnings

import pytest

from raytide.engine.replica import ReplicaCore, ReplicaMode
from raytide.rescale import layout
from raytide.rescale.rescaling import RescalePhase
from raytide.rescale.widths import width_groups
from raytide.snapshots.store import SnapshotStore
from raytide.supervisor.execution import Execution
from raytide.testing.local import COORDINATOR, PROGRESS, LocalJob, LocalRecovery
from tests.sim.chaos import BROKEN, caught_by
from tests.sim.scenarios import SCENARIOS, as_counters, with_input_width
from tests.sim.seeds import seeds
from tests.sim.test_reshard_sim import _owned_by_the_next
from tests.sim.test_zombies_sim import claimed

#: Trials per scenario, 400 in all. The loops cost 2-4 times as much per trial as the others
#: and get half as many: enough for 5 crashes to strike while the replicas hold at a cut, 5
#: while they hand their state over and 5 while the new replicas adopt it (the loops' 5th of
#: each is by trial 27 when last run). Every planted bug below fails the loops' trials at seed 0.
TRIALS = {"word count": 100, "keyed": 100, "join": 100, "loop": 50, "nested loop": 50}
#: Trials per scenario with output committed at snapshots.
SNAPSHOT_COMMIT_TRIALS = 20


#: When a trial crashes something, and the rescale's phase (with the steps it runs then) the
#: crash is aimed at.
WHEN = {"at a random step": None, "during a rescale's cut": None,
        "during a rescale's hand-over": RescalePhase.HANDING_OVER, "during a rescale's adoption": RescalePhase.ADOPTING}
#: The crash trials take these in turn: the hand-over and the adoption twice as often (a
#: random crash strikes the cut too; a trial whose job ends before its rescale reaches none).
TURNS = ["at a random step", "during a rescale's hand-over", "during a rescale's adoption", "during a rescale's cut",
         "during a rescale's hand-over", "during a rescale's adoption"]


class _Crashes:
    """Crashes a trial injects: at a random step, while the replicas align on a rescale's
    cut, or a few steps into the held replicas' hand-over of their state or the rescaled
    replicas' adoption of it."""

    def __init__(self, job: LocalJob, rng: random.Random, seen: collections.Counter, seed: int) -> None:
        """The odd seeds crash: ``seed`` picks when, each choice in turn."""
        self.rng, self.seen = rng, seen
        self.when = TURNS[seed // 2 % len(TURNS)]
        self.left = rng.randint(1, 3)
        self.struck: Execution | None = None  # the last rescale struck in its phase
        if self.when == "at a random step":
            job.crash(self._target(job), at_step=rng.randrange(1, 120))

    def _target(self, job: LocalJob) -> object:
        return self.rng.choice([*job.replicas, PROGRESS, COORDINATOR])

    def after_step(self, job: LocalJob) -> None:
        rescaling = job.rescaling
        if job.result.steps in job.crashes and rescaling is not None and not rescaling.over:
            self.seen[f"crash strikes {rescaling.machine.phase.name}"] += 1  # the phase it really struck in
        if not self.left:
            return
        flight = job.coordinator.in_flight if job.coordinator is not None else None
        if self.when == "during a rescale's cut" and flight is not None and flight.hold:
            self._crash(job, 3)
        phase, rescaling = WHEN[self.when], job.rescaling
        if rescaling is not None and rescaling.machine.phase is phase and rescaling is not self.struck:
            self.struck = rescaling
            steps = job.recovery_steps if phase is RescalePhase.ADOPTING else rescaling.steps
            if steps:
                self._crash(job, len(steps))

    def _crash(self, job: LocalJob, within: int) -> None:
        """Crash something within ``within`` steps from now."""
        self.left -= 1
        self.seen[f"crash {self.when}"] += 1
        job.crash(self._target(job), at_step=job.result.steps + 1 + self.rng.randrange(within))


def trial(name: str, seed: int, store_dir: str, seen: collections.Counter, output_commit: str = "epoch",
          nodes: int | None = None, leased: bool = False) -> str | None:
    """What went wrong in trial ``seed`` of scenario ``name`` (None: nothing); the driver
    hands out an epoch as it completes, or (``output_commit="snapshot"``) once a committed
    snapshot holds it. ``nodes``: the progress goes through a relay per node (and a group's
    relay per two nodes), chosen again in each rescale's widths (``LocalJob(nodes=)``).
    ``leased``: on a store the job holds a lease in, so that its recoveries record their
    incarnations and its commits are fenced by them, as on Ray."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng, epochs=5)
    flow = with_input_width(scenario.flow, rng.randint(1, 2))
    movable = [vertex for vertex, v in flow.vertices.items() if v.role != "input"]
    job = LocalJob(flow, scenario.inputs, rng.randint(1, 5), seed,
                   recovery=LocalRecovery(claimed(store_dir) if leased else SnapshotStore(store_dir),
                                          interval=rng.choice([5, 20, 60]), max_restarts=6,
                                          output_commit=output_commit), nodes=nodes, relay_fanin=2)
    asked = ask_rescales(job, movable, rng)
    crashes = _Crashes(job, rng, seen, seed) if seed % 2 else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a snapshot skipped after a crash
        run = job.run(max_steps=200_000, after_step=crashes.after_step if crashes else None)
    seen["rescales done"] += len(run.rescales)
    seen["trials that rescaled"] += bool(run.rescales)
    seen["recoveries"] += len(run.recoveries)
    if run.failure is not None or not run.finished:
        return f"failure={run.failure!r} finished={run.finished}"
    got = as_counters(run.outputs)
    if got != scenario.expected:
        return f"rescales {run.rescales} (asked {asked}):\n got {got}\n expected {scenario.expected}"
    return rescaled_wrongly(job, asked)


def ask_rescales(job: LocalJob, movable: list[str], rng: random.Random) -> list[dict[str, int]]:
    """Ask ``job`` for one to three rescales of vertices among ``movable`` at random steps; what was asked."""
    groups = width_groups(job.plan)
    asked = []
    for _ in range(rng.randint(1, 3)):
        chosen = {min(groups[vertex]) for vertex in rng.sample(movable, rng.randint(1, min(3, len(movable))))}
        widths = {vertex: rng.randint(1, 5) for vertex in sorted(chosen)}  # one per group: they move together
        asked.append(widths)
        job.rescale(widths, at_step=rng.randrange(1, 150))
    return asked


def rescaled_wrongly(job: LocalJob, asked: list[dict[str, int]]) -> str | None:
    """What is wrong with the rescales ``job`` made, or None: each gave every vertex of one
    request (the latest it took: a later one overrides an earlier) the width asked, and the
    job ends at its last rescale's widths, running exactly their replicas."""
    for step, widths, _ in job.result.rescales:
        if not any(all(widths[vertex] == width for vertex, width in ask.items()) for ask in asked):
            return f"the rescale at step {step} made the widths {widths}, none of the requests {asked}"
    if job.result.rescales:
        last = job.result.rescales[-1][1]
        if {vertex: job.plan.width(vertex) for vertex in last} != last:
            return f"the job ends in the plan of {job.plan.replica_keys()}, not the last rescale's widths {last}"
    if sorted(job.replicas) != sorted(job.plan.replica_keys()):
        return f"the job ends with the replicas {sorted(job.replicas)}, its plan's are {job.plan.replica_keys()}"
    return None


#: Trials per scenario with the progress relayed per node (1 to 4 nodes; on 3 and 4, through groups' relays too).
RELAYED_TRIALS = {"word count": 100, "keyed": 100, "join": 100, "loop": 50, "nested loop": 50}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rescales_and_crashes_with_progress_relayed_per_node_give_the_output_of_the_plain_reference(name, store_root):
    seen: collections.Counter = collections.Counter()
    for seed in seeds(RELAYED_TRIALS[name], f"rescale relayed {name}"):
        wrong = trial(name, seed, str(store_root / str(seed)), seen, nodes=1 + seed % 4)
        assert wrong is None, f"{name}, seed {seed}, {1 + seed % 4} nodes: {wrong}"
    assert seen["trials that rescaled"] >= RELAYED_TRIALS[name] * 0.6, seen


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rescales_at_random_moments_with_crashes_give_the_output_of_the_plain_reference(name, store_root):
    seen: collections.Counter = collections.Counter()
    for seed in seeds(TRIALS[name], f"rescale {name}"):
        wrong = trial(name, seed, str(store_root / str(seed)), seen, leased=seed % 4 == 1)  # crashes, on a leased store
        assert wrong is None, f"{name}, seed {seed}: {wrong}"
    assert seen["trials that rescaled"] >= TRIALS[name] * 0.6, seen
    for phase in ("HOLDING", "HANDING_OVER", "ADOPTING"):
        assert seen[f"crash strikes {phase}"] >= 5, seen


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_with_output_committed_at_snapshots_the_held_epochs_survive_rescales_and_crashes(name, store_root):
    """A rescale releases what its cut holds complete and drops the epochs held for a later
    commit: they are computed again, and handed out once."""
    seen: collections.Counter = collections.Counter()
    for seed in seeds(SNAPSHOT_COMMIT_TRIALS, f"rescale snapshot commit {name}"):
        wrong = trial(name, seed, str(store_root / str(seed)), seen, output_commit="snapshot")
        assert wrong is None, f"{name}, seed {seed}: {wrong}"
    assert seen["trials that rescaled"] >= SNAPSHOT_COMMIT_TRIALS // 2, seen


#: Trials per scenario of a job without recovery (no crash: a death fails such a job).
UNRECOVERED_TRIALS = 30


def unrecovered_trial(name: str, seed: int, seen: collections.Counter) -> str | None:
    """What went wrong in trial ``seed`` of scenario ``name`` run without recovery (None: nothing)."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng, epochs=5)
    flow = with_input_width(scenario.flow, rng.randint(1, 2))
    job = LocalJob(flow, scenario.inputs, rng.randint(1, 5), seed)
    asked = ask_rescales(job, [vertex for vertex, v in flow.vertices.items() if v.role != "input"], rng)
    run = job.run(max_steps=200_000)
    seen["trials that rescaled"] += bool(run.rescales)
    if run.failure is not None or not run.finished:
        return f"failure={run.failure!r} finished={run.finished}"
    if as_counters(run.outputs) != scenario.expected:
        return f"rescales {run.rescales} (asked {asked}):\n got {as_counters(run.outputs)}\n expected {scenario.expected}"
    return rescaled_wrongly(job, asked) or ("wrote snapshots" if run.snapshots else None)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rescales_of_a_job_without_recovery_give_the_output_of_the_plain_reference(name):
    """The cuts are a coordinator's made at the first rescale, nothing is written, and the
    output replicas keep their records until the driver has them (it tells them after each
    epoch it takes): every trial exact, most of them rescaled."""
    seen: collections.Counter = collections.Counter()
    for seed in seeds(UNRECOVERED_TRIALS, f"rescale without recovery {name}"):
        wrong = unrecovered_trial(name, seed, seen)
        assert wrong is None, f"{name} without recovery, seed {seed}: {wrong}"
    assert seen["trials that rescaled"] >= UNRECOVERED_TRIALS * 0.6, seen


def test_a_planted_forgetting_of_outputs_the_driver_has_not_had_is_caught_without_recovery(monkeypatch):
    """Planted: an output replica told what the driver has forgets all it keeps, epochs the
    driver has not had too (as if it kept nothing, before 2026-11-29): a rescale's new
    progress actor lacks their records."""
    monkeypatch.setattr(ReplicaCore, "forget_delivered", lambda self, delivered: [e.clear() for e in self.kept.values()])
    assert caught_by(sorted(SCENARIOS), 10, lambda name, seed: unrecovered_trial(name, seed, collections.Counter())
                     is not None), "no trial caught the planted bug"


def test_a_rescale_changes_the_parallelism_and_keeps_the_replicas_busy(store_root):
    """The job really runs at the new widths after the rescale: the retired replicas are
    gone, the new ones hold state and hand out records."""
    scenario = SCENARIOS["keyed"](random.Random(3), epochs=8)
    job = LocalJob(scenario.flow, scenario.inputs, 1, 3,
                   recovery=LocalRecovery(SnapshotStore(str(store_root)), interval=10))
    job.rescale({"running": 4}, at_step=20)
    run = job.run()
    assert run.rescales and run.rescales[0][1]["running"] == 4
    assert run.rescales[0][2] not in run.snapshots  # the cut: nothing written, the state moved in place
    assert job.plan.width("running") == 4
    assert sorted(key.replica for key in job.replicas if "running" in job.plan.chain(key.chain).vertices) == [0, 1, 2, 3]
    assert as_counters(run.outputs) == scenario.expected


# -- planted bugs: each must make some trial give a wrong output, fail, or hang ----------------


def _running_past_the_cut(monkeypatch) -> None:
    """A planted bug: a held replica goes on running after the rescale's cut (it takes the
    driver's later calls, the records on its back edges and its notifications)."""
    for name in ("_consume", "push_input", "advance_input", "_deliver_notifications"):
        monkeypatch.setattr(ReplicaCore, name, _unheld(getattr(ReplicaCore, name)))


def _unheld(method):
    def anyway(self, *args):
        mode, self.mode = self.mode, ReplicaMode.RUNNING
        try:
            method(self, *args)
        finally:
            self.mode = mode
    return anyway


def _losing_the_logged(monkeypatch) -> None:
    """A planted bug: the back-edge batches in flight in the cut are not handed over."""
    report = ReplicaCore._report_held
    monkeypatch.setattr(ReplicaCore, "_report_held", lambda self, logged: report(self, []))


PLANTS = {
    "state moved to the wrong owner": (lambda mp: mp.setattr(layout, "_owned_by", _owned_by_the_next),
                                       ("keyed", "join")),
    "held replicas run past the cut": (_running_past_the_cut, ("word count", "keyed", "loop")),
    "records in flight on a back edge are lost": (_losing_the_logged, ("loop", "nested loop")),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_bug_in_rescaling_is_caught(monkeypatch, store_root, plant):
    apply, names = PLANTS[plant]
    apply(monkeypatch)

    def failed(name: str, seed: int) -> bool:
        try:
            return trial(name, seed, str(store_root / f"{name}-{seed}"), collections.Counter()) is not None
        except BROKEN:  # a hang, a livelock, an epoch handed over twice
            return True

    assert caught_by(names, 40, failed), f"no trial caught the planted bug {plant!r}"
