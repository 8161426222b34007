"""The spanning forest (``raytide.graph.spanning_forest``) under churn with its edges partitioned
among replicas, as a broadcast loop would run it (not built: ``connected_components`` runs it
whole at one replica, ``raytide.graph.forest_components``), against the wired one, same batches.

Run with ``python -m bench forest --repeat 3 --param nodes=200000``. The batches are
``bench collections``' (epoch 0 the graph, then epochs deleting ``churn`` of the edges
present and inserting as many).

* ``forest_exchanges`` / ``forest_cpu_s``: the forest, the edges partitioned by a hash of the
  edge: the median update epoch's exchanges, and its CPU on the critical path (per round the
  slowest replica's, rounds summed: the work that would not overlap on Ray), glibc's
  thresholds pinned as in the actors (freed arrays reused, not faulted in again);
  ``forest_all_cpu_s`` every replica's summed; ``forest_first_cpu_s`` epoch 0's critical path.

* ``--param ray=True`` adds, on Ray, the forest's replicas as two plain actors with the
  driver relaying the exchanges (three calls each an epoch: announce, split and scan,
  reconnect and the changed labels): ``ray_forest_epoch_s`` / ``ray_forest_first_s``, push to
  labels; and the wired ``examples/incremental_components.py`` (the forest at one replica)
  and the insert-only ``examples/connected_components.py`` as ``bench collections`` times
  them (``ray_wired_epoch_s``, ``ray_insert_only_epoch_s``), in one run.

The forest's labels after the last epoch are checked against union-find.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import raytide as rt
from bench.baselines import data
from bench.baselines.cc_ray import components_union_find
from bench.bench_collections import churn_epochs, timed_epochs
from bench.harness import ensure_ray
from examples import connected_components as insert_only
from examples import incremental_components as incremental
from raytide.actors.hosts import keep_freed_buffers
from raytide.differential import update_columns
from raytide.graph import spanning_forest as sf

PARAMS = {"nodes": 20_000, "edges": None, "epochs": 5, "churn": 0.01, "seed": 0, "parallelism": 2,
          "ray": False}
REPEAT = 3
RATIOS = [
    ("critical-path CPU partitioned/all replicas' (an update epoch)", "forest_cpu_s", "forest_all_cpu_s"),
    ("on Ray: update epoch partitioned actors/wired", "ray_forest_epoch_s", "ray_wired_epoch_s"),
    ("on Ray: update epoch partitioned actors/insert-only", "ray_forest_epoch_s", "ray_insert_only_epoch_s"),
    ("on Ray: update epoch wired/insert-only", "ray_wired_epoch_s", "ray_insert_only_epoch_s"),
    ("on Ray: first fixpoint wired/insert-only", "ray_wired_first_s", "ray_insert_only_first_s"),
    ("on Ray: first fixpoint forest/insert-only", "ray_forest_first_s", "ray_insert_only_first_s"),
]


def partitioned(batches: list, parallelism: int) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Each epoch's updates as ``(id keys, diffs)`` per replica, the edges partitioned by a hash of the edge."""
    out = []
    for batch in batches:
        keys = sf.id_keys(np.array([e[0][0] for e in batch]), np.array([e[0][1] for e in batch]))
        diff = np.array([d for _, d in batch], dtype=np.int64)
        owner = (keys * 2654435761 >> 7) % parallelism
        out.append([(keys[owner == r], diff[owner == r]) for r in range(parallelism)])
    return out


def forest_epochs(batches: list, parallelism: int) -> tuple[list[int], list[float], list[float], sf.Forest]:
    """Per epoch, the forest's exchanges, critical-path CPU and all replicas' CPU; the last forest."""
    forests, owned = [sf.Forest.empty()] * parallelism, [sf.OwnedEdges.empty()] * parallelism
    exchanges, critical, total = [], [], []
    for parts in partitioned(batches, parallelism):
        forests, owned, count, rounds = timed_epoch(forests, owned, parts)
        exchanges.append(count)
        critical.append(sum(max(r) for r in rounds))
        total.append(sum(sum(r) for r in rounds))
    return exchanges, critical, total, forests[0]


def timed_epoch(forests: list, owned: list, parts: list) -> tuple[list, list, int, list[list[float]]]:
    """:func:`~raytide.graph.spanning_forest.run_epoch`'s rounds, each replica's thread CPU per round."""
    first = [clocked(announce_round, f, o, p) for f, o, p in zip(forests, owned, parts, strict=True)]
    owned, sent = [o for (o, _, _), _ in first], [s for (_, s, _), _ in first]
    second = [clocked(split_and_scan, f, sent, r, owned[r], first[r][0][2]) for r, f in enumerate(forests)]
    rounds = [[t for _, t in first], [t for _, t in second]]
    if not second[0][0][1]:
        return [f for (f, _, _, _), _ in second], owned, 1, rounds
    found = [c for (_, _, c, _), _ in second]
    third = [clocked(sf.reconnected, f, np.concatenate(sf.arrived(found, r)),
                     np.concatenate([i for _, i in sf.arrived(sent, r)]), moved)
             for r, ((f, _, _, moved), _) in enumerate(second)]
    return [f for (f, _), _ in third], owned, 2, rounds + [[t for _, t in third]]


