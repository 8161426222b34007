"""The iterative examples against plain references: components, incremental components, PageRank, nested loops."""

from __future__ import annotations

import numpy as np
import pytest

import raytide as rt
from bench.baselines.cc_ray import components_union_find
from bench.baselines.data import random_graph_edges
from examples import connected_components as cc
from examples import incremental_components as inc
from examples import nested_loop, pagerank

pytestmark = pytest.mark.ray


def reference_dict(nodes: int, edges: np.ndarray) -> dict[int, int]:
    """Union-find labels of the nodes that appear in ``edges``."""
    labels = components_union_find(nodes, edges)
    return {int(v): int(labels[v]) for v in np.unique(edges)}


# -- pieces of the label-propagation vertex, in process ------------------------------------


class FakeContext:
    vertex, replica, parallelism = "lp", 0, 1

    def __init__(self) -> None:
        self.sent: list[tuple[int, object, rt.Timestamp]] = []
        self.requested: list[rt.Timestamp] = []

    def send_by(self, output, message, time):
        self.sent.append((output, message, time))

    def notify_at(self, time):
        self.requested.append(time)


@pytest.mark.parametrize("scale", [1, 10**12])
def test_node_index_dense_and_sparse(scale):
    index = cc.NodeIndex()
    first = index.add(np.array([5, 3, 5, 9, 3]) * scale)
    assert sorted(first.tolist()) == [3 * scale, 5 * scale, 9 * scale]
    second = index.add(np.array([9, 1, 1]) * scale)
    assert second.tolist() == [1 * scale]
    ids = np.array([1, 3, 5, 9]) * scale
    assert (index.ids[index.slots(ids)] == ids).all()
    assert len(index) == 4
    assert (index.lookup(np.array([9, 2, 1]) * scale)[[0, 2]] >= 0).all()
    assert index.lookup(np.array([2, 10**6, -1]) * scale).tolist() == [-1, -1, -1]


def test_combiner_and_adjacency():
    combiner = cc.MinCombiner()
    for keys in (np.array([4, 2, 4, 7, 2]), np.array([4, 2, 4, 7, 2]) * 10**9):  # scratch array and np.unique paths
        k, v = combiner.combine(keys, np.array([9, 3, 1, 5, 3]))
        assert dict(zip(k.tolist(), v.tolist())) == {keys[0]: 1, keys[1]: 3, keys[3]: 5}
    assert combiner.combine(cc.EMPTY, cc.EMPTY)[0].size == 0
    adjacency = cc.Adjacency()
    adjacency.add(np.array([0, 1, 0]), np.array([10, 11, 12]), 2)
    adjacency.add(np.array([2, 0]), np.array([13, 14]), 3)  # a second segment, with a new slot
    targets, values = adjacency.spread(np.array([0, 2]), np.array([7, 8]))
    assert sorted(zip(targets.tolist(), values.tolist())) == [(10, 7), (12, 7), (13, 8), (14, 7)]
    targets, values = adjacency.spread(np.array([3, 1]), np.array([5, 6]))  # slot 3 has no edges
    assert list(zip(targets.tolist(), values.tolist())) == [(11, 6)]


def test_label_propagation_refuses_an_earlier_epoch_after_a_later_one():
    vertex = cc.LabelPropagation()
    vertex.bind(FakeContext())
    vertex.on_recv(0, {"src": np.array([1, 2]), "dst": np.array([2, 1])}, rt.Timestamp(1, (0,)))
    vertex.on_notify(rt.Timestamp(1, (0,)))
    vertex.on_recv(1, {"node": np.array([2]), "label": np.array([1])}, rt.Timestamp(0, (3,)))
    with pytest.raises(RuntimeError, match="feed the epochs one after another"):
        vertex.on_notify(rt.Timestamp(0, (3,)))


# -- connected components -------------------------------------------------------------------


def test_connected_components_match_union_find(ray_session):
    nodes = 400
    edges = random_graph_edges(nodes, 300, seed=5)  # many components, and isolated nodes (absent from the result)
    result = cc.component_labels(edges, parallelism=2)
    expected = reference_dict(nodes, edges)
    assert result.as_dict() == expected
    assert len(set(expected.values())) > 20 and len(expected) < nodes
    rounds = result.iterations()
    assert rounds[-1]["proposals_out"] == 0 and all(r["changed"] > 0 for r in rounds[1:-1])  # drains at the fixed point
    assert rounds[0]["edges_in"] == 2 * len(edges)


