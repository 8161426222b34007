"""The first job's start-up (issue 76) against plain Ray actors that import NumPy, in one process.

Each run is one child process (``python -m bench.bench_startup``) that starts two fresh local
Rays one after the other (``ray.init(num_cpus=2)``, a pause of :data:`SETTLE_S` in which Ray's
prestarted workers finish starting, the measurement, ``ray.shutdown()``), in an order that
alternates from run to run, because whichever start-up comes first in a process has its files
cached and the other does not. Before either, the child imports what Ray's serialization
context imports in the driver at its first call (every module ``ray.util.serialization_addons.apply``
imports: pyarrow, pydantic and its v1 fields, Ray's pydantic and Arrow serializers), so that neither
clock holds it (whichever side came first in a child paid its 25-30 ms until 2026-11-30):

* ``first_job_s``: raytide's first job in its Ray, the word count flow of
  ``bench_fixed_costs`` (``flat_map(str.split).count_by_key``, ``parallelism`` 2: two vertex
  hosts, the input replicas and the progress actor seated in them), timed from before ``rt.run`` to the first result in
  ``job.results`` (one line pushed, the input closed);
* ``numpy_actors_s``: as many plain Ray actors as the job's processes (``num_cpus=0`` like
  raytide's hosts, their class shipped by value), each importing NumPy in ``__init__``, timed
  from before their creation to a ping answered by every one.

The child has imported ``raytide`` and ``rt.run``'s modules before either clock (as a program
that built its dataflow has); ``driver_import_s`` is what that import of ``rt.run`` took, in
the fresh process, before any Ray started (``first_job_with_import_s`` adds it to the job's
start-up: a program's first ``rt.run`` pays both). ``first_job_cpu_s`` and ``numpy_actors_cpu_s`` are
the CPU seconds the measured processes (the driver and the actors) used inside each clock
(a prestarted worker's boot before it excluded): on a loaded machine they move less than the
wall clock; ``first_job_driver_cpu_s`` and ``numpy_actors_driver_cpu_s`` are the driver's part
(its serial part comes first: Ray exports an actor class, disassembling every method, before
the first actor of it is created).

``--param trace=DIR`` writes each run's two Ray timelines to ``DIR`` (Chrome's trace format, for
Perfetto): when each host's creation, its class's and arguments' loading, its ``__init__`` and each
call ran, beside the NumPy actors' (how ``docs/hosts.md``'s breakdown of a first job was read).

``--param bytecode=False`` runs the children in the environment as it is: where it sets
``PYTHONDONTWRITEBYTECODE`` (as the machine of ``docs/benchmarks.md`` does) and the checkout
has no ``__pycache__``, every host compiles raytide's modules from source, which an installed
raytide does not; by default the children have every module's bytecode, as after ``pip install``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow.json  # noqa: F401  (see the module docstring)
import pydantic.main  # noqa: F401
import pydantic.v1.fields  # noqa: F401
import ray
import ray._common.pydantic_compat  # noqa: F401
import ray._private.arrow_serialization  # noqa: F401

import raytide as rt
from bench.bench_soak import child_main, run_child
from bench.harness import bytecode_env

PARAMS = {"parallelism": 2, "bytecode": True, "trace": ""}
REPEAT = 6
RATIOS = [
    ("first job's start-up / as many plain actors importing NumPy, same process (issue 76: <= 1.2)",
     "first_job_s", "numpy_actors_s"),
    ("the same in CPU seconds of the measured processes", "first_job_cpu_s", "numpy_actors_cpu_s"),
    ("the same with rt.run's import in a fresh process added to the job's side", "first_job_with_import_s",
     "numpy_actors_s"),
]
#: The children's module (``python -m``) and how long one may run.
MODULE, CHILD_TIMEOUT = "bench.bench_startup", 600.0
#: Seconds a measured start-up may take.
TIMEOUT = 120.0
#: Seconds between ``ray.init`` and a clock (Ray's prestarted workers start meanwhile), and after a shutdown.
SETTLE_S = 3.0
#: Seconds waited before a timeline is read: Ray's workers report their tasks' events once a second.
TIMELINE_FLUSH_S = 2.0


def cpu_seconds(pids: list[int], before: dict[int, float] | None = None) -> float:
    """User and system CPU seconds the processes ``pids`` used since ``before`` (each one's CPU
    seconds then, from :func:`workers_cpu`; a process not in it started since: all of its own);
    those gone count 0."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system - (before or {}).get(pid, 0.0)
    return total


def workers_cpu() -> dict[int, float]:
    """The CPU seconds used so far by every process this driver's Ray started (its workers,
    prestarted ones included: they boot before a clock starts, and what they used then is not
    the start-up's)."""
    used = {}
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used[process.pid] = times.user + times.system
    return used


