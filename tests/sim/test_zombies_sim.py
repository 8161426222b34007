"""Deaths the job learns of badly: zombies (replicas declared dead that still send), death
notices that come late or never, and a frozen progress actor or coordinator. Every trial's
output is exactly the failure-free run's (or the job fails with an error naming the part);
each model has a planted bug that a trial catches."""

from __future__ import annotations

import collections
import random
import re
from typing import Any

import pytest

from raytide.snapshots import coordinator
from raytide.snapshots.incarnations import newest_committed
from raytide.snapshots.lease import Holder
from raytide.snapshots.lease_store import acquire
from raytide.snapshots.store import SnapshotStore
from raytide.testing import recovery, world
from raytide.testing.local import COORDINATOR, PROGRESS, LocalJob
from raytide.testing.outcome import LocalRecovery
from tests.sim.chaos import BROKEN, calm_steps, exact_under_chaos
from tests.sim.scenarios import SCENARIOS, as_counters
from tests.sim.seeds import ROTATING_FROM, seeds

pytestmark = pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")

NAMES = ("keyed", "join", "loop")
TRIALS = 8


def claimed(directory: str) -> SnapshotStore:
    """The store at ``directory``, fenced by a lease claimed as ``rt.run`` claims one (the real claim
    files; lapsed at once, since no thread renews it here): its recoveries record their
    incarnations in it, as the Ray driver's do, and its coordinators' commits are fenced by them."""
    store = SnapshotStore(directory)
    record = acquire(store.leases, Holder("simulator", 0, "zombies"), 1e-6, lambda: newest_committed(store),
                     gone=lambda holder, here: True)
    return SnapshotStore(directory, fence=record.fence)


