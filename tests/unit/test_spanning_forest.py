"""The replicated spanning forest (``raytide.graph.spanning_forest``) against union-find after
random insert/delete epochs, at several widths, the edges partitioned among replicas at random."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from examples.connected_components import union_find
from examples.incremental_components import random_updates
from raytide.graph import owned_edges
from raytide.graph import spanning_forest as sf
from raytide.graph.child_lists import Children, subtrees
from raytide.graph.hooking import roots
from raytide.graph.sorted_pairs import Runs, offsets, pair, unpack


def updates_by_replica(rng: random.Random, updates: list, width: int, owner: dict) -> list:
    """Each update to the replica owning its edge (chosen at random, once per edge)."""
    parts: list[list] = [[] for _ in range(width)]
    for (u, v), diff in updates:
        key = (min(u, v), max(u, v))
        parts[owner.setdefault(key, rng.randrange(width))].append((u, v, diff))
    return [(sf.id_keys(np.array([u for u, _, _ in p], dtype=np.int64), np.array([v for _, v, _ in p], dtype=np.int64)),
             np.array([d for _, _, d in p], dtype=np.int64)) for p in parts]


def trial(seed: int, spread: int = 1) -> None:
    rng = random.Random(seed)
    nodes, width = rng.randint(3, 40), rng.randint(1, 4)
    epochs = random_updates(rng, nodes, rng.randint(1, 2 * nodes), rng.randint(2, 7), rng.choice([0.05, 0.2, 0.5]))
    epochs = [[((u * spread, v * spread), diff) for (u, v), diff in updates] for updates in epochs]  # ids far apart
    if seed % 4 == 0:  # an edge twice, and taken away once: still present
        epochs[-1] = epochs[-1] + [epochs[0][0], (epochs[0][0][0], -1)]
    forests, owned, owner = [sf.Forest.empty()] * width, [sf.OwnedEdges.empty()] * width, {}
    present: Counter = Counter()
    before: dict = {}
    for number, updates in enumerate(epochs):
        forests, owned, _, (ids, labels) = sf.run_epoch(forests, owned, updates_by_replica(rng, updates, width, owner))
        for (u, v), diff in updates:
            present[(min(u, v), max(u, v))] += diff
        live = [edge for edge, copies in present.items() if copies > 0]
        expected = union_find(live)
        low, high = unpack(np.concatenate([mine.present() for mine in owned]))
        assert sorted(zip(low.tolist(), high.tolist())) == sorted(live)  # the replicas hold the edges present, once
        every = dict(zip(forests[0].ids.tolist(), forests[0].labels().tolist(), strict=True))
        changed = {node: label for node, label in every.items() if before.get(node) != label}
        assert dict(zip(ids.tolist(), labels.tolist(), strict=True)) == changed  # the changes found are all of them
        before = every
        for forest in forests:  # every replica holds the same forest, spanning the edges present
            assert np.array_equal(forest.up, forests[0].up) and np.array_equal(forest.ids, forests[0].ids)
            shown = forest.present()
            got = dict(zip(forest.ids[shown].tolist(), forest.labels()[shown].tolist(), strict=True))
            assert got == expected, f"seed {seed}, epoch {number}, width {width}"
            assert (forest.up != np.arange(len(forest.up))).sum() == len(expected) - len(set(expected.values()))
            child = np.flatnonzero(forest.up != np.arange(len(forest.up)))  # a forest of edges present, its trees the components
            edges = {(min(u, v), max(u, v)) for u, v in zip(forest.ids[child].tolist(), forest.ids[forest.up[child]].tolist())}
            assert all(present[edge] > 0 for edge in edges)
            assert_indexed(forest, owned)


def assert_indexed(forest: sf.Forest, owned: list) -> None:
    """The indexes agree with what they index: every tree rooted at its smallest node, which is each
    node's ``root``; the children index exactly the parent links; each replica's adjacency
    exactly its present edges, both ways."""
    assert np.array_equal(roots(forest.up.copy()), forest.root)
    assert (forest.root <= np.arange(len(forest.root))).all()
    assert forest.depth.tolist() == depths(forest.up).tolist()
    child = np.flatnonzero(forest.up != np.arange(len(forest.up)))
    nodes = np.arange(len(forest.up))
    kid, owner = forest.kids.of_parents(nodes)
    order = np.argsort(owner, kind="stable")  # each parent's list in its order: increasing
    assert pair(owner[order], kid[order]).tolist() == sorted(pair(forest.up[child], child).tolist())
    for mine in owned:  # both tiers sorted, apart, with their runs; both ends of an edge with the same copies
        held: dict = {}
        for index, copies in mine.tiers():
            assert_runs(index, sorted(index.keys.tolist()))
            held |= dict(zip(index.keys.tolist(), copies.tolist(), strict=True))
        assert len(held) == len(mine.adj.keys) + len(mine.recent.keys)
        assert mine.dead == sum(copies == 0 for copies in held.values())
        assert all(held[pair(key & 0xFFFFFFFF, key >> 32)] == copies for key, copies in held.items())


def depths(up: np.ndarray) -> np.ndarray:
    """Each node's depth under the parent links ``up``, counted up to its root."""
    depth, node = np.zeros(len(up), dtype=np.int64), np.arange(len(up))
    while (up[node] != node).any():
        below = up[node] != node
        depth[below] += 1
        node = np.where(below, up[node], node)
    return depth


