"""Connected components of a collection of edges, inserted and deleted: the spanning forest as a vertex.

Every node's label is the smallest node id of its component. The state is a spanning forest
of the graph of the edges present (:mod:`raytide.graph.spanning_forest`: every tree rooted at
its smallest node, with a children index and depths) and the edges with their copies
(:class:`~raytide.graph.owned_edges.OwnedEdges`). An epoch's updates cut the forest at its
deleted forest edges and hang the parts back by other edges found at the nodes cut off, or
join trees by inserted edges; only what the epoch touched is visited, whatever the depth, and
no loop runs: the epoch is one exchange of its updates to the vertex::

    edges (collection) --update_columns--> src, dst, diff --+ part = 0 (whole_graph)
        --exchange by part--> ForestComponents: run_epoch at the replica holding key 0
        --> per epoch ((node, label), diff): old records taken back, new ones added

The whole graph is one key (``part`` 0), so it is held by one replica at a time, and its
state moves as any keyed state does: snapshots, exactly-once recovery, restore at another
width and live rescale hand the forest and the edges over whole with the key's group
(:meth:`ForestLabels.take` / :meth:`ForestLabels.put`). The price is that the work is not
spread: one replica does an epoch, the others idle (docs/collections.md says what is left:
the edges owned by key group and the forest replicated, the two exchanges a broadcast loop).
Choices are deterministic (:func:`~raytide.graph.spanning_forest.run_epoch` is a function of
its arrays), so a recovered or rescaled run shows exactly the changes of an unbroken one.

Node ids are any int64 (:class:`~raytide.graph.node_codes.NodeCodes`); a node with no edge
present has no record.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from raytide.core.collection import Collection
from raytide.core.collection_columns import AppliedPerEpoch
from raytide.core.keyindex import EMPTY, concat
from raytide.differential import DIFF
from raytide.errors import RecordError
from raytide.graph.child_lists import NONE
from raytide.graph.node_codes import NodeCodes, Shift
from raytide.graph.owned_edges import OwnedEdges
from raytide.graph.sorted_pairs import Runs, distinct, member, pack, pair, unpack
from raytide.graph.spanning_forest import Forest, indexed, run_epoch

#: The key column every update carries to the vertex, and its one value: the whole graph.
PART, WHOLE = "part", 0
#: No label shown: the node has no record.
UNSHOWN = -1


def whole_graph(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An epoch's edge updates keyed to the one replica that holds the graph."""
    return {**batch, PART: np.zeros(len(batch[DIFF]), dtype=np.int64)}


