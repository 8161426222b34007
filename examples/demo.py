"""raytide in one minute: a Spark DataFrame of text through a timely dataflow on Ray.

    python examples/demo.py [--lines 300000] [--epochs 8] [--parallelism 2]

What happens:

1. Ray starts locally and Spark starts on top of it (RayDP): Spark's executors are Ray actors.
2. Spark generates ``--lines`` lines of text with an ``epoch`` column (0 .. epochs-1).
3. ``from_spark(df, epoch_column="epoch")`` hands the DataFrame to the dataflow as
   Arrow blocks in Ray's object store, one epoch after the other; no row passes
   through this process.
4. The dataflow splits lines into words, lower-cases them, drops stop words and counts
   words per epoch (``counts``); a second output keeps the top words of each epoch
   (``top``). Each epoch's results arrive as soon as that epoch is complete: the
   progress bar moves once per epoch.
5. The counts go back to Spark (``to_spark``) and are shown as a DataFrame.
"""

from __future__ import annotations

import argparse
import heapq
import time

import ray
from pyspark.sql import functions as F
from tqdm import tqdm

import raytide as rt
from raytide.integrations.spark import from_spark, start_spark, stop_spark, to_spark

VOCABULARY = (
    "The timely dataflow engine runs every vertex as a Ray actor and a central progress tracker tells "
    "each vertex when an epoch is complete so that results are exact and consistent while new input "
    "keeps arriving from Spark through RayDP into the object store of the cluster"
).split()
STOP_WORDS = {"the", "a", "an", "and", "as", "is", "of", "to", "so", "that", "when", "into", "from", "while"}
TOP = 5


def generate_lines(spark, lines: int, epochs: int):
    """``lines`` rows ``(epoch, line)`` of 4-12 words each, skewed towards the first words of the vocabulary.

    Generated inside Spark (deterministic: hashes of the row id), so nothing is built in Python.
    """
    vocabulary = ", ".join(f"'{w}'" for w in VOCABULARY)
    word = (f"element_at(array({vocabulary}), "
            f"cast(pow(pmod(xxhash64(id, i), 1000003) / 1000003.0, 2) * {len(VOCABULARY)} as int) + 1)")
    return spark.range(lines).selectExpr(
        f"cast(id * {epochs} div {lines} as int) as epoch",
        f"concat_ws(' ', transform(sequence(1, 4 + cast(pmod(id, 9) as int)), i -> {word})) as line",
    )


def keep_top(left: list, right: list) -> list:
    """Merge two top lists of ``(count, word)``; associative and commutative, as reduce_by_key needs."""
    return heapq.nlargest(TOP, left + right)


def build_flow() -> rt.Dataflow:
    flow = rt.Dataflow("demo")
    words = (flow.input("lines")
             .flat_map(lambda row: row["line"].split())     # rows arrive as dicts of the DataFrame's columns
             .map(str.lower)
             .filter(lambda word: word not in STOP_WORDS))
    counts = words.count_by_key(lambda word: word)          # per epoch: (word, count)
    counts.output("counts")
    (counts.reduce_by_key(lambda pair: "top", keep_top, value=lambda pair: [(pair[1], pair[0])])
           .map(lambda pair: pair[1])                      # per epoch: [(count, word), ...] best first
           .output("top"))
    return flow


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300_000, help="lines of text to generate (default 300000)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs the lines are spread over (default 8)")
    parser.add_argument("--parallelism", type=int, default=2, help="replicas per vertex (default 2)")
    args = parser.parse_args(argv)

    print("Starting Ray and Spark on Ray (RayDP) ...", flush=True)
    ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="ERROR")  # always a new local Ray
    spark = start_spark("raytide-demo", configs={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = generate_lines(spark, args.lines, args.epochs)
        print(f"Spark DataFrame: {args.lines:,} lines over {args.epochs} epochs, for example:")
        df.show(3, truncate=70)

        started = time.perf_counter()
        with rt.run(build_flow(), inputs={"lines": from_spark(df, epoch_column="epoch")},
                    parallelism=args.parallelism) as job:
            words = 0
            with tqdm(total=args.epochs, desc="epochs", unit="epoch") as bar:
                for epoch, pairs in job.results("counts"):
                    words += sum(count for _, count in pairs)
                    bar.set_postfix(epoch=epoch, words=f"{words:,}")
                    bar.update()
            elapsed = time.perf_counter() - started
            top = job.collect("top")
            result = to_spark(job, "counts").toDF("word", "count", "epoch")

        print()
        print(f"records in:  {args.lines:,} lines, {words:,} words counted (stop words dropped)")
        print(f"elapsed:     {elapsed:.1f} s (starting the job's actors, Spark -> Arrow -> dataflow -> results)")
        print(f"throughput:  {args.lines / elapsed:,.0f} lines/s, {words / elapsed:,.0f} words/s")
        print(f"top {TOP} words per epoch (from the 'top' output):")
        for epoch, records in sorted(top.items()):
            ranked = records[0] if records else []
            print(f"  epoch {epoch}: " + ", ".join(f"{w} {n:,}" for n, w in ranked))
        print("all epochs, back in Spark (to_spark(job, 'counts')):")
        result.groupBy("word").agg(F.sum("count").alias("count")).orderBy(F.desc("count")).show(TOP)
    finally:
        stop_spark()
        ray.shutdown()


if __name__ == "__main__":
    main()