def trial(name: str, seed: int, directory: str, frozen: tuple[str, ...] = (), nodes: int | None = None,
          again: tuple[Any, ...] = (), fenced: bool = False, **model: Any) -> tuple[bool, LocalJob]:
    """Trial ``seed`` of scenario ``name``: the crashes of a recovery trial, and a crash again once
    a snapshot committed after the first recovery, under the deaths ``model`` gives
    (``LocalRecovery``'s ``zombie``, ``missed``, ``output_commit``), one of the actors ``frozen`` names
    (the progress actor, the coordinator, the driver) slowed or frozen a while, the replicas on
    ``nodes`` (a relay each), the crash after a commit of one of ``again`` (a replica if none), on a
    store ``fenced`` by a lease (:func:`claimed`) or not; whether the output was exact, and the job."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10]), "timeout": rng.choice([40, 200]), "retain": rng.randint(1, 3),
               "max_restarts": 4, "detection": rng.randint(0, 3)}
    parallelism = rng.randint(2, 3)
    job = LocalJob(scenario.flow, scenario.inputs, parallelism, seed, nodes=nodes,
                   recovery=LocalRecovery(claimed(directory) if fenced else SnapshotStore(directory),
                                          **{**options, **model}))  # type: ignore[arg-type]
    try:
        calm = calm_steps(scenario, parallelism, seed, options, directory)
    except BROKEN:  # the run without crashes broke already (a planted bug): not exact
        return False, job
    if frozen:
        _freeze(job, rng, calm, frozen)
    return exact_under_chaos(job, scenario, rng, seed, calm, 200_000, watch=_again_after_a_commit(rng, again)), job


def _freeze(job: LocalJob, rng: random.Random, calm: int, targets: tuple[str, ...]) -> None:
    """One of ``targets`` slowed down throughout, or frozen a few times for a stretch of steps as
    long as a tenth of the job to four times it, then resumed."""
    target = rng.choice(targets)
    if rng.random() < 0.3:
        job.slow_down(target, rng.choice([0.02, 0.1]))
        return
    for _ in range(rng.randint(1, 3)):
        job.slow_down(target, 0.0, at_step=rng.randrange(max(1, calm)), steps=rng.randint(calm // 10 + 1, 4 * calm))


def zombie_trial(name: str, seed: int, directory: str) -> tuple[bool, int]:
    """A :func:`trial` whose dead replicas are zombies for up to a few dozen actions; whether its
    output was exact, and how many actions zombies took after a recovery replaced them."""
    exact, job = trial(name, seed, directory, zombie=random.Random(seed).choice([5, 20, 60]))
    return exact, sum(zombie.after_replacement for zombie in job.zombies.values())


def _again_after_a_commit(rng: random.Random, targets: tuple[Any, ...] = ()):
    """A watch that crashes one of ``targets`` (a replica if none) once, when the job commits a snapshot
    after its first recovery is over, so that the next recovery restores what zombies may have had a hand in."""
    state: dict[str, int | None] = {"committed": None}

    def watch(job: LocalJob) -> None:
        recovered = job.recovering is not None and job.recovering.over
        if state["committed"] is None and recovered:
            state["committed"] = len(job.result.snapshots)
        elif state["committed"] is not None and 0 <= state["committed"] < len(job.result.snapshots):
            state["committed"] = -1  # once
            job.crash(rng.choice(targets or job.replica_keys()), at_step=job.result.steps + rng.randrange(1, 20))
    return watch


@pytest.mark.parametrize("name", NAMES)
def test_zombies_sends_are_dropped_and_the_output_is_exact(name, store_root):
    haunted = 0
    for seed in seeds(TRIALS, f"zombies {name}"):
        exact, late = zombie_trial(name, seed, str(store_root / str(seed)))
        assert exact, f"{name}, seed {seed}"
        haunted += late
    assert haunted >= 5, f"zombies took only {haunted} actions after their replacement: they haunted nothing"


def _acknowledging_any_incarnation(original):
    """A planted bug: the coordinator takes a zombie's acknowledgement (of a dead incarnation)
    for the snapshot in flight."""
    def acknowledge(self, ack, now):
        flight = self.in_flight
        if flight is not None and ack.incarnation < self.incarnation:
            ack = coordinator.Acknowledgement(ack.replica, flight.snapshot_id, self.incarnation, ack.parts, ack.summary)
        return original(self, ack, now)
    return acknowledge


def _first_caught(store_root) -> tuple[str, int] | None:
    return next(((name, seed) for seed in range(TRIALS) for name in NAMES
                 if not zombie_trial(name, seed, str(store_root / f"{name}-{seed}"))[0]), None)


def test_a_coordinator_taking_zombies_acknowledgements_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(coordinator.CoordinatorCore, "acknowledge",
                        _acknowledging_any_incarnation(coordinator.CoordinatorCore.acknowledge))
    assert _first_caught(store_root) is not None, "no trial caught a snapshot committed with a zombie's part"


def test_a_replica_taking_zombies_data_is_caught(store_root, monkeypatch):
    """A planted bug: a replica's guard takes messages of any incarnation from a live sender."""
    monkeypatch.setattr(world.World, "_current", lambda self, key, incarnation: key not in self.dead)
    assert _first_caught(store_root) is not None, "no trial caught a replica taking a zombie's data"


def test_a_progress_actor_taking_zombies_calls_is_caught(store_root, monkeypatch):
    """A planted bug: the progress actor applies calls of any incarnation (only a zombie sends
    any once a recovery restarted it: what was on its way then is dropped with the old actor)."""
    monkeypatch.setattr(world.World, "_heard", lambda self, incarnation: True)
    assert _first_caught(store_root) is not None, "no trial caught the progress actor taking a zombie's calls"


def actor_zombie_trial(name: str, seed: int, directory: str) -> tuple[bool, LocalJob]:
    """A :func:`trial` whose dead progress actor and coordinator (the crash after a commit is of
    one of them) are zombies for up to a few dozen actions, and whose deaths are noticed at once,
    late or very late (so that a zombie coordinator may commit a snapshot of its dead incarnation)."""
    rng = random.Random(-seed)
    return trial(name, seed, directory, again=(PROGRESS, COORDINATOR), zombie=rng.choice([5, 20, 60]),
                 detection=rng.choice([0, 60, 400]), fenced=True)


def zombie_commits(job: LocalJob) -> tuple[list[int], int]:
    """The snapshots a coordinator's zombie committed after a recovery replaced it that the
    store's readers count (a recovery would restore them), and how many of its commits the
    store refused (a later incarnation was recorded)."""
    zombie = job.undead.get(COORDINATOR)
    if zombie is None:
        return [], 0
    return [snapshot_id for snapshot_id, replaced, counted in zombie.landed if replaced and counted], zombie.refused