def first_job(parallelism: int) -> tuple[float, float, float, int]:
    """``(seconds from rt.run to the first result, CPU seconds of the driver and the hosts, of the driver alone,
    processes)``."""
    flow = rt.Dataflow("startup")
    flow.input("lines").flat_map(str.split).count_by_key(lambda word: word).output("counts")
    cpu, workers = time.process_time(), workers_cpu()
    started = time.perf_counter()
    job = rt.run(flow, parallelism=parallelism)
    job.push("lines", ["to be or not to be"])
    job.close("lines")
    next(iter(job.results("counts", timeout=TIMEOUT, progress=False)))
    seconds = time.perf_counter() - started
    driver_cpu = time.process_time() - cpu
    pids = sorted(set(job.hosts().values()))
    hosts_cpu = cpu_seconds(pids, workers)
    job.wait(timeout=TIMEOUT)
    return seconds, driver_cpu + hosts_cpu, driver_cpu, len(pids)


def numpy_actors(count: int) -> tuple[float, float, float]:
    """``(seconds to create count actors that import NumPy and get a ping back from each, their CPU
    seconds and the driver's, the driver's alone)``."""

    class NumpyActor:  # made here, so that Ray ships it by value and its workers import nothing of bench's
        def __init__(self) -> None:
            import numpy  # noqa: F401

        def ping(self) -> int:
            return os.getpid()

    remote: Any = ray.remote(num_cpus=0)(NumpyActor)
    cpu, workers = time.process_time(), workers_cpu()
    started = time.perf_counter()
    actors = [remote.remote() for _ in range(count)]
    pids = ray.get([actor.ping.remote() for actor in actors], timeout=TIMEOUT)
    seconds = time.perf_counter() - started
    driver_cpu = time.process_time() - cpu
    return seconds, driver_cpu + cpu_seconds(pids, workers), driver_cpu  # the actors end with their Ray


def in_fresh_ray(measure: Any, timeline: str = "") -> Any:
    """``measure()`` in a Ray of its own, started and settled first, shut down after; with ``timeline``
    (a file), Ray's timeline of that Ray's tasks written there first (Chrome's trace format: each actor's
    creation, its arguments' deserialization, each call, on each worker; open it in Perfetto)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        time.sleep(SETTLE_S)
        result = measure()
        if timeline:
            time.sleep(TIMELINE_FLUSH_S)
            ray.timeline(filename=timeline)
        return result
    finally:
        ray.shutdown()
        time.sleep(SETTLE_S)


def child(parallelism: int, job_first: bool, trace: str = "") -> dict[str, float]:
    """Both start-ups in this process, each in a fresh Ray, the job's first if ``job_first``; with ``trace``,
    each Ray's timeline in ``trace-job.json`` and ``trace-actors.json``."""
    started = time.perf_counter()
    rt.run  # noqa: B018  (rt.run's modules, imported on first use)
    metrics = {"driver_import_s": time.perf_counter() - started}
    processes = parallelism  # the counting replicas' hosts (the input replicas and the progress actor seated in them)
    for part in ("job", "actors") if job_first else ("actors", "job"):
        if part == "job":
            seconds, cpu, driver_cpu, hosts = in_fresh_ray(lambda: first_job(parallelism), trace and f"{trace}-job.json")
            assert hosts == processes, f"the job has {hosts} hosts, not {processes}"
            metrics.update(first_job_s=seconds, first_job_cpu_s=cpu, first_job_driver_cpu_s=driver_cpu,
                           first_job_with_import_s=seconds + metrics["driver_import_s"])
        else:
            seconds, cpu, driver_cpu = in_fresh_ray(lambda: numpy_actors(processes), trace and f"{trace}-actors.json")
            metrics.update(numpy_actors_s=seconds, numpy_actors_cpu_s=cpu, numpy_actors_driver_cpu_s=driver_cpu)
    return metrics


_RUNS = {"count": 0}


def measure(parallelism: int, bytecode: bool, trace: str) -> dict[str, float]:
    """One run: a child process measuring both start-ups, the job's first in every other run;
    ``bytecode``: with every module's bytecode compiled beforehand (:func:`~bench.harness.bytecode_env`);
    ``trace``: a folder for each run's two Ray timelines (``run1-job.json``, ``run1-actors.json``, ...)."""
    _RUNS["count"] += 1
    timelines = ""
    if trace:
        Path(trace).mkdir(parents=True, exist_ok=True)
        timelines = str(Path(trace).resolve() / f"run{_RUNS['count']}")
    return run_child(MODULE, {"parallelism": parallelism, "job_first": _RUNS["count"] % 2 == 1, "trace": timelines},
                     env=bytecode_env(bytecode), timeout=CHILD_TIMEOUT, ray_address="local")


if __name__ == "__main__":
    child_main(child)
