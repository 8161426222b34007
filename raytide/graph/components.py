"""Connected components by label propagation over columnar state, incremental across epochs.

Every node's label starts as its own id; a node whose label drops offers it to its
neighbours, and a node keeps any smaller offer. In the loop, the edges (both directions)
are arranged by source at each replica, the labels are a state column, and offers are
combined to the minimum per node before the exchange. A node whose label is new or drops
is marked with its epoch; when the epoch's rounds are over each replica sends the marked
nodes' labels once (the loop's ``finish``). A new edge ``u -> v`` offers
``label(u)`` to ``v`` at the epoch's first iteration (``u``'s owner holds both), so the
edges of a later epoch start from the labels of the earlier ones, and only labels they
lower move again. When no label drops the loop drains and the epoch is complete.
"""

from __future__ import annotations

import numpy as np

from raytide.core.collection import Collection
from raytide.core.dataflow import Stream
from raytide.core.keyindex import concat
from raytide.core.step import Step
from raytide.graph.changing_components import changing_components
from raytide.graph.edges import CHANGED_OR_NEW, as_pairs, both_directions, changed_rows, mark_changed, mark_new, spread, useful_offers


def own_id(keys: np.ndarray) -> np.ndarray:
    """A new node's label: its own id."""
    return keys.astype(np.int64)


def propagate(s: Step) -> tuple[dict[str, np.ndarray], None]:
    """One round at one replica: the offers to neighbours; the nodes whose label is new or dropped are marked."""
    label = s.state["label"]
    added, rows = s.added.get(0, (np.empty(0, dtype=np.int64), {}))
    targets, offers = [rows["dst"]] if len(added) else [], [label[added]] if len(added) else []
    lower = s.values["label"] < label[s.slots]
    changed, smaller = s.slots[lower], s.values["label"][lower]
    label[changed] = smaller
    more_targets, more_offers = spread(s, changed, smaller)
    targets.append(more_targets)
    offers.append(more_offers)
    mark_new(s, added)  # a new node reports its label (its id, unless it drops) in its first epoch
    mark_changed(s, changed)
    return useful_offers(s, "label", concat(targets), concat(offers)), None


def connected_components(edges: Stream | Collection, *, name: str = "components") -> Stream | Collection:
    """Per epoch, ``(node, label)`` rows (an ``(n, 2)`` array batch) for every node whose label is new
    or dropped in the epoch: the smallest label per node over epochs ``0..e`` is the smallest node id
    of its component in the graph of the edges of epochs ``0..e``.

    ``edges``: batches of columns ``src`` and ``dst`` (direction ignored). Given a
    :class:`~raytide.core.collection.Collection` of ``(u, v)`` edges instead (integer node
    ids), inserted and deleted, returns the collection of ``(node, label)`` kept up to date:
    a deleted edge may split a component (:mod:`raytide.graph.changing_components`).
    """
    if isinstance(edges, Collection):
        return changing_components(edges, name)
    changes = edges.map_batches(both_directions, name=f"{name}.both-directions").iterate_columns(
        propagate, key="node", state={"label": (np.int64, own_id), "changed": CHANGED_OR_NEW},
        combine={"label": np.minimum}, arrange="src", name=name, finish=changed_rows("label"),
        repeatable_rounds=True)
    assert isinstance(changes, Stream)
    return changes.map_batches(lambda b: as_pairs(b, "label"), name=f"{name}.pairs")
