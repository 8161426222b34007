"""A replica recovered alone with the engine's own cores (``LocalRecovery(alone=True)``,
:mod:`raytide.testing.solo`): the model's job (:func:`raytide.testing.alone.running_counts`:
an input, a 4-replica stage keeping a running count per key from ``on_recv``, a sink) run by
``LocalJob``, one or two counting replicas crashed at random steps, each recovered alone
(``decide`` says so: one input channel, no notification, no loop, no output in its chain).
Every trial must hand out exactly the plain-Python reference (lost, duplicated and misplaced
records all show: each key's counts in order, per epoch), with no whole-job recovery: the
survivors keep their cores (their state never reloaded). Plants each caught: a replay that
skips its first batch, a replacement that takes its first replayed batch twice, receivers
without dedup, a progress core that does not set the lost replica's figures, and a
replacement restored with its figures at 0, and a replay without the barriers the lost
replica had passed on (a receiver aligning on one waits for it for ever)."""

from __future__ import annotations

import random
import warnings

import pytest

from raytide.engine import numbered_channels
from raytide.engine.numbered_channels import Numbering
from raytide.engine.outbox import Outbox
from raytide.engine.progress_core import ProgressCore
from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.store import SnapshotStore
from raytide.testing.alone import reference, running_counts
from raytide.testing.local import LocalJob, LocalRecovery, LocalRun
from tests.sim.seeds import seeds

PLAN = running_counts(4)
COUNT = PLAN.chain_of("count").name


def epochs_of(seed: int) -> list[list[int]]:
    """Eight epochs of up to eleven records over six keys: keys come back, so a count off by one shows."""
    rng = random.Random(seed)
    return [[rng.randrange(6) for _ in range(rng.randrange(12))] for _ in range(8)]


def trial(seed: int, root, nodes: int | None = None, noticed_apart: bool = False,
          **settings: object) -> tuple[LocalRun, list[ReplicaKey], dict, dict]:
    """Trial ``seed``: one or two crashes of counting replicas within the failure-free run's
    steps, snapshots every 3 to 30 steps, each death noticed 0 to 6 steps late or (half the
    trials) only when a call to the dead replica fails, output committed per epoch or at
    snapshots (``nodes``: progress relayed per node); returns the run, the crashed replicas,
    every core before the run and after it. ``noticed_apart``: two crashes' deaths are
    noticed within 6 steps each (never only at a failed call), so the first is noticed before
    the second crash: a death noticed at a failed call may be noticed after it, and two
    replicas dead at once roll the job back (rightly, docs/recovery.md). ``settings``: more
    ``LocalRecovery`` settings (``upstream_log_cap``)."""
    rng = random.Random(seed)
    epochs = epochs_of(seed)

    options = {"interval": rng.choice([3, 10, 30]), "detection": rng.randint(0, 6), "missed": rng.choice([0.0, 0.5]),
               "output_commit": rng.choice(["epoch", "snapshot"]), **settings}

    def job(directory: str) -> LocalJob:
        recovery = LocalRecovery(SnapshotStore(str(root / directory)), **options, alone=True)  # type: ignore[arg-type]
        return LocalJob(PLAN, {"x": epochs}, seed=seed, recovery=recovery, nodes=nodes, relay_fanin=2)

    calm = job(f"calm-{seed}").run()
    lost = [ReplicaKey(COUNT, rng.randrange(4)) for _ in range(rng.randint(1, 2))]
    if noticed_apart and len(lost) == 2:
        options["missed"] = 0.0
    crashed = job(f"crashed-{seed}")
    step = rng.randrange(max(calm.steps - 20, 2))
    for key in lost:  # apart by more than a death takes to be noticed (6 steps): two at once roll the job back
        crashed.crash(key, step)
        step += rng.randint(10, 60)
    before = dict(crashed.replicas)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "skipping snapshot k: not committed"
        run = crashed.run(max_steps=30_000)
    return run, lost, before, dict(crashed.replicas)


def exact(run: LocalRun, seed: int) -> bool:
    """The reference's records, epoch by epoch (each key's running counts, so order shows)."""
    got = {epoch: sorted(records) for epoch, records in run.outputs["out"].items() if records}
    want = {epoch: records for epoch, records in reference(epochs_of(seed)).items() if records}
    return run.finished and run.failure is None and got == want


@pytest.mark.parametrize("seed", seeds(30, "solo", rotate=2))
def test_a_replica_recovered_alone_gives_exactly_the_reference_and_the_survivors_keep_their_state(seed, tmp_path):
    run, lost, before, after = trial(seed, tmp_path, noticed_apart=True)
    assert exact(run, seed), f"seed {seed}: lost {lost}, alone {run.alone}, failure {run.failure!r}"
    assert len(run.alone) == len(run.recoveries), f"seed {seed}: every death recovered alone"
    survivors = [key for key in before if key not in run.alone]
    assert all(after[key] is before[key] for key in survivors), f"seed {seed}: a survivor was reloaded"
    assert all(after[key] is not before[key] for key in run.alone), f"seed {seed}: the lost replica was replaced"


@pytest.mark.parametrize("seed", range(12))
def test_a_relays_host_rolls_the_job_back_and_the_others_are_recovered_alone(seed, tmp_path):
    """With progress relayed per node (1 to 4 nodes), a counting replica that hosts its node's
    relay takes what the relay gathered of the others' progress with it: the job rolls back;
    any other is recovered alone. Either way, exactly the reference."""
    nodes = 1 + seed % 4
    run, lost, before, after = trial(seed, tmp_path, nodes)
    assert exact(run, seed), f"seed {seed}, {nodes} nodes: lost {lost}, alone {run.alone}, failure {run.failure!r}"
    assert all(key in lost for key in run.alone), f"seed {seed}: only crashed replicas recovered alone"


