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
the next, to report each epoch's labels as it comes. A driver may also push every epoch at
once: the loop's epoch gate admits epoch ``e + 1`` once nothing of epoch ``e`` is left in
it, so each epoch's labels are the same (docs/iteration.md).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator, Sequence

import numpy as np

import raytide as rt
from raytide.graph import connected_components, edge_columns


def build_flow(parallelism: int = 2) -> rt.Dataflow:
    """Input ``edges`` (``(u, v)`` pairs, direction ignored); output ``labels`` (``(node, label)`` pairs)."""
    flow = rt.Dataflow("connected-components", parallelism=parallelism)
    edges = flow.input("edges").map_batches(edge_columns, name="edge-columns")
    connected_components(edges, name="label-propagation").output("labels")
    return flow


def components_by_epoch(epochs: Sequence[Sequence[tuple[int, int]]] | Sequence[np.ndarray], parallelism: int = 2,
                        timeout: float = 600.0) -> Iterator[tuple[dict[int, int], int]]:
    """Push ``epochs[e]`` as epoch ``e``, one epoch at a time; yield ``(labels so far, records handled)`` after each.

    ``labels`` maps every node of the edges so far to the smallest node id of its
    component; ``records`` counts the records the label propagation handled in the epoch.
    """
    labels: dict[int, int] = {}
    handled = 0
    with rt.run(build_flow(parallelism), parallelism=parallelism) as job:
        results = job.results("labels", timeout=timeout)
        for epoch, edges in enumerate(epochs):
            if len(edges):  # an (n, 2) array travels as one buffer, not n tuples
                job.push("edges", np.asarray(edges, dtype=np.int64).reshape(-1, 2), epoch)
            job.advance("edges", epoch + 1)
            _, pairs = next(results)  # an epoch without edges comes too, with no labels
            for node, label in pairs:  # labels only drop: keep the smallest
                labels[node] = min(label, labels.get(node, label))
            total = job.stats()["vertices"]["label-propagation"]["records_in"]
            yield dict(labels), total - handled
            handled = total
        job.close("edges")
        job.wait(timeout=timeout)


def union_find(edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """The reference: plain union-find where the smaller root wins, so each root is its component's smallest id."""
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving: point to the grandparent, then go there
            x = parent[x]
        return x

    for u, v in edges:
        parent.setdefault(u, u)
        parent.setdefault(v, v)
        a, b = root(u), root(v)
        parent[max(a, b)] = min(a, b)
    return {x: root(x) for x in parent}


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
    seen, ok = 0, True
    for epoch, (labels, records) in enumerate(components_by_epoch(epochs, args.parallelism)):
        seen += len(epochs[epoch])
        matches = labels == union_find(edges[:seen])
        ok = ok and matches
        print(f"epoch {epoch}: {len(epochs[epoch])} new edges, {records} records handled, "
              f"{sum(node == label for node, label in labels.items())} components, matches union-find: {matches}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
