"""Connected components of a graph whose edges are inserted *and deleted*: collections against
the insert-only graph layer and a from-scratch recomputation, measured in the same run.

Run with ``python -m bench collections --repeat 3``. The graph is
``random_graph_edges(nodes, edges, seed)`` (``bench/baselines/data.py``); epoch 0 inserts
all of it, then each of ``epochs`` epochs deletes ``churn`` of the edges present and inserts
as many new ones. Every time below leaves actor start-up out (``job.wait_ready()`` first)
and runs from the push in the driver to the epoch's output in the driver.

* ``first_s``: ``examples/incremental_components.py`` (``rt.graph.connected_components`` on
  a collection: the spanning forest at one replica, ``raytide.graph.forest_components``),
  epoch 0, each epoch's updates pushed as a column batch (``src``, ``dst``, ``diff``);
  ``epoch_s``: the median of the churn epochs, ``epoch_max_s`` the slowest.
* ``insert_only_first_s`` / ``insert_only_epoch_s``: ``examples/connected_components.py``
  (columnar, insert-only) on the same first graph, then epochs inserting as many edges as a
  churn epoch inserts (it cannot delete).
* ``scratch_s``: union-find over the edges present after the last epoch, in the driver,
  single-core Python (``bench.baselines.cc_ray.components_union_find``): a from-scratch
  recomputation.
* ``pathway_first_s`` / ``pathway_epoch_s`` (with ``--param pathway_python=PATH``, a Python
  with ``pathway`` installed: ``python3 -m venv .pathway && .pathway/bin/pip install
  pathway==0.33.0``): ``bench/baselines/cc_pathway.py``, Pathway's own ``pw.iterate`` on 2
  threads, run once on epoch 0 alone and once on all epochs; the epoch time is the
  difference over the number of churn epochs. Its final labels are checked too.

Outside the clock every epoch's labels are folded (``rt.accumulate``) and the last one is
checked against union-find of the edges present (nodes without edges are absent).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import raytide as rt
from bench.baselines import data
from bench.baselines.cc_ray import components_union_find
from bench.harness import ensure_ray
from examples import connected_components as insert_only
from examples import incremental_components as incremental
from raytide.differential import update_columns

PARAMS = {"nodes": 20_000, "edges": 60_000, "epochs": 5, "churn": 0.01, "seed": 0, "parallelism": 2,
          "pathway_python": None}
REPEAT = 3
RATIOS = [
    ("update epoch (1% deleted, 1% inserted)/first fixpoint", "epoch_s", "first_s"),
    ("update epoch/insert-only epoch (1% inserted)", "epoch_s", "insert_only_epoch_s"),
    ("update epoch/from-scratch union-find", "epoch_s", "scratch_s"),
    ("first fixpoint/insert-only first fixpoint", "first_s", "insert_only_first_s"),
    ("update epoch/Pathway's", "epoch_s", "pathway_epoch_s"),
    ("first fixpoint/Pathway's", "first_s", "pathway_first_s"),
]


def churn_epochs(edges: np.ndarray, epochs: int, churn: float, seed: int, nodes: int) -> list[list]:
    """Epoch 0 inserts ``edges``; each later epoch deletes ``churn`` of those present and inserts as many."""
    rng = random.Random(seed)
    present = {tuple(edge) for edge in edges.tolist()}
    out = [[(edge, 1) for edge in present]]
    for _ in range(epochs):
        gone = rng.sample(sorted(present), int(churn * len(present)))
        present.difference_update(gone)
        new: set = set()
        while len(new) < len(gone):
            u, v = rng.randrange(nodes), rng.randrange(nodes)
            if u != v and (min(u, v), max(u, v)) not in present:
                new.add((min(u, v), max(u, v)))
        present |= new
        out.append([(edge, -1) for edge in gone] + [(edge, 1) for edge in sorted(new)])
    return out


def timed_epochs(flow: rt.Dataflow, batches: list, parallelism: int, fold) -> list[float]:
    """Push each batch as an epoch and wait for its output; the seconds each took."""
    seconds = []
    with rt.run(flow, parallelism=parallelism) as job:
        job.wait_ready(timeout=120)
        results = job.results("labels", timeout=1800)
        for epoch, batch in enumerate(batches):
            start = time.perf_counter()
            job.push("edges", batch, epoch)
            job.advance("edges", epoch + 1)
            _, changes = next(results)
            seconds.append(time.perf_counter() - start)
            fold(changes)
        job.close("edges")
    return seconds


def pathway_seconds(python: str, batches: list, nodes: int, expected: np.ndarray, touched: np.ndarray) -> dict[str, float]:
    """Pathway's run over epoch 0 alone and over every epoch; its last labels checked against ``expected``."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-pathway-") as folder:
        for count in (1, len(batches)):
            rows = np.array([(u, v, epoch, diff) for epoch, batch in enumerate(batches[:count]) for (u, v), diff in batch],
                            dtype=np.int64)
            source, target = f"{folder}/edges.npz", f"{folder}/out.json"
            np.savez(source, u=rows[:, 0], v=rows[:, 1], epoch=rows[:, 2], diff=rows[:, 3], nodes=nodes)
            subprocess.run([python, str(Path(__file__).parent / "baselines" / "cc_pathway.py"), source, target],
                           check=True, env={**os.environ, "PATHWAY_THREADS": "2"}, capture_output=True)
            runs.append(json.loads(Path(target).read_text()))
    labels = {int(node): label for node, label in runs[-1]["labels"].items()}
    assert all(labels[int(n)] == expected[n] for n in touched), "Pathway's labels differ from union-find"
    return {"pathway_first_s": runs[0]["run_s"], "pathway_epoch_s": (runs[1]["run_s"] - runs[0]["run_s"]) / (len(batches) - 1)}


def measure(nodes: int, edges: int, epochs: int, churn: float, seed: int, parallelism: int,
            pathway_python: str | None) -> dict[str, float]:
    ensure_ray()
    graph = data.random_graph_edges(nodes, edges, seed)
    batches = churn_epochs(graph, epochs, churn, seed, nodes)
    contents: dict = {}
    times = timed_epochs(incremental.build_flow(parallelism), [update_columns(batch, ("src", "dst")) for batch in batches], parallelism,
                         lambda changes: rt.accumulate(changes, contents))
    present = np.array([edge for edge, copies in rt.accumulate({e: b for e, b in enumerate(batches)}).items()
                        for _ in range(copies)], dtype=np.int64)
    start = time.perf_counter()
    expected = components_union_find(nodes, present)
    scratch = time.perf_counter() - start
    touched = np.unique(present)
    assert dict(contents) == {(int(n), int(expected[n])): 1 for n in touched}, "labels differ from union-find"
    inserts = [np.array([edge for edge, diff in batch if diff > 0], dtype=np.int64) for batch in batches]
    insert_times = timed_epochs(insert_only.build_flow(parallelism), inserts, parallelism, lambda changes: None)
    pathway = pathway_seconds(pathway_python, batches, nodes, expected, touched) if pathway_python else {}
    return {**pathway, "first_s": times[0], "epoch_s": statistics.median(times[1:]), "epoch_max_s": max(times[1:]),
            "insert_only_first_s": insert_times[0], "insert_only_epoch_s": statistics.median(insert_times[1:]),
            "scratch_s": scratch}
