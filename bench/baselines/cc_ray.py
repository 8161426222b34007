"""Connected components by label propagation on hand-written Ray actors, plus a union-find reference.

Every node starts with its own id as label; in each round every node takes the minimum of
its label and its neighbours' labels (synchronously: all proposals of a round read the
labels of the previous round). At the fixed point a node's label is the smallest node id
of its component, which :func:`components_union_find` computes directly.

:func:`connected_components_ray` partitions the undirected edges into ``n_actors``
contiguous slices, one per :class:`EdgeSliceActor`. Each actor stores both directions of
its edges sorted by target node once, so that a round is one gather plus one
``np.minimum.reduceat``. The driver coordinates rounds: it puts the label array in the
object store once per round, each actor returns only the (node, label) pairs that would
lower a label, and the driver applies them. Rounds repeat until a round changes nothing
(that last, confirming round is counted).
"""

from __future__ import annotations

import time

import numpy as np
import ray


def components_union_find(nodes: int, edges: np.ndarray) -> np.ndarray:
    """Connected components with union-find (path halving; the smaller root wins).

    Args:
        nodes: Number of nodes; ids are ``0 .. nodes - 1``.
        edges: Integer array of shape ``(E, 2)``; direction is ignored.

    Returns:
        An ``int64`` array: ``labels[v]`` is the smallest node id in ``v``'s component.
    """
    parent = list(range(nodes))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in np.asarray(edges).reshape(-1, 2).tolist():
        ru, rv = find(u), find(v)
        if ru < rv:
            parent[rv] = ru
        elif rv < ru:
            parent[ru] = rv
    return np.fromiter((find(x) for x in range(nodes)), dtype=np.int64, count=nodes)


class EdgeIndex:
    """Both directions of some undirected edges, grouped by target node for fast min-gathers."""

    def __init__(self, edges: np.ndarray) -> None:
        """Build the index.

        Args:
            edges: Integer array of shape ``(E, 2)``.
        """
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        src = np.concatenate([edges[:, 0], edges[:, 1]])
        dst = np.concatenate([edges[:, 1], edges[:, 0]])
        order = np.argsort(dst, kind="stable")
        dst = dst[order]
        self.sources = src[order]
        self.targets, self.starts = np.unique(dst, return_index=True)

    def propose(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Neighbour-minimum labels that are smaller than the current ones.

        Args:
            labels: Current label of every node.

        Returns:
            ``(nodes, new_labels)``: distinct nodes whose smallest neighbour label (over
            these edges) is below their label, and that smaller label.
        """
        if self.targets.size == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        best = np.minimum.reduceat(labels[self.sources], self.starts)
        lower = best < labels[self.targets]
        return self.targets[lower], best[lower]


@ray.remote
class EdgeSliceActor:
    """Holds one slice of the edges and proposes label updates for it."""

    def __init__(self, edges: np.ndarray) -> None:
        self._index = EdgeIndex(edges)

    def ready(self) -> bool:
        """Return once the index is built."""
        return True

    def propose(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`EdgeIndex.propose`."""
        return self._index.propose(labels)


def apply_proposals(labels: np.ndarray, proposals: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Lower ``labels`` in place with every actor's proposals; True if any label changed."""
    changed = False
    for idx, values in proposals:
        if idx.size:
            labels[idx] = np.minimum(labels[idx], values)
            changed = True
    return changed


def connected_components_ray(
    nodes: int, edges: np.ndarray, n_actors: int = 2, max_rounds: int = 10_000
) -> tuple[np.ndarray, int, list[float]]:
    """Label-propagation connected components on ``n_actors`` Ray actors.

    Expects Ray to be initialised. Actor start-up and index building happen before the
    first round and are not in the per-round times; the caller times the whole call.

    Args:
        nodes: Number of nodes; ids are ``0 .. nodes - 1``.
        edges: Integer array of shape ``(E, 2)`` of undirected edges.
        n_actors: Actors, each holding a contiguous slice of ``edges``.
        max_rounds: Safety cap on rounds.

    Returns:
        ``(labels, rounds, seconds_per_round)``: ``labels[v]`` is the smallest node id of
        ``v``'s component; ``rounds`` counts every round run, including the last one, which
        changed nothing; ``seconds_per_round`` has ``rounds`` wall-clock durations.
    """
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    actors = [EdgeSliceActor.remote(part) for part in np.array_split(edges, n_actors)]
    try:
        ray.get([a.ready.remote() for a in actors])
        labels, seconds = propagation_rounds(actors, nodes, max_rounds)
        return labels, len(seconds), seconds
    finally:
        for actor in actors:
            ray.kill(actor)


def propagation_rounds(actors: list, nodes: int, max_rounds: int = 10_000) -> tuple[np.ndarray, list[float]]:
    """The driver's rounds over actors with a ``propose`` method: ``(labels, seconds per round)``.

    Each round puts the label array in the object store once, gathers every actor's
    proposals and applies them; the round that changes nothing is the last one.
    """
    labels = np.arange(nodes, dtype=np.int64)
    seconds: list[float] = []
    while len(seconds) < max_rounds:
        started = time.perf_counter()
        labels_ref = ray.put(labels)
        changed = apply_proposals(labels, ray.get([a.propose.remote(labels_ref) for a in actors]))
        seconds.append(time.perf_counter() - started)
        if not changed:
            break
    return labels, seconds
