"""A driver that crashes while its consumer reads ``job.results``, and a new driver that
restores the job from its store (``restore="latest"``) and goes on with the same consumer:
seeded interleavings on the in-process runtime, which runs the Ray driver's delivery
code (:mod:`raytide.engine.delivery`, :mod:`raytide.snapshots.consumed`).

The consumer (:class:`~raytide.testing.consumer.LocalConsumer`) acts on each epoch when it
is handed it and acknowledges it at a later step, when it asks for the next one, as a
``job.results`` loop does. Across every driver of a trial it must see each epoch's records
exactly as a run without crashes gives them, none lost, in order, and only the epoch in its
hands at a crash seen again (at most one repeat per driver crash). Some trials crash a
replica, the progress core or the coordinator too, and some restart drivers that crash
again. When the crashed driver left no committed snapshot, the new one starts from the
very start (``START``, as a stream's driver does, whose query then runs its first batches
again), going on from what the consumer had.
"""

from __future__ import annotations

import collections
import random
import warnings

import pytest

import raytide as rt
from raytide.engine.delivery import Deliveries
from raytide.snapshots.consumed import START, ConsumedRecord
from raytide.snapshots.store import SnapshotStore
from raytide.testing.consumer import LocalConsumer
from raytide.testing.local import COORDINATOR, PROGRESS, LocalJob, LocalRecovery
from raytide.testing.outcome import DRIVER
from tests.sim.chaos import BROKEN
from tests.sim.seeds import seeds

TRIALS = 250


def running_totals() -> rt.Dataflow:
    """Per epoch, each word's count so far over all epochs: state that lives across epochs, so a
    restore from the wrong place, or an epoch counted twice, changes later epochs' output."""
    flow = rt.Dataflow("totals")
    counts = flow.input("words").count_by_key(lambda w: w, name="count")
    counts.stateful_map(lambda kv: kv[0], lambda total, kv: ((total or 0) + kv[1], (total or 0) + kv[1]),
                        name="total").output("totals")
    return flow


def consumed_wrongly(log: list[tuple[str, int, list]], expected: dict[int, list], in_hand: list[int]) -> str | None:
    """What is wrong with what the consumer saw across every driver, or None: each epoch comes
    after every earlier one, or again right after itself with the same records, and only if
    it was in the consumer's hands at a crash (``in_hand``: per crash, the epoch it had acted
    on and not asked past, which a new driver hands out first); together they are exactly the
    run without crashes."""
    epochs = [epoch for _, epoch, _ in log]
    seen: dict[int, list] = {}
    repeats: collections.Counter = collections.Counter()
    for position, (_, epoch, records) in enumerate(log):
        if epoch in seen:
            if epoch != epochs[position - 1]:
                return f"epoch {epoch} came again after epoch {epochs[position - 1]}: {epochs}"
            repeats[epoch] += 1
            if sorted(records) != sorted(seen[epoch]):
                return f"epoch {epoch} differs the second time: {seen[epoch]} then {records}"
        elif seen and epoch < max(seen):
            return f"epoch {epoch} came after a later one: {epochs}"
        seen[epoch] = records
    if repeats - collections.Counter(in_hand):
        return f"epochs seen again: {dict(repeats)}; in the consumer's hands at a crash: {in_hand} ({epochs})"
    wanted = {epoch: sorted(records) for epoch, records in expected.items()}
    got = {epoch: sorted(records) for epoch, records in seen.items()}
    if got != wanted:
        lost = sorted(set(wanted) - set(got))
        wrong = sorted(e for e in set(wanted) & set(got) if wanted[e] != got[e])
        return f"lost epochs {lost}, wrong epochs {wrong}, extra {sorted(set(got) - set(wanted))}"
    return None


#: When a driver crashes: at a random step; the step after its consumer is handed an epoch
#: (before or after acting on it); once a snapshot taken while the consumer held an epoch it
#: had not acted on has committed (the consumer waits meanwhile); or while the job rescales.
CRASH_MODES = ("anytime", "handed", "acted", "snapshot while handed", "during a rescale")


