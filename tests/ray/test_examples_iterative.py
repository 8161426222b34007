"""The iterative examples against plain references: components (one epoch and incremental), PageRank, nested loops."""

from __future__ import annotations

import numpy as np
import pytest

import raytide as rt
from bench.baselines.cc_ray import components_union_find
from bench.baselines.data import random_graph_edges
from examples import connected_components as cc
from examples import nested_loop, pagerank
from tests.ray.jobs import run_example


def reference_dict(nodes: int, edges: np.ndarray) -> dict[int, int]:
    """Union-find labels of the nodes that appear in ``edges``."""
    labels = components_union_find(nodes, edges)
    return {int(v): int(labels[v]) for v in np.unique(edges)}


def pairs(edges: np.ndarray) -> list[tuple[int, int]]:
    return [(u, v) for u, v in np.asarray(edges).reshape(-1, 2).tolist()]


# -- connected components ---------------------------------------------------------------------


def test_example_union_find_is_the_reference_union_find():
    edges = random_graph_edges(300, 250, seed=9)
    assert cc.union_find(pairs(edges)) == reference_dict(300, edges)
    assert cc.union_find([(5, 5), (7, 3)]) == {5: 5, 7: 3, 3: 3}


@pytest.mark.parametrize("seed", range(5))
def test_union_find_fed_epoch_by_epoch_and_the_component_count_equal_the_references(seed):
    # What the example's main checks each epoch with: one UnionFind given each epoch's edges once, against the
    # reference of every edge so far; and ComponentLabels.components against the count over the label dict.
    rng = np.random.default_rng(seed)
    edges = pairs(rng.integers(0, 60, size=(80, 2)))
    cuts = sorted(rng.integers(0, len(edges), size=4).tolist())
    reference, labels = cc.UnionFind(), cc.ComponentLabels()
    for start, end in zip([0, *cuts], [*cuts, len(edges)]):
        expected = reference_dict(60, np.array(edges[:end]).reshape(-1, 2))
        assert reference.add(edges[start:end]).labels() == expected, (seed, end)
        pairs_so_far = np.array(sorted(expected.items()), dtype=np.int64).reshape(-1, 2)
        labels = labels.lowered(pairs_so_far)
        assert labels == expected
        assert labels.components() == sum(node == label for node, label in expected.items())


@pytest.mark.ray
def test_connected_components_match_union_find(ray_session):
    nodes = 400
    edges = random_graph_edges(nodes, 300, seed=5)  # many components, and isolated nodes (absent from the result)
    edges = np.concatenate([edges, edges[:5], [[17, 17]]])  # repeated edges and a self-loop
    [(labels, records)] = list(cc.components_by_epoch([pairs(edges)], parallelism=2, records=True))
    expected = reference_dict(nodes, edges)
    assert labels == expected
    assert len(set(expected.values())) > 20 and len(expected) < nodes
    assert records > 2 * len(edges)  # both directions of every edge, then the offers


@pytest.mark.ray
def test_components_follow_union_find_epoch_by_epoch_and_do_little_work_later(ray_session):
    nodes = 500
    edges = pairs(random_graph_edges(nodes, 420, seed=2))
    epochs = [edges[:380], edges[380:384], [], edges[384:404], edges[404:]]  # epoch 2 is empty
    results = list(cc.components_by_epoch(epochs, parallelism=2, records=True))
    assert len(results) == len(epochs)
    seen = 0
    for epoch, ((labels, _), batch) in enumerate(zip(results, epochs)):
        seen += len(batch)
        assert labels == reference_dict(nodes, np.array(edges[:seen])), epoch
    first, small, empty = results[0][1], results[1][1], results[2][1]
    assert first > 1000
    assert small < first / 10, (small, first)  # the work follows the change, not the size of the graph
    assert empty == 0 and results[2][0] == results[1][0]


def test_split_epochs_cuts_every_edge_once():
    edges = [(i, i + 1) for i in range(101)]
    for epochs in (1, 2, 4, 7):
        parts = cc.split_epochs(edges, epochs)
        assert len(parts) == epochs and [e for part in parts for e in part] == edges
        assert len(parts[0]) == (101 if epochs == 1 else 90)


