"""Connected components on a fixed random graph: raytide vs plain PySpark vs a hand-written Ray-actor loop.

Run with ``python -m bench components --repeat 3``. The graph is
``random_graph_edges(200_000, 600_000, seed=0)`` (``bench/baselines/data.py``): 200,000
nodes, 600,000 distinct undirected edges, many small components plus one giant one.
All three compute the same thing, synchronous label propagation to the minimum node id
(checked against union-find, outside the clock), and run in the same process one after
the other in every repetition, on the same Ray (``num_cpus=2``) -- the machine has 2 cores.

What each time includes -- read this before comparing numbers:

* ``raytide_s``: ``bench/workloads/components.py`` with parallelism 2. The job's
  actors are started (``rt.run``, then ``job.wait_ready()`` for the progress actor) *before* the clock; the clock runs from the edge
  array in the driver (``job.push``, ``job.close``) through every iteration and the
  termination detection (the loop drains, the frontier passes the epoch) to a label
  array of all 200,000 nodes in the driver (``job.wait``, ``job.collect``, folding the
  label changes). It includes shipping the edges, adding the reverse edges, the
  exchange, building the adjacency (CSR) and the output collection.
* ``raytide_no_pretouch_s``: the same without ``pretouch_mb``. ``raytide_s`` runs the
  job with ``pretouch_mb=64`` (the ``pretouch_mb`` parameter): each actor maps 64 MiB
  while it starts, so the first iteration, which builds the adjacency, reuses those pages
  instead of faulting in about 10,000 fresh ones per replica; its start-up time
  (``raytide_startup_s``) grows by those faults. The hand-written loop does no such thing.
* ``handwritten_s``: the hand-written loop of ``bench/baselines/cc_ray.py`` (its
  ``EdgeIndex`` and ``apply_proposals``, 2 actors, the driver coordinating rounds and
  broadcasting the label array each round). Its actors are started before the clock;
  the clock runs from shipping the edge slices to the actors (which build their
  ``EdgeIndex``) to the label array in the driver, last confirming round included. The
  baseline's own ``connected_components_ray`` creates its actors inside the call, so
  it is re-assembled here from the same parts to leave actor start-up out, as for raytide;
  the unmodified call is timed too, start-up included (``handwritten_with_startup_s``,
  next to ``raytide_with_startup_s``).
* ``example_s``: ``examples/connected_components.py`` (``build_flow``: the graph layer's
  ``rt.graph.connected_components``, columnar keyed state with the edges arranged in the
  loop), parallelism 2, its actors started before the clock (``job.wait_ready()``); the
  clock runs from pushing the ``(E, 2)`` edge array to the label array in the driver.
  ``example_first_s`` / ``example_increment_s``: the same job fed 95% of the edges as
  epoch 0, then five epochs of 1% each (each clocked from its push to its output);
  ``example_increment_s`` is the median of the five, ``example_increment_max_s`` the
  slowest. One increment per repetition was too noisy on this shared machine (39-70 ms
  within one run); a smaller first epoch only makes the ratio harder to meet.
  ``example_ten_serial_s`` / ``example_ten_pipelined_s``: the edges in ten epochs (90%,
  then nine of about 1.1%, ``split_epochs``), fed one at a time waiting for each output,
  or all pushed at once (the loop's epoch gate takes them in turn); clocked from the
  first push to the last epoch's labels.
* ``pyspark_s``: ``bench/baselines/cc_pyspark.py`` on ``local[2]`` (4 shuffle
  partitions). The Spark session is started once, before the clock; the clock covers
  the whole call: reading the edge file (written once, before), caching it, every
  round, and collecting the labels into a NumPy array in the driver.

Work and time per iteration (raytide): ``raytide_iterNN_ms`` is the time from the
start of iteration NN's notification to the start of the next one's (for the last
iteration, to its end), ``raytide_iterNN_proposals`` the proposal records the
iteration received (iteration 00: the directed edges, whose first round needs no
message) and ``raytide_iterNN_changed`` the labels it lowered. ``raytide_ingest_s`` is the time before the first notification
(edges to the vertices), ``raytide_drain_s`` the time after the last one (termination
detected, labels gathered). ``raytide_busy_s`` sums, per iteration, the slowest
replica's time inside ``on_notify`` (the vectorised compute, plus handing the proposals
to Ray: ``send_by`` routes them and serialises those for the other replica);
``raytide_overhead_ms_per_iteration`` is the rest of the loop time per iteration: the
hop to the other replica, progress rounds.

The algorithms differ in what a round touches: the hand-written loop gathers over every
edge each round (one ``np.minimum.reduceat``) and ships the whole label array; raytide
sends only proposals from nodes whose label changed, minus those that cannot lower a
label, so its rounds shrink as the fixed point nears (``raytide_iterNN_proposals``).
``raytide_{heavy,light}_{busy,transfer,progress}_ms`` split an iteration (median over
iterations with >= 100,000 / < 1,000 proposals) into the slowest ``on_notify``, the
trip of the proposals to the replica that owns their node, and the progress rounds between the
last proposal's arrival and the notification (see :func:`phase_breakdown`).
``raytide_floor_ms_per_iteration`` measures that floor alone: the same job on a path of
50 edges, which needs about 50 iterations with one or two records each.
"""

