"""An incremental join and aggregate on collections: orders joined to customers, amounts summed
per region, kept up to date as 1% of each table is updated per epoch; against Pathway.

Run with ``python -m bench join_aggregate --repeat 1 --param pathway_python=PATH``. Data
(made outside every clock): ``orders`` rows ``(order, customer, amount)`` and
``customers`` rows ``(customer, region)``; epoch 0 inserts both tables, then each of
``epochs`` epochs updates ``churn`` of the orders (a new amount) and of the customers (a
new region), each update a retraction of the old row and an insertion of the new one.

* ``first_s``: raytide, from pushing epoch 0 (both tables, as column batches of updates) to
  its per-region sums in the driver; ``epoch_s``: the median of the update epochs, push to
  sums; actors started outside the clock (``job.wait_ready()``). The query by column name
  (``with_columns``, ``join(customers, "customer")``, ``sum("region", "amount")``: vectorised,
  ``raytide/core/column_join.py``).
* ``record_first_s`` / ``record_epoch_s``: the same query with key functions (``join`` and
  ``sum`` record by record, ``raytide/differential``), in the same run.
* ``pathway_first_s`` / ``pathway_epoch_s`` (with ``--param pathway_python=PATH``, a Python
  with ``pathway`` installed): ``bench/baselines/join_sum_pathway.py``, its own join and
  ``groupby().reduce(sum)`` on 2 threads, run once on epoch 0 alone and once on every
  epoch; the epoch time is the difference over the update epochs.
* ``arranged_updates``: what raytide's join traces and sums hold after the last epoch,
  over ``live_rows`` (the rows of both tables, and the sums): compaction keeps the
  arrangements to the live data.

The final sums of both systems are checked against NumPy's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import raytide as rt
from bench.harness import ensure_ray

PARAMS = {"orders": 1_000_000, "customers": 100_000, "regions": 100, "epochs": 5, "churn": 0.01, "seed": 0,
          "parallelism": 2, "pathway_python": None}
REPEAT = 1
RATIOS = [
    ("update epoch/Pathway's", "epoch_s", "pathway_epoch_s"),
    ("first epoch/Pathway's", "first_s", "pathway_first_s"),
    ("update epoch/record by record", "epoch_s", "record_epoch_s"),
    ("first epoch/record by record", "first_s", "record_first_s"),
    ("arranged updates/live rows", "arranged_updates", "live_rows"),
]


def build_flow(parallelism: int, columnar: bool = True) -> rt.Dataflow:
    """Collection inputs ``orders`` and ``customers``; output ``totals``: changes of ``(region, sum)``
    (by column name, vectorised; or with key functions, record by record)."""
    flow = rt.Dataflow("join-aggregate", parallelism=parallelism)
    orders, customers = flow.collection("orders"), flow.collection("customers")
    if columnar:
        joined = orders.with_columns("order", "customer", "amount").join(
            customers.with_columns("customer", "region"), "customer", name="joined")
        joined.sum("region", "amount", name="sums").output("totals")
        return flow
    joined = orders.join(customers, _customer_of_order, _first, name="joined")
    joined.map(_region_and_amount, name="amounts").sum(_first, _amount, name="sums").output("totals")
    return flow


def _customer_of_order(order: tuple) -> int:
    return order[1]


def _first(row: tuple) -> int:
    return row[0]


def _region_and_amount(joined: tuple) -> tuple:
    """``(customer, ((order, customer, amount), (customer, region)))`` -> ``(region, amount)``."""
    _, ((_, _, amount), (_, region)) = joined
    return (region, amount)


def _amount(row: tuple) -> int:
    return row[1]


def make_updates(orders: int, customers: int, regions: int, epochs: int, churn: float,
                 seed: int) -> tuple[list[dict], list[dict]]:
    """Per epoch, the column batches of updates of each table."""
    rng = np.random.default_rng(seed)
    customer_of = rng.integers(0, customers, orders)
    amount, region = rng.integers(1, 1000, orders), rng.integers(0, regions, customers)
    order_batches = [_columns(order=np.arange(orders), customer=customer_of, amount=amount, diff=np.ones(orders))]
    customer_batches = [_columns(customer=np.arange(customers), region=region, diff=np.ones(customers))]
    for _ in range(epochs):
        changed = rng.choice(orders, int(churn * orders), replace=False)
        new = (amount[changed] + rng.integers(1, 999, len(changed))) % 999 + 1
        order_batches.append(_columns(order=np.tile(changed, 2), customer=np.tile(customer_of[changed], 2),
                                      amount=np.concatenate([amount[changed], new]), diff=_minus_then_plus(len(changed))))
        amount[changed] = new
        moved = rng.choice(customers, int(churn * customers), replace=False)
        to = (region[moved] + rng.integers(1, regions, len(moved))) % regions
        customer_batches.append(_columns(customer=np.tile(moved, 2), region=np.concatenate([region[moved], to]),
                                         diff=_minus_then_plus(len(moved))))
        region[moved] = to
    return order_batches, customer_batches


def _columns(**columns: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.array(values, dtype=np.int64) for name, values in columns.items()}  # copies: the tables change later


def _minus_then_plus(count: int) -> np.ndarray:
    return np.concatenate([-np.ones(count, dtype=np.int64), np.ones(count, dtype=np.int64)])


def expected_sums(order_batches: list[dict], customer_batches: list[dict]) -> dict[int, int]:
    """The sums per region after every epoch, by NumPy over the tables the updates leave."""
    orders = _final({"customer": 0, "amount": 0}, order_batches, "order")
    customers = _final({"region": 0}, customer_batches, "customer")
    region = np.zeros(max(customers) + 1, dtype=np.int64)
    region[list(customers)] = [row["region"] for row in customers.values()]
    pairs = np.array([(row["customer"], row["amount"]) for row in orders.values()], dtype=np.int64)
    totals = np.bincount(region[pairs[:, 0]], weights=pairs[:, 1])
    return {r: int(total) for r, total in enumerate(totals) if total}


def _final(fields: dict, batches: list[dict], key: str) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    for batch in batches:
        for k in np.flatnonzero(batch["diff"] > 0):
            rows[int(batch[key][k])] = {name: int(batch[name][k]) for name in fields}
    return rows


def timed_epochs(parallelism: int, order_batches: list[dict], customer_batches: list[dict],
                 columnar: bool = True) -> tuple[list[float], dict, int]:
    """raytide's seconds per epoch, its final sums and the updates its traces hold."""
    sums: dict = {}
    seconds = []
    with rt.run(build_flow(parallelism, columnar), parallelism=parallelism) as job:
        job.wait_ready(timeout=120)
        results = job.results("totals", timeout=3600)
        for epoch, (orders, customers) in enumerate(zip(order_batches, customer_batches)):
            start = time.perf_counter()
            job.push("orders", orders, epoch)
            job.push("customers", customers, epoch)
            job.advance("orders", epoch + 1)
            job.advance("customers", epoch + 1)
            _, changes = next(results)
            seconds.append(time.perf_counter() - start)
            rt.accumulate(changes, sums)
        vertices = job.stats()["vertices"]
        held = sum(vertices[name].get("arranged_updates", 0) for name in ("joined", "sums"))
        job.close("orders")
        job.close("customers")
    return seconds, {region: total for region, total in sums}, held


