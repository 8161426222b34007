"""Epochs of edges pushed at once, without waiting, through connected components on real Ray.

Ten epochs go in back to back; the loop's epoch gate takes them one after another. The
output of each epoch is compared row for row (as a multiset) with what processing the
epochs one after another gives (``tests.sim.test_graph_sim.expected_rows``), so a lost,
duplicated or mixed-up record fails the test, not only a wrong labelling. The same with
a replica of the iterating vertex SIGKILLed while epochs iterate, and with that vertex
rescaled live from 2 to 3 replicas.
"""

from __future__ import annotations

import collections
import os
import random
import signal

import pytest

import raytide as rt
from examples.connected_components import build_flow, union_find
from tests.sim.test_graph_sim import expected_rows

pytestmark = pytest.mark.ray

EPOCHS = 10


def ten_epochs(seed: int) -> list[list[tuple[int, int]]]:
    rng = random.Random(seed)
    edges = [(rng.randrange(800), rng.randrange(800)) for _ in range(1000)]
    return [edges[i::EPOCHS] for i in range(EPOCHS)]


def run(epochs: list, tmp_path, during=None) -> dict[int, collections.Counter]:
    """Push every epoch at once, call ``during(job)`` once the first epoch is out, collect the rest."""
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.3, max_restarts=3) if during else None
    with rt.run(build_flow(2), parallelism=2, recovery=recovery) as job:
        for epoch, edges in enumerate(epochs):
            job.push("edges", edges, epoch)
        results = job.results("labels", timeout=300)
        got = dict([next(results)])
        if during:
            during(job)
        job.close("edges")
        got.update(results)
    return {epoch: collections.Counter(tuple(int(x) for x in row) for row in rows) for epoch, rows in got.items()}


def test_ten_epochs_pushed_at_once_equal_union_find_epoch_by_epoch(ray_session, tmp_path):
    epochs = ten_epochs(1)
    got = run(epochs, tmp_path)
    assert got == expected_rows(epochs)
    labels: dict[int, int] = {}
    for epoch in range(EPOCHS):  # the output contract: the smallest label so far is union-find's
        for node, label in got[epoch]:
            labels[node] = min(label, labels.get(node, label))
        assert labels == union_find([e for part in epochs[: epoch + 1] for e in part]), epoch


def test_a_replica_of_the_loop_killed_while_epochs_iterate_loses_and_repeats_nothing(ray_session, tmp_path):
    epochs = ten_epochs(2)

    def kill(job: rt.Job) -> None:
        chain = job.plan.chain_of("label-propagation").name
        os.kill(job.hosts()[f"{job.name}/{chain}/1"], signal.SIGKILL)

    assert run(epochs, tmp_path, kill) == expected_rows(epochs)


def test_the_loop_rescaled_live_while_epochs_iterate_loses_and_repeats_nothing(ray_session, tmp_path):
    epochs = ten_epochs(3)

    def rescale(job: rt.Job) -> None:
        job.rescale({"label-propagation": 3}, timeout=120)
        assert job.parallelism()["label-propagation"] == 3

    assert run(epochs, tmp_path, rescale) == expected_rows(epochs)
