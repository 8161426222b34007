"""Spark -> dataflow ingestion: a DataFrame into the input vertices of a running raytide job, vs ``ray.data.from_spark``.

Run with ``python -m bench spark_ingest --repeat 3``. The DataFrame is ``rows`` rows
(default 1,000,000) of ``(id bigint, s string)`` in ``partitions`` Spark partitions,
cached in Spark before any clock starts, so both sides time the Spark -> Ray conversion
and the reading, not the data generation. Both use the same RayDP conversion (Spark
executors write Arrow, Ray tasks fetch it into the object store) and then read every
block with the same :func:`touch` (row count, Arrow bytes and a checksum over every value):

* ``raytide``: the job ``flow.input("rows").map_batches(touch, batch_format="pyarrow")
  .output("n")`` with ``parallelism`` replicas is started first (its actors are up before
  the clock, and :func:`settle` has run since they started, see below). The clock runs
  from ``job.feed("rows", from_spark(df))`` -- the DataFrame
  handed to the running job -- until ``job.wait()`` says the job finished: the
  conversion, the blocks fetched by the input replicas (each reads its share), the
  touch, the sink, the progress protocol and the finished-job notification.
* ``ray_data``: ``ray.data.from_spark(df)`` then iterating its blocks on the driver
  (``iter_batches(batch_size=None, batch_format="pyarrow")``, one batch per block)
  with the same touch; RayDP's Spark-side cache is released after the clock
  (``SparkSource`` releases it inside raytide's clock, ~10 ms).

Steady state, on both sides: just before each clock starts, :func:`settle` waits
``SETTLE_S`` seconds and converts a tiny DataFrame through the same RayDP path. A job's
actors take Ray's idle worker processes (those that had RayDP's fetch code imported)
and Ray starts replacements; on 2 busy cores those start-ups (1-2 s of CPU each)
overlapped the measured conversion and made it about 1.5x slower right after
``rt.run`` (the same happens after creating 8 plain idle actors): a start-up transient
that a job which has been running for a while does not have, so it is kept out of the
clock. The baseline gets the same ``settle`` (for it, a no-op in effect).

Both sides first run ``WARMUPS`` times uncounted (JVM and worker warm-up), then each
repetition runs ``rounds`` rounds of both, in alternating order (AB BA AB ...), and takes
each side's median seconds: the conversion time alone varies by 2x from run to run on a
busy machine, and the same conversion is most of both sides' time (raytide's own
part, from the blocks in the object store to the finished job, measured ~0.1 s).
Throughput is rows (and Arrow MB) over those seconds; the ratio is raytide's over the
baseline's, measured in the same run. The checksums must agree.
Ray runs locally with ``num_cpus=2`` (this machine has 2 cores); Spark gets one of them.
"""

from __future__ import annotations

import atexit
import itertools
import statistics
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray

import raytide as rt
from bench.harness import ensure_ray

PARAMS = {"rows": 1_000_000, "partitions": 8, "parallelism": 2, "rounds": 3}
RATIOS = [
    ("raytide / ray.data rows per second", "raytide_rows_per_s", "ray_data_rows_per_s"),
    ("raytide / ray.data MB per second", "raytide_mb_per_s", "ray_data_mb_per_s"),
]

#: Uncounted runs of each side before the first measurement (the JVM keeps speeding up the conversion).
WARMUPS = 2
#: Seconds to wait before each clock (see :func:`settle`).
SETTLE_S = 3.0

_state: dict[str, Any] = {}
_turn = itertools.count()


def touch(table: pa.Table) -> list[tuple[int, int, int]]:
    """Read every value of a block: ``[(rows, Arrow bytes, checksum)]``."""
    checksum = (pc.sum(table.column("id")).as_py() or 0) + (pc.sum(pc.utf8_length(table.column("s"))).as_py() or 0)
    return [(table.num_rows, table.nbytes, checksum)]


