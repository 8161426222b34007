"""Collections on real Ray: connected components of a graph whose edges are inserted and
deleted, ten epochs pushed at once, a replica of the loop SIGKILLed while epochs iterate and
the loop rescaled live; each epoch's changes must be exactly the difference between
union-find's labels of the edges present before and after it (so a change lost or shown
twice fails, not only a wrong labelling). The operators' semantics are proven against
recomputation in tests/unit/test_differential.py and tests/sim/test_collections_sim.py.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter

import pytest

import raytide as rt
from examples.connected_components import union_find
from examples.incremental_components import build_flow, labels_by_epoch, random_updates
from raytide.differential import update_columns
from tests.oracles import component_changes

pytestmark = pytest.mark.ray

EPOCHS = 10


def test_labels_by_epoch_equal_union_find_of_the_edges_present(ray_session):
    epochs = random_updates(random.Random(1), 200, 300, 4, churn=0.05)
    present: Counter = Counter()
    for epoch, labels in enumerate(labels_by_epoch(epochs)):
        for edge, diff in epochs[epoch]:
            present[edge] += diff
        assert labels == union_find(list((+present).elements())), epoch


def test_a_replica_killed_mid_fixpoint_and_a_live_rescale_lose_and_repeat_no_change(ray_session, tmp_path):
    epochs = random_updates(random.Random(2), 300, 600, EPOCHS, churn=0.01)
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.3, max_restarts=3)
    got: dict[int, Counter] = {}
    with rt.run(build_flow(2), parallelism=2, recovery=recovery) as job:
        for epoch, updates in enumerate(epochs):  # odd epochs as column batches of updates: arrays stay arrays
            job.push("edges", update_columns(updates, ("src", "dst")) if epoch % 2 else updates, epoch)
        results = job.results("labels", timeout=300)
        for epoch, changes in results:
            assert epoch not in got, f"epoch {epoch} handed out twice"
            got[epoch] = Counter(dict(changes))
            if epoch == 1:  # the later epochs are in the loop now
                chain = job.plan.chain_of("components").name
                os.kill(job.hosts()[f"{job.name}/{chain}/1"], signal.SIGKILL)
            if epoch == 4:
                job.rescale({"components": 3}, timeout=120)
                assert job.parallelism()["components"] == 3
            if epoch == EPOCHS - 2:
                job.close("edges")
        stats = job.stats()
        assert len(stats["recoveries"]) >= 1
        held = stats["vertices"]["components"]["arranged_updates"]  # its netted arrangement (Vertex.statistics)
    present = sum(copies for copies in rt.accumulate({e: u for e, u in enumerate(epochs)}).values())
    assert 0 < held <= 3 * 2 * present, (held, present)  # both directions of each edge, and what merges have not netted yet
    assert {epoch: changes for epoch, changes in got.items() if changes} == component_changes(epochs)
