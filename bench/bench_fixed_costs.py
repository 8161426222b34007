"""Fixed costs (issue 17): ``rt.run``'s start-up, and the three workloads end to end with it inside the clock.

Every repetition runs in fresh Rays, one per child process (``python -m
bench.bench_fixed_costs``, ``ray.init(num_cpus=2)``), so that each measures a first job
in a fresh Ray; the parent aggregates. Two children per repetition:

* the **raytide child**, in this order:

  1. ``first_startup_s``: the first job of the fresh Ray, the word count flow below
     (``flow.input("lines").flat_map(str.split).count_by_key(...)``, ``hosts`` processes:
     two vertex hosts at parallelism 2, each with an input replica seated in it, the progress actor in one), timed from before
     ``rt.run`` to ``job.wait_ready()``. The steps of that start-up are timed too
     (``profile_*``, see :func:`profiled_first_startup`);
  2. ``later_startup_s``: the same flow started again ``later_jobs`` times after the first
     job finished, in the same driver (warm hosts from the pool): the median;
  3. the three workloads end to end, each beside its hand-written baseline, every clock
     from before starting anything to the last result at the driver (raytide's start-up,
     the baseline's actor creation included): word count (``bench_wordcount``: a
     ``TextFileSource`` of ``lines`` lines in ``epochs`` epochs against
     ``bench/baselines/wordcount_ray.py``), Mandelbrot (``bench_mandelbrot``: ``rows``
     rows of ``rows`` pixels, ``batch_size=10``, against ``mandelbrot_ray.py``), connected
     components (``bench/workloads/components.component_labels``, ``nodes`` nodes and
     three edges per node, against ``cc_ray.connected_components_ray``). raytide's jobs
     here are later jobs of the driver: they lease the warm hosts of steps 1 and 2, as a
     driver running one job after another does. Results are checked against each other.

* two **bare children**: ``bare_actors_s``, creating ``hosts`` trivial actors (as many
  processes as raytide's first job started, ``num_cpus=0`` like raytide's hosts, a class
  shipped by value, so that their workers import nothing but Ray) and getting a ping back
  from each; ``bare_workers_s``, the same with as many as the job's parallel workers
  (``workers``: its vertex hosts; the same count now that the progress actor is seated in one). Each runs in a
  Ray of its own, because whichever start-up comes first in a Ray takes the workers Ray
  prestarts.

* four **first-job children**, one per workload: raytide's side of the workload as the
  first job of a fresh Ray (``<workload>_first_job_s``: its hosts start inside the clock),
  against the baseline's time from the raytide child. The fourth, ``example``, is the
  components graph again through ``examples/connected_components.py``'s
  ``components_by_epoch`` (the graph layer's loop, the whole graph as one epoch, labels
  folded as the example does), against the same hand-written components time; its labels
  are checked against union-find after the clock.

* three **hand-written first-job children**: each hand-written pipeline as the first job of a
  fresh Ray too (``<workload>_handwritten_first_job_s``), as the issue's targets compare them.
  The raytide child's baselines run after raytide's jobs in its Ray, whose prestarted workers
  those jobs took: their actors are new processes there, where a fresh Ray's first job gets
  its first actors on the workers Ray prestarts (measured 2026-11-29: the components
  baseline 0.8-1.0 s of CPU in a fresh Ray, no process started).

Every child does the same before its clock (``ray.init``, the same imports, a pause of
:data:`SETTLE_S`), with every module's bytecode compiled beforehand unless ``--param bytecode=False``
(see ``bench startup``). ``--param lines=200000 --param nodes=50000 --param rows=300`` makes a quick run.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psutil
import ray

import raytide as rt
from bench.baselines.cc_ray import components_union_find, connected_components_ray
from bench.baselines.data import random_graph_edges
from bench.baselines.mandelbrot_ray import mandelbrot_ray
from bench.bench_mandelbrot import raytide_mandelbrot
from bench.bench_soak import child_main, run_child
from bench.bench_startup import cpu_seconds, workers_cpu
from bench.bench_wordcount import dataset, handwritten_wordcount, raytide_wordcount
from bench.harness import SETTLE_S, bytecode_env, ensure_ray
from bench.workloads.components import component_labels
from examples import connected_components as example_cc
from raytide.driver import run as runtime
from raytide.driver.placement import JobPlacement
from raytide.driver.pool import HostPool

PARAMS = {"lines": 1_000_000, "epochs": 10, "nodes": 200_000, "rows": 1000, "parallelism": 2, "later_jobs": 2,
          "bytecode": True}
RATIOS = [
    ("first start-up / bare actor creation, as many actors as raytide's hosts (issue 17: <= 1.2; issue 31: <= 1.3)",
     "first_startup_s", "bare_actors_s"),
    ("first start-up / bare actor creation, as many actors as parallel workers (the vertex hosts)",
     "first_startup_s", "bare_workers_s"),
    ("word count throughput, raytide / hand-written, start-up included (target >= 1.0)",
     "wordcount_handwritten_s", "wordcount_raytide_s"),
    ("Mandelbrot throughput, raytide / hand-written, start-up included (target >= 0.9)",
     "mandelbrot_handwritten_s", "mandelbrot_raytide_s"),
    ("components time, raytide / hand-written, start-up included (target <= 1.5)",
     "components_raytide_s", "components_handwritten_s"),
    ("word count throughput as a fresh Ray's first job, raytide / hand-written", "wordcount_handwritten_s",
     "wordcount_first_job_s"),
    ("Mandelbrot throughput as a fresh Ray's first job, raytide / hand-written", "mandelbrot_handwritten_s",
     "mandelbrot_first_job_s"),
    ("components time as a fresh Ray's first job, raytide / hand-written (issue 76: <= 1.5)", "components_first_job_s",
     "components_handwritten_s"),
    ("examples/connected_components.py's time as a fresh Ray's first job / hand-written components (issue 76: <= 1.5)",
     "example_first_job_s", "components_handwritten_s"),
    ("word count time, each side a fresh Ray's first job, raytide / hand-written (issue 76: <= 1.0)",
     "wordcount_first_job_s", "wordcount_handwritten_first_job_s"),
    ("Mandelbrot time, each side a fresh Ray's first job, raytide / hand-written (issue 76: <= 1.0)",
     "mandelbrot_first_job_s", "mandelbrot_handwritten_first_job_s"),
    ("components time, each side a fresh Ray's first job, raytide / hand-written (issue 76: <= 1.5)",
     "components_first_job_s", "components_handwritten_first_job_s"),
    ("examples/connected_components.py, each side a fresh Ray's first job, raytide / hand-written components "
     "(issue 76: <= 1.5)", "example_first_job_s", "components_handwritten_first_job_s"),
]
#: The workloads, each also run as the first job of a fresh Ray (``first_job`` children);
#: ``example`` only so (the components graph through ``examples/connected_components.py``).
WORKLOADS = ("wordcount", "mandelbrot", "components", "example")
#: The workloads whose hand-written pipeline also runs as the first job of a fresh Ray.
BASELINES = ("wordcount", "mandelbrot", "components")
#: Edges per node of the components graph (the table's 600,000 edges on 200,000 nodes).
EDGES_PER_NODE = 3
#: Rows per pushed batch (raytide) and per remote call (baseline) of the Mandelbrot workload.
MANDELBROT_BATCH = 10
#: Seconds to wait for a job of no input to finish, and for Ray's task events to reach its timeline.
JOB_TIMEOUT, TIMELINE_FLUSH_S = 120.0, 3.0
#: The children's module (``python -m``) and how long one may run.
MODULE, CHILD_TIMEOUT = "bench.bench_fixed_costs", 1800.0
#: What the raytide child's first start-up times on the driver: steps of ``rt.run`` (lease and
#: put_plan happen inside lease_hosts) and ``job.wait_ready``.
DRIVER_STEPS = ((runtime, "compile_plan", "compile"), (JobPlacement, "__init__", "lease_hosts"),
                (runtime.Job, "_start", "start_hosts"),
                (HostPool, "lease", "lease"), (ray, "put", "put_plan"),
                (runtime.Job, "wait_ready", "wait_progress_host"))


# -- start-up ------------------------------------------------------------------------------


def startup_flow() -> rt.Dataflow:
    """The word count flow of the start-up measurements (its input is fed by ``job.push``)."""
    flow = rt.Dataflow("startup")
    flow.input("lines").flat_map(str.split).count_by_key(lambda word: word).output("counts")
    return flow


def started_job(parallelism: int) -> tuple[float, dict[str, int]]:
    """Start :func:`startup_flow`, wait until every host answers, let it finish; ``(seconds to
    ready, the process id of each of its actors, by name: job.hosts())``."""
    started = time.perf_counter()
    with rt.run(startup_flow(), parallelism=parallelism) as job:
        job.wait_ready()
        seconds = time.perf_counter() - started
        job.close("lines")
        job.wait(timeout=JOB_TIMEOUT)
        return seconds, job.hosts()


@contextlib.contextmanager
def timing(steps: tuple[tuple[Any, str, str], ...], seconds: dict[str, float]) -> Iterator[None]:
    """Wrap every ``(owner, attribute, label)`` of ``steps`` to add its calls' seconds to
    ``seconds[label]`` (this process only; restored on exit)."""
    originals = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in steps]

    def timed(function: Callable[..., Any], label: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - started
        return call

    try:
        for (owner, attribute, original), (_, _, label) in zip(originals, steps):
            setattr(owner, attribute, timed(original, label))
        yield
    finally:
        for owner, attribute, original in originals:
            setattr(owner, attribute, original)


def profiled_first_startup(parallelism: int) -> dict[str, float]:
    """The first job's start-up, with where its seconds go.

    Driver side (``profile_<step>_s``, seconds inside the step): compiling the plan;
    ``JobPlacement.__init__``, which leases the hosts (submits their creation, not waited for)
    and puts the plan in the object store (within it the lease and the put); ``Job._start``,
    which waits for the vertex hosts to take their roles and connect; waiting for the progress host. Host side,
    from Ray's task events and the processes' start times (``profile_<phase>_s``, seconds
    after ``rt.run`` was called, for the last host):
    ``process_started``, ``worker_ready`` (Ray's worker runtime up, the host's creation
    task starts), ``class_loaded`` (the host class unpickled: raytide imported),
    ``host_created`` (``__init__`` done: the role's modules imported); and
    ``profile_take_max_s``, ``profile_connect_max_s``: the longest ``take`` and ``connect``.
    """
    seconds: dict[str, float] = {}
    wall = time.time()
    with timing(DRIVER_STEPS, seconds):
        first, hosts = started_job(parallelism)
    time.sleep(TIMELINE_FLUSH_S)
    pids = sorted(set(hosts.values()))
    workers = {pid for name, pid in hosts.items() if not name.endswith("/progress")}
    metrics = {"first_startup_s": first, "hosts": float(len(pids)), "workers": float(len(workers))}
    metrics.update({f"profile_{label}_s": seconds.get(label, 0.0) for _, _, label in DRIVER_STEPS})
    metrics.update(host_phases(wall, ray.timeline(), pids))
    return metrics


def host_phases(wall: float, events: list[dict], pids: list[int]) -> dict[str, float]:
    """The host-side phases of :func:`profiled_first_startup` from Ray's timeline ``events``
    (wall-clock microseconds) and the start times of the hosts' processes ``pids``, relative
    to ``wall``, the moment ``rt.run`` was called."""
    spans = [e for e in events if e.get("ph") == "X" and e["ts"] / 1e6 >= wall]
    inits = [e for e in spans if e["name"] == "__init__" and e["cat"].endswith("Host.__init__")]
    workers = {e["tid"] for e in inits}

    def unpickled(init: dict) -> float:
        """When the creation task ``init`` finished unpickling its class and arguments."""
        return max(e["ts"] + e["dur"] for e in spans if e["tid"] == init["tid"]
                   and e["name"] == "task:deserialize_arguments" and init["ts"] <= e["ts"] <= init["ts"] + init["dur"])

    def longest(name: str) -> float:
        return max(e["dur"] for e in spans if e["tid"] in workers and e["name"] == name) / 1e6

    return {
        "profile_process_started_s": max(psutil.Process(pid).create_time() for pid in pids) - wall,
        "profile_worker_ready_s": max(e["ts"] for e in inits) / 1e6 - wall,
        "profile_class_loaded_s": max(unpickled(e) for e in inits) / 1e6 - wall,
        "profile_host_created_s": max(e["ts"] + e["dur"] for e in inits) / 1e6 - wall,
        "profile_take_max_s": longest("take"),
        "profile_connect_max_s": longest("connect"),
    }


def bare_actors(count: int) -> float:
    """Seconds to create ``count`` trivial actors (``num_cpus=0``) and get a ping back from each."""

    class Trivial:  # made here, so that Ray ships it by value and its workers import nothing of bench's
        def ping(self) -> int:
            return 0

    trivial: Any = ray.remote(num_cpus=0)(Trivial)
    started = time.perf_counter()
    actors = [trivial.remote() for _ in range(count)]
    ray.get([actor.ping.remote() for actor in actors], timeout=JOB_TIMEOUT)
    seconds = time.perf_counter() - started
    for actor in actors:
        ray.kill(actor)
    return seconds


# -- the workloads, start-up inside the clock -------------------------------------------------


def wordcount_pair(lines: int, epochs: int, parallelism: int) -> dict[str, float]:
    """Word count end to end: raytide (a ``TextFileSource`` given to ``rt.run``) and the baseline."""
    path = dataset(lines)
    ours, raytide_s, startup_s = raytide_wordcount_end_to_end(lines, epochs, parallelism)
    time.sleep(SETTLE_S)
    theirs, handwritten_s = handwritten_wordcount(path, epochs, warm=False)
    assert ours == theirs, "raytide and the hand-written word count disagree"
    return {"wordcount_raytide_s": raytide_s, "wordcount_raytide_startup_s": startup_s,
            "wordcount_handwritten_s": handwritten_s}


def raytide_wordcount_end_to_end(lines: int, epochs: int, parallelism: int) -> tuple[dict, float, float]:
    """raytide's word count: ``(counts per epoch, seconds end to end, seconds in rt.run)``."""
    ours, raytide_s, startup_s, _ = raytide_wordcount(dataset(lines), lines, epochs, parallelism, warm=False)
    return ours, raytide_s, startup_s


def raytide_mandelbrot_end_to_end(rows: int, parallelism: int) -> tuple[np.ndarray, float, float]:
    """raytide's Mandelbrot: ``(image, seconds end to end, seconds in rt.run)``."""
    started = time.perf_counter()
    ours, startup_s = raytide_mandelbrot(rows, parallelism, MANDELBROT_BATCH)
    return ours, time.perf_counter() - started, startup_s


def raytide_components_end_to_end(nodes: int, parallelism: int) -> tuple[np.ndarray, float]:
    """raytide's connected components: ``(label per node, seconds end to end)``."""
    edges = random_graph_edges(nodes, EDGES_PER_NODE * nodes, 0)
    started = time.perf_counter()
    result = component_labels(edges, parallelism)
    ours = np.arange(nodes, dtype=np.int64)
    ours[result.nodes] = result.labels
    return ours, time.perf_counter() - started


def raytide_example_end_to_end(nodes: int, parallelism: int) -> tuple[np.ndarray, float]:
    """The example's connected components (``components_by_epoch``, the graph as one epoch):
    ``(label per node, seconds end to end)``; checked against union-find after the clock."""
    edges = random_graph_edges(nodes, EDGES_PER_NODE * nodes, 0)
    started = time.perf_counter()
    (labels, _), = example_cc.components_by_epoch([edges], parallelism)  # one epoch: one (labels, None)
    seconds = time.perf_counter() - started
    ours = np.arange(nodes, dtype=np.int64)
    ours[labels.nodes] = labels.labels
    assert np.array_equal(ours, components_union_find(nodes, edges)), "the example's labels differ from union-find"
    return ours, seconds


def mandelbrot_pair(rows: int, parallelism: int) -> dict[str, float]:
    """Mandelbrot end to end: raytide's ``map`` and the baseline's actor pool."""
    ours, raytide_s, startup_s = raytide_mandelbrot_end_to_end(rows, parallelism)
    time.sleep(SETTLE_S)
    started = time.perf_counter()
    theirs = mandelbrot_ray(rows, rows, n_actors=parallelism, rows_per_call=MANDELBROT_BATCH)
    handwritten_s = time.perf_counter() - started
    assert np.array_equal(ours, theirs), "raytide and the hand-written Mandelbrot disagree"
    return {"mandelbrot_raytide_s": raytide_s, "mandelbrot_raytide_startup_s": startup_s,
            "mandelbrot_handwritten_s": handwritten_s}


def components_pair(nodes: int, parallelism: int) -> dict[str, float]:
    """Connected components end to end: ``component_labels`` and ``connected_components_ray``."""
    edges = random_graph_edges(nodes, EDGES_PER_NODE * nodes, 0)
    reference = components_union_find(nodes, edges)
    ours, raytide_s = raytide_components_end_to_end(nodes, parallelism)
    time.sleep(SETTLE_S)
    started = time.perf_counter()
    theirs, _, _ = connected_components_ray(nodes, edges, n_actors=parallelism)
    handwritten_s = time.perf_counter() - started
    assert np.array_equal(ours, reference) and np.array_equal(theirs, reference), "components differ from union-find"
    return {"components_raytide_s": raytide_s, "components_handwritten_s": handwritten_s}


# -- the children and the parent ----------------------------------------------------------


def fresh_ray() -> None:
    """What both children do before their clocks: a Ray of their own, then a pause for its start."""
    ensure_ray()
    time.sleep(SETTLE_S)


def raytide_child(lines: int, epochs: int, nodes: int, rows: int, parallelism: int, later_jobs: int) -> dict[str, float]:
    """Steps 1 to 3 of the module docstring, in one fresh Ray."""
    fresh_ray()
    metrics = profiled_first_startup(parallelism)
    metrics["later_startup_s"] = statistics.median(started_job(parallelism)[0] for _ in range(later_jobs))
    for pair in (lambda: wordcount_pair(lines, epochs, parallelism), lambda: mandelbrot_pair(rows, parallelism),
                 lambda: components_pair(nodes, parallelism)):
        time.sleep(SETTLE_S)
        metrics.update(pair())
    return metrics


def bare_child(actors: int, metric: str) -> dict[str, float]:
    """``metric``: seconds to create ``actors`` trivial actors, in one fresh Ray."""
    fresh_ray()
    return {metric: bare_actors(actors)}


def handwritten_end_to_end(workload: str, lines: int, epochs: int, nodes: int, rows: int, parallelism: int) -> float:
    """Seconds of ``workload``'s hand-written pipeline, its actors created inside the clock (its input made before)."""
    if workload == "wordcount":
        return handwritten_wordcount(dataset(lines), epochs, warm=False)[1]
    edges = random_graph_edges(nodes, EDGES_PER_NODE * nodes, 0) if workload == "components" else None
    started = time.perf_counter()
    if edges is None:
        mandelbrot_ray(rows, rows, n_actors=parallelism, rows_per_call=MANDELBROT_BATCH)
    else:
        connected_components_ray(nodes, edges, n_actors=parallelism)
    return time.perf_counter() - started


def first_job_child(workload: str, lines: int, epochs: int, nodes: int, rows: int, parallelism: int,
                    later_jobs: int, side: str = "raytide") -> dict[str, float]:
    """``<workload>_first_job_s``: raytide's side of one workload as the first job of a fresh Ray
    (its hosts start inside the clock; ``later_jobs`` is not used here); ``side="handwritten"``:
    ``<workload>_handwritten_first_job_s``, the hand-written pipeline's instead. ``..._cpu_s``: the
    CPU seconds every process of its Ray (not the driver, whose input and checks differ) used in
    that time, its prestarted workers' boot before it excluded: a loaded machine moves it less than the wall clock.
    A process gone by then counts nothing (the hand-written pipelines kill their actors): compare raytide's with raytide's."""
    fresh_ray()
    before = workers_cpu()
    if side == "handwritten":  # the baseline's side instead (:data:`BASELINES`)
        seconds = handwritten_end_to_end(workload, lines, epochs, nodes, rows, parallelism)
        return {f"{workload}_handwritten_first_job_s": seconds,
                f"{workload}_handwritten_first_job_cpu_s": cpu_seconds(list(workers_cpu()), before)}
    runs: dict[str, Callable[[], tuple]] = {
        "wordcount": lambda: raytide_wordcount_end_to_end(lines, epochs, parallelism),
        "mandelbrot": lambda: raytide_mandelbrot_end_to_end(rows, parallelism),
        "components": lambda: raytide_components_end_to_end(nodes, parallelism),
        "example": lambda: raytide_example_end_to_end(nodes, parallelism),
    }
    seconds = runs[workload]()[1]
    return {f"{workload}_first_job_s": seconds,
            f"{workload}_first_job_cpu_s": cpu_seconds(list(workers_cpu()), before)}


CHILDREN: dict[str, Callable[..., dict[str, float]]] = {"raytide": raytide_child, "bare": bare_child,
                                                         "first_job": first_job_child}


def child(part: str, **params: Any) -> dict[str, float]:
    """A child's measurement: ``part`` is a key of :data:`CHILDREN`."""
    return CHILDREN[part](**params)


def measure(lines: int, epochs: int, nodes: int, rows: int, parallelism: int, later_jobs: int,
            bytecode: bool) -> dict[str, float]:
    """One run: the raytide child, the bare children and the first-job children, each in a
    fresh process; ``bytecode``: with every module's bytecode compiled beforehand, as
    ``bench startup`` (:func:`~bench.harness.bytecode_env`)."""
    dataset(lines)  # written once, outside every clock
    params = {"lines": lines, "epochs": epochs, "nodes": nodes, "rows": rows, "parallelism": parallelism,
              "later_jobs": later_jobs}
    env = bytecode_env(bytecode)
    metrics = run_child(MODULE, {"part": "raytide", **params}, env=env, timeout=CHILD_TIMEOUT, ray_address="local")
    time.sleep(SETTLE_S)
    for actors, metric in ((int(metrics["hosts"]), "bare_actors_s"), (int(metrics["workers"]), "bare_workers_s")):
        time.sleep(SETTLE_S)
        metrics.update(run_child(MODULE, {"part": "bare", "actors": actors, "metric": metric}, env=env,
                                 timeout=CHILD_TIMEOUT, ray_address="local"))
    for workload in WORKLOADS:
        time.sleep(SETTLE_S)
        metrics.update(run_child(MODULE, {"part": "first_job", "workload": workload, **params}, env=env,
                                 timeout=CHILD_TIMEOUT, ray_address="local"))
    for workload in BASELINES:
        time.sleep(SETTLE_S)
        metrics.update(run_child(MODULE, {"part": "first_job", "workload": workload, "side": "handwritten", **params},
                                 env=env, timeout=CHILD_TIMEOUT, ray_address="local"))
    return metrics


if __name__ == "__main__":
    child_main(child)
