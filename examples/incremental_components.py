"""Connected components of a graph whose edges are inserted *and deleted*, kept up to date.

    python examples/incremental_components.py [--nodes 2000] [--edges 4000] [--epochs 5] [--parallelism 2]

The edges are a collection: each epoch pushes updates ``((u, v), +1)`` (an edge added) and
``((u, v), -1)`` (an edge removed), as pairs or as a column batch ``{"src": us, "dst": vs,
"diff": ds}``. ``rt.graph.connected_components`` on a collection keeps a spanning forest of the graph
(``raytide.graph.forest_components``): a node's label is the smallest id of its component;
an epoch's deleted forest edges cut the forest, the parts cut off hang back by other edges
found at their nodes, and only the nodes whose label changed are shown again, so a
component that loses its bridge splits. The output
``labels`` is, per epoch, the changes ``((node, label), diff)``; ``rt.accumulate`` folds
them into the labels.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator, Sequence

import raytide as rt
from raytide.graph import connected_components

Edge = tuple[int, int]


def build_flow(parallelism: int = 2) -> rt.Dataflow:
    """Collection input ``edges`` (``((u, v), diff)``); output ``labels`` (changes ``((node, label), diff)``)."""
    flow = rt.Dataflow("incremental-components", parallelism=parallelism)
    labels = connected_components(flow.collection("edges"), name="components")
    assert isinstance(labels, rt.Collection)
    labels.output("labels")
    return flow


def labels_by_epoch(epochs: Sequence[Sequence[tuple[Edge, int]]], parallelism: int = 2,
                    timeout: float = 600.0) -> Iterator[dict[int, int]]:
    """Push ``epochs[e]`` (updates ``((u, v), diff)``) as epoch ``e``, all at once; yield after each
    epoch the ``{node: label}`` of the graph of the edges present then (a node without edges is absent)."""
    contents: dict = {}
    with rt.run(build_flow(parallelism), parallelism=parallelism) as job:
        for epoch, updates in enumerate(epochs):
            job.push("edges", list(updates), epoch)
        job.close("edges")
        for _, changes in job.results("labels", timeout=timeout):
            rt.accumulate(changes, contents)  # {(node, label): 1}
            yield {node: label for node, label in contents}


def random_updates(rng: random.Random, nodes: int, edges: int, epochs: int, churn: float) -> list[list[tuple[Edge, int]]]:
    """A random graph in epoch 0, then per epoch ``churn`` of its edges deleted and as many inserted."""
    present: set[Edge] = set()
    while len(present) < edges:
        present.add((rng.randrange(nodes), rng.randrange(nodes)))
    out = [[(edge, 1) for edge in sorted(present)]]
    for _ in range(1, epochs):
        gone = rng.sample(sorted(present), max(1, int(churn * len(present))))
        present.difference_update(gone)
        new: set[Edge] = set()
        while len(new) < len(gone):
            edge = (rng.randrange(nodes), rng.randrange(nodes))
            if edge not in present:
                new.add(edge)
        present |= new
        out.append([(edge, -1) for edge in gone] + [(edge, 1) for edge in sorted(new)])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--churn", type=float, default=0.01, help="fraction of edges deleted (and inserted) per epoch")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args(argv)
    epochs = random_updates(random.Random(0), args.nodes, args.edges, args.epochs, args.churn)
    start = time.perf_counter()
    for epoch, labels in enumerate(labels_by_epoch(epochs, args.parallelism)):
        print(f"epoch {epoch}: {len(labels)} nodes in {len(set(labels.values()))} components "
              f"({time.perf_counter() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
