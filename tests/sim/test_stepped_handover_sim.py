"""A stepped rescale's hand-over in the real engine (``LocalJob``, the replica cores Ray runs):
the old owner holds at the vertex's input until nothing before the step can reach it, then
hands the moving groups' state over as a message at the step's epoch; the new owner keeps
their records until it comes (docs/rescaling.md, "Stepped migration"). Keyed state across
epochs (``stateful_map``: a sequence per key) and per-epoch counts delivered at notifications
(``count_by_key``), against a plain-Python reference, under seeded interleavings."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import pytest

import raytide as rt
from raytide.core.keygroups import KeyGroupAssignment
from raytide.physical.protocol import ReplicaKey
from raytide.progress.timestamps import Timestamp
from raytide.rescale.steps import StepPlan, plan_steps
from raytide.snapshots.store import SnapshotStore
from raytide.testing import LocalJob, LocalRecovery
from tests.sim.seeds import rotating

EPOCHS = 8
STEPPED = ("seq", "count", "eager")


class EagerSequence(rt.Vertex):
    """A sequence number per key, sent as each record comes (no notification): a record
    processed before its group's state came restarts its key's sequence."""

    def __init__(self) -> None:
        self.seen: dict[Hashable, int] = {}

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        out = []
        for key in message:
            self.seen[key] = self.seen.get(key, 0) + 1
            out.append((key, self.seen[key]))
        self.send_by(0, out, time)

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        taken = {key: n for key, n in self.seen.items() if moving(key)}
        for key in taken:
            del self.seen[key]
        return taken

    def put_keys(self, state: Any) -> None:
        self.seen.update(state)

    def snapshot(self) -> Any:
        return dict(self.seen)

    def restore(self, state: Any) -> None:
        self.seen = dict(state or {})


def flow() -> rt.Dataflow:
    job = rt.Dataflow("stepped")
    keys = job.input("keys", parallelism=1)  # one sender: a key's records in epoch order at the eager vertex
    keys.unary(EagerSequence, exchange=lambda k: k, name="eager", parallelism=3).output("eager_running")
    keys.stateful_map(lambda k: k, lambda seen, k: ((seen or 0) + 1, (seen or 0) + 1), name="seq",
                      parallelism=3).output("running")
    keys.count_by_key(lambda k: k, name="count", parallelism=3).output("counts")
    return job


def reference(keys: list[list[int]]) -> tuple[dict[int, Counter], dict[int, Counter]]:
    seen: Counter = Counter()
    running, counts = {}, {}
    for epoch, batch in enumerate(keys):
        out = []
        for key in batch:
            seen[key] += 1
            out.append((key, seen[key]))
        running[epoch], counts[epoch] = Counter(out), Counter(Counter(batch).items())
    return running, counts


def trial(seed: int, groups_per_step: int = 8) -> None:
    rng = random.Random(seed)
    keys = [[rng.randrange(60) for _ in range(rng.randrange(10, 30))] for _ in range(EPOCHS)]
    plans = [plan(groups_per_step).message(vertex) for vertex in STEPPED]
    job = LocalJob(flow(), {"keys": keys}, seed=seed, step_plans=plans)
    if seed % 2:  # the old owners slow: the new owners get records and tokens well before the state
        for vertex in STEPPED:
            job.slow_down(ReplicaKey(job.plan.chain_of(vertex).name, 2), weight=0.1)
    result = job.run()
    assert result.failure is None, f"seed {seed}: {result.failure}"
    running, counts = reference(keys)
    got_eager = {e: Counter(r) for e, r in result.outputs["eager_running"].items() if r}
    assert got_eager == {e: c for e, c in running.items() if c}, f"seed {seed}: per-key sequences (eager)"
    got_running = {e: Counter(r) for e, r in result.outputs["running"].items() if r}
    got_counts = {e: Counter(r) for e, r in result.outputs["counts"].items() if r}
    assert got_running == {e: c for e, c in running.items() if c}, f"seed {seed}: per-key sequences"
    assert got_counts == {e: c for e, c in counts.items() if c}, f"seed {seed}: per-epoch counts"


def plan(groups_per_step: int) -> StepPlan:
    """3 -> 2 replicas: the third's groups move to the other two, a few a step from epoch 1."""
    return plan_steps(KeyGroupAssignment.contiguous(3), 2, first_epoch=1, groups_per_step=groups_per_step)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8, *rotating(4, "stepped-handover")])
