"""Connected components kept up to date as edges arrive, with raytide's graph layer.

    python examples/connected_components.py [--nodes 5000] [--edges 5000] [--epochs 4] [--parallelism 2]
    ray job submit --working-dir . -- python examples/connected_components.py

``rt.graph.connected_components`` is label propagation in a loop: every node starts with
its own id as label, a node whose label drops offers it to its neighbours, and when no
label drops the loop drains and the epoch is complete. The edges enter the loop once and
stay there, arranged by source (a CSR per replica); the labels are NumPy columns that live
across epochs, so epoch ``e``'s edges start from the labels of the edges before them and
only the labels they lower move again (the work follows the change, not the graph).

``components_by_epoch`` feeds one epoch at a time and waits for its output before pushing
the next, to report each epoch's labels as it comes. What a caller waits for stays
vectorised: each epoch's edges go as one array per input replica, its changed labels come
back as one ``(n, 2)`` array and are folded into NumPy arrays (:class:`ComponentLabels`,
read as a dict), and the records handled are counted (``job.stats()``) only when asked. A driver may also push every epoch at
once: the loop's epoch gate admits epoch ``e + 1`` once nothing of epoch ``e`` is left in
it, so each epoch's labels are the same (docs/iteration.md).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

import raytide as rt
from raytide.graph import connected_components, edge_columns


def build_flow(parallelism: int = 2) -> rt.Dataflow:
    """Input ``edges`` (``(u, v)`` pairs, direction ignored); output ``labels`` (``(node, label)`` pairs)."""
    flow = rt.Dataflow("connected-components", parallelism=parallelism)
    edges = flow.input("edges").map_batches(edge_columns, name="edge-columns")
    connected_components(edges, name="label-propagation").output("labels")
    return flow


class ComponentLabels(Mapping[int, int]):
    """``{node: label}`` held as two NumPy arrays (nodes sorted, their labels): made from an
    epoch's ``(n, 2)`` array of changed labels with a few vectorised calls, where a dict would
    take a Python step per node. Reads like a dict and equals one with the same items."""

    def __init__(self, nodes: np.ndarray | None = None, labels: np.ndarray | None = None) -> None:
        self.nodes = np.empty(0, dtype=np.int64) if nodes is None else nodes
        self.labels = np.empty(0, dtype=np.int64) if labels is None else labels

    def lowered(self, pairs: np.ndarray) -> ComponentLabels:
        """These labels with ``pairs`` (rows ``(node, label)``) folded in, a new node added and
        a known one keeping the smaller label (labels only drop); ``self`` is left as it is."""
        if not len(pairs):
            return self
        order = np.lexsort((pairs[:, 1], pairs[:, 0]))  # by node, then label: each node's smallest first
        nodes, labels = pairs[order, 0], pairs[order, 1]
        first = np.ones(len(nodes), dtype=bool)
        first[1:] = nodes[1:] != nodes[:-1]
        nodes, labels = nodes[first], labels[first]
        at = np.searchsorted(self.nodes, nodes)
        known = at < len(self.nodes)
        known[known] = self.nodes[at[known]] == nodes[known]
        kept = self.labels.copy()
        kept[at[known]] = np.minimum(kept[at[known]], labels[known])
        where = np.searchsorted(self.nodes, nodes[~known])
        return ComponentLabels(np.insert(self.nodes, where, nodes[~known]), np.insert(kept, where, labels[~known]))

    def components(self) -> int:
        """How many components: the nodes that are their own label (their component's smallest id)."""
        return int(np.count_nonzero(self.nodes == self.labels))

    def __getitem__(self, node: int) -> int:
        at = int(np.searchsorted(self.nodes, node))
        if at == len(self.nodes) or self.nodes[at] != node:
            raise KeyError(node)
        return int(self.labels[at])

    def __iter__(self) -> Iterator[int]:
        return iter(self.nodes.tolist())

    def __len__(self) -> int:
        return len(self.nodes)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ComponentLabels):
            return np.array_equal(self.nodes, other.nodes) and np.array_equal(self.labels, other.labels)
        if not isinstance(other, Mapping):
            return False
        theirs = other if isinstance(other, dict) else dict(other.items())  # a dict is compared as it is, not copied
        return dict(zip(self.nodes.tolist(), self.labels.tolist())) == theirs

    __hash__ = None  # type: ignore[assignment]  # mutable-looking mapping: not hashable, as a dict


