"""The components benchmark's raytide job (bench/workloads/components.py) on a real Ray, against union-find."""

from __future__ import annotations

import numpy as np
import pytest

from bench.baselines.cc_ray import components_union_find
from bench.baselines.data import random_graph_edges
from bench.workloads.components import component_labels

pytestmark = pytest.mark.ray


def test_components_match_union_find_and_the_loop_drains_at_the_fixed_point(ray_session):
    nodes = 400
    edges = random_graph_edges(nodes, 300, seed=5)  # many components, and isolated nodes (absent from the result)
    result = component_labels(edges, parallelism=2)
    labels = components_union_find(nodes, edges)
    expected = {int(v): int(labels[v]) for v in np.unique(edges)}
    assert result.as_dict() == expected
    assert len(set(expected.values())) > 20 and len(expected) < nodes
    rounds = result.iterations()
    assert rounds[-1]["proposals_out"] == 0 and all(r["changed"] > 0 for r in rounds[1:-1])
    assert rounds[0]["edges_in"] == 2 * len(edges)


def test_sparse_ids_repeated_edges_and_self_loops(ray_session):
    edges = random_graph_edges(300, 280, seed=11)
    ids = np.random.default_rng(7).choice(10**12, size=300, replace=False)  # large, sparse ids: no lookup tables
    edges = np.concatenate([edges, edges[:5], [[0, 0]]])  # repeated edges and a self-loop
    result = component_labels(ids[edges], parallelism=2)
    union = components_union_find(300, edges)
    smallest: dict[int, int] = {}  # the smallest *id* of each union-find component
    for v in np.unique(edges).tolist():
        smallest[union[v]] = min(smallest.get(union[v], int(ids[v])), int(ids[v]))
    assert result.as_dict() == {int(ids[v]): smallest[union[v]] for v in np.unique(edges).tolist()}
    assert result.nodes.tolist() == sorted(result.nodes.tolist())
