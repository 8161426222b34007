"""Word count from a Spark DataFrame through raytide, with the result back as a Spark DataFrame.

Locally (starts its own Ray and Spark on Ray)::

    python examples/spark_wordcount.py [--input lines.txt] [--top 10]

On a running Ray cluster (``ray job submit`` sets RAY_ADDRESS, so the script joins that
cluster instead of starting one; see docs/running.md for the token)::

    RAY_AUTH_MODE=token ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python examples/spark_wordcount.py --input /data/lines.txt

Without ``--input`` the lines are generated (:func:`sample_lines`). The most frequent
words are printed as ``RESULT word=<word> count=<count>`` lines (most frequent first,
ties by word), followed by ``RESULT total=<words> distinct=<distinct words>``.
"""

from __future__ import annotations

import argparse
import os
import time

import ray

import raytide as rt
from raytide.integrations.spark import from_spark, start_spark, stop_spark, to_spark

WORDS = ("ray", "spark", "timely", "dataflow", "epoch", "vertex", "actor", "arrow", "progress", "frontier", "stream")


def sample_lines(count: int) -> list[str]:
    """``count`` deterministic lines of 1-6 words, the first words of WORDS the most frequent.

    Plain Python, so that a test can recompute the answer.
    """
    return [" ".join(WORDS[(i * (j + 1) + j) % (2 * j + 1)] for j in range(1 + i % 6)) for i in range(count)]


def connect_ray() -> None:
    """Join the cluster in RAY_ADDRESS (set by ``ray job submit``), else start a local Ray."""
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address="auto", log_to_driver=False)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=False)


def word_count_flow(column: str) -> rt.Dataflow:
    flow = rt.Dataflow("spark-wordcount")
    (flow.input("lines")
         .flat_map(lambda row: (row[column] or "").split())   # a row is a dict of the DataFrame's columns
         .count_by_key(lambda word: word)                     # (word, count)
         .output("counts"))
    return flow


def word_count(lines, column: str = "value", parallelism: int = 2, timeout: float = 300):
    """Count the words of ``lines[column]`` (a Spark DataFrame) with raytide; a DataFrame ``(word, count)``.

    The rows go from Spark to the dataflow as Arrow blocks in Ray's object store, the
    counts come back the same way: nothing is collected on the driver.
    """
    with rt.run(word_count_flow(column), inputs={"lines": from_spark(lines)}, parallelism=parallelism) as job:
        job.wait(timeout=timeout)
        return to_spark(job, "counts", epoch=0).toDF("word", "count")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="a text file (or directory, or glob) read with spark.read.text; "
                                        "default: generated lines")
    parser.add_argument("--lines", type=int, default=20_000, help="lines to generate without --input (default 20000)")
    parser.add_argument("--top", type=int, default=10, help="how many RESULT lines to print (default 10)")
    parser.add_argument("--parallelism", type=int, default=2, help="replicas per vertex (default 2)")
    args = parser.parse_args(argv)

    connect_ray()
    spark = start_spark("raytide-wordcount", configs={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.input:
            lines = spark.read.text(args.input)       # one column, "value"
        else:
            lines = spark.createDataFrame([(line,) for line in sample_lines(args.lines)], ["value"])
        started = time.perf_counter()
        counts = word_count(lines, parallelism=args.parallelism).cache()
        ranked = counts.orderBy(counts["count"].desc(), counts["word"]).collect()
        elapsed = time.perf_counter() - started
        counts.orderBy(counts["count"].desc(), counts["word"]).show(args.top)
        for row in ranked[: args.top]:
            print(f"RESULT word={row['word']} count={row['count']}")
        print(f"RESULT total={sum(row['count'] for row in ranked)} distinct={len(ranked)}")
        print(f"counted in {elapsed:.1f} s on Ray at {ray.get_runtime_context().gcs_address}")
    finally:
        stop_spark()
        ray.shutdown()


if __name__ == "__main__":
    main()
