"""The graph layer on real Ray: connected components, shortest paths and PageRank against plain references.

Each result is checked record by record: every node of the reference appears, none
appears that should not, and the value per node is the reference's (a lost or doubled
offer would show as a wrong label or distance, a lost or doubled contribution as a
wrong rank).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from bench.baselines.data import random_graph_edges
from examples import connected_components as cc
from examples import graph_pagerank, shortest_paths
from tests.ray.test_examples_iterative import pairs, reference_dict

pytestmark = pytest.mark.ray


def bfs(edges: np.ndarray, source: int) -> dict[int, float]:
    """Hop counts from ``source`` over directed edges, breadth first."""
    adjacency = collections.defaultdict(list)
    for u, v in edges.tolist():
        adjacency[u].append(v)
    hops, frontier = {source: 0.0}, [source]
    for node in frontier:
        for neighbour in adjacency[node]:
            if neighbour not in hops:
                hops[neighbour] = hops[node] + 1
                frontier.append(neighbour)
    return hops


def pagerank_reference(edges: np.ndarray, iterations: int) -> dict[int, float]:
    """The unnormalised power iteration, every node of ``edges`` starting at 1."""
    nodes = np.unique(edges)
    index = {n: i for i, n in enumerate(nodes.tolist())}
    src = np.array([index[u] for u in edges[:, 0].tolist()])
    dst = np.array([index[v] for v in edges[:, 1].tolist()])
    degree = np.bincount(src, minlength=len(nodes))
    rank = np.ones(len(nodes))
    for _ in range(iterations):
        rank = 0.15 + 0.85 * np.bincount(dst, weights=rank[src] / degree[src], minlength=len(nodes))
    return dict(zip(nodes.tolist(), rank.tolist()))


def test_components_epoch_by_epoch_equal_union_find(ray_session):
    edges = random_graph_edges(3000, 2600, seed=7)
    epochs = [edges[:2000], edges[2000:2020], edges[2020:]]
    seen = 0
    for epoch, (labels, handled) in enumerate(cc.components_by_epoch([pairs(e) for e in epochs], parallelism=2, records=True)):
        seen += len(epochs[epoch])
        assert labels == reference_dict(3000, edges[:seen]), epoch
        if epoch == 1:
            assert 0 < handled < 2000, handled  # 20 new edges move a few labels, not the graph


def test_shortest_paths_equal_breadth_first_search(ray_session):
    edges = np.random.default_rng(1).integers(0, 400, size=(1600, 2))
    source = int(edges[0, 0])
    assert shortest_paths.distances(edges, source) == bfs(edges, source)


def test_pagerank_equals_the_power_iteration(ray_session):
    edges = np.random.default_rng(2).integers(0, 300, size=(1500, 2))
    got, expected = graph_pagerank.ranks(edges, iterations=7), pagerank_reference(edges, 7)
    assert got.keys() == expected.keys()
    assert max(abs(got[n] - expected[n]) for n in expected) < 1e-9