def add(parts) -> tuple[int, int, int]:
    rows = nbytes = checksum = 0
    for r, b, c in parts:
        rows, nbytes, checksum = rows + r, nbytes + b, checksum + c
    return rows, nbytes, checksum


def ingest_flow() -> rt.Dataflow:
    flow = rt.Dataflow("spark-ingest")
    flow.input("rows").map_batches(touch, batch_format="pyarrow").output("n")
    return flow


def settle() -> None:
    """Before a clock starts: let Ray finish starting workers, then convert a tiny DataFrame through RayDP.

    The tiny conversion (8 partitions of 100 rows, cached) leaves warm workers with
    RayDP's fetch code imported for the measured conversion.
    """
    from raydp.spark import release_spark_recoverable

    from raytide.integrations.spark import dataframe_to_blocks

    time.sleep(SETTLE_S)
    ray.get(dataframe_to_blocks(_state["tiny"]))
    release_spark_recoverable(_state["tiny"])


def via_raytide(frame, parallelism: int) -> tuple[tuple[int, int, int], float]:
    """Seconds from handing ``from_spark(frame)`` to a running job until it finished."""
    from raytide.integrations.spark import from_spark

    with rt.run(ingest_flow(), parallelism=parallelism) as job:
        settle()
        started = time.perf_counter()
        job.feed("rows", from_spark(frame))
        job.wait(timeout=600)
        elapsed = time.perf_counter() - started
        totals = add(part for records in job.collect("n").values() for part in records)
    return totals, elapsed


def via_ray_data(frame, _parallelism: int) -> tuple[tuple[int, int, int], float]:
    """Seconds for ``ray.data.from_spark(frame)`` and iterating its blocks on the driver."""
    from raydp.spark import release_spark_recoverable

    settle()
    started = time.perf_counter()
    dataset = ray.data.from_spark(frame)
    totals = add(part for block in dataset.iter_batches(batch_size=None, batch_format="pyarrow") for part in touch(block))
    elapsed = time.perf_counter() - started
    release_spark_recoverable(frame)
    return totals, elapsed


def _frame(rows: int, partitions: int):
    key = (rows, partitions)
    if _state.get("key") != key:
        from raytide.integrations.spark import start_spark, stop_spark

        ensure_ray()
        spark = start_spark("raytide-bench-ingest", configs={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        atexit.register(stop_spark)
        frame = spark.range(0, rows, numPartitions=partitions).selectExpr("id", "concat('row-', cast(id as string)) as s")
        frame.cache().count()
        tiny = spark.range(0, 800, numPartitions=8).selectExpr("id", "cast(id as string) as s")
        tiny.cache().count()
        _state.update(key=key, frame=frame, tiny=tiny)
        for way in (via_raytide, via_ray_data) * WARMUPS:  # JVM and worker warm-up, not counted
            way(frame, 2)
    return _state["frame"]


def measure(rows: int, partitions: int, parallelism: int, rounds: int) -> dict[str, float]:
    frame = _frame(rows, partitions)
    ways = {"raytide": via_raytide, "ray_data": via_ray_data}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    found = {}
    for _ in range(rounds):
        order = list(ways) if next(_turn) % 2 == 0 else list(reversed(ways))
        for name in order:
            found[name], elapsed = ways[name](frame, parallelism)
            seconds[name].append(elapsed)
    (rows_a, nbytes, sum_a), (rows_b, _, sum_b) = found["raytide"], found["ray_data"]
    if (rows_a, sum_a) != (rows_b, sum_b) or rows_a != rows:
        raise AssertionError(f"raytide read {rows_a} rows (checksum {sum_a}), ray.data {rows_b} ({sum_b}); expected {rows}")
    metrics = {}
    for name in ways:
        median = statistics.median(seconds[name])
        metrics.update({f"{name}_s": median, f"{name}_rows_per_s": rows / median, f"{name}_mb_per_s": nbytes / median / 1e6})
    return metrics