from __future__ import annotations

import functools
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

import raytide as rt
from bench.baselines import data
from bench.baselines.cc_ray import (
    EdgeIndex,
    components_union_find,
    connected_components_ray,
    propagation_rounds,
)
from bench.harness import ensure_ray
from bench.workloads import components
from examples import connected_components as example_cc

PARAMS = {"nodes": 200_000, "edges": 600_000, "seed": 0, "parallelism": 2, "pretouch_mb": 64}
RATIOS = [
    ("example/handwritten", "example_s", "handwritten_s"),
    ("example/pyspark", "example_s", "pyspark_s"),
    ("example incremental epoch (+1% edges)/first epoch", "example_increment_s", "example_first_s"),
    ("example ten epochs pushed at once/fed one at a time", "example_ten_pipelined_s", "example_ten_serial_s"),
    ("raytide/pyspark", "raytide_s", "pyspark_s"),
    ("raytide/handwritten", "raytide_s", "handwritten_s"),
    ("raytide without pretouch/handwritten", "raytide_no_pretouch_s", "handwritten_s"),
    ("raytide/handwritten, both with actor start-up", "raytide_with_startup_s", "handwritten_with_startup_s"),
]
#: Iterations reported one by one (the fixed graph needs 11; missing ones are reported as 0).
REPORTED_ITERATIONS = 14
FLOOR_PATH = 50


