"""A stream read by several consumers fused into its writer's chain (one process per replica,
not one per reader): each reader gets records of its own, as separate processes would, so a
reader that changes its records in place, or keeps them until a notification, never changes
what another reader sees. In the engine the simulator and Ray both run (``LocalJob``), under
seeded interleavings, at widths 1 to 3, against a plain-Python reference."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import pytest

import raytide as rt
from raytide.progress.timestamps import Timestamp
from raytide.testing import LocalJob
from tests.sim.seeds import rotating

EPOCHS = 4


class KeptUntilNotified(rt.Vertex):
    """Keeps the records it gets (the objects themselves) and sends each one's ``n`` when its epoch is complete."""

    def __init__(self) -> None:
        self.kept: dict[Timestamp, list[dict]] = {}

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        if time not in self.kept:
            self.notify_at(time)
        self.kept.setdefault(time, []).extend(message)

    def on_notify(self, time: Timestamp) -> None:
        self.send_by(0, [row["n"] for row in self.kept.pop(time)], time)


def changed_in_place(row: dict) -> dict:
    row["n"] *= 10
    return row


def flow(changer_first: bool) -> rt.Dataflow:
    """Rows read by a reader that changes each row in place, one that reads ``n`` at once, and
    one that keeps the rows until its epoch is complete; the changer first or last."""
    job = rt.Dataflow("fanout")
    rows = job.input("numbers").map(lambda n: {"n": n}, name="rows")
    if changer_first:
        rows.map(changed_in_place, name="changer").map(lambda row: row["n"], name="changed").output("tens")
    rows.map(lambda row: row["n"], name="reader").output("read")
    rows.unary(KeptUntilNotified, name="keeper").output("kept")
    if not changer_first:
        rows.map(changed_in_place, name="changer").map(lambda row: row["n"], name="changed").output("tens")
    return job


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, *rotating(2, "fanout")])
def test_readers_fused_behind_one_stream_never_see_each_others_changes(seed: int) -> None:
    rng = random.Random(seed)
    numbers = [[rng.randrange(100) for _ in range(rng.randrange(1, 20))] for _ in range(EPOCHS)]
    changer_first = seed % 2 == 0
    job = LocalJob(flow(changer_first), {"numbers": numbers}, parallelism=rng.randint(1, 3), seed=seed)
    assert any(len(chain.vertices) > 4 for chain in job.plan.chains), "the readers are not fused behind the writer"
    result = job.run()
    assert result.failure is None and result.finished, f"seed {seed}: {result.failure}"
    for name, scale in (("read", 1), ("kept", 1), ("tens", 10)):
        got = {epoch: Counter(records) for epoch, records in result.outputs[name].items() if records}
        expected = {epoch: Counter(n * scale for n in batch) for epoch, batch in enumerate(numbers) if batch}
        assert got == expected, f"seed {seed}: {name!r} saw another reader's change (changer first: {changer_first})"


def test_a_record_that_does_not_pickle_fails_the_copy_naming_vertex_replica_time_and_reader() -> None:
    """A record another process could not get cannot be copied for a fused reader either: the
    job fails with a RecordError saying where, never a reader sharing the other's object."""
    job = rt.Dataflow("unpicklable")
    locks = job.input("numbers").map(lambda n: threading.Lock(), name="locks")
    locks.map(lambda lock: 1, name="a").output("oa")
    locks.map(lambda lock: 2, name="b").output("ob")
    result = LocalJob(job, {"numbers": [[1, 2]]}, parallelism=1).run()
    assert isinstance(result.failure, rt.RecordError), result.failure
    assert "vertex 'locks' replica 0, output 0 at Timestamp(0), copied for 'a'" in str(result.failure)
    assert "cannot be pickled" in str(result.failure)
