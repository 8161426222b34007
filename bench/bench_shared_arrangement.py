"""Two joins over one collection by one key: a shared arrangement against one trace per join.

Run with ``python -m bench shared_arrangement --repeat 3``. ``orders`` ``(order, customer,
amount)`` is joined by customer with ``customers`` ``(customer, region)`` and with
``segments`` ``(customer, segment)``, and each join's amounts summed (per region, per
segment); epoch 0 inserts the tables, then each of ``epochs`` epochs updates ``churn`` of the
orders (a retraction and an insertion). Record by record (key functions), on Ray.

* ``shared_*``: ``orders.arrange_by_key(customer)`` read by both joins (one vertex, one trace
  of the orders per replica); ``copied_*``: ``orders.join(...)`` twice (each join keeps its
  own trace of the orders). Both run in every measurement, their order alternating, so the
  ratios are of the same run.
* ``*_first_s``: push of epoch 0 to both sums in the driver; ``*_epoch_s``: the median
  update epoch; ``*_arranged``: the updates the joins' traces hold after the last epoch
  (``job.stats()``'s ``arranged_updates``).

* ``columns=True``: the same by column name, vectorised: ``shared_*`` the two joins of
  ``orders`` by ``customer`` finding one arrangement of it (one vertex), ``copied_*`` each
  join given a name of its own (a vertex and an arrangement of the orders each).

* ``local=True``: both in one process instead (``LocalJob``, every epoch pushed at once):
  ``*_local_s`` the whole run's seconds, ``*_snapshot_bytes`` the pickled state of the
  joins' vertices after it (what a snapshot holds), CPU and memory without Ray's noise.

The sums of both are checked against each other and against Python's.
"""

from __future__ import annotations

import pickle
import random
import statistics
import time
from collections import Counter

import raytide as rt
from bench.harness import ensure_ray
from raytide.testing.local import LocalJob

PARAMS = {"orders": 100_000, "customers": 10_000, "epochs": 5, "churn": 0.01, "seed": 0, "parallelism": 2,
          "local": False, "columns": False}
REPEAT = 3
RATIOS = [
    ("update epoch shared/copied", "shared_epoch_s", "copied_epoch_s"),
    ("first epoch shared/copied", "shared_first_s", "copied_first_s"),
    ("arranged updates shared/copied", "shared_arranged", "copied_arranged"),
    ("in one process shared/copied", "shared_local_s", "copied_local_s"),
    ("snapshot bytes shared/copied", "shared_snapshot_bytes", "copied_snapshot_bytes"),
]
_RUNS = Counter[str]()


def build_flow(parallelism: int, shared: bool, columns: bool = False) -> rt.Dataflow:
    """Outputs ``by_region`` and ``by_segment``: changes of ``(region, sum)`` and ``(segment, sum)``."""
    flow = rt.Dataflow("two-joins", parallelism=parallelism)
    orders, customers, segments = flow.collection("orders"), flow.collection("customers"), flow.collection("segments")
    if columns:
        orders = orders.with_columns("order", "customer", "amount")
        customers, segments = customers.with_columns("customer", "region"), segments.with_columns("customer", "segment")
        regions = orders.join(customers, "customer", name="by-customer" if shared else "join-regions")
        kinds = orders.join(segments, "customer", name=None if shared else "join-segments")  # shared: finds it
        regions.sum("region", "amount").output("by_region")
        kinds.sum("segment", "amount").output("by_segment")
        return flow
    if shared:
        by_customer = orders.arrange_by_key(_customer, name="by-customer")
        regions, kinds = by_customer.join(customers, _first), by_customer.join(segments, _first)
    else:
        regions = orders.join(customers, _customer, _first, name="join-regions")
        kinds = orders.join(segments, _customer, _first, name="join-segments")
    regions.map(_label_and_amount).sum(_first, _second).output("by_region")
    kinds.map(_label_and_amount).sum(_first, _second).output("by_segment")
    return flow


def _customer(order: tuple) -> int:
    return order[1]


def _first(row: tuple) -> int:
    return row[0]


def _second(row: tuple) -> int:
    return row[1]


def _label_and_amount(joined: tuple) -> tuple:
    """``(customer, ((order, customer, amount), (customer, label)))`` -> ``(label, amount)``."""
    _, ((_, _, amount), (_, label)) = joined
    return (label, amount)


