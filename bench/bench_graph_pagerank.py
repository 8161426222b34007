"""PageRank, 20 rounds over 1,000,000 random directed edges: raytide's graph layer vs hand-written Ray actors.

Run with ``python -m bench graph_pagerank --repeat 3``. Both on the same Ray (2 CPUs),
parallelism 2, actors started before the clock on both sides:

* ``raytide_s``: ``rt.graph.pagerank`` (columnar keyed state, the edges arranged in the
  loop, contributions summed before the exchange); the clock runs from pushing the
  ``(E, 2)`` edge array to the rank array in the driver (read with
  ``job.results(..., batch_format="numpy")``).
* ``handwritten_s``: ``bench/baselines/pagerank_ray.py``: two actors each holding half of
  the edges, the driver broadcasting the rank array every round; the clock runs from
  shipping the edge slices (and out-degrees, computed in the driver, on the clock) to the
  rank array.

Both are checked against a one-process NumPy power iteration, outside the clock.
"""

from __future__ import annotations

import time

import numpy as np
import ray

import raytide as rt
from bench.baselines.pagerank_ray import EdgeSliceSums, pagerank_reference, pagerank_rounds
from bench.harness import ensure_ray
from raytide.graph import edge_columns, pagerank

PARAMS = {"nodes": 200_000, "edges": 1_000_000, "iterations": 20, "parallelism": 2}
RATIOS = [("raytide/handwritten", "raytide_s", "handwritten_s")]
REPEAT = 3


def raytide_ranks(nodes: int, edges: np.ndarray, iterations: int, parallelism: int) -> tuple[np.ndarray, float]:
    flow = rt.Dataflow("pagerank", parallelism=parallelism)
    pagerank(flow.input("edges").map_batches(edge_columns), iterations=iterations).output("ranks")
    with rt.run(flow, parallelism=parallelism, batch_size=-(-len(edges) // parallelism)) as job:
        job.wait_ready()
        clock = time.perf_counter()
        job.push("edges", edges, 0)
        job.close("edges")
        (_, rows), = job.results("ranks", batch_format="numpy")  # the (n, 2) array the step sent, not n records
        rank = np.ones(nodes)
        rank[rows[:, 0].astype(np.int64)] = rows[:, 1]
        return rank, time.perf_counter() - clock


def handwritten_ranks(nodes: int, edges: np.ndarray, iterations: int, parallelism: int) -> tuple[np.ndarray, float]:
    actors = [EdgeSliceSums.remote() for _ in range(parallelism)]
    try:
        ray.get([a.__ray_ready__.remote() for a in actors])
        clock = time.perf_counter()
        degree = np.maximum(np.bincount(edges[:, 0], minlength=nodes), 1)
        ray.get([a.load.remote(part, degree) for a, part in zip(actors, np.array_split(edges, parallelism))])
        rank = pagerank_rounds(actors, nodes, iterations)
        return rank, time.perf_counter() - clock
    finally:
        for actor in actors:
            ray.kill(actor)


def measure(nodes: int = 200_000, edges: int = 1_000_000, iterations: int = 20, parallelism: int = 2,
            seed: int = 0) -> dict[str, float]:
    ensure_ray()
    e = np.random.default_rng(seed).integers(0, nodes, size=(edges, 2))
    reference = pagerank_reference(nodes, e, iterations)
    ours, raytide_s = raytide_ranks(nodes, e, iterations, parallelism)
    theirs, handwritten_s = handwritten_ranks(nodes, e, iterations, parallelism)
    present = np.zeros(nodes, dtype=bool)
    present[e.ravel()] = True  # the graph layer knows the nodes of the edges only
    assert np.allclose(ours[present], reference[present], rtol=1e-9, atol=1e-9), "raytide ranks differ"
    assert np.allclose(theirs[present], reference[present], rtol=1e-9, atol=1e-9), "hand-written ranks differ"
    time.sleep(1.0)  # the killed actors exit asynchronously
    return {"raytide_s": raytide_s, "handwritten_s": handwritten_s}