@dataclass
class ForestLabels:
    """The components' state: the forest, the edges with their copies, the label each node's
    record shows (``shown``, by forest index: :data:`UNSHOWN` for none) and the node coding."""

    forest: Forest = field(default_factory=Forest.empty)
    owned: OwnedEdges = field(default_factory=OwnedEdges.empty)
    shown: np.ndarray = field(default_factory=lambda: EMPTY)
    codes: NodeCodes = field(default_factory=NodeCodes)

    @property
    def held(self) -> int:
        """The edge rows held (both ways, the small tier's included)."""
        return len(self.owned.copies) + len(self.owned.recent_copies)

    def apply(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """An epoch's updates (columns ``src``, ``dst``, ``diff``) in; the changes of the
        ``(node, label)`` records out (columns ``node``, ``label``, ``diff``), None if none."""
        src, dst, diff = (integers(rows[name], name) for name in ("src", "dst", DIFF))
        if not len(src):
            return None
        self.codes, coded, shift = self.codes.encode(concat([src, dst]), self.known)
        if shift is not None:
            self.recoded(shift)
        keys = pack(coded[: len(src)], coded[len(src):])
        before = self.forest
        forests, owned, _, (relabelled, _) = run_epoch([before], [self.owned], [(keys, diff)])
        self.forest, self.owned = forests[0], owned[0]
        self.shown = aligned(self.shown, before.ids, self.forest.ids)
        return self.changes(distinct(concat([relabelled, *unpack(keys)])))

    def known(self) -> np.ndarray:
        """Every code the state holds: the forest's nodes and the ends of the edges held."""
        keys = concat([index.keys for index, _ in self.owned.tiers()])
        return distinct(concat([self.forest.ids, *unpack(keys)]))

    def recoded(self, shift: Shift) -> None:
        """Every code held mapped by ``shift`` (the coding changed; the order of codes is kept)."""
        adj, recent = Runs.of(recoded_pairs(self.owned.adj.keys, shift)), recoded_pairs(self.owned.recent.keys, shift)
        self.owned = OwnedEdges(adj, self.owned.copies, Runs.sparse(recent), self.owned.recent_copies,
                                self.owned.dead)
        self.forest = replace(self.forest, ids=shift(self.forest.ids))
        shown = self.shown >= 0
        self.shown = self.shown.copy()
        self.shown[shown] = shift(self.shown[shown])

    def changes(self, touched: np.ndarray) -> dict[str, np.ndarray] | None:
        """The record changes of the nodes ``touched`` (codes: the ends of the epoch's edges and
        the nodes relabelled), their shown labels brought up to date."""
        forest = self.forest
        at, held = indexed(forest.ids, touched)
        at = at[held]
        present = (forest.up[at] != at) | (forest.kids.first[at] != NONE) | member(at, forest.loops)
        label, shown = forest.ids[forest.root[at]], self.shown[at]
        was = shown != UNSHOWN
        differs = (present != was) | (present & (label != shown))
        at, label, shown, present, was = at[differs], label[differs], shown[differs], present[differs], was[differs]
        if not len(at):
            return None
        self.shown[at] = np.where(present, label, UNSHOWN)
        node = self.codes.decode(forest.ids[at])
        return {"node": concat([node[was], node[present]]),
                "label": self.codes.decode(concat([shown[was], label[present]])),
                DIFF: np.repeat(np.array([-1, 1], dtype=np.int64), [int(was.sum()), int(present.sum())])}

    def rows(self) -> ForestLabels | None:
        """A copy of the state to save (None: nothing held). The forest's arrays are replaced, never
        changed, by an epoch; the copies of the edges and the shown labels are changed in place."""
        if not len(self.forest.ids) and not self.held:
            return None
        owned = replace(self.owned, copies=self.owned.copies.copy(), recent_copies=self.owned.recent_copies.copy())
        return ForestLabels(self.forest, owned, self.shown.copy(), self.codes)

    def take(self, moving: Callable[[Hashable], bool]) -> ForestLabels | None:
        """All of the state if the whole graph's key moves (it is one key), and none is left here."""
        if not moving(WHOLE):
            return None
        taken = ForestLabels(self.forest, self.owned, self.shown, self.codes)
        self.put(ForestLabels())
        return taken if taken.rows() is not None else None

    def put(self, state: ForestLabels | None) -> None:
        """Another replica's state taken over (this one holds none: the graph is one key)."""
        if state is not None:
            self.forest, self.owned, self.shown, self.codes = state.forest, state.owned, state.shown, state.codes


def integers(values: Any, name: str) -> np.ndarray:
    """A column of integers as int64, or a clear error naming the column and a value."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" and len(values):
        raise RecordError(f"connected components take edges of integer node ids and integer diffs: column {name!r} "
                          f"holds {values.dtype} values such as {values[:1].tolist()[0]!r}")
    return values.astype(np.int64)


def recoded_pairs(keys: np.ndarray, shift: Shift) -> np.ndarray:
    """Pair keys with both codes mapped by ``shift`` (monotone: they stay sorted)."""
    high, low = unpack(keys)
    return pair(shift(high), shift(low)) if len(keys) else keys


def aligned(shown: np.ndarray, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """``shown`` (by index into the node codes ``before``) by index into ``after``, which holds
    them all (new nodes shown none)."""
    if len(after) == len(before):
        return shown
    out = np.full(len(after), UNSHOWN, dtype=np.int64)
    if len(before) and after[len(before) - 1] == before[-1]:  # new codes after the old (sorted, a superset)
        out[: len(before)] = shown
    else:
        out[np.searchsorted(after, before)] = shown
    return out


class ForestComponents(AppliedPerEpoch):
    """The vertex: each epoch's updates gathered and run at its notification by :class:`ForestLabels`."""

    saved_as = "forest"

    def __init__(self) -> None:
        super().__init__(ForestLabels, PART)


def forest_components(edges: Collection, name: str) -> Collection:
    """``(node, label)`` kept up to date as ``edges`` (``(u, v)`` records of integer node ids,
    direction ignored) are inserted and deleted: the smallest node id of each node's component."""
    columns = edges.update_columns(("src", "dst"), name=f"{name}.columns").map_batches(
        whole_graph, name=f"{name}.whole-graph")
    (changes,) = columns.flow.vertex(ForestComponents, [columns], exchange=[PART], name=name)
    return Collection(columns=changes, consolidated=True)