def test_cli_reads_an_edge_list_and_writes_labels(ray_session, tmp_path):
    rng = np.random.default_rng(7)
    edges = random_graph_edges(300, 280, seed=11)
    ids = rng.choice(10**12, size=300, replace=False)  # large, sparse ids
    named = ids[edges]
    named = np.concatenate([named, named[:5], [[ids[0], ids[0]]]])  # repeated edges and a self-loop
    path = tmp_path / "edges.txt"
    path.write_text("".join(f"{u} {v}\n" for u, v in named.tolist()))
    out = tmp_path / "labels.txt"
    assert cc.main(["--edges", str(path), "--out", str(out), "--parallelism", "2"]) == 0
    got = {int(a): int(b) for a, b in (line.split(" ") for line in out.read_text().splitlines())}
    union = components_union_find(300, np.concatenate([edges, [[0, 0]]]))
    present = np.unique(np.concatenate([edges.ravel(), [0]]))
    # the smallest *id* of each component, computed from union-find's components
    smallest: dict[int, int] = {}
    for v in present.tolist():
        smallest[union[v]] = min(smallest.get(union[v], ids[v]), int(ids[v]))
    assert got == {int(ids[v]): smallest[union[v]] for v in present.tolist()}
    assert list(got) == sorted(got)


def test_edge_file_reader_accepts_odd_spacing(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("1\t2\n# a comment\n3   4\n")
    assert cc.read_edge_file(str(path)).tolist() == [[1, 2], [3, 4]]
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert cc.read_edge_file(str(empty)).shape == (0, 2)


# -- incremental components -------------------------------------------------------------------


def test_incremental_components_follow_union_find_and_do_little_work_later(ray_session):
    nodes = 500
    edges = random_graph_edges(nodes, 420, seed=2)
    batches = inc.split_epochs(edges, [380, 4, 0, 20])  # epoch 2 is empty; epoch 4 takes the rest
    results = list(inc.run_incremental(batches, parallelism=2))
    assert [r.epoch for r in results] == [0, 1, 2, 3, 4]
    seen = 0
    for r, batch in zip(results, batches):
        seen += len(batch)
        assert dict(zip(r.nodes.tolist(), r.labels.tolist())) == reference_dict(nodes, edges[:seen]), r.epoch
    first, small = results[0], results[1]
    assert first.records > 1000
    assert small.records < first.records / 10, (small.records, first.records)  # work follows the change
    assert small.proposals < first.proposals / 10
    assert results[2].records == 0 and results[2].labels.tolist() == results[1].labels.tolist()


# -- PageRank ---------------------------------------------------------------------------------


def test_pagerank_matches_numpy_power_iteration(ray_session):
    nodes = 300
    rng = np.random.default_rng(3)
    edges = rng.integers(0, 250, size=(900, 2))  # nodes 250..299 have no edges at all: dangling and isolated
    edges = np.concatenate([edges, [[7, 7], [7, 7], [8, 9]]])  # self-loops and a parallel edge
    assert len(set(range(nodes)) - set(edges[:, 0].tolist())) > 50  # plenty of dangling nodes
    ranks = pagerank.pagerank(edges, nodes, iterations=15, parallelism=2)
    expected = pagerank.pagerank_reference(nodes, edges, 15)
    assert np.abs(ranks - expected).max() < 1e-9
    assert abs(ranks.sum() - 1) < 1e-9
    assert not np.allclose(expected, pagerank.pagerank_reference(nodes, edges, 14), atol=1e-9)  # the count matters


# -- nested loops -----------------------------------------------------------------------------


def test_nested_loop_levels_match_plain_python(ray_session):
    edges = random_graph_edges(300, 330, seed=4)
    weights = np.random.default_rng(4).random(len(edges))
    thresholds = [0.1, 0.3, 0.6, 0.9]
    levels, work = nested_loop.threshold_levels(edges, weights, thresholds, parallelism=2)
    expected = nested_loop.levels_reference(edges.tolist(), weights.tolist(), thresholds)
    assert levels == expected
    assert [len(level) for level in levels] == sorted(len(level) for level in levels)
    components = [sum(n == lab for n, lab in level.items()) for level in levels]
    assert len(set(components)) > 1  # the levels really differ
    outer = {w["counters"][0] for w in work}
    assert outer == set(range(len(thresholds)))  # every level ran its own inner fixed point
    assert all(len(w["counters"]) == 2 for w in work)