def test_state_moves_in_steps_exactly_once_and_in_order(seed: int) -> None:
    trial(seed)


@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15, 16, *rotating(3, "stepped-migrate")])
def test_a_stepped_rescale_made_at_any_step_of_a_running_job(seed: int) -> None:
    """``LocalJob.migrate``: the driver plans the steps from the epoch after the latest any
    input has reached, at a random step of the run, with the plan's holds and its install
    in that one step; every output as the reference's."""
    rng = random.Random(seed)
    keys = [[rng.randrange(60) for _ in range(rng.randrange(10, 30))] for _ in range(EPOCHS)]
    job = LocalJob(flow(), {"keys": keys}, seed=seed)
    at = rng.randrange(0, 900)  # runs take about 1,200 steps: an input may have closed (the rescale refused)
    for vertex in STEPPED:
        job.migrate(vertex, rng.choice([1, 2]), at_step=at, groups_per_step=rng.choice([4, 16, 64]))
    result = job.run()
    assert result.failure is None, f"seed {seed}: {result.failure}"
    assert len(result.migrations) == len(STEPPED) or result.refused, f"seed {seed}: the migration was not made"
    running, counts = reference(keys)
    for name, expected in (("eager_running", running), ("running", running), ("counts", counts)):
        got = {e: Counter(r) for e, r in result.outputs[name].items() if r}
        assert got == {e: c for e, c in expected.items() if c}, f"seed {seed}: {name} (migrated at step {at})"


@pytest.mark.parametrize("seed", [21, 22, 23, 24, 25, 26, 27, 28, *rotating(4, "stepped-crash")])
def test_a_death_during_a_stepped_rescale_falls_back_to_a_whole_job_recovery(tmp_path: Path, seed: int) -> None:
    """With recovery: a replica of a stepped vertex (or of the input) killed at a random step
    while the plan may run; the job recovers from the snapshot before the plan, the rescale
    is made again, and every output is exactly the reference's, each epoch once."""
    rng = random.Random(seed)
    keys = [[rng.randrange(60) for _ in range(rng.randrange(10, 30))] for _ in range(EPOCHS)]
    store = SnapshotStore(str(tmp_path / "store"))
    job = LocalJob(flow(), {"keys": keys}, seed=seed, recovery=LocalRecovery(store, interval=rng.choice([30, 80])))
    at = rng.randrange(0, 500)
    widths = {vertex: rng.choice([1, 2]) for vertex in STEPPED}
    for vertex, width in widths.items():
        job.migrate(vertex, width, at_step=at, groups_per_step=rng.choice([4, 16]))
    victim = rng.choice([key for key in job.replica_keys() if key.chain in (*STEPPED, "keys")])
    job.crash(victim, at_step=at + rng.randrange(0, 400))
    result = job.run()
    assert result.failure is None, f"seed {seed}: {result.failure}"
    running, counts = reference(keys)
    for name, expected in (("eager_running", running), ("running", running), ("counts", counts)):
        got = {e: Counter(r) for e, r in result.outputs[name].items() if r}
        assert got == {e: c for e, c in expected.items() if c}, f"seed {seed}: {name} ({victim} killed)"
    sender = job.replicas[ReplicaKey(job.plan.chain_of("keys").name, 0)].outbox
    for (name, port, index), table in sender.tables().items():  # the rescale was made (again, after the recovery)
        vertex = job.plan.consumers_of(name, port)[index].vertex
        if vertex in widths and not result.refused:
            assert table.owners == KeyGroupAssignment.contiguous(3).rescale(widths[vertex])[0].owners, \
                f"seed {seed}: {vertex}'s groups are not where the rescale put them"
