"""Single-source shortest paths (Bellman-Ford rounds) over columnar state; BFS is the unit-weight case.

A node's distance starts at infinity, the source's at 0. A node whose distance drops
offers ``distance + weight`` along its out-edges; offers are combined to the minimum per
node before the exchange. New edges of a later epoch offer from their source's current
distance, so epochs are incremental. Weights must be non-negative (a negative cycle would
never stop).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from raytide.core.collection import Collection
from raytide.core.dataflow import Stream
from raytide.core.keyindex import concat
from raytide.core.step import Step
from raytide.graph.edges import CHANGED, as_pairs, both_directions, changed_rows, mark_changed, spread, useful_offers
from raytide.graph.incremental import distances


def unit_weights(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Edges with weight 1 where they have none (BFS: distances are hop counts)."""
    if "weight" in batch:
        return batch
    return {**batch, "weight": np.ones(len(batch["src"]), dtype=np.float64)}


def relaxing(source: int) -> Callable[[Step], tuple[dict[str, np.ndarray], None]]:
    """The step of shortest paths from ``source``: the offers; the nodes brought nearer are marked."""

    def relax(s: Step) -> tuple[dict[str, np.ndarray], None]:
        dist = s.state["distance"]
        keys, slots, values = s.keys, s.slots, s.values["distance"].astype(np.float64)
        start = np.flatnonzero(s.ids == source)
        if len(start) and dist[start[0]] == np.inf:  # the source, first seen here: distance 0
            keys, slots, values = np.append(keys, source), np.append(slots, start), np.append(values, 0.0)
        lower = values < dist[slots]
        changed, shorter = slots[lower], values[lower]
        dist[changed] = shorter
        added, rows = s.added.get(0, (np.empty(0, dtype=np.int64), {}))
        reached = np.isfinite(dist[added])  # new edges from reached nodes offer at once
        targets = [rows["dst"][reached]] if len(added) else []
        offers = [dist[added[reached]] + rows["weight"][reached]] if len(added) else []
        more_targets, more_offers = spread(s, changed, shorter, weighted=True)
        mark_changed(s, changed)
        return useful_offers(s, "distance", concat(targets + [more_targets]), concat(offers + [more_offers])), None

    return relax


def shortest_paths(edges: Stream | Collection, source: int, *, directed: bool = True,
                   name: str = "paths") -> Stream | Collection:
    """Per epoch, ``(node, distance)`` rows (an ``(n, 2)`` float array batch) for every node reached or
    brought nearer in the epoch: the smallest distance per node over epochs ``0..e`` is its distance
    from ``source`` in the graph of the edges of epochs ``0..e``.

    ``edges``: batches of columns ``src``, ``dst`` and optionally ``weight`` (non-negative; 1 if absent).
    Given a :class:`~raytide.core.collection.Collection` of edges ``(u, v)`` or ``(u, v, weight)``
    instead, inserted and deleted, returns the collection of ``(node, distance)`` kept up to
    date (a node cut off from the source loses its distance).
    """
    if isinstance(edges, Collection):
        return distances(edges, source, directed, name)
    weighted = edges.map_batches(unit_weights, name=f"{name}.weights")
    if not directed:
        weighted = weighted.map_batches(both_directions, name=f"{name}.both-directions")
    changes = weighted.iterate_columns(
        relaxing(source), key="node", state={"distance": (np.float64, np.inf), "changed": CHANGED},
        combine={"distance": np.minimum}, arrange="src", name=name, finish=changed_rows("distance"),
        repeatable_rounds=True)
    assert isinstance(changes, Stream)
    return changes.map_batches(lambda b: as_pairs(b, "distance"), name=f"{name}.pairs")