@functools.cache
def graph(nodes: int, edges: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """The edges, the union-find labels and the edge file for PySpark (made once per process)."""
    e = data.random_graph_edges(nodes, edges, seed)
    path = Path(tempfile.mkdtemp(prefix="bench-components-")) / "edges.txt"
    data.write_edges(path, e)
    return e, components_union_find(nodes, e), str(path)


@functools.cache
def spark_session():
    from bench.baselines.wordcount_pyspark import local_spark

    session = local_spark(cores=2, app_name="bench-components")
    session.sparkContext.setLogLevel("ERROR")
    return session


@ray.remote
class EdgeSlice:
    """``cc_ray.EdgeSliceActor`` with its edges loaded after start-up, so that start-up can be left out of the clock."""

    def __init__(self) -> None:
        self._index = None

    def load(self, edges: np.ndarray) -> bool:
        self._index = EdgeIndex(edges)
        return True

    def propose(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._index.propose(labels)


def handwritten(nodes: int, edges: np.ndarray, n_actors: int) -> tuple[np.ndarray, int, float, float]:
    """``cc_ray``'s driver loop; returns ``(labels, rounds, start-up seconds, data-to-labels seconds)``."""
    started = time.perf_counter()
    actors = [EdgeSlice.remote() for _ in range(n_actors)]
    try:
        ray.get([a.__ray_ready__.remote() for a in actors])
        clock = time.perf_counter()
        ray.get([a.load.remote(part) for a, part in zip(actors, np.array_split(edges, n_actors))])
        labels, seconds = propagation_rounds(actors, nodes)
        return labels, len(seconds), clock - started, time.perf_counter() - clock
    finally:
        for actor in actors:
            ray.kill(actor)


def raytide(nodes: int, edges: np.ndarray, parallelism: int,
            pretouch_mb: int) -> tuple[np.ndarray, components.Components, float, float]:
    """The raytide workload; returns ``(labels, result, start-up seconds, data-to-labels seconds)``."""
    started = time.perf_counter()
    job = components.start_job(parallelism, batch_size=-(-len(edges) // parallelism), pretouch_mb=pretouch_mb)
    with job:
        job.wait_ready()
        clock = time.perf_counter()
        wall = time.time()
        result = components.solve(job, edges)
        labels = np.arange(nodes, dtype=np.int64)
        labels[result.nodes] = result.labels
        elapsed = time.perf_counter() - clock
    result.clock_started = wall  # type: ignore[attr-defined]
    return labels, result, clock - started, elapsed


def example(nodes: int, edges: np.ndarray, parallelism: int, epochs: list[np.ndarray],
            recovery: rt.Recovery | None = None) -> tuple[np.ndarray, list[float]]:
    """The example's job fed ``epochs`` one after another (with ``recovery``, if given);
    ``(labels, seconds per epoch)``."""
    labels = np.arange(nodes, dtype=np.int64)
    seconds = []
    with rt.run(example_cc.build_flow(parallelism), parallelism=parallelism,
                batch_size=-(-len(edges) // parallelism), recovery=recovery) as job:
        job.wait_ready()
        results = job.results("labels", batch_format="numpy")  # one (n, 2) array per epoch
        for epoch, part in enumerate(epochs):
            clock = time.perf_counter()
            job.push("edges", part, epoch)
            job.advance("edges", epoch + 1)
            _, rows = next(results)
            pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
            np.minimum.at(labels, pairs[:, 0], pairs[:, 1])
            seconds.append(time.perf_counter() - clock)
        job.close("edges")
    return labels, seconds


def example_ten(nodes: int, edges: np.ndarray, parallelism: int, pipelined: bool) -> tuple[np.ndarray, float]:
    """The example's job fed ten epochs, at once or one at a time; ``(labels, seconds)``."""
    labels = np.arange(nodes, dtype=np.int64)
    epochs = example_cc.split_epochs(list(range(len(edges))), 10)
    with rt.run(example_cc.build_flow(parallelism), parallelism=parallelism,
                batch_size=-(-len(edges) // parallelism)) as job:
        job.wait_ready()
        results = job.results("labels", batch_format="numpy")  # one (n, 2) array per epoch
        clock = time.perf_counter()
        for epoch, part in enumerate(epochs):
            job.push("edges", edges[part[0]: part[-1] + 1], epoch)
            if not pipelined:
                job.advance("edges", epoch + 1)
                _, rows = next(results)
                pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
                np.minimum.at(labels, pairs[:, 0], pairs[:, 1])
        job.close("edges")
        for _, rows in results:
            pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
            np.minimum.at(labels, pairs[:, 0], pairs[:, 1])
        return labels, time.perf_counter() - clock


def floor_per_iteration(parallelism: int) -> float:
    """Milliseconds per iteration of the same job on a path of FLOOR_PATH edges (almost no data)."""
    path = np.stack([np.arange(FLOOR_PATH, 0, -1), np.arange(FLOOR_PATH - 1, -1, -1)], axis=1)
    with components.start_job(parallelism, batch_size=FLOOR_PATH) as job:
        clock = time.perf_counter()
        result = components.solve(job, path)
        elapsed = time.perf_counter() - clock
    assert (result.labels == 0).all()
    return 1000 * elapsed / len(result.iterations())


def iteration_metrics(result: components.Components, wall_started: float, elapsed: float) -> dict[str, float]:
    rounds = result.iterations()
    out: dict[str, float] = {"raytide_iterations": float(len(rounds))}
    starts = [r["start"] for r in rounds] + [rounds[-1]["end"]]
    busy = sum(r["busy"] for r in rounds)
    loop = rounds[-1]["end"] - rounds[0]["start"]
    out["raytide_ingest_s"] = rounds[0]["start"] - wall_started
    out["raytide_loop_s"] = loop
    out["raytide_drain_s"] = elapsed - (rounds[-1]["end"] - wall_started)
    out["raytide_busy_s"] = busy
    out["raytide_overhead_ms_per_iteration"] = 1000 * (loop - busy) / len(rounds)
    out.update(phase_breakdown(result.work))
    for i in range(REPORTED_ITERATIONS):
        r = rounds[i] if i < len(rounds) else None
        out[f"raytide_iter{i:02d}_ms"] = 1000 * (starts[i + 1] - starts[i]) if r else 0.0
        out[f"raytide_iter{i:02d}_proposals"] = float(r["proposals_in"] + r["edges_in"]) if r else 0.0
        out[f"raytide_iter{i:02d}_changed"] = float(r["changed"]) if r else 0.0
    return out


def phase_breakdown(work: list[dict]) -> dict[str, float]:
    """Where an iteration's time goes, median over heavy (>= 100,000 proposals) and light (< 1,000) iterations.

    For iteration ``i >= 1``: ``busy`` is the slowest replica's ``on_notify``; ``transfer``
    runs from the end of the slowest notification of ``i - 1`` to the arrival of the last
    proposal of ``i`` (a replica's proposals for its own nodes skip Ray); ``progress`` from
    that arrival to the first notification of ``i`` (the progress rounds that prove that
    iteration ``i``'s input is complete).
    """
    by_round: dict[int, list[dict]] = {}
    for w in work:
        by_round.setdefault(w["counters"][-1], []).append(w)
    phases: dict[str, list[tuple[float, float, float]]] = {"heavy": [], "light": []}
    for i in sorted(by_round)[1:]:
        ws, before = by_round[i], by_round.get(i - 1, [])
        if not before:
            continue
        end_before = max(w["started"] + w["seconds"] for w in before)
        last = max(w["received"][1] for w in ws)
        proposals = sum(w["proposals_in"] for w in ws)
        kind = "heavy" if proposals >= 100_000 else "light" if proposals < 1_000 else None
        if kind:
            phases[kind].append((max(w["seconds"] for w in ws), last - end_before, min(w["started"] for w in ws) - last))
    out = {}
    for kind, rows in phases.items():
        for j, name in enumerate(("busy", "transfer", "progress")):
            out[f"raytide_{kind}_{name}_ms"] = 1000 * float(np.median([r[j] for r in rows])) if rows else float("nan")
    return out


def measure(nodes: int = 200_000, edges: int = 600_000, seed: int = 0, parallelism: int = 2, pretouch_mb: int = 64,
            pyspark: bool = True) -> dict[str, float]:
    ensure_ray()
    e, reference, path = graph(nodes, edges, seed)
    metrics: dict[str, float] = {}

    labels, result, startup, elapsed = raytide(nodes, e, parallelism, pretouch_mb)
    assert np.array_equal(labels, reference), "raytide labels differ from union-find"
    metrics.update(raytide_s=elapsed, raytide_startup_s=startup, raytide_with_startup_s=startup + elapsed)
    metrics.update(iteration_metrics(result, result.clock_started, elapsed))  # type: ignore[attr-defined]
    labels, _, startup, elapsed = raytide(nodes, e, parallelism, 0)
    assert np.array_equal(labels, reference), "raytide labels differ from union-find"
    metrics.update(raytide_no_pretouch_s=elapsed, raytide_no_pretouch_startup_s=startup)

    labels, (elapsed,) = example(nodes, e, parallelism, [e])
    assert np.array_equal(labels, reference), "example labels differ from union-find"
    metrics["example_s"] = elapsed
    cuts = [len(e) * percent // 100 for percent in range(95, 101)]
    labels, (first, *increments) = example(nodes, e, parallelism, [e[:cuts[0]]] + [
        e[start:end] for start, end in zip(cuts, cuts[1:])])
    assert np.array_equal(labels, reference), "example labels differ from union-find"
    metrics.update(example_first_s=first, example_increment_s=float(np.median(increments)),
                   example_increment_max_s=max(increments))
    for pipelined in (False, True):
        labels, elapsed = example_ten(nodes, e, parallelism, pipelined)
        assert np.array_equal(labels, reference), "example labels differ from union-find"
        metrics["example_ten_pipelined_s" if pipelined else "example_ten_serial_s"] = elapsed

    labels, rounds, startup, elapsed = handwritten(nodes, e, parallelism)
    assert np.array_equal(labels, reference), "hand-written labels differ from union-find"
    metrics.update(handwritten_s=elapsed, handwritten_startup_s=startup, handwritten_rounds=float(rounds))
    clock = time.perf_counter()
    labels, rounds, _ = connected_components_ray(nodes, e, n_actors=parallelism)
    metrics["handwritten_with_startup_s"] = time.perf_counter() - clock
    assert np.array_equal(labels, reference)

    if pyspark:
        session = spark_session()
        clock = time.perf_counter()
        labels, rounds = cc_pyspark_run(session, path, nodes)
        metrics["pyspark_s"] = time.perf_counter() - clock
        metrics["pyspark_rounds"] = float(rounds)
        assert np.array_equal(labels, reference), "PySpark labels differ from union-find"
    else:  # --param pyspark=False: a quick run without Spark
        metrics["pyspark_s"] = metrics["pyspark_rounds"] = float("nan")

    metrics["raytide_floor_ms_per_iteration"] = floor_per_iteration(parallelism)
    return metrics


def cc_pyspark_run(session, path: str, nodes: int) -> tuple[np.ndarray, int]:
    from bench.baselines.cc_pyspark import connected_components_pyspark

    return connected_components_pyspark(session, path, nodes)
