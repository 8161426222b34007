"""Nested loops: connected components at rising edge-weight thresholds (single-linkage levels).

    python examples/nested_loop.py [--nodes 2000] [--edges 3000] [--thresholds 0.2,0.4,0.6,0.8,1.0]

Given weighted undirected edges and thresholds ``t_0 < t_1 < ...``, level ``r`` is the
partition into connected components of the graph of the edges with weight ``<= t_r``
(the levels of single-linkage clustering). :func:`levels_reference` computes them in
plain Python (union-find on dicts), level after level.

The dataflow nests two loops:

* the outer loop counts levels. At outer iteration ``r`` the vertex
  :class:`ThresholdSplit` admits the edges of weight ``<= t_r`` (as both directed edges)
  and feeds the heavier ones back to iteration ``r + 1`` (the outer feedback's
  ``max_iterations`` is the number of thresholds, so edges above the last one drop out);
* the inner loop, inside the outer one, is the label propagation of
  ``examples/connected_components.py``: a fixed point, with timestamps
  ``(epoch, (r, i))``. Its vertex keeps labels and adjacency across outer iterations,
  so level ``r`` starts from level ``r - 1``'s fixed point and only propagates what
  the newly admitted edges change.

Loop counters compare lexicographically, so ``(r, 7) < (r + 1, 0)``: the inner fixed
point of level ``r`` completes (its notifications are delivered) before level ``r + 1``
starts -- the nesting itself orders the levels, no driver coordination is needed
(unlike epochs, see ``examples/incremental_components.py``). The label changes leave
both loops tagged with their loop counters; level ``r``'s labels are the changes of
outer iterations ``0 .. r`` folded together.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``examples`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import raytide as rt  # noqa: E402
from examples import connected_components as cc  # noqa: E402


class ThresholdSplit(rt.Vertex):
    """At outer iteration ``r``: edges of weight ``<= thresholds[r]`` to output 0 (both directions), the rest to output 1."""

    def __init__(self, thresholds: Sequence[float]) -> None:
        self.thresholds = list(thresholds)

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        level = time.counters[-1]
        weight = np.asarray(message["weight"])
        admit = weight <= self.thresholds[level]
        src, dst = np.asarray(message["src"]), np.asarray(message["dst"])
        if admit.any():
            self.send_by(0, cc.both_directions({"src": src[admit], "dst": dst[admit]}), time)
        if level + 1 < len(self.thresholds) and not admit.all():
            rest = ~admit
            self.send_by(1, {"src": src[rest], "dst": dst[rest], "weight": weight[rest]}, time)


def build_flow(thresholds: Sequence[float], parallelism: int = 2) -> rt.Dataflow:
    """Input ``edges`` (``{"src", "dst", "weight"}``), output ``labels`` (label-propagation reports)."""
    flow = rt.Dataflow("threshold-components", parallelism=parallelism)
    outer = flow.loop("levels")
    heavier = outer.feedback(max_iterations=len(thresholds), name="heavier-edges")
    at_level = outer.enter(flow.input("edges")).concat(heavier.stream)
    admitted, rest = flow.vertex(lambda: ThresholdSplit(thresholds), [at_level], outputs=2, name="split")
    heavier.connect(rest)
    inner = outer.loop("propagate")
    reports = cc.propagation_loop(inner, inner.enter(admitted))
    outer.leave(inner.leave(reports)).output("labels")
    return flow


def threshold_levels(edges: np.ndarray, weights: np.ndarray, thresholds: Sequence[float], parallelism: int = 2,
                     timeout: float = 600.0) -> tuple[list[dict[int, int]], list[dict]]:
    """Per threshold, ``{node: smallest node id of its component}`` over the nodes of the admitted edges.

    Also returns the label-propagation work records (their counters are ``(level, iteration)``).
    """
    if list(thresholds) != sorted(thresholds):
        raise ValueError("thresholds must be increasing")
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    with rt.run(build_flow(thresholds, parallelism), parallelism=parallelism,
                batch_size=max(1, -(-len(edges) // parallelism))) as job:
        if len(edges):
            job.push("edges", {"src": edges[:, 0].copy(), "dst": edges[:, 1].copy(),
                               "weight": np.asarray(weights, dtype=np.float64)})
        job.close("edges")
        job.wait(timeout=timeout)
        records = job.collect("labels").get(0, [])
    work = [r[1] for r in records if r[0] == "work"]
    changes = [r for r in records if r[0] == "labels"]
    levels = []
    for level in range(len(thresholds)):
        nodes, labels = cc.latest_labels([(r[1], r[2]) for r in changes if r[3][0] <= level])
        levels.append(dict(zip(nodes.tolist(), labels.tolist())))
    return levels, work


def levels_reference(edges: Sequence[tuple[int, int]], weights: Sequence[float],
                     thresholds: Sequence[float]) -> list[dict[int, int]]:
    """Plain Python: union-find over the edges admitted so far, one level per threshold."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pending = sorted(zip([float(w) for w in weights], [(int(u), int(v)) for u, v in edges]))
    levels, position = [], 0
    for threshold in thresholds:
        while position < len(pending) and pending[position][0] <= threshold:
            u, v = pending[position][1]
            position += 1
            parent.setdefault(u, u)
            parent.setdefault(v, v)
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[max(ru, rv)] = min(ru, rv)  # the smaller root wins: roots are component minima
        levels.append({node: find(node) for node in parent})
    return levels


def main(argv: Optional[Sequence[str]] = None) -> int:
    from bench.baselines.data import random_graph_edges

    parser = argparse.ArgumentParser(description="Connected components at rising weight thresholds (nested loops).")
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--edges", type=int, default=3_000)
    parser.add_argument("--thresholds", default="0.2,0.4,0.6,0.8,1.0")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    edges = random_graph_edges(args.nodes, args.edges, args.seed)
    weights = np.random.default_rng(args.seed).random(len(edges))
    started_ray = cc.connect_ray()
    try:
        levels, work = threshold_levels(edges, weights, thresholds, args.parallelism)
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    reference = levels_reference(edges.tolist(), weights.tolist(), thresholds)
    rounds = cc.per_iteration(work)
    for level, (threshold, labels) in enumerate(zip(thresholds, levels)):
        inner = [r for r in rounds if r["counters"][0] == level]
        print(f"weight <= {threshold:.2f}: {len(labels)} nodes, {sum(n == lab for n, lab in labels.items())} components, "
              f"{len(inner)} inner iterations, {sum(r['proposals_in'] for r in inner)} proposals, "
              f"matches plain Python: {labels == reference[level]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
