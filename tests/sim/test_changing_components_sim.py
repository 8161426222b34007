"""Connected components of a collection of edges inserted and deleted (the spanning forest of
``raytide.graph.forest_components``), in the in-process runtime under
seeded interleavings, against union-find of the edges present after every epoch.

Each epoch's output must be exactly the changes between union-find's labellings before and
after it: a change lost, shown twice, or a stale label kept (a component cut in two that
still carries the label of the other part) fails. Crashes and live rescales of the same
loop run in tests/sim/test_collections_sim.py (its ``graph`` scenario); on real Ray in
tests/ray/test_collections.py.
"""

from __future__ import annotations

import random
from collections import Counter

import raytide as rt
from examples.incremental_components import random_updates
from raytide.graph import connected_components
from raytide.testing import LocalJob
from tests.oracles import component_changes
from tests.sim.seeds import seeds


def trial(seed: int) -> None:
    rng = random.Random(seed)
    nodes = rng.randint(3, 30)
    epochs = random_updates(rng, nodes, rng.randint(1, 2 * nodes), rng.randint(2, 6), rng.choice([0.05, 0.2, 0.5]))
    if seed % 4 == 0:  # an edge twice, and taken away once: still present
        epochs[-1] = epochs[-1] + [epochs[0][0], (epochs[0][0][0], -1)]
    check(epochs, rng.randint(1, 3), seed)


def check(epochs: list, parallelism: int, seed: int) -> None:
    """``epochs`` of updates through the loop at ``parallelism``: each epoch's changes are union-find's."""
    flow = rt.Dataflow("cc")
    connected_components(flow.collection("edges"), name="cc").output("labels")  # type: ignore[union-attr]
    run = LocalJob(flow, {"edges": epochs}, parallelism=parallelism, seed=seed).run()
    assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
    got = {epoch: Counter(dict(changes)) for epoch, changes in run.outputs["labels"].items() if changes}
    assert got == component_changes(epochs), f"seed {seed} (parallelism {parallelism})"


def test_components_under_insertions_and_deletions_equal_union_find_after_every_epoch():
    for seed in range(80):
        trial(seed)


def test_denser_graphs_where_most_lost_parents_reattach_equal_union_find():
    """Graphs of a few hundred edges, where a node that loses its parent edge mostly finds
    another neighbour of its label to reattach to, and chains of reattachments and resets
    meet within a round and across replicas."""
    for seed in seeds(4, "changing-components-dense"):
        rng = random.Random(seed)
        nodes = rng.randint(60, 150)
        epochs = random_updates(rng, nodes, rng.randint(2 * nodes, 4 * nodes), rng.randint(3, 6), rng.choice([0.05, 0.2]))
        check(epochs, rng.randint(1, 3), seed)


def ladder(length: int) -> list[tuple[tuple[int, int], int]]:
    """Two paths ``0 .. length-1`` and ``length .. 2*length-1`` with a rung between each pair of
    their nodes: every node has a neighbour of its label besides its parent."""
    rails = [((i, i + 1), 1) for i in range(length - 1)] + [((length + i, length + i + 1), 1) for i in range(length - 1)]
    return rails + [((i, length + i), 1) for i in range(length)]


def test_cut_components_isolated_nodes_and_cancelling_updates_equal_union_find():
    """The cases the forest's repair could get wrong, each at widths 1 to 3 under seeded
    interleavings: a ladder cut in two across every rung (reattachment must not keep a label
    the part can no longer reach), a node losing all its edges (its record taken back), an
    edge inserted and deleted in one epoch (nothing to show), a deleted edge inserted again,
    and a bridge between two cycles deleted (the cycles keep their labels by the other way
    round, the far one gets its own smallest id)."""
    cut = ladder(8) + [((7, 20), 1), ((20, 21), 1)]
    epochs = [cut,
              [((i, 8 + i), -1) for i in range(8)],  # every rung gone: two paths, ids 0.. and 8..
              [((20, 21), -1), ((3, 30), 1), ((3, 30), -1)],  # 21 alone (absent); an edge and its deletion
              [((5, 13), 1), ((7, 20), -1), ((7, 20), 1)],  # a rung again; a deleted edge back in the same epoch
              [((i, 8 + i), 1) for i in range(8)] + [((5, 13), -1)]]
    cycles = [((i, (i + 1) % 6), 1) for i in range(6)] + [((10 + i, 10 + (i + 1) % 6), 1) for i in range(6)]
    bridges = [cycles + [((3, 12), 1)], [((0, 1), -1), ((3, 12), -1)], [((3, 12), 1), ((0, 1), 1)], [((2, 3), -1)]]
    for seed in seeds(2, "changing-components-cases", rotate=1):
        for parallelism in (1, 2, 3):
            check(epochs, parallelism, seed)
            check(bridges, parallelism, seed)


