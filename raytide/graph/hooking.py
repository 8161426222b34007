"""Spanning forests of an edge list by hooking, vectorised: the deterministic choice every replica
of the replicated spanning forest (``raytide.graph.spanning_forest``) makes the same way."""

from __future__ import annotations

import numpy as np

from raytide.core.keyindex import EMPTY, concat
from raytide.graph.sorted_pairs import renumbered


def roots(parent: np.ndarray) -> np.ndarray:
    """Every node's root under ``parent`` (pointer jumping, only the nodes not there yet; a
    forest's depth halves each step, so more than 64 steps means a cycle: refused)."""
    grand = parent[parent]
    moving = np.flatnonzero(grand != parent)
    grand = grand[moving]
    for _ in range(64):
        if not len(moving):
            return parent
        parent[moving] = grand
        above = parent[grand]
        still = above != grand
        moving, grand = moving[still], above[still]
    raise ValueError(f"the parent links of {len(moving)} nodes form a cycle, not a forest (first: {moving[:3].tolist()})")


def depths(up: np.ndarray, depth: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, their depths)``: the depths under the parent links ``up`` (a root its own parent) of
    ``nodes`` (any order, repeats allowed), which must hold every child of each of them; the
    depths ``depth`` of the other nodes are taken as they are. Each node's distance to the
    first node above it outside ``nodes``, or to its root, by pointer jumping among ``nodes``
    only: a step per doubling of the longest path, whatever the siblings (more than 64 means
    a cycle: refused). ``nodes`` come back sorted, once each."""
    inside = np.zeros(len(up), dtype=bool)
    inside[nodes] = True
    nodes = np.flatnonzero(inside)
    at = np.empty(len(up), dtype=np.int64)
    at[nodes] = np.arange(len(nodes))
    above = up[nodes]
    top, linked = above == nodes, inside[above] & (above != nodes)
    link = np.where(linked, at[above], -1)  # where each is counted from: a node of ``nodes``, or -1 (found)
    value = np.where(linked, 1, np.where(top, 0, depth[above] + 1))
    pending = np.flatnonzero(linked)
    for _ in range(64):
        if not len(pending):
            return nodes, value
        ahead = link[pending]
        value[pending] += value[ahead]
        link[pending] = link[ahead]
        pending = pending[link[pending] >= 0]
    raise ValueError(f"the parent links of {len(pending)} nodes form a cycle, not a forest")


def spanning_forest(count: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chosen, root)``: a spanning forest of the graph of ``count`` nodes and edges ``(a[i], b[i])``,
    as a mask of the edges, and every node's component as its smallest node.

    Each round every root with an edge to another tree hooks to the smallest such root
    (the tie broken by the smaller edge position) through that edge, then the roots are
    found again by pointer jumping. A root hooks only to a smaller one, so the hooks form
    a forest over the trees and each chosen edge joins two trees: the chosen edges are a
    spanning forest, and each tree's root is its smallest node. The result depends only on
    the arrays (their order included), never on timing or on anything else held.
    """
    parent = np.arange(count, dtype=np.int64)
    chosen = np.zeros(len(a), dtype=bool)
    edge = np.arange(len(a), dtype=np.int64)
    none = np.iinfo(np.int64).max
    while len(edge):
        ra, rb = parent[a], parent[b]
        crossing = ra != rb
        edge, a, b, ra, rb = edge[crossing], a[crossing], b[crossing], ra[crossing], rb[crossing]
        if not len(edge):
            break
        high, low = np.maximum(ra, rb), np.minimum(ra, rb)
        best = np.full(count, none, dtype=np.int64)
        np.minimum.at(best, high, low * len(chosen) + edge)
        hooked = np.flatnonzero(best != none)
        parent[hooked] = best[hooked] // len(chosen)
        chosen[best[hooked] % len(chosen)] = True
        parent = roots(parent)
    return chosen, parent


def joining(root: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(chosen, touched, top)``: the edges ``(a, b)`` that join different components of ``root``
    (a mask: a spanning forest of them over the components), the components they touch (sorted)
    and each one's component once joined (``touched[top]``, its smallest), with no pass over the nodes."""
    chosen = np.zeros(len(a), dtype=bool)
    ra, rb = root[a], root[b]
    crossing = np.flatnonzero(ra != rb)
    if not len(crossing):
        return chosen, EMPTY, EMPTY
    touched, dense = renumbered(concat([ra[crossing], rb[crossing]]), len(root))
    picked, top = spanning_forest(len(touched), dense[: len(crossing)], dense[len(crossing):])
    chosen[crossing[picked]] = True
    return chosen, touched, top
