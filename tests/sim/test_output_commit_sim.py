"""Output committed at snapshots (``output_commit="snapshot"``) keeps a dataflow whose output
depends on arrival order exactly-once across crashes; committed per epoch it does not.

The dataflow links every record to the one before it in the order a single replica
happened to see them (a ``stateful_map`` whose state is the last record): the output is
a chain ``(previous, record)`` through all records, different in every run. If an epoch
handed out before a crash is computed again in another order after it, the state the job
goes on from disagrees with the output the user has, and the chain breaks: a record
appears twice as a predecessor. Seeded trials on the in-process runtime crash a replica,
the progress core or the coordinator (:mod:`tests.sim.chaos`).
"""

from __future__ import annotations

import collections
import random
import warnings
from typing import Any

import raytide as rt
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob, LocalRecovery, LocalRun
from tests.sim.chaos import BROKEN, MODES, Chaos

TRIALS = 300


def chained_flow() -> rt.Dataflow:
    """Each record paired with the record the linking replica saw just before it."""
    flow = rt.Dataflow("chain")
    flow.input("records").stateful_map(lambda r: 0, lambda last, r: (r, (last, r)), name="link").output("links")
    return flow


def chain_breaks(links: dict[int, list], inputs: list[list[int]]) -> str | None:
    """What is wrong with a run's ``links`` per epoch, or None: every epoch holds exactly its
    records, and the links form one chain from None through every record."""
    for epoch, records in enumerate(inputs):
        got = sorted(record for _, (_, record) in links.get(epoch, []))
        if got != sorted(records):
            return f"epoch {epoch} holds {got}, not {sorted(records)}"
    successor: dict[Any, Any] = {}
    for _, (previous, record) in (link for epoch in links.values() for link in epoch):
        if previous in successor:
            return f"{previous} precedes both {successor[previous]} and {record}"
        successor[previous] = record
    walked, at = 0, None
    while at in successor:
        at, walked = successor[at], walked + 1
    total = sum(map(len, inputs))
    return None if walked == total else f"the chain from None reaches {walked} of {total} records"


def trial(seed: int, store_dir: str, commit: str, seen: collections.Counter) -> tuple[LocalRun | None, str | None]:
    """Seeded trial ``seed``: a crash at a random moment; returns the run and what went wrong."""
    rng = random.Random(seed)
    numbers = iter(range(10_000))
    inputs = [[next(numbers) for _ in range(rng.randint(2, 6))] for _ in range(rng.randint(3, 5))]

    def job(directory: str) -> LocalJob:
        recovery = LocalRecovery(SnapshotStore(directory), interval=rng.choice([3, 10, 30]), max_restarts=4,
                                 detection=rng.randint(0, 6), output_commit=commit)  # type: ignore[arg-type]
        return LocalJob(chained_flow(), {"records": inputs}, parallelism=rng.randint(2, 3), seed=seed,
                        recovery=recovery)

    calm = job(store_dir + "-calm").run()
    calm_wrong = chain_breaks(calm.outputs["links"], inputs)
    assert calm.finished and calm_wrong is None, f"seed {seed}, no crash: {calm_wrong}"
    victim = job(store_dir)
    chaos = Chaos(victim, rng, MODES[seed % len(MODES)], seen, calm.steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "skipping snapshot k: not committed" after a crash
        try:
            run = victim.run(max_steps=100_000, after_step=chaos.after_step)
        except BROKEN as error:  # a hang, a livelock or an epoch handed over twice
            return None, repr(error)
    if run.failure is not None or not run.finished:
        return run, f"failure={run.failure!r} finished={run.finished}"
    return run, chain_breaks(run.outputs["links"], inputs)


def test_committed_at_snapshots_the_output_agrees_with_one_run_across_every_crash(store_root):
    seen: collections.Counter = collections.Counter()
    recoveries = 0
    for seed in range(TRIALS):
        run, wrong = trial(seed, str(store_root / str(seed)), "snapshot", seen)
        assert wrong is None, f"seed {seed} ({MODES[seed % len(MODES)]}): {wrong}; recoveries {run and run.recoveries}"
        assert run is not None
        recoveries += len(run.recoveries)
    assert recoveries >= TRIALS * 3 // 4, recoveries
    assert seen["crash after a committed snapshot"] >= 20, dict(seen)


def test_committed_per_epoch_the_same_crashes_break_the_chain(store_root):
    """The teeth of the test above: handing out each epoch as it completes, some trials show
    output that a recovery then computed differently."""
    seen: collections.Counter = collections.Counter()
    broken = [seed for seed in range(TRIALS) if trial(seed, str(store_root / str(seed)), "epoch", seen)[1] is not None]
    assert broken, "no trial broke the chain with output committed per epoch"


def test_an_epoch_is_handed_out_only_once_a_committed_snapshot_holds_it_complete(store_root):
    """At every step of a run without crashes, each epoch the driver has is complete in a
    committed snapshot of the store (as its manifest says), until the job finishes."""
    held_back = 0
    for seed in range(20):
        store = SnapshotStore(str(store_root / str(seed)))
        inputs = [[seed * 100 + i, seed * 100 + 50 + i] for i in range(4)]
        job = LocalJob(chained_flow(), {"records": inputs}, parallelism=2, seed=seed,
                       recovery=LocalRecovery(store, interval=15, output_commit="snapshot"))

        def check(job: LocalJob, store: SnapshotStore = store, seed: int = seed) -> None:
            nonlocal held_back
            if job.result.finished:
                return
            complete = max((m.metadata["complete"]["links"] for m in store.committed()), default=-1,
                           key=lambda epoch: float("inf") if epoch is None else epoch)
            handed = max(job.result.outputs["links"], default=-1)
            assert complete is None or handed <= complete, f"seed {seed}: epoch {handed} out, {complete} committed"
            held_back += any(job.outputs.gate.held.values())

        run = job.run(after_step=check)
        assert run.finished and chain_breaks(run.outputs["links"], inputs) is None
    assert held_back, "no epoch was ever held back"
