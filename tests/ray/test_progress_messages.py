"""Progress messages on a real local Ray: how many an epoch costs (the rounds through the
progress actor are most of an epoch's latency, so their number is pinned here), and output
parts too large to travel inline reaching the driver."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import raytide as rt
from raytide.graph import connected_components, edge_columns

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


#: Per round of a two-replica loop, at each replica: the push that makes the round's
#: notification due (it carries the acknowledgement of the round before: no push of its own)...
PUSHES_PER_ROUND = 1.0
#: ... and a little over one Ray call to the progress actor: the round's batch (with its next
#: notification as its new wait) goes with the round's data to the peer, which passes it on
#: in the call that carries its receipt of that data.
CALLS_PER_ROUND = 1.25
PATH = 40


def test_a_round_of_a_loop_costs_each_replica_one_push_and_about_one_call_to_the_progress_actor(ray_session):
    """Connected components on a path: about one round per edge, with one or two rows each."""
    flow = rt.Dataflow("rounds-in-a-loop")
    connected_components(flow.input("edges").map_batches(edge_columns), name="cc").output("labels")
    path = np.stack([np.arange(PATH, 0, -1), np.arange(PATH - 1, -1, -1)], axis=1)
    with rt.run(flow, parallelism=2) as job:
        results = job.results("labels", timeout=120, batch_format="numpy")
        job.push("edges", path[:1], 0)
        job.advance("edges", 1)
        next(results)
        before = job.stats()
        job.push("edges", path[1:], 1)
        job.advance("edges", 2)
        epoch, labels = next(results)
        after = job.stats()
        job.close("edges")
    assert epoch == 1 and sorted(map(tuple, labels.tolist())) == [(node, 0) for node in range(PATH + 1)]
    rounds = after["vertices"]["cc"]["notifications"] - before["vertices"]["cc"]["notifications"]
    pushes = after["progress_pushes"] - before["progress_pushes"]
    calls = after["progress_calls"] - before["progress_calls"]
    assert rounds >= 2 * PATH, rounds  # both replicas, every round
    assert pushes <= PUSHES_PER_ROUND * rounds, f"{pushes / rounds:.2f} status pushes per round and replica"
    assert calls <= CALLS_PER_ROUND * rounds, f"{calls / rounds:.2f} progress calls per round and replica"


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