def components_by_epoch(epochs: Sequence[Sequence[tuple[int, int]]] | Sequence[np.ndarray], parallelism: int = 2,
                        timeout: float = 600.0, records: bool = False) -> Iterator[tuple[ComponentLabels, int | None]]:
    """Push ``epochs[e]`` as epoch ``e``, one epoch at a time; yield ``(labels so far, records handled)`` after each.

    ``labels`` maps every node of the edges so far to the smallest node id of its
    component (a :class:`ComponentLabels`, read as a dict); ``records`` counts the records
    the label propagation handled in the epoch when asked (``records=True``: a
    ``job.stats()`` call per epoch, which waits on every replica), else None. Each epoch's
    edges go to the input replicas as one array per replica.
    """
    arrays = [np.asarray(edges, dtype=np.int64).reshape(-1, 2) for edges in epochs]
    labels, handled = ComponentLabels(), 0
    batch_size = max(1, -(-max((len(a) for a in arrays), default=1) // parallelism))
    with rt.run(build_flow(parallelism), parallelism=parallelism, batch_size=batch_size) as job:
        results = job.results("labels", timeout=timeout, batch_format="numpy")  # an (n, 2) array per epoch
        for epoch, edges in enumerate(arrays):
            if len(edges):
                job.push("edges", edges, epoch)
            job.advance("edges", epoch + 1)
            _, pairs = next(results)  # an epoch without edges comes too, with no labels
            labels = labels.lowered(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
            count = None
            if records:
                total = job.stats()["vertices"]["label-propagation"]["records_in"]
                count, handled = total - handled, total
            yield labels, count
        job.close("edges")
        job.wait(timeout=timeout)


class UnionFind:
    """The reference: plain union-find where the smaller root wins, so each root is its
    component's smallest id. Edges may come in several calls (:meth:`add`), so a caller
    checking every epoch adds each epoch's edges once instead of redoing the edges so far."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def root(self, x: int) -> int:
        """``x``'s root, halving the path on the way (each node points to its grandparent)."""
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def add(self, edges: Iterable[tuple[int, int]]) -> UnionFind:
        """Join the ends of every edge of ``edges``; returns ``self``."""
        parent = self.parent
        for u, v in edges:
            parent.setdefault(u, u)
            parent.setdefault(v, v)
            a, b = self.root(u), self.root(v)
            parent[max(a, b)] = min(a, b)
        return self

    def labels(self) -> dict[int, int]:
        """``{node: smallest id of its component}`` for every node of the edges so far."""
        return {x: self.root(x) for x in self.parent}


def union_find(edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """:class:`UnionFind`'s labels of ``edges``."""
    return UnionFind().add(edges).labels()


def split_epochs(edges: list[tuple[int, int]], epochs: int) -> list[list[tuple[int, int]]]:
    """Epoch 0 takes 90% of the edges and the other epochs share the rest, so that they show incremental work."""
    first = len(edges) * 9 // 10 if epochs > 1 else len(edges)
    bounds = [0] + [first + (len(edges) - first) * k // max(epochs - 1, 1) for k in range(epochs)]
    return [edges[a:b] for a, b in itertools.pairwise(bounds)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="node ids are 0 .. nodes-1 (default 5000)")
    parser.add_argument("--edges", type=int, default=5000, help="random edges (default 5000)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs the edges arrive in (default 4): the first takes 90%% of them")
    parser.add_argument("--parallelism", type=int, default=2, help="replicas per operator (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pairs = np.random.default_rng(args.seed).integers(0, args.nodes, size=(args.edges, 2)).tolist()
    edges = [(u, v) for u, v in pairs]
    epochs = split_epochs(edges, args.epochs)
    reference, ok = UnionFind(), True
    for epoch, (labels, records) in enumerate(components_by_epoch(epochs, args.parallelism, records=True)):
        matches = labels == reference.add(epochs[epoch]).labels()  # the reference takes each epoch's edges once
        ok = ok and matches
        print(f"epoch {epoch}: {len(epochs[epoch])} new edges, {records} records handled, "
              f"{labels.components()} components, matches union-find: {matches}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
