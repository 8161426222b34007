"""Connected components under insertions and deletions in Pathway (its own ``pw.iterate``), for
``bench collections``: run with a Python that has ``pathway`` installed (it is not one of
raytide's dependencies), ``python cc_pathway.py EDGES.npz OUT.json``.

``EDGES.npz`` holds ``u``, ``v``, ``epoch``, ``diff`` (the updates of every epoch) and ``nodes``.
The program is the form of Pathway's own iterate tutorial: a static table of every node with
``repr`` its own id, the edges in both directions plus a self-loop per node, and one step
joining edges to representatives and taking the smallest per node. Epoch ``e`` is Pathway
time ``2 * (e + 1)`` (times must be even). ``OUT.json`` gets the seconds ``pw.run`` took (all
epochs, one after another: Pathway reports the end of a time only when its output changed,
and 1% churn of a random graph often changes no label, so the caller times a run of the first
epoch alone and a run of all of them) and the final representative of every node.

An edge's Pathway id is made from its ends (``id_from=["a", "b"]``), so that a deletion
retracts the row its insertion added. Made from the DataFrame's row index (Pathway's default,
which this harness used until 2026-11-29), a deletion was a row of another id with a count of
-1 and the inserted edge stayed: Pathway never deleted an edge, and at 200k nodes its labels
differed from union-find's (a component cut in two kept one label). The labels are folded from
every change, additions and retractions, so the order Pathway calls back in does not matter.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pandas as pd
import pathway as pw


def components(vertices: pw.Table, edges: pw.Table) -> pw.Table:
    def step(vertices: pw.Table, edges: pw.Table) -> pw.Table:
        offers = edges.join(vertices, edges.b == vertices.a).select(edges.a, vertices.repr)
        smallest = offers.groupby(pw.this.a).reduce(pw.this.a, repr=pw.reducers.min(pw.this.repr))
        return smallest.with_universe_of(vertices)

    return pw.iterate(step, vertices=vertices, edges=edges)


def main(source: str, target: str) -> None:
    data = np.load(source)
    nodes = int(data["nodes"])
    vertices = pw.debug.table_from_pandas(pd.DataFrame({"a": np.arange(nodes), "__time__": 2}),
                                          id_from=["a"]).with_columns(repr=pw.this.a)
    updates = pd.DataFrame({"a": data["u"], "b": data["v"], "__time__": 2 * (data["epoch"] + 1), "__diff__": data["diff"]})
    edges = pw.debug.table_from_pandas(updates, id_from=["a", "b"])  # a deletion retracts its insertion's row
    both = pw.Table.concat_reindex(edges, edges.select(a=pw.this.b, b=pw.this.a), vertices.select(a=pw.this.a, b=pw.this.a))
    copies: dict[tuple[int, int], int] = {}  # (node, repr) -> copies, every change folded

    def on_change(key, row, time, is_addition):  # noqa: ANN001
        pair = (int(row["a"]), int(row["repr"]))
        copies[pair] = copies.get(pair, 0) + (1 if is_addition else -1)

    pw.io.subscribe(components(vertices, both), on_change=on_change)
    start = time.perf_counter()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    seconds = time.perf_counter() - start
    held = [pair for pair, count in copies.items() if count]
    if any(copies[pair] != 1 for pair in held) or len({node for node, _ in held}) != len(held):
        raise AssertionError(f"Pathway's output is not one label per node: {sorted(held)[:10]}")
    with open(target, "w") as out:
        json.dump({"run_s": seconds, "labels": dict(held)}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