def make_updates(orders: int, customers: int, epochs: int, churn: float, seed: int) -> dict[str, list[list]]:
    """Per input, per epoch, the updates ``(record, diff)``."""
    rng = random.Random(seed)
    rows = [(order, rng.randrange(customers), rng.randrange(1, 1000)) for order in range(orders)]
    updates = {"orders": [[(row, 1) for row in rows]],
               "customers": [[((c, rng.randrange(100)), 1) for c in range(customers)]],
               "segments": [[((c, rng.randrange(7)), 1) for c in range(customers)]]}
    for _ in range(epochs):
        epoch = []
        for index in rng.sample(range(orders), int(churn * orders)):
            old = rows[index]
            rows[index] = (old[0], old[1], rng.randrange(1, 1000))
            epoch += [(old, -1), (rows[index], 1)]
        updates["orders"].append(epoch)
        updates["customers"].append([])
        updates["segments"].append([])
    return updates


def timed(parallelism: int, shared: bool, columns: bool, updates: dict[str, list[list]]) -> tuple[list[float], dict, int]:
    """Seconds per epoch (push to both sums), the final sums and the updates the joins' traces hold."""
    sums: dict[str, dict] = {"by_region": {}, "by_segment": {}}
    seconds = []
    with rt.run(build_flow(parallelism, shared, columns), parallelism=parallelism) as job:
        job.wait_ready(timeout=120)
        results = {name: job.results(name, timeout=3600) for name in sums}
        for epoch in range(len(updates["orders"])):
            start = time.perf_counter()
            for name, batches in updates.items():
                job.push(name, batches[epoch], epoch)
                job.advance(name, epoch + 1)
            for name, result in results.items():
                _, changes = next(result)
                rt.accumulate(changes, sums[name])
            seconds.append(time.perf_counter() - start)
        vertices = job.stats()["vertices"]
        names = ("by-customer",) if shared else ("join-regions", "join-segments")
        held = sum(vertices[name].get("arranged_updates", 0) for name in names)
        for name in updates:
            job.close(name)
    return seconds, sums, held


def in_process(parallelism: int, shared: bool, columns: bool,
               updates: dict[str, list[list]]) -> tuple[dict[str, float], dict]:
    """The whole run in one process (``LocalJob``): its seconds, the joins' state and the final sums."""
    job = LocalJob(build_flow(parallelism, shared, columns), updates, parallelism, seed=0)
    start = time.perf_counter()
    run = job.run()
    seconds = time.perf_counter() - start
    assert run.finished and run.failure is None, run.failure
    names = ("by-customer",) if shared else ("join-regions", "join-segments")
    states = [vertex for replica in job.replicas.values() for name, vertex in replica.vertices.items() if name in names]
    sums: dict[str, dict] = {name: {} for name in run.outputs}
    for name, epochs in run.outputs.items():
        for epoch in sorted(epochs):
            rt.accumulate(epochs[epoch], sums[name])
    return {"local_s": seconds, "arranged": sum(v.statistics()["arranged_updates"] for v in states),
            "snapshot_bytes": sum(len(pickle.dumps(v.snapshot())) for v in states)}, sums


def measure(orders: int, customers: int, epochs: int, churn: float, seed: int, parallelism: int,
            local: bool, columns: bool) -> dict[str, float]:
    updates = make_updates(orders, customers, epochs, churn, seed)
    _RUNS["runs"] += 1
    order = (True, False) if _RUNS["runs"] % 2 else (False, True)
    out: dict[str, float] = {}
    sums = {}
    for shared in order:
        label = "shared" if shared else "copied"
        if local:
            figures, sums[shared] = in_process(parallelism, shared, columns, updates)
            out.update({f"{label}_{name}": value for name, value in figures.items()})
            continue
        ensure_ray()
        seconds, sums[shared], held = timed(parallelism, shared, columns, updates)
        out.update({f"{label}_first_s": seconds[0], f"{label}_epoch_s": statistics.median(seconds[1:]),
                    f"{label}_arranged": held})
    assert sums[True] == sums[False], "the shared arrangement's sums differ from the copied ones'"
    total = sum(row[2] * diff for epoch in updates["orders"] for row, diff in epoch)
    assert sum(t * n for (_, t), n in sums[True]["by_region"].items()) == total, "the sums differ from Python's"
    return out
