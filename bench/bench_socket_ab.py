"""Issue 76's two figures with replicas' hops by Ray call and by socket, side by side in one process.

Each run measures both settings of ``RAYTIDE_SOCKET_HOPS`` (``0``: every hop a Ray call, as
before; ``1``: replicas on one node send data over sockets, :mod:`raytide.actors.socket_hops`),
in alternating order from run to run, on the same Ray:

* ``keyed_*``: the small keyed job of ``bench latency`` (``map -> count_by_key``,
  parallelism 2), ``keyed_epochs`` epochs after its warm-up, each clocked from ``job.push``
  to its counts at the driver (``bench_latency.keyed_epoch_latencies``); median and p99;
* ``increment_*``: ``examples/connected_components.py`` fed 95% of a 200k/600k graph,
  then five epochs of 1% of the edges, each clocked from its push to its labels in the
  driver (``bench_components.example``); the median of the five.

The ratios are sockets over Ray calls (below 1: the sockets are faster).
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from bench.bench_components import example, graph
from bench.bench_latency import _median_p99_ms, keyed_epoch_latencies
from bench.harness import ensure_ray
from raytide.actors.socket_hops import SETTING

PARAMS = {"keyed_epochs": 500, "nodes": 200_000, "edges": 600_000, "parallelism": 2}
RATIOS = [("keyed latency, sockets / Ray calls (median)", "keyed_sockets_median_ms", "keyed_ray_median_ms"),
          ("keyed latency, sockets / Ray calls (p99)", "keyed_sockets_p99_ms", "keyed_ray_p99_ms"),
          ("1% increment, sockets / Ray calls", "increment_sockets_ms", "increment_ray_ms")]
REPEAT = 3
_runs = 0


def _one(setting: str, keyed_epochs: int, edges: np.ndarray, nodes: int, parallelism: int) -> dict[str, float]:
    name = "sockets" if setting == "1" else "ray"
    os.environ[SETTING] = setting
    latencies, _ = keyed_epoch_latencies(keyed_epochs, parallelism)
    median, p99 = _median_p99_ms(latencies)
    cuts = [len(edges) * percent // 100 for percent in range(95, 101)]
    _, (_, *increments) = example(nodes, edges, parallelism, [edges[:cuts[0]]] + [
        edges[start:end] for start, end in zip(cuts, cuts[1:])])
    return {f"keyed_{name}_median_ms": median, f"keyed_{name}_p99_ms": p99,
            f"increment_{name}_ms": statistics.median(increments) * 1e3}


def measure(keyed_epochs: int, nodes: int, edges: int, parallelism: int) -> dict[str, float]:
    global _runs
    ensure_ray()
    e, _, _ = graph(nodes, edges, 0)
    metrics: dict[str, float] = {}
    order = ("0", "1") if _runs % 2 == 0 else ("1", "0")
    _runs += 1
    try:
        for setting in order:
            metrics.update(_one(setting, keyed_epochs, e, nodes, parallelism))
    finally:
        os.environ.pop(SETTING, None)
    return metrics