def test_a_new_edge_to_a_node_that_forgets_in_the_same_epoch_equals_union_find():
    """An epoch that cuts a path and joins its far end back by a new edge: the new edge's offer
    may reach a node that is forgetting (its parent cut) at the same round, at its own replica
    (taken in the round, never sent) or at another; it must not be lost, and the far part
    takes the label back by the new edge (0, then 2's own id once that edge goes too)."""
    path = [((i, i + 1), 1) for i in range(6)]
    epochs = [path, [((1, 2), -1), ((0, 5), 1), ((6, 9), 1)], [((0, 5), -1), ((2, 7), 1)], [((0, 4), 1)]]
    for seed in seeds(3, "changing-components-new-edge", rotate=1):
        for parallelism in (1, 2, 3):
            check(epochs, parallelism, seed)


def gadgets(count: int) -> tuple[list, list[list], list]:
    """``count`` copies of a component ``a - b1, a - b2, b1 - c, b2 - c, c - d`` (ids ``10k + 0..4``),
    where ``c`` takes ``a``'s label from ``b1`` and ``b2`` at once (``b2`` its backup, wherever it
    is held) and ``d`` from ``c``; then epochs that cut ``c``'s parent edge alone (``c`` reattaches
    to ``b2``) and put it back, and that cut it with ``b2``'s own parent edge (``b2`` is cut in the round ``c`` reattaches to
    it: ``c`` must forget in turn, and ``b2``, ``c``, ``d`` take ``b2``'s id)."""
    first = [((10 * k + u, 10 * k + v), 1) for k in range(count) for u, v in ((0, 1), (0, 2), (1, 3), (2, 3), (3, 4))]
    cut_parent = [((10 * k + 1, 10 * k + 3), -1) for k in range(count)]
    restore = [((10 * k + 1, 10 * k + 3), 1) for k in range(count)]
    cut_both = cut_parent + [((10 * k, 10 * k + 2), -1) for k in range(count)]
    return first, [cut_parent, restore], cut_both


def test_a_node_reattaching_across_replicas_into_a_subtree_being_cut_equals_union_find():
    """A node whose parent edge goes reattaches to its backup held at another replica; when the
    backup's own parent edge goes in the same epoch the backup forgets and so must the node
    (its notice reaching it as its child), and no node may reattach to one that took its label
    after it (from it, say): a cycle of parents would keep a label the part cannot reach."""
    first, cut_parent, cut_both = gadgets(12)
    for seed in seeds(2, "changing-components-backups", rotate=1):
        for parallelism in (2, 3, 4):
            check([first, *cut_parent, cut_both], parallelism, seed)
            check([first, cut_both], parallelism, seed)


def test_a_reset_node_whose_held_label_is_taken_back_asks_at_the_barrier():
    """A reset node holds the smallest label its neighbours answer its notice with while the
    wave runs; when the neighbour that answered forgets later in the wave (its notice comes,
    or it forgets at the same replica), that label is dropped and the node must ask its
    neighbours at the barrier, the other answers having been folded away. The random graph
    of trial seed 288 at width 3 is such a run: a release offering the node's own id without
    asking leaves it a label too large. It runs under its own interleaving and rotating ones."""
    rng = random.Random(288)
    nodes = rng.randint(3, 30)
    epochs = random_updates(rng, nodes, rng.randint(1, 2 * nodes), rng.randint(2, 6), rng.choice([0.05, 0.2, 0.5]))
    for seed in [288, *seeds(2, "changing-components-held", rotate=1)]:
        check(epochs, 3, seed)
