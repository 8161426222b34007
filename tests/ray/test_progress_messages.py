"""Progress messages on a real local Ray: how many an epoch costs (the rounds through the
progress actor are most of an epoch's latency, so their number is pinned here), and output
parts too large to travel inline reaching the driver."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import raytide as rt

pytestmark = pytest.mark.ray

EPOCHS = 30
#: Per epoch of the keyed pipeline below, at parallelism 2: a batch from each input replica
#: as it moves on, one from each merge replica as its records arrive (with the wait they
#: declare) and one with its counts, after the notification.
BATCHES_PER_EPOCH = 6
#: Per epoch: the status that makes the notification of each merge replica due.
PUSHES_PER_EPOCH = 2


def keyed() -> rt.Dataflow:
    flow = rt.Dataflow("rounds")
    flow.input("x").map(lambda x: x % 5).count_by_key(lambda k: k).output("counts")
    return flow


def run_epochs(job: rt.Job, results, epochs: range, expected: Callable[[int], list]) -> None:
    """Push, close and take each small epoch in turn, as a user waiting on each would."""
    for epoch in epochs:
        job.push("x", list(range(10)), epoch)
        job.advance("x", epoch + 1)
        got, records = next(results)
        assert (got, sorted(records)) == (epoch, expected(epoch))


def counts(epoch: int) -> list:
    """Each epoch's counts: ten records, two per key."""
    return [(k, 2) for k in range(5)]


def test_a_small_epoch_of_a_keyed_pipeline_takes_one_round_through_the_progress_actor(ray_session):
    with rt.run(keyed(), parallelism=2) as job:
        results = job.results("counts", timeout=120)
        run_epochs(job, results, range(1), counts)
        before = job.stats()
        run_epochs(job, results, range(1, 1 + EPOCHS), counts)
        after = job.stats()
        job.close("x")
    batches = after["progress_batches"] - before["progress_batches"]
    pushes = after["progress_pushes"] - before["progress_pushes"]
    assert batches <= BATCHES_PER_EPOCH * EPOCHS, f"{batches / EPOCHS:.2f} progress batches per epoch"
    assert pushes <= PUSHES_PER_EPOCH * EPOCHS, f"{pushes / EPOCHS:.2f} status pushes per epoch"


def padded(i: int) -> tuple[int, str]:
    return i, "y" * 50_000


def large(epoch: int) -> list:
    """An epoch's records: 500 KB, far beyond what travels inline to the progress actor."""
    return [padded(i) for i in range(10)]


def test_output_parts_that_stay_in_the_object_store_reach_the_driver(ray_session):
    """Such a part is an object ref: it must travel as a Ray argument, so that Ray keeps it
    while the progress actor and the driver hold it, after the sink let go of it."""
    flow = rt.Dataflow("large-parts")
    flow.input("x").map(padded).output("out")
    with rt.run(flow, parallelism=2) as job:
        results = job.results("out", timeout=120)
        run_epochs(job, results, range(3), large)