def test_zombie_progress_actors_and_coordinators_sends_are_dropped(store_root):
    """Every scenario's trials exact, no commit of a coordinator's zombie made after its
    replacement counted by the store (each refused: a recovery records its incarnation first);
    the zombies' actions after their replacement, and the commits refused, counted over the
    fixed seeds of all three (the join's alone rarely crash either actor after a commit)."""
    after: collections.Counter[str] = collections.Counter()
    for name in NAMES:
        for seed in seeds(TRIALS, f"actor zombies {name}"):
            exact, job = actor_zombie_trial(name, seed, str(store_root / f"{name}-{seed}"))
            assert exact, f"{name}, seed {seed}"
            counted, refused = zombie_commits(job)
            assert not counted, f"{name}, seed {seed}: a zombie coordinator's snapshots {counted} were committed"
            if seed < ROTATING_FROM:
                after.update({role: zombie.after_replacement for role, zombie in job.undead.items()})
    assert after[PROGRESS] + after[COORDINATOR] >= 5, f"zombies acted after their replacement only {dict(after)} times"



#: Keyed seeds whose progress actor's zombie, before its late death notice, logs job events the
#: driver takes, up to the end of the job (the zombie finishes it) when the simulator dropped the
#: events the actor had logged and the driver had not read when it died: a gap, the epochs in it
#: lost (found at seeds 35, 96 and 243: `sums` epoch 1 and `running` epochs 1 and 2, and so on).
#: On Ray the driver reads the actor's log from its cursor, so what it takes of a live or undead
#: actor has no gap. The seeds changed with the keyed scenario's chains (its stream read twice is
#: fused since 2026-12-02): these are the first three whose trial has a progress actor's zombie.
FINISHED_BY_A_ZOMBIE = (6, 19, 25)


@pytest.mark.parametrize("seed", FINISHED_BY_A_ZOMBIE)
def test_a_progress_actors_zombie_that_finishes_the_job_loses_no_epoch(seed, store_root):
    exact, job = actor_zombie_trial("keyed", seed, str(store_root))
    assert PROGRESS in job.undead, f"seed {seed} has no progress actor's zombie any more: pick another seed"
    assert exact, f"keyed, seed {seed}"


#: Loop seeds of the actor-zombie trials in which a replica is killed again before a recovery
#: replaced it, while its zombie held data it had not taken, ahead of a snapshot's barrier on the
#: same channel (203904079, a rotating seed that failed CI: `positive+back/1` killed at steps 51
#: and 73; `[8]` and `[13]` of epoch 0, round 0, lost, so `out` missed 4, 2, 1, 0 and 6, 3, 1, 0
#: and `rounds` counted 3 of 5 in rounds 1 to 4). The simulator raised a second zombie of the same
#: core with only the mail sent after the second kill: it took the barrier without the data ahead
#: of it, and the snapshot it completed, which both recoveries restored, had lost them. No actor
#: on Ray skips a message of a FIFO channel and takes the next; a zombie killed again now ends.
#: The loop scenario's chains changed since (its stream read twice is fused): seeds 2 and 15 are
#: the first that kill a replica again while it is a zombie.
KILLED_AGAIN = (2, 15)


def killed_twice(job: LocalJob) -> bool:
    """Whether a recovery of ``job`` names two deaths of one replica (killed again while dead)."""
    deaths = set(re.findall(r"(\S+) died at step (\d+)", " ".join(job.result.recoveries)))
    return max(collections.Counter(name for name, _ in deaths).values(), default=0) >= 2


@pytest.mark.parametrize("seed", KILLED_AGAIN)
def test_a_replica_killed_again_while_a_zombie_loses_no_record(seed, store_root):
    exact, job = actor_zombie_trial("loop", seed, str(store_root))
    assert killed_twice(job), f"loop seed {seed} kills no replica twice any more: pick another seed"
    assert exact, f"loop, seed {seed}"