def assert_runs(index: Runs, keys: list) -> None:
    """The index holds exactly ``keys`` (sorted), and its starts (when kept) are where each high's run starts,
    for every high held."""
    assert index.keys.tolist() == keys
    if len(index.start):
        assert index.start.tolist() == offsets(index.keys, len(index.start) - 1).tolist()


@pytest.mark.parametrize("seed", range(60))
def test_labels_equal_union_find_after_every_epoch(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if seed % 2:  # edges always linked into the forest, never a bulk rebuilding it
        monkeypatch.setattr(sf, "BULK", 0)
    if seed % 3 == 0:  # never merged: a replica's new edges stay in its small tier, its edges with no copy held
        monkeypatch.setattr(owned_edges, "MERGE", 0)
        monkeypatch.setattr(owned_edges, "TOMBSTONES", 0)
    monkeypatch.setattr(sf, "arrived", shuffled(random.Random(seed)))  # each replica gets the announcements in a random order
    trial(seed, 50_000_000 if seed % 5 == 0 else 1)  # every fifth: node ids up to 2e9, indexes found by search


def shuffled(rng: random.Random) -> Callable[[list, int], list]:
    """An ``arrived`` that hands each replica what every replica sent in an order drawn at random."""
    def arrived(sent: list, replica: int) -> list:
        return rng.sample(sent, len(sent))
    return arrived


def test_an_epoch_takes_two_exchanges_at_most_and_one_without_a_forest_edge_deleted() -> None:
    keys = sf.id_keys(np.array([0, 1, 2]), np.array([1, 2, 3]))
    forests, owned, exchanges, _ = sf.run_epoch([sf.Forest.empty()] * 2, [sf.OwnedEdges.empty()] * 2,
                                             [(keys[:2], np.ones(2, dtype=np.int64)), (keys[2:], np.ones(1, dtype=np.int64))])
    assert exchanges == 1 and forests[0].labels().tolist() == [0, 0, 0, 0]
    cycle = sf.id_keys(np.array([0]), np.array([3]))  # a cycle, then one of its forest edges deleted
    forests, owned, _, _ = sf.run_epoch(forests, owned, [(cycle, np.ones(1, dtype=np.int64)), (sf.EMPTY, sf.EMPTY)])
    forests, owned, exchanges, _ = sf.run_epoch(forests, owned, [(keys[:1], -np.ones(1, dtype=np.int64)), (sf.EMPTY, sf.EMPTY)])
    assert exchanges == 2 and forests[1].labels().tolist() == [0, 0, 0, 0]


def test_an_edge_with_no_copy_left_is_dropped_from_what_a_replica_holds() -> None:
    keys = sf.id_keys(np.array([0, 1, 5]), np.array([1, 2, 5]))
    owned, inserted, _ = sf.apply_updates(sf.OwnedEdges.empty(), keys, np.array([2, 1, 1]))
    owned, _, deleted = sf.apply_updates(owned, keys, np.array([-1, -1, -1]))
    assert deleted.tolist() == keys[1:].tolist()  # 3 of the 5 held without a copy: dropped (above one in 8)
    assert owned.adj.keys.tolist() == [pair(0, 1), pair(1, 0)] and owned.copies.tolist() == [1, 1]


def test_parent_links_in_a_cycle_and_a_cycle_to_link_are_refused_not_looped_on() -> None:
    with pytest.raises(ValueError, match="form a cycle"):
        roots(np.array([1, 2, 0, 3]))
    for a, b in (([0, 0], [1, 1]), ([0, 1, 0], [1, 2, 2])):  # two edges between two trees; a cycle of three
        with pytest.raises(ValueError, match="not a forest over the trees"):
            sf.linked(np.arange(3), Children.of(np.arange(3)), (np.array(a), np.array(a)), (np.array(b), np.array(b)),
                      np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="holds a cycle"):
        subtrees(Children(np.array([1, 0]), np.array([-1, -1])), np.array([0]))


def test_node_ids_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="node ids must be integers in"):
        sf.id_keys(np.array([-1]), np.array([2]))


