"""An incremental join and aggregate in Pathway, for ``bench join_aggregate``: run with a Python
that has ``pathway`` installed (not one of raytide's dependencies),
``python join_sum_pathway.py UPDATES.npz OUT.json``.

``UPDATES.npz`` holds the orders' updates (``order``, ``customer``, ``amount``, ``epoch``,
``diff``) and the customers' (``c_customer``, ``c_region``, ``c_epoch``, ``c_diff``). The
query joins orders to customers on the customer and sums the amounts per region, kept up
to date. Epoch ``e`` is Pathway time ``2 * (e + 1)`` (times must be even). ``OUT.json``
gets the seconds ``pw.run`` took over every epoch given, when each time closed (``ends``:
Pathway time and seconds since the start: with every epoch's rows given at once, Pathway
closes them all together at the end, so the caller takes the difference of two runs) and
the final sum per region.

A row's Pathway id is made from all its columns, so that a retraction takes back the row its
insertion added (made from the DataFrame's row index, Pathway's default, a retraction was
another row with a count of -1 and the old row stayed: the sums came out right, being
linear, but the join kept every version of every row).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pandas as pd
import pathway as pw


def main(source: str, target: str) -> None:
    data = np.load(source)
    orders = pw.debug.table_from_pandas(pd.DataFrame({
        "order": data["order"], "customer": data["customer"], "amount": data["amount"],
        "__time__": 2 * (data["epoch"] + 1), "__diff__": data["diff"]}), id_from=["order", "customer", "amount"])
    customers = pw.debug.table_from_pandas(pd.DataFrame({
        "customer": data["c_customer"], "region": data["c_region"],
        "__time__": 2 * (data["c_epoch"] + 1), "__diff__": data["c_diff"]}), id_from=["customer", "region"])
    joined = orders.join(customers, orders.customer == customers.customer).select(customers.region, orders.amount)
    totals = joined.groupby(pw.this.region).reduce(pw.this.region, total=pw.reducers.sum(pw.this.amount))
    copies: dict[tuple[int, int], int] = {}  # (region, total) -> copies, every change folded

    def on_change(key, row, time, is_addition):  # noqa: ANN001
        pair = (int(row["region"]), int(row["total"]))
        copies[pair] = copies.get(pair, 0) + (1 if is_addition else -1)

    ends: list[tuple[int, float]] = []  # (Pathway time, seconds since the start) as each time closes

    pw.io.subscribe(totals, on_change=on_change, on_time_end=lambda closed: ends.append((closed, time.perf_counter() - start)))
    start = time.perf_counter()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    with open(target, "w") as out:
        json.dump({"run_s": time.perf_counter() - start, "ends": ends,
                   "sums": dict(pair for pair, count in copies.items() if count)}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