def killed_again_trial(name: str, seed: int, directory: str, target: str | None = None) -> tuple[bool, bool]:
    """``target`` (a replica if None) killed, its death noticed late, and killed again (its zombie's
    host dies too) as soon as its zombie holds mail it has not taken (or, the progress actor's, job
    events the driver has not read); whether the output was exact, and whether it was killed again."""
    rng = random.Random(seed)
    scenario = SCENARIOS[name](rng)
    options = {"interval": rng.choice([3, 10]), "timeout": 200, "retain": 2, "max_restarts": 4,
               "detection": rng.choice([60, 400])}
    parallelism = rng.randint(2, 3)
    calm = calm_steps(scenario, parallelism, seed, options, directory)
    job = LocalJob(scenario.flow, scenario.inputs, parallelism, seed,
                   recovery=LocalRecovery(SnapshotStore(directory), zombie=rng.choice([20, 60]), **options))
    killed = target or rng.choice(job.replica_keys())
    job.crash(killed, rng.randrange(1, calm))
    again: list[int] = []

    def watch(job: LocalJob) -> None:
        if not again and job._still_dead(killed) and _holds_mail(job, killed):
            again.append(job.result.steps + 1)
            job.crash(killed, again[0])
    run = job.run(max_steps=200_000, after_step=watch)
    return run.failure is None and run.finished and as_counters(run.outputs) == scenario.expected, bool(again)


def _holds_mail(job: LocalJob, target: Any) -> bool:
    """Whether ``target``'s zombie, with actions left, holds mail it has not taken (the progress
    actor's: or job events the driver has not read)."""
    if target in (PROGRESS, COORDINATOR):
        zombie = job.undead.get(target)
        return zombie is not None and zombie.listening() and bool(zombie.inbox or (target == PROGRESS and job.mail.log))
    replica = job.zombies.get(target)
    return replica is not None and replica.left > 0 and any(replica.inbox.values())


#: Trials of :func:`killed_again_trial` that lost records when the simulator raised a second zombie
#: from the core of the first (a replica's: the loop's seeds 9 and 14 and the keyed scenario's 7,
#: of 60 each), or dropped the job events the progress actor had logged when its zombie was killed
#: again and went on logging (the 2026-11-29 gap again, by another path: keyed 23, `sums` epoch 1
#: lost; loop 14, `out` epoch 2).
LOST_WHEN_KILLED_AGAIN = (("loop", 9, None), ("loop", 14, None), ("keyed", 7, None),
                          ("keyed", 23, PROGRESS), ("loop", 14, PROGRESS))


@pytest.mark.parametrize(("name", "seed", "target"), LOST_WHEN_KILLED_AGAIN)
def test_a_zombie_killed_again_ends(name, seed, target, store_root):
    exact, again = killed_again_trial(name, seed, str(store_root), target)
    assert again, f"{name} seed {seed}: the zombie of {target or 'a replica'} never held mail: pick another seed"
    assert exact, f"{name}, seed {seed}, {target or 'a replica'} killed again"


#: How many seeds of the keyed scenario the trials below go through for a zombie coordinator that
#: completes a snapshot after its replacement (rare: 3 of 480 actor-zombie trials of the three
#: scenarios, seeds 0-159, when measured; the first at keyed seed 34, and at 106 and 204 once the
#: scenario's stream read twice was fused), after :data:`LATE_COMMITS`, the seeds known to.
SEARCH = 60
LATE_COMMITS = (106, 204)


def _first_late_commit(store_root) -> tuple[int, bool, list[int], int]:
    """The first keyed seed whose coordinator's zombie tries to commit after its replacement
    (refused, or taken); the trial's exactness, the zombie's commits the store counted, and
    those it refused."""
    for seed in (*LATE_COMMITS, *range(SEARCH)):
        exact, job = actor_zombie_trial("keyed", seed, str(store_root / f"late-{seed}"))
        zombie = job.undead.get(COORDINATOR)
        if zombie is not None and (zombie.refused or any(replaced for _, replaced, _ in zombie.landed)):
            return (seed, exact, *zombie_commits(job))
    raise AssertionError(f"no zombie coordinator tried to commit after its replacement in keyed seeds {LATE_COMMITS} "
                         f"and 0-{SEARCH - 1}")


