"""Spark -> Ray ingestion: raytide's SparkSource read by parallel Ray readers vs plain ``ray.data.from_spark``.

Both sides use the same RayDP conversion (Spark executors write Arrow, Ray
tasks fetch it into the object store); they differ in how the blocks are then
consumed:

* ``spark_source``: ``from_spark(df).epochs()`` gives the block refs and
  ``--readers`` Ray tasks read them in parallel, as dataflow input replicas
  would;
* ``ray_data``: ``ray.data.from_spark(df)`` then ``iter_batches`` on the
  driver, Ray Data's usual way to consume a dataset.

Each reader touches every value (sums the ids and the string lengths), so a
block is really read, not just mapped. The DataFrame is cached in Spark first,
so the runs time the conversion and the reading, not the data generation.
The two ways run alternately (ABBA...) after ``--warmups`` uncounted runs of
each, so that the JVM's warm-up helps neither; the medians of ``--runs`` runs
are printed, split into conversion and reading, with their ratio.

Usage: ``python bench/bench_spark_ingest.py [--rows 1000000] [--partitions 8] [--runs 5] [--readers 2] [--warmups 2]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import ray


def touch(table: pa.Table) -> tuple[int, int, int]:
    """Read every value of a block: (rows, Arrow bytes, checksum)."""
    checksum = pc.sum(table.column("id")).as_py() or 0
    checksum += pc.sum(pc.utf8_length(table.column("s"))).as_py() or 0
    return table.num_rows, table.nbytes, checksum


def add(totals: Iterable[tuple[int, int, int]]) -> tuple[int, int, int]:
    rows = nbytes = checksum = 0
    for r, b, c in totals:
        rows, nbytes, checksum = rows + r, nbytes + b, checksum + c
    return rows, nbytes, checksum


@ray.remote(num_cpus=0.5)
def read_blocks(*tables: pa.Table) -> tuple[int, int, int]:
    """A reader replica: gets its share of the blocks (fetched by Ray as arguments) and reads them."""
    return add(touch(table) for table in tables)


def via_spark_source(frame, readers: int) -> tuple[tuple[int, int, int], float]:
    """Convert with SparkSource, read with ``readers`` parallel Ray tasks; returns (totals, conversion seconds)."""
    from raytide.integrations.spark import from_spark

    start = time.perf_counter()
    converted = 0.0
    totals = []
    with from_spark(frame) as source:
        for _epoch, blocks in source.epochs():
            converted += time.perf_counter() - start
            shares = [blocks[i::readers] for i in range(readers)]
            totals += ray.get([read_blocks.remote(*share) for share in shares if share])
            start = time.perf_counter()
    return add(totals), converted


def via_ray_data(frame, _readers: int) -> tuple[tuple[int, int, int], float]:
    """Convert with ``ray.data.from_spark``, iterate the batches on the driver."""
    from raydp.spark import release_spark_recoverable

    start = time.perf_counter()
    dataset = ray.data.from_spark(frame)
    converted = time.perf_counter() - start
    totals = add(touch(batch) for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"))
    release_spark_recoverable(frame)
    return totals, converted


def timed(name: str, run: Callable, frame, readers: int, index: int) -> tuple[float, float, int, int]:
    """One run: (total seconds, conversion seconds, rows, Arrow bytes)."""
    start = time.perf_counter()
    (rows, nbytes, checksum), converted = run(frame, readers)
    elapsed = time.perf_counter() - start
    print(
        f"  {name} run {index}: {rows} rows, {nbytes / 1e6:.1f} MB in {elapsed:.2f} s "
        f"(conversion {converted:.2f} s, read {elapsed - converted:.3f} s, checksum {checksum})",
        flush=True,
    )
    return elapsed, converted, rows, nbytes


def summarise(results: list[tuple[float, float, int, int]]) -> dict[str, float]:
    """Medians of total / conversion / read seconds, rows/s and MB/s."""
    return {
        "seconds": statistics.median(r[0] for r in results),
        "convert": statistics.median(r[1] for r in results),
        "read": statistics.median(r[0] - r[1] for r in results),
        "rows_per_s": statistics.median(r[2] / r[0] for r in results),
        "mb_per_s": statistics.median(r[3] / r[0] / 1e6 for r in results),
    }


def compare(frame, readers: int, runs: int, warmups: int) -> dict[str, dict[str, float]]:
    """Run both ways alternately (ABBA...), so that JVM and worker warm-up drift hits both alike."""
    ways = {"spark_source": via_spark_source, "ray_data": via_ray_data}
    for _ in range(warmups):
        for run in ways.values():
            run(frame, readers)
    results: dict[str, list] = {name: [] for name in ways}
    for index in range(runs):
        order = list(ways) if index % 2 == 0 else list(reversed(ways))
        for name in order:
            results[name].append(timed(name, ways[name], frame, readers, index))
    return {name: summarise(found) for name, found in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--warmups", type=int, default=2)
    args = parser.parse_args()

    from raytide.integrations.spark import start_spark, stop_spark

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    spark = start_spark("raytide-bench", configs={"spark.ui.showConsoleProgress": "false"})
    try:
        frame = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(
            "id", "concat('row-', cast(id as string)) as s"
        )
        frame.cache().count()
        print(f"{args.rows} rows in {args.partitions} partitions, {args.readers} readers, {args.runs} runs")
        medians = compare(frame, args.readers, args.runs, args.warmups)
        ours, base = medians["spark_source"], medians["ray_data"]
    finally:
        stop_spark()
    for name, result in (("spark_source + readers", ours), ("ray.data.from_spark + iter_batches", base)):
        print(
            f"{name:36s} median {result['seconds']:.2f} s (conversion {result['convert']:.2f} s, "
            f"read {result['read']:.3f} s)  {result['rows_per_s'] / 1e6:.2f} M rows/s  {result['mb_per_s']:.1f} MB/s"
        )
    print(f"ratio spark_source / ray_data, rows/s of the medians: {ours['rows_per_s'] / base['rows_per_s']:.2f}x")


if __name__ == "__main__":
    main()