def test_an_inserted_edge_announced_by_another_is_still_a_candidate_where_neither_end_moved() -> None:
    """0 roots 2 and 4; (0, 2) goes and (1, 2), (1, 4) come at one replica, which announces only
    (1, 2) (both join the same two trees). {0, 4} and {1, 2} meet only through (1, 4), whose
    ends kept their roots: found because the replica searches the edges it inserted too."""
    one = np.ones(2, dtype=np.int64)
    forests, owned, _, _ = sf.run_epoch([sf.Forest.empty()], [sf.OwnedEdges.empty()],
                                        [(sf.id_keys(np.array([0, 0]), np.array([2, 4])), one)])
    assert forests[0].up.tolist()[2:5:2] == [0, 0]
    updates = (sf.id_keys(np.array([0, 1, 1]), np.array([2, 2, 4])), np.array([-1, 1, 1]))
    forests, _, exchanges, _ = sf.run_epoch(forests, owned, [updates])
    assert exchanges == 2 and forests[0].labels().tolist() == [0, 0, 0, 3, 0]


@pytest.mark.parametrize(("parents", "others", "deleted", "inserted"), [
    # {1, 2} and {3, 4} cut off from 0; 3 settles by (3, 7), 1 has only the inserted (1, 5) to the other tree:
    # not settled by it, so 2's edge (2, 4) to {3, 4} is searched and the two trees join
    ({1: 0, 3: 0, 7: 0, 2: 1, 4: 3, 6: 5}, [(2, 4), (3, 7)], [(0, 1), (0, 3)], [(1, 5)]),
    # {1}, {3, 4} and {5, 6} cut off; the inserted (1, 3) waits for the search, so {3, 4} is searched as a
    # part of its own tree (it is not settled) and its edge (4, 6) to {5, 6} joins 0's tree to 2's
    ({1: 0, 7: 0, 3: 2, 5: 2, 8: 2, 4: 3, 6: 5}, [(1, 7), (4, 6), (5, 8)], [(0, 1), (2, 3), (2, 5)], [(1, 3)]),
])
def test_a_part_is_settled_only_by_an_edge_of_before_to_the_part_above_its_own_cut(parents, others, deleted, inserted) -> None:
    """Searching a cut-off part's root first and stopping there is safe only if what settles it
    is an edge of before to its own tree's part above the cuts (two plants caught here)."""
    def keyed(edges: list) -> np.ndarray:
        return sf.id_keys(np.array([u for u, _ in edges]), np.array([v for _, v in edges]))
    up = np.arange(max(parents) + 1)
    up[list(parents)] = list(parents.values())
    forest = sf.Forest(np.arange(len(up)), up, roots(up.copy()), sf.EMPTY, Children.of(up), depths(up))
    graph = list(parents.items()) + others
    owned = sf.apply_updates(sf.OwnedEdges.empty(), keyed(graph), np.ones(len(graph), dtype=np.int64))[0]
    diff = np.array([-1] * len(deleted) + [1] * len(inserted), dtype=np.int64)
    forests, _, exchanges, _ = sf.run_epoch([forest], [owned], [(keyed(deleted + inserted), diff)])
    assert exchanges == 2 and set(forests[0].labels().tolist()) == {0}


