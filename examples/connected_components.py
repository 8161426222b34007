"""Connected components by label propagation in a raytide loop, kept up to date as edges arrive.

    python examples/connected_components.py [--nodes 5000] [--edges 5000] [--epochs 4] [--parallelism 2]
    ray job submit --working-dir . -- python examples/connected_components.py

Every node starts with its own id as label. A node that gets a smaller label offers it
to its neighbours, and a node keeps any offer smaller than its label. When no label
drops, nothing is sent: the loop drains, progress tracking sees that the epoch can
produce no more output, and its output is complete. Every label is then the smallest
node id of its component.

The dataflow is three operators: the edges (both directions) enter ``iterate``, whose
body is one ``stateful_map`` keyed by node. Its state, a node's label and neighbours,
lives across epochs, so the components are *incremental*: epoch ``e``'s edges start
from the labels of the edges before them, and only the labels they lower move again --
the work of an epoch follows what changes, not the size of the graph.

The driver feeds one epoch at a time and waits for its output before pushing the next:
inside the loop ``(e, (5,))`` and ``(e + 1, (0,))`` are incomparable timestamps, so
without the wait the labels of one epoch could already hold the edges of the next.
``bench/workloads/components.py`` is this algorithm vectorised, for the benchmark.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator, Sequence

import numpy as np

import raytide as rt

Record = tuple[int, str, int]  # (node, kind, value): an "edge" to a neighbour, an "offer" or a "label"


def visit(state: tuple[int, list[int]] | None, record: Record) -> tuple[tuple[int, list[int]], list[Record]]:
    """Label propagation at one node, one record at a time; the state is the node's ``(label, neighbours)``.

    Returns the new state and the records it makes: offers ``(neighbour, "offer", label)``
    for the next round and ``(node, "label", label)`` for the output.
    """
    node, kind, value = record
    label, neighbours = state if state is not None else (node, [])  # a new node: its own id
    if kind == "edge":  # a new neighbour: offer it our label
        neighbours.append(value)
        return (label, neighbours), [(node, "label", label), (value, "offer", label)]
    if value < label:  # a smaller label: keep it and offer it to every neighbour
        return (value, neighbours), [(node, "label", value)] + [(n, "offer", value) for n in neighbours]
    return (label, neighbours), []


def propagate(records: rt.Stream) -> tuple[rt.Stream, rt.Stream]:
    """One round: ``(offers, fed back to the next round; labels, which leave the loop)``."""
    made = records.stateful_map(lambda r: r[0], visit, name="label-propagation").flat_map(lambda pair: pair[1])
    return made.filter(lambda r: r[1] == "offer"), made.filter(lambda r: r[1] == "label")


def build_flow(parallelism: int = 2) -> rt.Dataflow:
    """Input ``edges`` (``(u, v)`` pairs, direction ignored); output ``labels`` (``(node, label)`` pairs)."""
    flow = rt.Dataflow("connected-components", parallelism=parallelism)
    edges = flow.input("edges").flat_map(lambda e: [(e[0], "edge", e[1]), (e[1], "edge", e[0])])
    edges.iterate(propagate).map(lambda r: (r[0], r[2])).output("labels")
    return flow


def components_by_epoch(epochs: Sequence[list[tuple[int, int]]], parallelism: int = 2,
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
            job.push("edges", edges, epoch)
            job.advance("edges", epoch + 1)
            if edges:  # an epoch without edges has no output to wait for
                _, pairs = next(results)
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
