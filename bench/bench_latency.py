"""Epoch latency and progress traffic on a 3-stage pipeline.

Latency: the driver pushes a small epoch (10 records) and closes it (advances the
input); the clock stops when that epoch's results reach the driver through
``job.results``. The job is started once and warmed up; 200 epochs are measured one
after the other. Progress traffic: progress batches the progress actor applied per
data message delivered to a vertex, on a word count with 100 epochs of 200 lines
(steady state: many data batches per epoch).
"""

from __future__ import annotations

import statistics
import time

import raytide as rt
from bench.harness import ensure_ray

PARAMS = {"epochs": 200, "parallelism": 2}
RATIOS: list = []


def _pipeline() -> rt.Dataflow:
    flow = rt.Dataflow("latency")
    (flow.input("numbers")
        .map(lambda x: x + 1, name="stage1")
        .exchange(lambda x: x % 7, name="stage2")
        .map(lambda x: x * 2, name="stage3")
        .output("out"))
    return flow


def epoch_latencies(epochs: int, parallelism: int) -> list[float]:
    """Seconds from closing each small epoch to its results at the driver."""
    latencies = []
    with rt.run(_pipeline(), parallelism=parallelism) as job:
        results = job.results("out", timeout=600)
        for epoch in range(epochs + 10):
            job.push("numbers", list(range(10)), epoch)
            started = time.perf_counter()
            job.advance("numbers", epoch + 1)
            got, records = next(results)
            assert got == epoch and len(records) == 10
            if epoch >= 10:  # warm-up
                latencies.append(time.perf_counter() - started)
        job.close("numbers")
    return latencies


def progress_per_batch(parallelism: int) -> float:
    """Progress batches applied per data message, on a word count at steady state."""
    flow = rt.Dataflow("progress")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    epochs = [[f"w{i % 50} w{(i * 7) % 13} x" for i in range(200)] for _ in range(100)]
    with rt.run(flow, inputs={"lines": epochs}, parallelism=parallelism, batch_size=10) as job:
        job.wait(timeout=600)
        stats = job.stats()
    return stats["progress_batches"] / stats["data_messages"]


def measure(epochs: int, parallelism: int) -> dict[str, float]:
    ensure_ray()
    latencies = sorted(epoch_latencies(epochs, parallelism))
    return {
        "latency_median_ms": statistics.median(latencies) * 1e3,
        "latency_p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
        "progress_batches_per_data_message": progress_per_batch(parallelism),
    }
