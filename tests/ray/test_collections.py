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


def test_a_join_and_sums_by_column_rescaled_live_equal_the_reference(ray_session, tmp_path):
    """The vectorised join and sum (``with_columns``) on Ray: orders joined to customers on
    ``customer``, amounts summed per region, rows updated every epoch (pushed as column batches
    in odd epochs, as pairs in even ones), the join rescaled live mid-run; each epoch's changes
    of the sums are the difference of the reference's totals."""
    rng = random.Random(3)
    orders = {o: (rng.randrange(20), rng.randrange(1, 9)) for o in range(200)}
    regions = {c: rng.randrange(4) for c in range(20)}
    epochs: list[tuple[list, list]] = [([((o, c, a), 1) for o, (c, a) in orders.items()],
                                        [((c, r), 1) for c, r in regions.items()])]
    totals = [_region_totals(orders, regions)]
    for _ in range(6):
        moved = {o: (orders[o][0], rng.randrange(1, 9)) for o in rng.sample(sorted(orders), 10)}
        recolored = {c: rng.randrange(4) for c in rng.sample(sorted(regions), 3)}
        epochs.append(([((o, *orders[o]), -1) for o in moved] + [((o, *row), 1) for o, row in moved.items()],
                       [((c, regions[c]), -1) for c in recolored] + [((c, r), 1) for c, r in recolored.items()]))
        orders.update(moved)
        regions.update(recolored)
        totals.append(_region_totals(orders, regions))
    flow = rt.Dataflow("join-sum")
    joined = flow.collection("orders").with_columns("order", "customer", "amount").join(
        flow.collection("customers").with_columns("customer", "region"), "customer", name="joined")
    joined.sum("region", "amount", name="sums").output("totals")
    got: dict[int, Counter] = {}
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"), interval=0.3)) as job:
        for epoch, (order_updates, customer_updates) in enumerate(epochs):
            as_sent = (lambda u, names: update_columns(u, names)) if epoch % 2 else (lambda u, names: u)
            job.push("orders", as_sent(order_updates, ("order", "customer", "amount")), epoch)
            job.push("customers", as_sent(customer_updates, ("customer", "region")), epoch)
            if epoch == 3:
                job.rescale({"joined": 3}, timeout=120)
                assert job.parallelism()["joined"] == 3
        job.close("orders")
        job.close("customers")
        for epoch, changes in job.results("totals", timeout=300):
            got[epoch] = Counter(dict(changes))
        assert job.stats()["vertices"]["joined"]["arranged_updates"] >= len(orders) + len(regions)
    for epoch, after in enumerate(totals):
        change = Counter(after)
        change.subtract(totals[epoch - 1] if epoch else Counter())
        assert got.get(epoch, Counter()) == Counter({r: d for r, d in change.items() if d}), epoch


def _region_totals(orders: dict, regions: dict) -> Counter:
    sums: Counter = Counter()
    for customer, amount in orders.values():
        sums[regions[customer]] += amount
    return Counter({(region, total): 1 for region, total in sums.items()})
