"""PageRank by power iteration in a raytide loop, vectorised with NumPy.

    python examples/pagerank.py [--nodes 10000] [--edges 50000] [--iterations 20] [--parallelism 2]

The graph is directed, nodes are ``0 .. N - 1`` and every node starts with rank ``1 / N``.
One iteration computes, for every node ``v``::

    rank'(v) = (1 - d) / N + d * (sum over edges u -> v of rank(u) / outdeg(u) + D / N)

with damping ``d = 0.85`` and ``D`` the total rank of the *dangling* nodes (no out-edge):
a dangling node's rank is spread evenly over all ``N`` nodes, as if it linked to every
node (itself included), so the ranks always sum to 1. Parallel edges count as many
times as they appear; self-loops are ordinary edges. :func:`pagerank_reference` is the
same power iteration in plain NumPy.

The dataflow: one input ``graph`` of ``{"src", "dst"}`` batches holds the edges and,
as rows ``(v, -1)``, the nodes (so that nodes without edges exist too); it enters a
loop whose vertex, :class:`PageRankVertex`, owns a partition of the nodes (the graph is
exchanged by ``src`` and the contributions by target node, so a replica gets its nodes,
their out-edges and every contribution to them). At iteration 0 it builds its out-edge
lists and sends the first contributions; at notification ``(epoch, k)`` every
contribution of iteration ``k`` has arrived, so it computes ``rank_k`` and, until
``k`` reaches the number of iterations, sends ``rank_k(u) / outdeg(u)`` along every
out-edge (summed per target before it leaves the replica) plus its dangling rank.
The dangling sums go to every replica through a broadcast and a second feedback. The
loop's ``max_iterations`` bounds the iterations as well: nothing is fed back past the
last one. The ranks leave the loop at the last iteration as ``(nodes, ranks)`` chunks.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray

import raytide as rt

DAMPING = 0.85
EMPTY = np.empty(0, dtype=np.int64)


def pagerank_reference(nodes: int, edges: np.ndarray, iterations: int, damping: float = DAMPING) -> np.ndarray:
    """Power iteration in NumPy: ``iterations`` steps from the uniform vector (dangling rank spread evenly)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    src, dst = edges[:, 0], edges[:, 1]
    outdeg = np.bincount(src, minlength=nodes).astype(np.float64)
    rank = np.full(nodes, 1.0 / nodes)
    for _ in range(iterations):
        incoming = np.bincount(dst, weights=rank[src] / outdeg[src], minlength=nodes)
        dangling = rank[outdeg == 0].sum()
        rank = (1.0 - damping) / nodes + damping * (incoming + dangling / nodes)
    return rank


class PageRankVertex(rt.Vertex):
    """Owns a partition of the nodes; see the module docstring.

    Inputs: 0 the graph (iteration 0: edges ``src -> dst`` and node rows ``(v, -1)``),
    1 contributions ``{"node", "value"}``, 2 dangling sums (lists of floats, one per
    replica and iteration). Outputs: 0 contributions, 1 dangling sums, 2 the final ranks
    as ``(nodes, ranks)`` chunks.
    """

    def __init__(self, nodes: int, iterations: int, damping: float = DAMPING) -> None:
        self.n, self.iterations, self.damping = nodes, iterations, damping
        self.inbox: dict[rt.Timestamp, list[list]] = {}
        self.ids = EMPTY  # this replica's nodes, sorted: node ids[k] has slot k
        self.rank = np.empty(0)
        self.share = np.empty(0)  # rank / outdeg, or 0 for a dangling node
        self.outdeg = EMPTY
        self.dangling = np.empty(0, dtype=bool)
        self.edge_sources = EMPTY  # local slot of each out-edge's source
        self.targets = EMPTY  # distinct targets of the out-edges, sorted
        self.edge_target = EMPTY  # index into targets of each out-edge

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        if time not in self.inbox:
            self.inbox[time] = [[], [], []]
            self.notify_at(time)
        self.inbox[time][edge].append(message)

    def on_notify(self, time: rt.Timestamp) -> None:
        graph, contributions, dangling = self.inbox.pop(time)
        k = time.counters[-1]
        if k == 0:
            self._start(graph)
        else:
            incoming: np.ndarray = np.zeros(len(self.ids))
            if contributions:
                targets = np.concatenate([np.asarray(m["node"]) for m in contributions])
                values = np.concatenate([np.asarray(m["value"]) for m in contributions])
                incoming = np.bincount(np.searchsorted(self.ids, targets), weights=values, minlength=len(self.ids))
            total_dangling = float(sum(x for m in dangling for x in m))
            self.rank = (1.0 - self.damping) / self.n + self.damping * (incoming + total_dangling / self.n)
        if k == self.iterations:
            self.send_by(2, [(self.ids, self.rank)], time)
            return
        self.share = np.where(self.dangling, 0.0, self.rank / np.maximum(self.outdeg, 1))
        sums = np.bincount(self.edge_target, weights=self.share[self.edge_sources], minlength=len(self.targets))
        if len(self.targets):
            self.send_by(0, {"node": self.targets, "value": sums}, time)
        self.send_by(1, [float(self.rank[self.dangling].sum())], time)

    def _start(self, graph: list) -> None:
        """Iteration 0: index this replica's nodes (the node rows), out-edges and out-degrees; rank 1/N."""
        src = np.concatenate([np.asarray(m["src"]) for m in graph]).astype(np.int64, copy=False)
        dst = np.concatenate([np.asarray(m["dst"]) for m in graph]).astype(np.int64, copy=False)
        is_node = dst < 0
        ids = src[is_node]
        self.ids = np.unique(ids)
        if len(self.ids) != len(ids):
            raise ValueError(f"node ids given twice at replica {self.replica}")
        src, dst = src[~is_node], dst[~is_node]
        self.edge_sources = np.searchsorted(self.ids, src)
        self.outdeg = np.bincount(self.edge_sources, minlength=len(self.ids))
        self.dangling = self.outdeg == 0
        self.targets, self.edge_target = np.unique(dst, return_inverse=True)
        self.rank = np.full(len(self.ids), 1.0 / self.n)


