"""Shortest paths from one node (BFS when edges have no weight) with raytide's graph layer.

    python examples/shortest_paths.py [--nodes 2000] [--edges 6000] [--source 0]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import raytide as rt
from raytide.graph import edge_columns, shortest_paths


def distances(edges: np.ndarray, source: int, parallelism: int = 2) -> dict[int, float]:
    """``{node: hops from source}`` over the directed ``(u, v)`` or ``(u, v, weight)`` rows of ``edges``."""
    flow = rt.Dataflow("shortest-paths", parallelism=parallelism)
    shortest_paths(flow.input("edges").map_batches(edge_columns), source).output("distances")
    with rt.run(flow, {"edges": [edges]}, parallelism=parallelism) as job:
        job.wait()
        rows = job.collect("distances").get(0, [])
    best: dict[int, float] = {}
    for node, distance in rows:
        best[int(node)] = min(distance, best.get(int(node), distance))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=6000)
    parser.add_argument("--source", type=int, default=0)
    args = parser.parse_args(argv)
    edges = np.random.default_rng(0).integers(0, args.nodes, size=(args.edges, 2))
    found = distances(edges, args.source)
    print(f"{len(found)} nodes reached from {args.source}; farthest: {max(found.values())} hops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