def test_component_labels_fold_epochs_as_a_dict_of_the_smallest_label_does():
    rng = np.random.default_rng(3)
    labels, expected, before = cc.ComponentLabels(), {}, []
    for size in (0, 40, 1, 25, 0, 60):  # new nodes, known ones lowered, repeats within an epoch
        pairs_in = rng.integers(0, 50, size=(size, 2))
        for node, label in pairs_in.tolist():
            expected[node] = min(label, expected.get(node, label))
        before.append((labels, dict(labels)))
        labels = labels.lowered(pairs_in)
        assert labels == expected and dict(labels) == expected and len(labels) == len(expected)
        assert all(labels[node] == label for node, label in expected.items())
    assert all(old == kept for old, kept in before)  # a fold leaves the labels it started from as they were
    with pytest.raises(KeyError):
        labels[1000]
    assert labels != {**expected, 1000: 0} and labels == cc.ComponentLabels(labels.nodes.copy(), labels.labels.copy())


# -- PageRank ---------------------------------------------------------------------------------


@pytest.mark.ray
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


@pytest.mark.ray
def test_nested_loop_levels_match_plain_python(ray_session):
    edges = random_graph_edges(300, 330, seed=4)
    weights = np.random.default_rng(4).random(len(edges))
    thresholds = [0.1, 0.3, 0.6, 0.9]
    levels, changes = nested_loop.threshold_levels(edges, weights, thresholds, parallelism=2)
    expected = nested_loop.levels_reference(edges.tolist(), weights.tolist(), thresholds)
    assert levels == expected
    assert [len(level) for level in levels] == sorted(len(level) for level in levels)
    components = [sum(n == lab for n, lab in level.items()) for level in levels]
    assert len(set(components)) > 1  # the levels really differ
    assert all(len(counters) == 2 for counters, _, _ in changes)
    assert {counters[0] for counters, _, _ in changes} == set(range(len(thresholds)))  # every level ran its own fixed point
    assert max(counters[1] for counters, _, _ in changes) > 1  # ... over several inner rounds


# -- the examples as programs -------------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("script, args, expected", [
    ("connected_components.py", ["--nodes", "800", "--edges", "700", "--epochs", "3"], "matches union-find: True"),
    ("nested_loop.py", ["--nodes", "300", "--edges", "400", "--thresholds", "0.3,0.7"], "matches plain Python: True"),
    ("pagerank.py", ["--nodes", "300", "--edges", "1000", "--iterations", "5"], "max |raytide - numpy|"),
])
def test_an_example_runs_as_a_script_from_the_repository_root(tmp_path, session_ray_env, script, args, expected):
    # A fresh process joining the session's Ray, as under ``ray job submit``: ``python examples/NAME.py`` has only
    # examples/ on sys.path, so this fails if an example imports another example or bench/. Output goes to files:
    # Ray's helpers inherit the descriptors (run_example).
    env = {k: v for k, v in session_ray_env.items() if k != "PYTHONPATH"}
    out, _ = run_example(tmp_path, env, script, *args)
    assert expected in out and "False" not in out, out


@pytest.mark.ray
def test_the_batches_a_replica_sends_a_peer_in_one_event_share_one_ray_call(ray_session):
    """Each round of the label propagation sends the peer its next-round rows and the epoch gate's
    token: one Ray call (``receive_many``), taken there as one event, and the labels stay union-find's."""
    nodes = 2000
    edges = random_graph_edges(nodes, 3000, seed=4)
    with rt.run(cc.build_flow(2), parallelism=2) as job:
        job.push("edges", edges, 0)
        job.close("edges")
        [(_, rows)] = list(job.results("labels", timeout=120, batch_format="numpy"))
        stats = job.stats()
    labels: dict[int, int] = {}
    for node, label in rows.tolist():
        labels[node] = min(label, labels.get(node, label))
    assert labels == reference_dict(nodes, edges)
    remote = stats["data_messages"] - stats["local_sends"]  # batches that crossed to another replica
    assert stats["data_calls"] < remote - 5, stats  # a round's rows and token to the peer: one call
