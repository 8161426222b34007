"""A soak: the memory of every process of a job over thousands of epochs, results consumed.

A streaming job runs for weeks, so once its results are consumed no process may grow
with the number of epochs. The job is ``map -> count_by_key`` at parallelism 2, fed from
the driver one small epoch at a time and read with ``job.results`` a few epochs behind
(:data:`LAG`), so that epochs are in flight all along. Each epoch's output is 80
``(key, count)`` pairs with 200-character keys, about 25 KB of Python objects on the
driver: a driver that kept every epoch would grow by about 25 MB per 1,000 epochs.

The resident set size (RSS) of the driver, the progress actor and every vertex actor is
read after a warm-up and at the end; ``*_growth_mib_per_1000_epochs`` is the figure that
must stay near zero. Every run is a child process (``python -m bench.bench_soak``) with a
Ray of its own, so that the measured driver and actors hold nothing but this job.

This module also holds what the memory benchmarks and tests share: the child process
and the memory of a job's processes.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

import raytide as rt
from bench.harness import ROOT, ensure_ray

PARAMS = {"epochs": 5000, "warmup": 500, "parallelism": 2}
RATIOS: list = []

MIB = 1 << 20
#: Epochs the driver pushes ahead of the one it reads.
LAG = 4
#: Keys per epoch, their length, and records per key.
KEYS, KEY_CHARS, PER_KEY = 80, 200, 2


# -- what the memory benchmarks and tests share -------------------------------------------


def run_child(module: str, params: dict[str, Any], env: dict[str, str] | None = None,
              timeout: float = 900, ray_address: str | None = None) -> dict[str, float]:
    """Run ``python -m module`` with ``params`` in a fresh process (which starts a Ray of its
    own); returns the metrics it printed as JSON on its last line of output. ``ray_address``
    is the child's ``RAY_ADDRESS`` (``"local"``: a new Ray even while others run here)."""
    env = {name: value for name, value in (os.environ if env is None else env).items() if name != "RAY_ADDRESS"}
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    done = subprocess.run([sys.executable, "-m", module, json.dumps(params)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{module} {params} exited with {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(run: Callable[..., dict[str, float]]) -> None:
    """A child's entry point: ``run(**params)`` with the JSON parameters of ``argv[1]``; prints its metrics as JSON."""
    print(json.dumps(run(**json.loads(sys.argv[1]))))


def process_ids(job: Any) -> dict[str, int]:
    """The process id of the driver and of each actor of ``job``: ``driver``, ``progress``
    and ``chain/replica``."""
    return {"driver": os.getpid(), **{name.removeprefix(f"{job.name}/"): pid for name, pid in job.hosts().items()}}


def resident_mib(pid: int) -> float:
    """The resident memory of process ``pid`` in MiB (it counts the pages of Ray's object
    store, shared memory, that the process touched)."""
    return psutil.Process(pid).memory_info().rss / MIB


def private_mib(pid: int) -> float:
    """The memory of process ``pid`` that no other process shares (its unique set size) in
    MiB: unlike the resident size, it does not count the object store's pages the process
    touched, which belong to the store and are bounded by its size."""
    return psutil.Process(pid).memory_full_info().uss / MIB


# -- the soak ------------------------------------------------------------------------------


def _flow() -> rt.Dataflow:
    flow = rt.Dataflow("soak")
    (flow.input("numbers")
        .map(lambda n: f"{n % KEYS:03d}".ljust(KEY_CHARS, "x"), name="key")
        .count_by_key(lambda key: key, name="count")
        .output("counts"))
    return flow


def _resident(pids: dict[str, int]) -> dict[str, float]:
    gc.collect()
    return {name: resident_mib(pid) for name, pid in pids.items()}


def soak(epochs: int, warmup: int, parallelism: int) -> dict[str, float]:
    """Run the soak in this process (a fresh one: it starts Ray); RSS per process, start and end."""
    if not 0 <= warmup < epochs:
        raise ValueError(f"the warm-up ({warmup} epochs) must end before the last of {epochs} epochs")
    ensure_ray()
    numbers = list(range(KEYS * PER_KEY))
    wrong = 0
    with rt.run(_flow(), parallelism=parallelism) as job:
        job.wait_ready()
        pids = process_ids(job)
        results = job.results("counts", timeout=600)

        def check(expected: int) -> None:
            nonlocal wrong
            epoch, records = next(results)
            wrong += epoch != expected or len(records) != KEYS or any(count != PER_KEY for _, count in records)

        started = time.perf_counter()
        for epoch in range(epochs):
            job.push("numbers", numbers, epoch)  # moves the input to ``epoch``: the one before completes
            if epoch >= LAG:
                check(epoch - LAG)
            if epoch == warmup:
                start = _resident(pids)
        job.close("numbers")
        for epoch in range(max(epochs - LAG, 0), epochs):
            check(epoch)
        elapsed = time.perf_counter() - started
        end = _resident(pids)
    metrics = {"seconds_per_1000_epochs": elapsed / epochs * 1000, "wrong_epochs": float(wrong)}
    for name in pids:
        label = name.replace("/", "_")
        metrics[f"{label}_start_mib"] = start[name]
        metrics[f"{label}_end_mib"] = end[name]
        metrics[f"{label}_growth_mib_per_1000_epochs"] = (end[name] - start[name]) / (epochs - warmup) * 1000
    return metrics


def measure(epochs: int, warmup: int, parallelism: int) -> dict[str, float]:
    return run_child("bench.bench_soak", {"epochs": epochs, "warmup": warmup, "parallelism": parallelism})


if __name__ == "__main__":
    child_main(soak)