@pytest.mark.parametrize("width", [1, 2])
def test_a_part_cut_off_hangs_from_the_shallowest_node_it_has_an_edge_to(width: int) -> None:
    """7 is cut from 6 and has edges to 3 (depth 3) and 4 (depth 1): it hangs from 4, so churn
    deepens the forest less (by key order it would hang from 3). One replica picks among its
    candidates; two (the last one owning (4, 7)) each send one, and every replica picks."""
    up = np.array([0, 0, 1, 2, 0, 5, 0, 6])
    forest = sf.Forest(np.arange(8), up, roots(up.copy()), sf.EMPTY, Children.of(up), depths(up))
    graph = [(1, 0), (2, 1), (3, 2), (4, 0), (6, 0), (7, 6), (3, 7), (4, 7)]
    parts = [graph] if width == 1 else [graph[:-1], graph[-1:]]
    owned = [sf.apply_updates(sf.OwnedEdges.empty(), sf.id_keys(np.array([u for u, _ in part]), np.array([v for _, v in part])),
                              np.ones(len(part), dtype=np.int64))[0] for part in parts]
    cut = (sf.id_keys(np.array([6]), np.array([7])), -np.ones(1, dtype=np.int64))
    forests, _, exchanges, _ = sf.run_epoch([forest] * width, owned, [cut] + [(sf.EMPTY, sf.EMPTY)] * (width - 1))
    assert exchanges == 2 and forests[0].up[7] == 4 and forests[0].depth[7] == 2


@pytest.mark.parametrize("seed", range(40))
def test_a_runs_find_is_searchsorted_and_a_membership(seed: int) -> None:
    """:meth:`Runs.find` (a bisection inside each high's run when the index keeps its starts, a
    binary search over all the keys when it does not) against ``np.searchsorted``: the same spot
    for every value, held or not, its high among the keys' or past them, and the same mask."""
    rng = np.random.default_rng(seed)
    highs, lows, count = int(rng.integers(1, 60)), int(rng.integers(1, 40)), int(rng.integers(0, 300))
    keys = np.unique(pair(rng.integers(0, highs, count), rng.integers(0, lows, count)))
    asked = int(rng.integers(0, 200))
    values = np.concatenate([pair(rng.integers(0, highs + 3, asked), rng.integers(0, lows + 1, asked)),
                             rng.choice(keys, min(len(keys), asked))])
    rng.shuffle(values)  # in any order, as the search within runs allows
    for index in (Runs.of(keys), Runs.sparse(keys)):
        spot, found = index.find(values)
        assert spot.tolist() == np.searchsorted(keys, values).tolist()
        assert found.tolist() == np.isin(values, keys).tolist()
    assert len(Runs.of(keys).start) or not len(keys)  # the bisection ran: these keys are dense


@pytest.mark.parametrize("seed", range(12))
def test_a_bulk_builds_breadth_first_trees_over_all_its_edges(seed: int) -> None:
    """A first epoch (a bulk) is announced whole, not reduced to a spanning forest, so the forest it
    builds is breadth-first over all its edges: every node's depth is its distance from its
    component's smallest node (reduced first, the trees were the hooking's, twice as deep on
    ``bench collections``' graph, and every later cut cut off subtrees as much larger)."""
    rng = random.Random(seed)
    nodes, width = rng.randint(20, 120), rng.randint(1, 3)
    edges = sorted({(min(u, v), max(u, v)) for u, v in ((rng.randrange(nodes), rng.randrange(nodes)) for _ in range(3 * nodes))
                    if u != v})
    updates = updates_by_replica(rng, [(edge, 1) for edge in edges], width, {})
    forests, _, _, _ = sf.run_epoch([sf.Forest.empty()] * width, [sf.OwnedEdges.empty()] * width, updates)
    near: dict = {}
    for u, v in edges:
        near.setdefault(u, []).append(v)
        near.setdefault(v, []).append(u)
    distance: dict = {}
    for start in sorted(near):  # breadth first from each component's smallest node
        if start in distance:
            continue
        distance[start], level = 0, [start]
        while level:
            below = []
            for u in level:
                for v in near[u]:
                    if v not in distance:
                        distance[v] = distance[u] + 1
                        below.append(v)
            level = below
    forest = forests[0]
    assert {int(i): int(d) for i, d in zip(forest.ids, forest.depth, strict=True) if i in distance} == distance
