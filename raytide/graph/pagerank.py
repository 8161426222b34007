"""PageRank by power iteration over columnar state: a fixed number of synchronous rounds per epoch.

``rank = (1 - damping) + damping * (sum of rank / out-degree over in-edges)``, the
unnormalised form (GraphX's), which needs no global node count. Every node starts at 1;
each round every node with out-edges sends ``rank / out-degree`` along them, summed per
target before the exchange (one ``np.bincount`` over the arrangement's distinct targets,
:meth:`~raytide.core.arrangement.Arrangement.distinct`, which it keeps until edges are
added), and every node takes its new rank from what it got. Each epoch
recomputes over all the edges so far (they stay arranged in the loop); every replica runs
every round (:meth:`~raytide.core.step.Step.again`), with input or not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from raytide.core.collection import Collection
from raytide.core.dataflow import Stream
from raytide.core.step import Step
from raytide.graph.edges import as_pairs
from raytide.graph.incremental import ranks as incremental_ranks


def rounds(iterations: int, damping: float) -> Callable[[Step], tuple[dict | None, dict | None]]:
    """The step of ``iterations`` PageRank rounds: ``(contributions, final ranks)``."""

    def step(s: Step) -> tuple[dict | None, dict | None]:
        rank = s.state["rank"]
        if s.iteration == 0:
            rank[:] = 1.0
        else:
            rank[:] = 1.0 - damping
            rank[s.slots] += damping * s.values["rank"]  # the updates are one row per node (summed)
        if s.iteration >= iterations:
            return None, {"node": s.ids.copy(), "rank": rank.copy()}
        s.again()
        edges = s.arrangement()
        slots, _ = edges.rows()  # every edge, every round: no lookup of which to spread
        if not len(slots):  # no edges here (yet): nothing to send this round
            return None, None
        share = rank / np.maximum(edges.degrees(len(rank)), 1)
        targets, target_of_edge = edges.distinct("dst")  # summed here, one row per target in key order: no fold after
        return {"node": targets, "rank": np.bincount(target_of_edge, weights=share[slots], minlength=len(targets))}, None

    return step


def pagerank(edges: Stream | Collection, *, iterations: int = 20, damping: float = 0.85,
             name: str = "pagerank") -> Stream | Collection:
    """Per epoch, ``(node, rank)`` rows (an ``(n, 2)`` float array batch) of every node, after
    ``iterations`` rounds over the directed edges of epochs ``0..e``.

    ``edges``: batches of columns ``src`` and ``dst``. Given a
    :class:`~raytide.core.collection.Collection` of edges ``(u, v)`` instead, inserted and
    deleted, returns the collection of ``(node, rank)`` kept up to date: each epoch's
    changes are carried through the rounds, not recomputed from scratch
    (:func:`raytide.graph.incremental.ranks`).
    """
    if isinstance(edges, Collection):
        return incremental_ranks(edges, iterations, damping, name)
    ranks = edges.iterate_columns(rounds(iterations, damping), key="node", state={"rank": (np.float64, 1.0)},
                                  combine={"rank": np.add}, arrange="src", name=name)
    assert isinstance(ranks, Stream)
    return ranks.map_batches(lambda b: as_pairs(b, "rank"), name=f"{name}.pairs")