def build_flow(nodes: int, iterations: int, damping: float = DAMPING, parallelism: int = 2) -> rt.Dataflow:
    """Input ``graph`` (edges and node rows ``(v, -1)``); output ``ranks`` (``(nodes, ranks)`` chunks)."""
    flow = rt.Dataflow("pagerank", parallelism=parallelism)
    loop = flow.loop("power-iteration")
    contributions = loop.feedback(max_iterations=iterations + 1, name="contributions")
    dangling = loop.feedback(max_iterations=iterations + 1, name="dangling")
    to_next, dangling_sum, ranks = flow.vertex(
        lambda: PageRankVertex(nodes, iterations, damping),
        [loop.enter(flow.input("graph")), contributions.stream, dangling.stream],
        outputs=3, exchange=["src", "node", None], name="pagerank")
    contributions.connect(to_next)
    # broadcast before the feedback: a vertex fed by a feedback alone is refused by the snapshot aligner
    dangling.connect(dangling_sum.broadcast(name="dangling-to-all"))
    loop.leave(ranks).output("ranks")
    return flow


def pagerank(edges: np.ndarray, nodes: int, iterations: int = 20, damping: float = DAMPING, parallelism: int = 2,
             timeout: float = 600.0) -> np.ndarray:
    """Ranks of nodes ``0 .. nodes - 1`` after ``iterations`` power-iteration steps (see the module docstring)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if len(edges) and (edges.min() < 0 or edges.max() >= nodes):
        raise ValueError(f"edges must join nodes 0 .. {nodes - 1}")
    src = np.concatenate([edges[:, 0], np.arange(nodes)])  # the edges, then one row (v, -1) per node
    dst = np.concatenate([edges[:, 1], np.full(nodes, -1)])
    flow = build_flow(nodes, iterations, damping, parallelism)
    with rt.run(flow, parallelism=parallelism, batch_size=max(1, -(-len(src) // parallelism))) as job:
        job.push("graph", {"src": src, "dst": dst})
        job.close("graph")
        job.wait(timeout=timeout)
        chunks = job.collect("ranks").get(0, [])
    rank = np.full(nodes, np.nan)
    for ids, values in chunks:
        rank[ids] = values
    return rank


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PageRank of a random directed graph, checked against NumPy.")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--edges", type=int, default=50_000)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    edges = rng.integers(0, args.nodes, size=(args.edges, 2))
    # Join the cluster in RAY_ADDRESS (set by ``ray job submit``), else start a local Ray, before the clock.
    ray.init(ignore_reinit_error=True, log_to_driver=False)
    started = time.perf_counter()
    ranks = pagerank(edges, args.nodes, args.iterations, parallelism=args.parallelism)
    elapsed = time.perf_counter() - started
    reference = pagerank_reference(args.nodes, edges, args.iterations)
    top = np.argsort(-ranks)[:5]
    print(f"{args.iterations} iterations in {elapsed:.2f} s; sum of ranks {ranks.sum():.12f}; "
          f"max |raytide - numpy| = {np.abs(ranks - reference).max():.2e}; top nodes {top.tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