def clocked(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the thread CPU it took."""
    start = time.thread_time()
    return fn(*args), time.thread_time() - start


def announce_round(forest: sf.Forest, owned: sf.OwnedEdges, part: tuple) -> tuple[sf.OwnedEdges, tuple, np.ndarray]:
    """Round 1 at one replica: its edges updated, what it announces, and the edges it inserted."""
    owned, inserted, deleted = sf.apply_updates(owned, *part)
    return owned, sf.announce(forest, inserted, deleted), inserted


def split_and_scan(forest: sf.Forest, sent: list, replica: int, owned: sf.OwnedEdges, inserted: np.ndarray) -> tuple:
    """Round 2 at ``replica``: ``(F'', split, candidates, moved)``."""
    got = sf.arrived(sent, replica)
    middle, split, moved, tops = sf.split_join(forest, np.concatenate([d for d, _ in got]), np.concatenate([i for _, i in got]))
    return middle, split, sf.candidates(middle, owned, moved, tops, inserted) if split else sf.EMPTY, moved


def measure(nodes: int, edges: int | None, epochs: int, churn: float, seed: int, parallelism: int,
            ray: bool) -> dict[str, float]:
    keep_freed_buffers()  # as the replicas on Ray (and raytide's hosts) do: at load, fresh pages cost more than the work
    graph = data.random_graph_edges(nodes, edges or 3 * nodes, seed)
    batches = churn_epochs(graph, epochs, churn, seed, nodes)
    exchanges, critical, total, forest = forest_epochs(batches, parallelism)
    present = np.array([e for e, c in rt.accumulate(dict(enumerate(batches))).items() if c > 0])
    expected = components_union_find(nodes, present)
    shown = forest.present()
    assert np.array_equal(forest.labels()[shown], expected[forest.ids[shown]]), "forest labels differ from union-find"
    got = {"forest_exchanges": statistics.median(exchanges[1:]), "forest_cpu_s": statistics.median(critical[1:]),
           "forest_all_cpu_s": statistics.median(total[1:]), "forest_first_cpu_s": critical[0]}
    if ray:
        got |= on_ray(batches, parallelism)
    return got


class Replica:
    """One replica of the forest in a Ray actor: its edges and its copy of the forest."""

    def __init__(self, index: int, width: int) -> None:
        keep_freed_buffers()  # as raytide's vertex hosts do: freed arrays come back without page faults
        self.index, self.width = index, width
        self.forest, self.owned = sf.Forest.empty(), sf.OwnedEdges.empty()

    def announce(self, keys: np.ndarray, diff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.owned, self.inserted, deleted = sf.apply_updates(self.owned, keys, diff)
        return sf.announce(self.forest, self.inserted, deleted)

    def split(self, sent: list) -> np.ndarray | None:
        got = sf.arrived(sent, self.index)
        self.before, self.announced = self.forest, np.concatenate([i for _, i in got])
        self.forest, split, self.moved, tops = sf.split_join(self.forest, np.concatenate([d for d, _ in got]), self.announced)
        return sf.candidates(self.forest, self.owned, self.moved, tops, self.inserted) if split else None

    def join(self, found: list | None) -> dict[str, np.ndarray]:
        """Reconnected; the changed labels of the nodes this replica shows (by id modulo the width)."""
        moved = self.moved
        if found is not None:
            self.forest, hung = sf.reconnected(self.forest, np.concatenate(sf.arrived(found, self.index)),
                                               self.announced, moved)
            moved = np.concatenate([moved, hung])
        node, label = sf.relabelled(self.before, self.forest, moved)
        mine = node % self.width == self.index
        return {"node": node[mine], "label": label[mine]}


def ray_forest(parts_all: list, parallelism: int) -> list[float]:
    """Each epoch's seconds, push to labels in the driver, of the forest's replicas as Ray actors."""
    import ray

    actor = ray.remote(Replica)
    replicas = [actor.remote(r, parallelism) for r in range(parallelism)]
    ray.get([r.announce.remote(sf.EMPTY, sf.EMPTY) for r in replicas])  # started (as job.wait_ready() for the others)
    seconds = []
    for parts in parts_all:
        start = time.perf_counter()
        sent = ray.get([r.announce.remote(*p) for r, p in zip(replicas, parts, strict=True)])
        found = ray.get([r.split.remote(sent) for r in replicas])
        ray.get([r.join.remote(None if found[0] is None else found) for r in replicas])
        seconds.append(time.perf_counter() - start)
    for r in replicas:
        ray.kill(r)
    return seconds


def on_ray(batches: list, parallelism: int) -> dict[str, float]:
    """The forest's actors, the wired vertex and the insert-only loop on Ray, one after another."""
    ensure_ray()
    forest = ray_forest(partitioned(batches, parallelism), parallelism)
    columns = [update_columns(batch, ("src", "dst")) for batch in batches]
    wired = timed_epochs(incremental.build_flow(parallelism), columns, parallelism, lambda changes: None)
    inserts = [np.array([edge for edge, diff in batch if diff > 0], dtype=np.int64) for batch in batches]
    insert = timed_epochs(insert_only.build_flow(parallelism), inserts, parallelism, lambda changes: None)
    return {"ray_forest_first_s": forest[0], "ray_forest_epoch_s": statistics.median(forest[1:]),
            "ray_wired_epoch_s": statistics.median(wired[1:]), "ray_wired_first_s": wired[0],
            "ray_insert_only_epoch_s": statistics.median(insert[1:]), "ray_insert_only_first_s": insert[0]}
