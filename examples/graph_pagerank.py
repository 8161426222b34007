"""PageRank in a few lines with raytide's graph layer (``examples/pagerank.py`` is the custom-vertex version).

    python examples/graph_pagerank.py [--nodes 2000] [--edges 10000] [--iterations 20]

The graph layer's PageRank is the unnormalised form, ``rank = 0.15 + 0.85 * sum(rank / out-degree)``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import raytide as rt
from raytide.graph import edge_columns, pagerank


def ranks(edges: np.ndarray, iterations: int = 20, parallelism: int = 2) -> dict[int, float]:
    """``{node: rank}`` after ``iterations`` rounds over the directed ``(u, v)`` rows of ``edges``."""
    flow = rt.Dataflow("pagerank", parallelism=parallelism)
    pagerank(flow.input("edges").map_batches(edge_columns), iterations=iterations).output("ranks")
    with rt.run(flow, {"edges": [edges]}, parallelism=parallelism) as job:
        job.wait()
        return {int(node): rank for node, rank in job.collect("ranks").get(0, [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=10000)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    edges = np.random.default_rng(0).integers(0, args.nodes, size=(args.edges, 2))
    top = sorted(ranks(edges, args.iterations).items(), key=lambda item: -item[1])[:5]
    print("top nodes:", ", ".join(f"{node} ({rank:.3f})" for node, rank in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