def pathway_seconds(python: str, order_batches: list[dict], customer_batches: list[dict],
                    expected: dict[int, int]) -> dict[str, float]:
    """Pathway's run over epoch 0 alone and over every epoch; its final sums checked."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-pathway-") as folder:
        for count in (1, len(order_batches)):
            orders = {name: np.concatenate([b[name] for b in order_batches[:count]]) for name in order_batches[0]}
            customers = {name: np.concatenate([b[name] for b in customer_batches[:count]]) for name in customer_batches[0]}
            epochs = np.concatenate([np.full(len(b["diff"]), e) for e, b in enumerate(order_batches[:count])])
            c_epochs = np.concatenate([np.full(len(b["diff"]), e) for e, b in enumerate(customer_batches[:count])])
            source, target = f"{folder}/updates.npz", f"{folder}/out.json"
            np.savez(source, order=orders["order"], customer=orders["customer"], amount=orders["amount"], epoch=epochs,
                     diff=orders["diff"], c_customer=customers["customer"], c_region=customers["region"],
                     c_epoch=c_epochs, c_diff=customers["diff"])
            subprocess.run([python, str(Path(__file__).parent / "baselines" / "join_sum_pathway.py"), source, target],
                           check=True, env={**os.environ, "PATHWAY_THREADS": "2"}, capture_output=True)
            runs.append(json.loads(Path(target).read_text()))
    assert {int(r): t for r, t in runs[-1]["sums"].items()} == expected, "Pathway's sums differ from NumPy's"
    updates = len(order_batches) - 1
    return {"pathway_first_s": runs[0]["run_s"], "pathway_epoch_s": (runs[1]["run_s"] - runs[0]["run_s"]) / updates}


def measure(orders: int, customers: int, regions: int, epochs: int, churn: float, seed: int, parallelism: int,
            pathway_python: str | None) -> dict[str, float]:
    ensure_ray()
    order_batches, customer_batches = make_updates(orders, customers, regions, epochs, churn, seed)
    expected = expected_sums(order_batches, customer_batches)
    seconds, sums, held = timed_epochs(parallelism, order_batches, customer_batches)
    assert sums == expected, "raytide's sums differ from NumPy's"
    record_seconds, record_sums, _ = timed_epochs(parallelism, order_batches, customer_batches, columnar=False)
    assert record_sums == expected, "raytide's sums (record by record) differ from NumPy's"
    pathway = pathway_seconds(pathway_python, order_batches, customer_batches, expected) if pathway_python else {}
    return {**pathway, "first_s": seconds[0], "epoch_s": statistics.median(seconds[1:]),
            "record_first_s": record_seconds[0], "record_epoch_s": statistics.median(record_seconds[1:]),
            "arranged_updates": held, "live_rows": orders + customers + len(expected)}