def test_a_zombie_coordinators_commit_after_its_replacement_is_refused(store_root):
    seed, exact, counted, refused = _first_late_commit(store_root)
    assert exact and not counted and refused >= 1, (seed, exact, counted, refused)


def test_a_recovery_that_records_no_incarnation_is_caught(store_root, monkeypatch):
    """A planted bug: the simulator's recovery does not record its incarnation in the store (the
    fence removed): the zombie coordinator's commit after its replacement is taken and counted."""
    monkeypatch.setattr(recovery, "enter_incarnation", lambda store, incarnation, job: store.at(incarnation))
    seed, _, counted, refused = _first_late_commit(store_root)
    assert counted and not refused, (seed, counted, refused)


def _polling_any_incarnation(self: world.World) -> None:
    """A planted bug: the driver takes job events of any incarnation of the progress actor (a
    zombie's, or its own from before a restart)."""
    self._record([self.mail.log.popleft()[1]])


def test_a_driver_taking_a_dead_progress_actors_events_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(world.World, "_poll", _polling_any_incarnation)
    caught = next(((name, seed) for seed in range(TRIALS) for name in NAMES
                   if not actor_zombie_trial(name, seed, str(store_root / f"{name}-{seed}"))[0]), None)
    assert caught is not None, "no trial caught the driver taking a dead progress actor's events"


def missed_trial(name: str, seed: int, directory: str) -> tuple[bool, LocalJob]:
    """A :func:`trial` in which most deaths are never announced, and the others late or at once."""
    return trial(name, seed, directory, missed=0.75, detection=random.Random(-seed).choice([0, 60, 400]))


@pytest.mark.parametrize("name", NAMES)
def test_deaths_never_announced_are_found_and_recovered_from(name, store_root):
    found: collections.Counter[str] = collections.Counter()
    for seed in seeds(TRIALS, f"missed deaths {name}"):
        exact, job = missed_trial(name, seed, str(store_root / str(seed)))
        assert exact, f"{name}, seed {seed}"
        found += job.found
    assert sum(found.values()) >= 3, f"only {dict(found)} missed deaths were found: the model missed nothing"


def test_deaths_nobody_finds_hang_and_are_caught(store_root, monkeypatch):
    """A planted bug: a death never announced is never found (neither a failed call to the dead
    actor nor a ping of a stalled job is taken for a death, as if the driver ignored
    ``RayActorError``); the job waits for the dead, which a trial catches as a hang."""
    monkeypatch.setattr(world.World, "_found", lambda self, target, how: None)
    caught = next(((name, seed) for seed in range(TRIALS) for name in NAMES
                   if not missed_trial(name, seed, str(store_root / f"{name}-{seed}"))[0]), None)
    assert caught is not None, "no trial caught a death that nobody found"


def frozen_trial(name: str, seed: int, directory: str) -> bool:
    """A :func:`trial` with the progress actor or the coordinator slow or frozen a while, the
    replicas on two nodes every other seed (a relay's runs grow long behind a frozen progress actor)."""
    return trial(name, seed, directory, frozen=(PROGRESS, COORDINATOR), nodes=2 if seed % 2 else None)[0]


@pytest.mark.parametrize("name", NAMES)
def test_a_frozen_progress_actor_or_coordinator_delays_never_breaks(name, store_root):
    for seed in seeds(TRIALS, f"frozen {name}"):
        assert frozen_trial(name, seed, str(store_root / str(seed))), f"{name}, seed {seed}"


def test_a_coordinator_frozen_for_good_leaves_the_data_path_running(store_root):
    """No snapshot is ever taken, and the job still finishes with its exact output."""
    scenario = SCENARIOS["keyed"](random.Random(0))
    job = LocalJob(scenario.flow, scenario.inputs, 2, 0, recovery=LocalRecovery(SnapshotStore(str(store_root)), interval=3))
    job.slow_down(COORDINATOR, 0.0, at_step=0, steps=10**9)
    run = job.run(max_steps=100_000)
    assert run.finished and run.snapshots == [] and as_counters(run.outputs) == scenario.expected
