"""The spanning forest's walks and orders (``raytide.graph.child_lists.subtrees`` down the children lists,
``raytide.graph.hooking.depths`` up the parent links, ``spanning_forest.shallow``) against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.graph import spanning_forest as sf
from raytide.graph.child_lists import Children, subtrees
from raytide.graph.hooking import depths


def random_forest(seed: int, count: int) -> np.ndarray:
    """Parent links of a random forest of ``count`` nodes (a root its own parent), its node
    numbers shuffled; some nodes with many children, most with few."""
    rng = np.random.default_rng(seed)
    parent = np.array([rng.integers(0, max(i, 1)) if rng.random() < 0.9 else i for i in range(count)], dtype=np.int64)
    parent[: min(count, 3)] = np.arange(min(count, 3))
    if count > 3:  # a hub: a third of the nodes hang from one node
        hub = rng.choice(np.arange(3, count), size=count // 3, replace=False)
        parent[hub] = np.minimum(parent[hub], 1)
    label = rng.permutation(count)
    up = np.empty(count, dtype=np.int64)
    up[label] = label[parent]
    return up


def path_up(up: np.ndarray, node: int) -> list[int]:
    """``node`` and every node above it, to its root."""
    path = [node]
    while up[path[-1]] != path[-1]:
        path.append(int(up[path[-1]]))
    return path


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 120), st.data())
def test_subtrees_are_every_node_under_each_top_and_which_top(seed: int, count: int, data: st.DataObject) -> None:
    up = random_forest(seed, count)
    tops = np.array(sorted(data.draw(st.sets(st.integers(0, count - 1), max_size=count))), dtype=np.int64)
    up[tops] = tops  # each top cut from its parent: the subtrees are apart
    nodes, top = subtrees(Children.of(up), tops)
    expected = {}
    for node in range(count):
        above = [n for n in path_up(up, node) if n in set(tops.tolist())]
        if above:
            expected[node] = tops.tolist().index(above[0])
    assert sorted(nodes.tolist()) == sorted(expected)  # each node once
    assert dict(zip(nodes.tolist(), top.tolist(), strict=True)) == expected
    assert nodes[: len(tops)].tolist() == tops.tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 120), st.data())
def test_depths_of_whole_subtrees_are_found_from_the_depths_above_them(seed: int, count: int, data: st.DataObject) -> None:
    up = random_forest(seed, count)
    truth = np.array([len(path_up(up, node)) - 1 for node in range(count)], dtype=np.int64)
    heads = data.draw(st.lists(st.integers(0, count - 1), max_size=5))
    below = [node for node in range(count) if set(path_up(up, node)) & set(heads)]  # whole subtrees
    nodes = np.array(below, dtype=np.int64)
    stale = truth.copy()
    stale[nodes] = 10**6  # what the nodes held is not read
    repeated = np.concatenate([nodes, nodes[::2]])[np.random.default_rng(seed).permutation(len(nodes) + len(nodes[::2]))]
    found, depth = depths(up, stale, repeated)
    assert found.tolist() == below  # sorted, once each
    assert depth.tolist() == truth[below].tolist()


def test_a_cycle_is_refused_by_both_walks() -> None:
    up = np.array([1, 2, 0, 3])
    with pytest.raises(ValueError, match="form a cycle"):
        depths(up, np.zeros(4, dtype=np.int64), np.arange(3))
    with pytest.raises(ValueError, match="holds a cycle"):
        subtrees(Children(np.array([1, 2, 0, -1]), np.full(4, -1)), np.array([0]))


@pytest.mark.parametrize("deepest", [40, 40_000])
def test_edges_are_taken_shallow_end_first_ties_in_their_order(deepest: int) -> None:
    """``shallow``'s order against a comparison sort, depths that fit 16 bits (a radix sort) and not."""
    rng = np.random.default_rng(deepest)
    count = 500
    depth = rng.integers(0, deepest, count)
    forest = sf.Forest(np.arange(count), np.arange(count), np.arange(count), sf.EMPTY, Children.of(np.arange(count)), depth)
    a, b, moved = rng.integers(0, count, 300), rng.integers(0, count, 300), rng.choice(count, 100, replace=False)
    end = np.where(np.isin(a, moved), depth[b], depth[a])
    assert sf.shallow(forest, a, b, moved).tolist() == np.lexsort((np.arange(300), end)).tolist()
