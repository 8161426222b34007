"""Graph algorithms on collections: kept up to date as edges are inserted *and deleted*.

Each is an :meth:`~raytide.core.collection.Collection.iterate` of differential dataflow's
classic form: a node's distance at the next iteration is the smallest of its own start and
what its neighbours offer, so after an epoch's changes only the values those changes
reach are redone, iteration by iteration, and a deleted edge takes back what it carried
(a node too far from the source loses its distance). A node without edges is in no
result. PageRank (:func:`ranks`) runs a fixed number of rounds instead of to a fixpoint.
Connected components have a vectorised loop of their own
(:mod:`raytide.graph.forest_components`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

from raytide.core.collection import Collection


def distances(edges: Collection, source: Hashable, directed: bool, name: str) -> Collection:
    """``(node, hops)`` from ``source`` (a weight as a record's third element counts instead of 1)."""
    arcs = edges if directed else edges.flat_map(_both_directions_weighted, name=f"{name}.both-directions")
    start = arcs.map(_source, name=f"{name}.sources").distinct(name=f"{name}.nodes") \
        .filter(lambda node: node == source, name=f"{name}.source").map(_at_zero, name=f"{name}.start")

    def nearest_offer(reached: Collection) -> Collection:
        offers = reached.join(arcs, _first, _first, name=f"{name}.offers").map(_step, name=f"{name}.offer")
        return offers.concat(start).reduce(_first, _smallest, name=f"{name}.nearest")

    return start.iterate(nearest_offer, name=name)


def ranks(edges: Collection, iterations: int, damping: float, name: str) -> Collection:
    """``(node, rank)`` after ``iterations`` rounds of unnormalised PageRank over directed edges ``(u, v)``.

    Every node (an end of an edge) starts at 1; a round gives each ``(1 - damping) + damping
    * sum(rank(u) / out-degree(u))`` over its in-edges. Sums are exactly rounded
    (``math.fsum``), so a rank does not depend on the order its shares come in.
    """
    nodes = edges.flat_map(_ends, name=f"{name}.ends").distinct(name=f"{name}.nodes")
    degrees = edges.count(_source, name=f"{name}.out-degrees")
    start = nodes.map(_at_one, name=f"{name}.start")
    present = nodes.map(_at_zero_share, name=f"{name}.present")

    def one_round(rank: Collection) -> Collection:
        shares = rank.join(degrees, _first, _first, name=f"{name}.shares").map(_share, name=f"{name}.share")
        spread = shares.join(edges, _first, _source, name=f"{name}.spread").map(_along, name=f"{name}.along")
        return spread.concat(present).reduce(_first, _damped(damping), name=f"{name}.sum")

    return start.iterate(one_round, max_iterations=iterations, name=name)


def _ends(edge: tuple) -> list:
    return [edge[0], edge[1]]


def _at_one(node: Any) -> tuple:
    return (node, 1.0)


def _at_zero_share(node: Any) -> tuple:
    return (node, 0.0)


def _share(joined: tuple) -> tuple:
    """``(u, ((u, rank), (u, degree)))`` -> ``(u, rank / degree)``."""
    node, ((_, rank), (_, degree)) = joined
    return (node, rank / degree)


def _along(joined: tuple) -> tuple:
    """``(u, ((u, share), edge))`` -> ``(edge's head, share)``."""
    _, ((_, share), edge) = joined
    return (edge[1], share)


def _damped(damping: float) -> Callable[[Any, list], list]:
    def rank_of(node: Any, shares: list[tuple]) -> list[tuple]:
        return [(node, (1.0 - damping) + damping * math.fsum(share for _, share in shares))]

    return rank_of


def _both_directions_weighted(edge: tuple) -> list[tuple]:
    return [edge, (edge[1], edge[0], *edge[2:])]


def _source(edge: tuple) -> Any:
    return edge[0]


def _first(pair: tuple) -> Any:
    return pair[0]


def _at_zero(node: Any) -> tuple:
    return (node, 0)


def _step(joined: tuple) -> tuple:
    """``(node, ((node, hops), arc))`` -> ``(arc's head, hops + its weight)``."""
    _, ((_, hops), arc) = joined
    return (arc[1], hops + (arc[2] if len(arc) > 2 else 1))


def _smallest(node: Any, offers: list[tuple]) -> list[tuple]:
    return [(node, min(value for _, value in offers))]
