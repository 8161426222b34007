"""raytide in one minute: a Spark DataFrame of text through a timely dataflow on Ray.

    python examples/demo.py [--lines 300000] [--epochs 8] [--parallelism 2]

What happens:

1. Ray starts locally and Spark starts on top of it (RayDP): Spark's executors are Ray actors.
2. Spark generates ``--lines`` lines of text with an ``epoch`` column (0 .. epochs-1).
3. ``from_spark([...])`` gets one DataFrame per epoch (the lines of that epoch) and
   hands each to the dataflow as Arrow blocks in Ray's object store when the dataflow
   asks for that epoch: Spark produces epoch k+1 while the dataflow counts epoch k, and
   no row passes through this process. (``from_spark(df, epoch_column="epoch")`` would
   convert the whole DataFrame before the first epoch, so every result would arrive
   at the end.)
4. The dataflow splits lines into words, lower-cases them, drops stop words and counts
   words per epoch (``counts``); a second output keeps the top words of each epoch
   (``top``). Each epoch's results arrive as soon as that epoch is complete: the
   progress bar moves once per epoch.
5. The counts go back to Spark (``to_spark``) and are shown as a DataFrame. The summary
   tells start-up (the job's actors) and processing (first epoch in to last result
   out) apart.

Logging: the demo starts a Ray of its own and keeps its console to the demo's output
(``log_to_driver=False``, Ray's loggers at ERROR); docs/running.md says what else is quiet.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import time

import ray
import ray.data  # configures Ray Data's loggers on import; quiet_ray() then raises them to ERROR
from pyspark.sql import DataFrame
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


def epoch_frames(lines: DataFrame, epochs: int) -> list[DataFrame]:
    """One DataFrame per epoch, its lines; Spark computes each only when the dataflow reads that epoch."""
    return [lines.where(F.col("epoch") == epoch) for epoch in range(epochs)]


def quiet_ray() -> None:
    """Start a local Ray whose console shows only errors.

    Ray Data's "the Ray cluster currently does not have any available CPUs" is a
    snapshot taken as each epoch's conversion starts; on a small machine the previous
    conversion's tasks and Spark's executor may hold every CPU at that instant, and
    they free them within moments, so the demo shows Ray Data's errors only.
    """
    ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    logging.getLogger("ray.data").setLevel(logging.ERROR)


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
    quiet_ray()  # always a new local Ray
    spark = start_spark("raytide-demo", configs={"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false"})
    try:
        df = generate_lines(spark, args.lines, args.epochs)
        print(f"Spark DataFrame: {args.lines:,} lines over {args.epochs} epochs, for example:")
        df.show(3, truncate=70)

        started = time.perf_counter()
        with rt.run(build_flow(), inputs={"lines": from_spark(epoch_frames(df, args.epochs))},
                    parallelism=args.parallelism) as job:
            job.wait_ready()
            ready = time.perf_counter()
            top = {}
            with tqdm(total=args.epochs, desc="epochs", unit="epoch") as bar:
                for epoch, records in job.results("top"):  # consumed as they come: the driver keeps none
                    top[epoch] = records[0] if records else []
                    bar.set_postfix(epoch=epoch, top=top[epoch][0][1] if top[epoch] else "-")
                    bar.update()
            processing = time.perf_counter() - ready
            result = to_spark(job, "counts").toDF("word", "count", "epoch")  # every epoch, kept on the driver
        words = result.agg(F.sum("count")).first()[0] or 0

        print()
        print(f"records in:  {args.lines:,} lines, {words:,} words counted (stop words dropped)")
        print(f"start-up:    {ready - started:.1f} s (the job's actors and its progress tracker)")
        print(f"processing:  {processing:.1f} s (Spark -> Arrow -> dataflow -> results, first epoch to last)")
        print(f"throughput:  {args.lines / processing:,.0f} lines/s, {words / processing:,.0f} words/s (processing)")
        print(f"top {TOP} words per epoch (from the 'top' output):")
        for epoch, ranked in sorted(top.items()):
            print(f"  epoch {epoch}: " + ", ".join(f"{w} {n:,}" for n, w in ranked))
        print("all epochs, back in Spark (to_spark(job, 'counts')):")
        result.groupBy("word").agg(F.sum("count").alias("count")).orderBy(F.desc("count")).show(TOP)
    finally:
        stop_spark()
        ray.shutdown()


if __name__ == "__main__":
    main()