def test_the_trials_recover_replicas_alone_often(tmp_path):
    """The deaths mostly come before the job ends (after it, nothing is recovered)."""
    alone = [len(trial(seed, tmp_path)[0].alone) for seed in range(12)]
    assert sum(alone) >= 12 and sum(count == 2 for count in alone) >= 3, alone


def _skip_first(original):
    def replay(self, to, positions, after=0):
        sent = self.transport.send
        skipped = []

        def send(*args, **kwargs):
            if not skipped and kwargs.get("sequence") is not None:
                skipped.append(args)
                return
            sent(*args, **kwargs)

        self.transport.send = send
        try:
            return original(self, to, positions, after)
        finally:
            self.transport.send = sent
    return replay


def _twice(original):
    def replace_alone(self, *args):
        original(self, *args)
        received, taken = self._receive, []

        def receive(*message):
            received(*message)
            if not taken and message[-1] is not None:
                taken.append(True)
                self._consume(*message[:4])  # the first replayed batch taken a second time

        self._receive = receive
    return replace_alone


PLANTS = {
    "a replay that skips its first batch": (Outbox, "replay", _skip_first),
    "a replacement that takes its first replayed batch twice": (ReplicaCore, "replace_alone", _twice),
    "receivers without dedup": (Numbering, "__init__", lambda original: lambda self, name, enabled=True, unchecked=(),
                                dedup=True, keeps=None, cap=None: original(self, name, enabled, unchecked, False, keeps, cap)),
    "no log kept for a replica recovered alone": (numbered_channels, "_into", lambda original: lambda chains, channel: False),
    "the lost replica's figures not set": (ProgressCore, "replace", lambda original: lambda self, key, restored, first, locations:
                                           original(self, key, self.figures.get(key, {}), first, locations)),
    "a replay without the barriers": (Numbering, "note_marker", lambda original: lambda self, channel, marker: None),
    "a replacement's figures at 0": (ReplicaCore, "replace_alone", lambda original: lambda self, data, figures, first, quiet:
                                     original(self, data, False, first, quiet)),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_each_planted_bug_is_caught(plant, monkeypatch, tmp_path):
    owner, name, make = PLANTS[plant]
    monkeypatch.setattr(owner, name, make(getattr(owner, name)))
    for seed in range(40):
        try:
            run, *_ = trial(seed, tmp_path)
        except (RaytideError, RuntimeError):  # a gap refused, or a hang
            return
        if not exact(run, seed):
            return
    pytest.fail(f"plant {plant!r}: 40 trials passed")


def test_only_one_lost_counting_replica_off_the_relays_is_recovered_alone(tmp_path):
    """``alone_candidate``: a counting replica alone, yes; an input's, two at once, a relay's
    host, a job with zombies or without ``alone``: the whole job."""
    from raytide.testing.solo import alone_candidate

    def job(nodes: int | None = None, **options: object) -> LocalJob:
        recovery = LocalRecovery(SnapshotStore(str(tmp_path / f"s{len(list(tmp_path.iterdir()))}")), **options)  # type: ignore[arg-type]
        return LocalJob(PLAN, {"x": epochs_of(0)}, recovery=recovery, nodes=nodes)

    x, count = ReplicaKey(PLAN.chain_of("x").name, 0), [ReplicaKey(COUNT, r) for r in range(4)]
    cases = [(job(alone=True), [count[2]], count[2]), (job(alone=True), [x], None),
             (job(alone=True), count[:2], None), (job(), [count[2]], None),
             (job(alone=True, zombie=3), [count[2]], None)]
    relayed = job(nodes=2, alone=True)
    keys = relayed.replica_keys()
    hosts = {relayed.mail.via(key, keys) for key in keys}
    cases += [(job(nodes=2, alone=True), [key], None if key in hosts else key) for key in count]
    assert any(key in hosts for key in count) and any(key not in hosts for key in count)
    for world, lost, expected in cases:
        world.dead.update(lost)
        assert alone_candidate(world) == expected, (lost, expected)


def test_a_log_past_its_cap_refuses_the_replay_and_the_whole_job_rolls_back_exactly(tmp_path):
    """A tiny cap, the job's setting (``upstream_log_cap``, as ``rt.Recovery``'s; docs/recovery.md,
    "A cap on a log"): a sender's log drops all it keeps past it, and a replay from before the
    drop is refused, so that death rolls the whole job back, the record saying why; every trial
    still exactly the reference, and the refusals happen. Planted: the setting ignored (the
    module's cap of 65,536 used): no refusal, the test fails."""
    cap = 8
    refused = 0
    for seed in range(3):
        run, lost, *_ = trial(seed, tmp_path, upstream_log_cap=cap)
        assert exact(run, seed), f"cap {cap}, seed {seed}: lost {lost}, alone {run.alone}, failure {run.failure!r}"
        assert len(run.alone) + len(run.alone_refused) <= len(run.recoveries)
        assert all(f"past its cap of {cap} messages" in why for why in run.alone_refused), run.alone_refused
        refused += len(run.alone_refused)
    assert refused >= 2, f"cap {cap}: {refused} replays refused in 3 trials"
