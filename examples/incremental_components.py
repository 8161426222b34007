"""Connected components kept up to date while edges arrive in epochs.

    python examples/incremental_components.py [--nodes 20000] [--edges 30000] [--epochs 5] [--parallelism 2]

The dataflow is the one of ``examples/connected_components.py``: the label-propagation
vertex keeps its labels and adjacency from one epoch to the next, so epoch ``e`` starts
from the fixed point of epochs ``0 .. e - 1``. Only epoch ``e``'s new edges propose
labels at its iteration 0, and after that only nodes whose label changed send anything:
the work of an epoch follows what changed, not the size of the graph. Each epoch's
output holds the label changes of that epoch; folded over epochs ``0 .. e`` they are the
components of every edge seen so far.

The driver feeds one epoch at a time: it pushes epoch ``e``, advances the input to
``e + 1`` and waits for epoch ``e``'s output to be complete (``job.results``) before it
pushes the next. That ordering is needed: inside the loop ``(e, 5)`` and ``(e + 1, 0)``
are incomparable timestamps, so without it epoch ``e + 1`` could start while epoch ``e``
still iterates (the vertex raises rather than mixing them).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``examples`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples import connected_components as cc  # noqa: E402


@dataclass
class EpochResult:
    """What one epoch did and the components after it."""

    epoch: int
    edges: int                # undirected edges pushed in this epoch
    records: int              # records the propagation vertex processed: directed edges + proposals
    proposals: int            # of which proposals
    changed: int              # labels lowered (not counting new nodes)
    iterations: int
    seconds: float            # push to complete output, on the driver
    nodes: np.ndarray         # every node seen so far, sorted
    labels: np.ndarray        # its current label

    @property
    def components(self) -> int:
        return int(np.count_nonzero(self.nodes == self.labels))


def run_incremental(batches: Sequence[np.ndarray], parallelism: int = 2, timeout: float = 600.0) -> Iterator[EpochResult]:
    """Push ``batches[e]`` (``(E_e, 2)`` integer edges) as epoch ``e``, one epoch at a time; yield each epoch's result."""
    nodes, labels = cc.EMPTY, cc.EMPTY
    largest = max((len(b) for b in batches), default=1)
    with cc.start_job(parallelism, batch_size=max(1, -(-largest // parallelism))) as job:
        results = job.results("labels", timeout=timeout)
        for epoch, batch in enumerate(batches):
            batch = np.asarray(batch, dtype=np.int64).reshape(-1, 2)
            started = time.perf_counter()
            if len(batch):
                src, dst = cc.narrow(batch[:, 0], batch[:, 1])
                job.push("edges", {"src": np.ascontiguousarray(src), "dst": np.ascontiguousarray(dst)}, epoch)
            job.advance("edges", epoch + 1)
            records: list = []
            if len(batch):  # an empty epoch does no work and has no output records to wait for
                done, records = next(results)
                assert done == epoch, f"expected the output of epoch {epoch}, got epoch {done}"
            chunks, work = cc.split_reports(records)
            nodes, labels = cc.latest_labels([(nodes, labels), *chunks])
            rounds = cc.per_iteration(work)
            proposals = sum(w["proposals_in"] for w in work)
            yield EpochResult(
                epoch=epoch, edges=len(batch), records=proposals + sum(w["edges_in"] for w in work),
                proposals=proposals, changed=sum(w["changed"] for w in work), iterations=len(rounds),
                seconds=time.perf_counter() - started, nodes=nodes, labels=labels)
        job.close("edges")
        job.wait(timeout=timeout)


def split_epochs(edges: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Cut ``edges`` into consecutive batches of ``sizes`` edges (the last takes the rest)."""
    bounds = np.cumsum([0, *sizes])
    parts = [edges[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    if bounds[-1] < len(edges):
        parts.append(edges[bounds[-1]:])
    return parts


def main(argv: Optional[Sequence[str]] = None) -> int:
    from bench.baselines.cc_ray import components_union_find
    from bench.baselines.data import random_graph_edges

    parser = argparse.ArgumentParser(description="Incremental connected components over epochs of edges.")
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=30_000)
    parser.add_argument("--epochs", type=int, default=5, help="epoch 0 takes 90%% of the edges, the others share the rest")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    edges = random_graph_edges(args.nodes, args.edges, args.seed)
    first = int(0.9 * len(edges))
    rest = len(edges) - first
    sizes = [len(edges)] if args.epochs <= 1 else [first] + [rest // (args.epochs - 1)] * (args.epochs - 2)
    batches = split_epochs(edges, sizes)
    started_ray = cc.connect_ray()
    try:
        seen = 0
        print("epoch  edges  records  proposals  changed  iterations  components  seconds  matches union-find")
        for r in run_incremental(batches, args.parallelism):
            seen += r.edges
            reference = components_union_find(args.nodes, edges[:seen])
            ok = np.array_equal(r.labels, reference[r.nodes])
            print(f"{r.epoch:5d} {r.edges:6d} {r.records:8d} {r.proposals:10d} {r.changed:8d} {r.iterations:11d} "
                  f"{r.components:11d} {r.seconds:8.2f}  {ok}")
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
