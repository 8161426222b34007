"""One large NumPy array through an exchange to an output: each process's peak memory, in multiples of the array.

The driver builds an array of ``mb`` MiB, pushes it as the one record ``("big", array)``
of epoch 0 into ``input -> exchange -> output`` (parallelism 2), reads it back with
``job.results`` and checks that it is bit-identical (by a hash of each: ``==`` would
build a boolean array as large as the record). A process's growth is its peak resident
memory from the moment the array exists until the check is done, minus its resident
memory at that moment, in multiples of the array's size (``*_peak_x``).

The peak is the kernel's high-water mark (``VmHWM`` in ``/proc/<pid>/status``, reset
through ``/proc/<pid>/clear_refs`` when the array exists), so no short-lived copy is
missed, as a thread sampling the driver's memory would miss those made while the
interpreter lock is held. Resident memory counts the pages of Ray's object store (shared
memory) that a process touched: the driver writes the array into the store once when it
pushes it and reads the copy that comes back, so 2x is its floor. Linux only. Each run is
a child process with a Ray of its own (see :func:`bench.bench_soak.run_child`);
docs/large-records.md explains the numbers.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

import raytide as rt
from bench.bench_soak import MIB, child_main, process_ids, resident_mib, run_child
from bench.harness import ensure_ray

PARAMS = {"mb": 200}
RATIOS: list = []


def reset_peak(pid: int) -> None:
    """Start process ``pid``'s high-water mark of resident memory afresh, at its current size."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_mib(pid: int) -> float:
    """Process ``pid``'s high-water mark of resident memory in MiB since the last :func:`reset_peak`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def _flow() -> rt.Dataflow:
    flow = rt.Dataflow("large-record")
    flow.input("records").exchange(lambda record: record[0], name="spread").output("out")
    return flow


def _digest(array: np.ndarray) -> bytes:
    return hashlib.sha256(memoryview(array)).digest()


def large_record(mb: int) -> dict[str, float]:
    """Run the measurement in this process (a fresh one: it starts Ray)."""
    ensure_ray()
    with rt.run(_flow(), parallelism=2) as job:
        job.wait_ready()
        pids = process_ids(job)
        array = np.random.default_rng(0).integers(0, 256, size=mb * MIB, dtype=np.uint8)
        before = {name: resident_mib(pid) for name, pid in pids.items()}
        for pid in pids.values():
            reset_peak(pid)
        started = time.perf_counter()
        job.push("records", [("big", array)])
        job.close("records")
        [(_, [(key, back)])] = list(job.results("out", timeout=300))
        identical = key == "big" and back.dtype == array.dtype and _digest(back) == _digest(array)
        seconds = time.perf_counter() - started
        growth = {name: (peak_mib(pid) - before[name]) / mb for name, pid in pids.items()}
    return {
        "seconds": seconds,
        "identical": float(identical),
        "driver_peak_x": growth["driver"],
        "progress_peak_x": growth["progress"],
        "vertex_peak_x": max(x for name, x in growth.items() if name not in ("driver", "progress")),
    }


def measure(mb: int) -> dict[str, float]:
    return run_child("bench.bench_large_record", {"mb": mb})


if __name__ == "__main__":
    child_main(large_record)
