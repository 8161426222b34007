"""Epoch latency and progress traffic.

Latency on a 3-stage pipeline: the driver pushes a small epoch (10 records) and closes
it (advances the input); the clock stops when that epoch's results reach the driver
through ``job.results``. The job is started once and warmed up; 200 epochs are measured
one after the other.

Keyed latency, as a user measures it through the public API (raytide issue 17): a
2-stage keyed pipeline, ``input -> map -> count_by_key`` at parallelism 2 (chained as
by default). Per epoch, the clock runs from just before ``job.push`` of a small epoch,
through ``job.advance``, to ``next(job.results(...))`` returning its counts; 1,000
epochs one after the other, after 20 of warm-up. ``count_by_key`` emits when its
notification is due: the input replicas' epoch tokens make it due at the count replicas
(``raytide/engine/epoch_tokens.py``), and the driver learns the epoch is complete from the
progress actor. Its progress batches per data message are reported too.

Its floors, measured in the same run (``bench/baselines/relay_ray.py``): plain Ray calls
relaying 100 bytes one after the other, with a long poll at the driver's end, over as
many hops as the critical path. That path was six Ray hops (driver -> input replica ->
count replica -> progress actor -> count replica -> progress actor -> driver): the issue's
comparator, ``relay_6_hops_*``. With epoch tokens it is four (driver -> input replica ->
count replica -> progress actor -> driver): ``relay_4_hops_*``, the hand-written pipeline
no implementation of the protocol can beat on this machine. And the epoch's every call,
not only its critical path, made by plain Ray actors that do nothing else
(``bench/baselines/keyed_calls_ray.py``, ``keyed_calls_ray_*``): on two cores the calls
off the critical path compete with it, so this is the floor of raytide's message pattern,
and raytide's latency over it is raytide's own work.

Progress traffic: progress batches the progress actor applied per data message
delivered to a vertex, on a word count with 100 epochs of 200 lines (steady state: many
data batches per epoch).
"""

from __future__ import annotations

import statistics
import time

import raytide as rt
from bench.baselines.keyed_calls_ray import keyed_calls_latencies
from bench.baselines.relay_ray import relay_latencies
from bench.harness import ensure_ray

PARAMS = {"epochs": 200, "keyed_epochs": 1000, "parallelism": 2}
RATIOS = [("keyed latency / six-hop Ray relay (median)", "keyed_latency_median_ms", "relay_6_hops_median_ms"),
          ("keyed latency / four-hop Ray relay (median)", "keyed_latency_median_ms", "relay_4_hops_median_ms"),
          ("keyed latency / its calls by plain Ray actors (median)", "keyed_latency_median_ms", "keyed_calls_ray_median_ms"),
          ("its calls by plain Ray actors / six-hop Ray relay (median)", "keyed_calls_ray_median_ms", "relay_6_hops_median_ms")]
#: Ray hops on the critical path of a small epoch of the keyed pipeline, before and with
#: epoch tokens (see the module docstring).
ISSUE_HOPS, CRITICAL_HOPS = 6, 4
#: Epochs run before the clock starts.
WARMUP = 20
#: Records of each small epoch.
EPOCH_RECORDS = 10


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


def _keyed_pipeline() -> rt.Dataflow:
    flow = rt.Dataflow("keyed-latency")
    flow.input("x").map(lambda x: x % 5).count_by_key(lambda k: k).output("counts")
    return flow


def keyed_epoch_latencies(epochs: int, parallelism: int,
                          recovery: rt.Recovery | None = None) -> tuple[list[float], float]:
    """Seconds from each small epoch's push to its counts at the driver, and the job's
    progress batches per data message; ``recovery``: the job's (none: no snapshots)."""
    latencies = []
    records = list(range(EPOCH_RECORDS))
    expected = sorted((k, EPOCH_RECORDS // 5) for k in range(5))
    with rt.run(_keyed_pipeline(), parallelism=parallelism, recovery=recovery) as job:
        job.wait_ready()
        results = job.results("counts", timeout=600)
        for epoch in range(WARMUP + epochs):
            started = time.perf_counter()
            job.push("x", records, epoch)
            job.advance("x", epoch + 1)
            got, counts = next(results)
            elapsed = time.perf_counter() - started
            assert got == epoch and sorted(counts) == expected, (got, counts)
            if epoch >= WARMUP:
                latencies.append(elapsed)
        stats = job.stats()
        job.close("x")
    return latencies, stats["progress_batches"] / stats["data_messages"]


def progress_per_batch(parallelism: int) -> float:
    """Progress batches applied per data message, on a word count at steady state."""
    flow = rt.Dataflow("progress")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    epochs = [[f"w{i % 50} w{(i * 7) % 13} x" for i in range(200)] for _ in range(100)]
    with rt.run(flow, inputs={"lines": epochs}, parallelism=parallelism, batch_size=10) as job:
        job.wait(timeout=600)
        stats = job.stats()
    return stats["progress_batches"] / stats["data_messages"]


def _median_p99_ms(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.99) - 1] * 1e3


def measure(epochs: int, keyed_epochs: int, parallelism: int) -> dict[str, float]:
    ensure_ray()
    median, p99 = _median_p99_ms(epoch_latencies(epochs, parallelism))
    keyed, keyed_progress = keyed_epoch_latencies(keyed_epochs, parallelism)
    keyed_median, keyed_p99 = _median_p99_ms(keyed)
    relay_median, relay_p99 = _median_p99_ms(relay_latencies(ISSUE_HOPS, keyed_epochs))
    floor_median, floor_p99 = _median_p99_ms(relay_latencies(CRITICAL_HOPS, keyed_epochs))
    calls, calls_progress = keyed_calls_latencies(parallelism, keyed_epochs)
    calls_median, calls_p99 = _median_p99_ms(calls)
    return {
        "latency_median_ms": median,
        "latency_p99_ms": p99,
        "keyed_latency_median_ms": keyed_median,
        "keyed_latency_p99_ms": keyed_p99,
        "keyed_progress_batches_per_data_message": keyed_progress,
        "relay_6_hops_median_ms": relay_median,
        "relay_6_hops_p99_ms": relay_p99,
        "relay_4_hops_median_ms": floor_median,
        "relay_4_hops_p99_ms": floor_p99,
        "keyed_calls_ray_median_ms": calls_median,
        "keyed_calls_ray_p99_ms": calls_p99,
        "keyed_calls_ray_progress_calls_per_epoch": calls_progress,
        "progress_batches_per_data_message": progress_per_batch(parallelism),
    }
