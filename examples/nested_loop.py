"""Nested loops: connected components at rising edge-weight thresholds (single-linkage levels).

    python examples/nested_loop.py [--nodes 2000] [--edges 3000] [--thresholds 0.2,0.4,0.6,0.8,1.0]

Given weighted undirected edges and thresholds ``t_0 < t_1 < ...``, level ``r`` is the
partition into connected components of the graph of the edges with weight ``<= t_r``
(the levels of single-linkage clustering). :func:`levels_reference` computes them in
plain Python (union-find on dicts), level after level.

The dataflow nests two loops:

* the outer loop counts levels. At outer iteration ``r`` the vertex
  :class:`ThresholdSplit` admits the edges of weight ``<= t_r`` (as both directed edges)
  and feeds the heavier ones back to iteration ``r + 1`` (the outer feedback's
  ``max_iterations`` is the number of thresholds, so edges above the last one drop out);
* the inner loop, inside the outer one, is label propagation to a fixed point, with
  timestamps ``(epoch, (r, i))``: the vertex :class:`LabelPropagation` is notified once
  round ``i`` of level ``r`` is complete, keeps the smallest label offered to each of
  its nodes and offers every lowered label to the node's neighbours. It keeps labels
  and neighbours across outer iterations, so level ``r`` starts from level ``r - 1``'s
  fixed point and only propagates what the newly admitted edges change.

Loop counters compare lexicographically, so ``(r, 7) < (r + 1, 0)``: the inner fixed
point of level ``r`` completes (its notifications are delivered) before level ``r + 1``
starts -- the nesting itself orders the levels, no driver coordination is needed
(unlike epochs, see ``examples/connected_components.py``). The label changes leave
both loops tagged with their loop counters; level ``r``'s labels are the changes of
outer iterations ``0 .. r`` folded together.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

import raytide as rt


class ThresholdSplit(rt.Vertex):
    """Admits the edges of level ``r`` and feeds the heavier ones back to level ``r + 1``.

    At outer iteration ``r``, edges ``(u, v, weight)`` of weight ``<= thresholds[r]`` go to
    output 0 as ``(u, v)`` and ``(v, u)``, the others to output 1.
    """

    def __init__(self, thresholds: Sequence[float]) -> None:
        self.thresholds = list(thresholds)

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        level = time.counters[-1]
        admitted = [(u, v) for u, v, weight in message if weight <= self.thresholds[level]]
        heavier = [e for e in message if e[2] > self.thresholds[level]]
        if admitted:
            self.send_by(0, admitted + [(v, u) for u, v in admitted], time)
        if heavier and level + 1 < len(self.thresholds):
            self.send_by(1, heavier, time)


class LabelPropagation(rt.Vertex):
    """Owns the nodes the exchange routes here (by node id): their labels and neighbours, across levels.

    Input 0: the edges ``(node, neighbour)`` admitted at level ``r``, at ``(r, 0)``; input 1:
    offers ``(node, label)`` from the round before. Output 0: offers for the next round;
    output 1: ``(loop counters, node, label)`` for every new or lowered label.
    """

    def __init__(self) -> None:
        self.labels: dict[int, int] = {}
        self.neighbours: dict[int, list[int]] = defaultdict(list)
        self.inbox: dict[rt.Timestamp, tuple[list, list]] = {}

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        if time not in self.inbox:
            self.inbox[time] = ([], [])
            self.notify_at(time)  # on_notify(time) runs once this round's records have all arrived
        self.inbox[time][edge].extend(message)

    def on_notify(self, time: rt.Timestamp) -> None:
        edges, offers = self.inbox.pop(time)
        changed: dict[int, int] = {}
        sends = []
        for node, neighbour in edges:
            if node not in self.labels:
                self.labels[node] = changed[node] = node  # a new node: its own id
            elif node not in changed:
                sends.append((neighbour, self.labels[node]))  # a known node offers its label over a new edge
            self.neighbours[node].append(neighbour)
        for node, label in offers:
            if label < self.labels[node]:
                self.labels[node] = changed[node] = label  # the smallest offer below the label wins
        sends += [(n, label) for node, label in changed.items() for n in self.neighbours[node]]
        if sends:
            self.send_by(0, sends, time)
        if changed:
            self.send_by(1, [(time.counters, node, label) for node, label in changed.items()], time)


def build_flow(thresholds: Sequence[float], parallelism: int = 2) -> rt.Dataflow:
    """Input ``edges`` (``(u, v, weight)``), output ``labels`` (``(counters, node, label)`` changes)."""
    flow = rt.Dataflow("threshold-components", parallelism=parallelism)
    outer = flow.loop("levels")
    heavier = outer.feedback(max_iterations=len(thresholds), name="heavier-edges")
    at_level = outer.enter(flow.input("edges")).concat(heavier.stream)
    admitted, rest = flow.vertex(lambda: ThresholdSplit(thresholds), [at_level], outputs=2, name="split")
    heavier.connect(rest)
    inner = outer.loop("propagate")
    offers = inner.feedback(name="offers")
    to_next, changes = flow.vertex(LabelPropagation, [inner.enter(admitted), offers.stream], outputs=2,
                                   exchange=[first, first], name="label-propagation")
    offers.connect(to_next)
    outer.leave(inner.leave(changes)).output("labels")
    return flow


def first(record: tuple) -> Any:
    """The key both inputs of the propagation are exchanged by: the node a record is about."""
    return record[0]


def threshold_levels(edges: np.ndarray, weights: np.ndarray, thresholds: Sequence[float], parallelism: int = 2,
                     timeout: float = 600.0) -> tuple[list[dict[int, int]], list[tuple]]:
    """Per threshold, ``{node: smallest node id of its component}`` over the nodes of the admitted edges.

    Also returns the label changes ``(counters, node, label)``; the counters are ``(level, round)``.
    """
    if list(thresholds) != sorted(thresholds):
        raise ValueError("thresholds must be increasing")
    weighted = [(int(u), int(v), float(w)) for (u, v), w in zip(np.asarray(edges).reshape(-1, 2).tolist(), weights)]
    with rt.run(build_flow(thresholds, parallelism), parallelism=parallelism) as job:
        job.push("edges", weighted)
        job.close("edges")
        job.wait(timeout=timeout)
        changes = job.collect("labels").get(0, [])
    levels: list[dict[int, int]] = []
    labels: dict[int, int] = {}
    for level in range(len(thresholds)):
        for _, node, label in (c for c in changes if c[0][0] == level):
            labels[node] = min(label, labels.get(node, label))
        levels.append(dict(labels))
    return levels, changes


def levels_reference(edges: Sequence[tuple[int, int]], weights: Sequence[float],
                     thresholds: Sequence[float]) -> list[dict[int, int]]:
    """Plain Python: union-find over the edges admitted so far, one level per threshold."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pending = sorted(zip([float(w) for w in weights], [(int(u), int(v)) for u, v in edges]))
    levels, position = [], 0
    for threshold in thresholds:
        while position < len(pending) and pending[position][0] <= threshold:
            u, v = pending[position][1]
            position += 1
            parent.setdefault(u, u)
            parent.setdefault(v, v)
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[max(ru, rv)] = min(ru, rv)  # the smaller root wins: roots are component minima
        levels.append({node: find(node) for node in parent})
    return levels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Connected components at rising weight thresholds (nested loops).")
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--edges", type=int, default=3_000)
    parser.add_argument("--thresholds", default="0.2,0.4,0.6,0.8,1.0")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    rng = np.random.default_rng(args.seed)
    edges = rng.integers(0, args.nodes, size=(args.edges, 2))
    weights = rng.random(len(edges))
    levels, changes = threshold_levels(edges, weights, thresholds, args.parallelism)
    reference = levels_reference(edges.tolist(), weights.tolist(), thresholds)
    for level, (threshold, labels) in enumerate(zip(thresholds, levels)):
        rounds = {c[0][1] for c in changes if c[0][0] == level}
        print(f"weight <= {threshold:.2f}: {len(labels)} nodes, {sum(n == lab for n, lab in labels.items())} components, "
              f"labels changed in {len(rounds)} inner rounds, matches plain Python: {labels == reference[level]}")
    return 0 if levels == reference else 1


if __name__ == "__main__":
    sys.exit(main())