class DriverCrash:
    """Crashes one driver of a trial in one of :data:`CRASH_MODES` (None: it does not crash)."""

    def __init__(self, job: LocalJob, consumer: LocalConsumer, rng: random.Random, mode: str | None,
                 length: int) -> None:
        """``length``: the steps a run without crashes takes."""
        self.consumer, self.mode, self.rng, self.length = consumer, mode, rng, length
        self.target = len(consumer.log) + rng.randint(0, 2)  # the epoch (by count) a "handed"/"acted" crash waits for
        self.held: tuple[int, int, float] | None = None  # (snapshot last triggered, until step, pace) at the hand
        self.into, self.struck = rng.choice(("HOLDING", "HANDING_OVER", "ADOPTING")), None  # the rescale's phase to crash in
        if mode == "anytime":
            job.crash(DRIVER, at_step=rng.randrange(1, length + 20))
        if mode == "during a rescale":
            width = rng.choice([w for w in (1, 2, 3) if w != job.plan.width("total")])
            job.rescale({"total": width, "count": rng.randint(1, 3)}, at_step=rng.randrange(1, max(2, length // 2)))

    def after_step(self, job: LocalJob) -> None:
        handed = bool(self.consumer.handed)
        if self.mode == "snapshot while handed":
            due = self._snapshot_while_handed(job, handed)
        elif self.mode == "during a rescale":
            due = self._into_the_rescale(job)
        else:
            due = self.mode in ("handed", "acted") and len(self.consumer.log) == self.target and \
                handed == (self.mode == "handed")
        if due:
            self.mode = None
            job.crash(DRIVER, at_step=job.result.steps + 1)

    def _into_the_rescale(self, job: LocalJob) -> bool:
        """Whether the rescale under way is in the phase :attr:`into` aims at (a step or a few
        into it: its steps queued then); :attr:`struck`: the phase."""
        rescaling = job.rescaling
        if rescaling is None or rescaling.over or rescaling.machine.phase.name != self.into:
            return False
        queued = job.recovery_steps if self.into == "ADOPTING" else rescaling.steps
        self.struck = self.into
        job.crash(DRIVER, at_step=job.result.steps + 1 + self.rng.randrange(len(queued) + 1))
        self.mode = None
        return False

    def _snapshot_while_handed(self, job: LocalJob, handed: bool) -> bool:
        """Once the consumer is handed an epoch, it waits (for up to ``length`` steps) until a
        snapshot triggered since has committed: then the driver is due to crash."""
        if self.held is None:
            if handed:
                self.held = (job.last_snapshot_id, job.result.steps + self.length, self.consumer.pace)
                self.consumer.pace = 0.0
            return False
        since, until, pace = self.held
        due = max(job.result.snapshots, default=0) > since
        if due or job.result.steps >= until:
            self.consumer.pace, self.mode = pace, None if not due else self.mode
        return due


def trial(seed: int, root: str, seen: collections.Counter) -> str | None:
    """Seeded trial ``seed``: drivers crash at random steps until one finishes; returns what went wrong."""
    rng = random.Random(seed)
    words = "abcdef"
    inputs = [[rng.choice(words) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(3, 7))]
    parallelism, commit = rng.randint(1, 3), rng.choice(["epoch", "snapshot"])

    def job(store: str, restore: str | None, consumer: LocalConsumer | None, run_seed: int) -> LocalJob:
        recovery = LocalRecovery(SnapshotStore(store), interval=rng.choice([3, 10, 30]), max_restarts=6,
                                 detection=rng.randint(0, 4), output_commit=commit)  # type: ignore[arg-type]
        return LocalJob(running_totals(), {"words": inputs}, parallelism=parallelism, seed=run_seed,
                        recovery=recovery, restore=restore, consumer=consumer)

    calm = job(f"{root}-calm", None, LocalConsumer(), seed).run()
    assert calm.finished, f"seed {seed}: the run without crashes did not finish"
    consumer, in_hand, restore = LocalConsumer(pace=rng.choice([1.0, 0.2, 0.05]), rng=random.Random(seed)), [], None
    store = SnapshotStore(root)
    for attempt in range(4):
        consumer.handed.clear()  # handed by the driver that crashed, not acted on: gone with its process
        driver = job(root, restore, consumer, seed * 10 + attempt)
        crash = DriverCrash(driver, consumer, rng, rng.choice(CRASH_MODES) if attempt < 3 else None, calm.steps)
        if rng.random() < 0.3:
            driver.crash(rng.choice([*driver.replicas, PROGRESS, COORDINATOR]), at_step=rng.randrange(1, calm.steps))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "skipping snapshot k: not committed" after a crash
            try:
                run = driver.run(max_steps=100_000, after_step=crash.after_step)
            except BROKEN as error:  # a hang, a livelock, or an epoch shown twice (InternalError)
                return f"driver {attempt}: {error!r}"
        if run.driver_crashed is None:
            if run.failure is not None or not run.finished:
                return f"driver {attempt}: failure={run.failure!r} finished={run.finished}"
            break
        acted = [epoch for _, epoch, _ in consumer.log[-1:] if epoch > consumer.asked_past.get("totals", -1)]
        in_hand += acted  # acted on, not asked past: the one epoch the next driver may hand out again
        seen["driver crashed"] += 1
        seen[f"during a rescale, {crash.struck}"] += crash.struck is not None
        seen["with an epoch in the consumer's hands"] += any(driver.outputs.book.in_hand.values())
        seen["with epochs shown and not handed out"] += any(driver.outputs.pending.values())
        seen["after a committed snapshot"] += bool(run.snapshots)
        restore = "latest" if store.committed() else START  # as a stream's restart does (streams.restore_id)
        seen["restarted from a snapshot" if restore == "latest" else "restarted from the beginning"] += 1
    return consumed_wrongly(consumer.log, calm.outputs["totals"], in_hand)


def test_a_restarted_driver_hands_its_consumer_every_epoch_once_but_the_one_in_hand(store_root):
    seen: collections.Counter = collections.Counter()
    for seed in seeds(TRIALS, "driver restart"):
        wrong = trial(seed, str(store_root / str(seed)), seen)
        assert wrong is None, f"seed {seed}: {wrong}"
    for what in ("with an epoch in the consumer's hands", "with epochs shown and not handed out",
                 "after a committed snapshot", "restarted from a snapshot", "restarted from the beginning"):
        assert seen[what] >= 20, dict(seen)


# -- planted bugs: each must make some trial hand the consumer an epoch twice, or lose one ----


def _counting_the_epoch_in_hand(book: Deliveries, first_pending) -> dict[str, int]:
    """A planted bug: the epoch in the consumer's hands counts as delivered (a driver that
    dies before its consumer acts on it loses it)."""
    marks = book.delivered()
    for name in book.streamed:
        first = first_pending(name)
        if first is not None:
            marks[name] = max(book.handed_before[name], first - 1)
    return marks


def _one_too_few(durable):
    """A planted bug: what counts as delivered stops an epoch short (the last one the consumer
    asked past is handed out again)."""
    def fewer(book: Deliveries, first_pending) -> dict[str, int]:
        return {name: max(-1, epoch - 1) if name in book.streamed else epoch
                for name, epoch in durable(book, first_pending).items()}
    return fewer


PLANTS = {
    "the epoch in hand counted as delivered": lambda mp: mp.setattr(Deliveries, "durable", _counting_the_epoch_in_hand),
    "delivered stops an epoch short": lambda mp: mp.setattr(Deliveries, "durable", _one_too_few(Deliveries.durable)),
    "the consumed record not read": lambda mp: mp.setattr(ConsumedRecord, "after", lambda self, snapshot_id: {}),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_bug_in_what_counts_as_delivered_is_caught(monkeypatch, store_root, plant):
    PLANTS[plant](monkeypatch)
    caught = next((seed for seed in range(60) if trial(seed, str(store_root / str(seed)), collections.Counter())), None)
    assert caught is not None, f"no trial caught the planted bug {plant!r}"

