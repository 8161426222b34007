"""PageRank on hand-written Ray actors: the baseline of ``bench/bench_graph_pagerank.py``.

The unnormalised form the graph layer computes, ``rank = 0.15 + 0.85 * sum(rank / out-degree)``
over in-edges, every node starting at 1. Each actor holds a contiguous slice of the
directed edges; a round puts the rank array in the object store once, every actor returns
its partial sums (one ``np.bincount``), the driver adds them and applies the damping.
"""

from __future__ import annotations

import numpy as np
import ray


@ray.remote
class EdgeSliceSums:
    """Holds a slice of the edges and the global out-degrees; sums rank shares per target."""

    def __init__(self) -> None:
        self.src = self.dst = self.degree = np.empty(0, dtype=np.int64)
        self.nodes = 0

    def load(self, edges: np.ndarray, degree: np.ndarray) -> bool:
        self.src, self.dst, self.degree, self.nodes = edges[:, 0], edges[:, 1], degree, len(degree)
        return True

    def shares(self, rank: np.ndarray) -> np.ndarray:
        return np.bincount(self.dst, weights=rank[self.src] / self.degree[self.src], minlength=self.nodes)


def pagerank_rounds(actors: list, nodes: int, iterations: int, damping: float = 0.85) -> np.ndarray:
    """The driver's rounds over loaded actors; returns the rank of every node ``0 .. nodes-1``."""
    rank = np.ones(nodes)
    for _ in range(iterations):
        ref = ray.put(rank)
        rank = (1 - damping) + damping * np.sum(ray.get([a.shares.remote(ref) for a in actors]), axis=0)
    return rank


def pagerank_reference(nodes: int, edges: np.ndarray, iterations: int, damping: float = 0.85) -> np.ndarray:
    """The same in one process (nodes without edges keep rank 1: no round touches them here)."""
    degree = np.maximum(np.bincount(edges[:, 0], minlength=nodes), 1)
    rank = np.ones(nodes)
    for _ in range(iterations):
        rank = (1 - damping) + damping * np.bincount(edges[:, 1], weights=rank[edges[:, 0]] / degree[edges[:, 0]],
                                                     minlength=nodes)
    return rank
