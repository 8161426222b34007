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
from raytide.core.combine import combine_by_key
from raytide.core.dataflow import Stream
from raytide.core.keyindex import concat
from raytide.core.step import Step
from raytide.graph.edges import (
    CHANGED_OR_NEW,
    as_pairs,
    both_directions,
    changed_rows,
    mark_changed,
    mark_new,
    narrow,
    spread,
    useful_offers,
)
from raytide.graph.forest_components import forest_components


def own_id(keys: np.ndarray) -> np.ndarray:
    """A new node's label: its own id."""
    return keys.astype(np.int64)


def propagate(s: Step) -> tuple[dict[str, np.ndarray], None]:
    """One round at one replica, run to a local fixpoint: the offers to neighbours held
    elsewhere; the nodes whose label is new or dropped are marked."""
    label = s.state["label"]
    added, rows = s.added.get(0, (np.empty(0, dtype=np.int64), {}))
    targets, offers = ([rows["dst"]], [label[added]]) if len(added) else ([], [])
    changed = settle(s, s.slots, s.values["label"], targets, offers)
    mark_new(s, added)  # a new node reports its label (its id, unless it drops) in its first epoch
    mark_changed(s, changed)
    return useful_offers(s, "label", concat(targets), concat(offers)), None


def settle(s: Step, slots: np.ndarray, values: np.ndarray, targets: list[np.ndarray],
           offers: list[np.ndarray]) -> np.ndarray:
    """Offers ``values`` to the nodes at ``slots`` taken where lower, and each label that
    drops offered on at once to the neighbours held at this replica, until none drops: the
    round's local fixpoint, so only offers to other replicas wait for the next round (one
    hop each); a wide wave goes on as messages instead (:func:`~raytide.graph.edges.narrow`).
    Appends those offers (ids and labels) to ``targets`` and ``offers``; returns the slots
    whose label dropped."""
    label, changed = s.state["label"], []
    held = [s.lookup(t) for t in targets]
    slots = concat([slots] + [at[at >= 0] for at in held])
    values = concat([values] + [o[at >= 0] for o, at in zip(offers, held)])
    targets[:] = [t[at < 0] for t, at in zip(targets, held)]
    offers[:] = [o[at < 0] for o, at in zip(offers, held)]
    while len(slots):
        keys, smallest = combine_by_key(slots, {"label": values}, {"label": np.minimum})
        lower = smallest["label"] < label[keys]
        took = keys[lower]
        label[took] = smallest["label"][lower]
        changed.append(took)
        ids, values = spread(s, took, label[took])
        slots = s.lookup(ids) if narrow(took, len(label)) else np.full(len(ids), -1)  # wide: all as messages
        targets.append(ids[slots < 0])
        offers.append(values[slots < 0])
        values = values[slots >= 0]
        slots = slots[slots >= 0]
    return concat(changed)


def connected_components(edges: Stream | Collection, *, name: str = "components") -> Stream | Collection:
    """Per epoch, ``(node, label)`` rows (an ``(n, 2)`` array batch) for every node whose label is new
    or dropped in the epoch: the smallest label per node over epochs ``0..e`` is the smallest node id
    of its component in the graph of the edges of epochs ``0..e``.

    ``edges``: batches of columns ``src`` and ``dst`` (direction ignored). Given a
    :class:`~raytide.core.collection.Collection` of ``(u, v)`` edges instead (integer node
    ids), inserted and deleted, returns the collection of ``(node, label)`` kept up to date:
    a deleted edge may split a component (:mod:`raytide.graph.forest_components`).
    """
    if isinstance(edges, Collection):
        return forest_components(edges, name)
    changes = edges.map_batches(both_directions, name=f"{name}.both-directions").iterate_columns(
        propagate, key="node", state={"label": (np.int64, own_id), "changed": CHANGED_OR_NEW},
        combine={"label": np.minimum}, arrange="src", name=name, finish=changed_rows("label"),
        repeatable_rounds=True)
    assert isinstance(changes, Stream)
    return changes.map_batches(lambda b: as_pairs(b, "label"), name=f"{name}.pairs")
