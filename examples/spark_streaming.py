"""A Spark Structured Streaming query feeding raytide: files land in a directory, Spark reads
them as micro-batches, raytide counts the words of each micro-batch (one epoch each),
``write_parquet`` writes every epoch once, and Spark reads the result back.

Locally (starts its own Ray and Spark on Ray)::

    python examples/spark_streaming.py [--files 6] [--root /tmp/landing]

On a running Ray cluster (``ray job submit`` sets RAY_ADDRESS; ``--root`` must then be a
directory every node sees, see docs/running.md)::

    RAY_AUTH_MODE=token ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python examples/spark_streaming.py --root /shared/landing

Each micro-batch is acknowledged to Spark only once a committed raytide snapshot holds it
(docs/streaming.md): kill this driver and run it again with the same ``--root`` and
``--restore``, and every file is still counted exactly once. Prints, from the Parquet files
read back by Spark, one ``BATCH`` line per micro-batch, then ``RESULT word=<word> count=<count>`` for every word (read
back from the Parquet files by Spark) and ``RESULT files=<n> words=<total>``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import ray

import raytide as rt
from examples.spark_wordcount import connect_ray, sample_lines
from raytide.integrations.parquet import write_parquet
from raytide.integrations.spark import SparkStreamSource, from_spark_stream, start_spark, stop_spark

LINES_PER_FILE = 200


def file_lines(index: int) -> list[str]:
    """The lines of landing file ``index`` (deterministic, so the counts can be checked)."""
    return sample_lines(LINES_PER_FILE * (index + 1))[LINES_PER_FILE * index:]


def land(incoming: Path, index: int) -> None:
    """Write landing file ``index`` whole: written aside, then renamed in (Spark must not see half a file)."""
    if (incoming / f"part-{index:05d}.txt").exists():  # landed by a run before this one
        return
    staged = incoming.parent / f".staged-{index}"
    staged.write_text("\n".join(file_lines(index)) + "\n")
    os.rename(staged, incoming / f"part-{index:05d}.txt")


def word_count_flow() -> rt.Dataflow:
    flow = rt.Dataflow("spark-streaming-wordcount")
    (flow.input("lines")
         .flat_map(lambda row: (row["value"] or "").split())   # a row of the micro-batch, as a dict
         .count_by_key(lambda word: word)                      # (word, count) per micro-batch
         .output("counts"))
    return flow


def land_then_finish(source: SparkStreamSource, incoming: Path, files: int, every: float) -> None:
    """Land the files after the first, one every ``every`` seconds, then let the query take
    everything and stop it (which closes the job's input, so the job finishes)."""
    for index in range(1, files):
        time.sleep(every)
        land(incoming, index)
    while source.query is None:
        time.sleep(0.1)
    source.query.processAllAvailable()
    source.query.stop()


def stream_word_counts(spark, root: Path, files: int, every: float = 1.0, parallelism: int = 2,
                       restore: bool = False) -> tuple[dict[str, int], dict[int, int], list[int]]:
    """Land ``files`` files under ``root/in`` (the first at once, then one every ``every``
    seconds) while a streaming query feeds them to a word count, written with ``write_parquet``
    under ``root/parquet``; ``restore``: go on from an earlier run's snapshots in ``root``.

    Returns the counts read back by Spark (word: count), the words per micro-batch, and the
    epochs this run wrote.
    """
    incoming = root / "in"
    incoming.mkdir(parents=True, exist_ok=True)
    land(incoming, 0)
    frame = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(incoming))
    source = from_spark_stream(frame, str(root / "checkpoint"), processing_time="0.5 seconds",
                               query_name="landing-files")
    with rt.run(word_count_flow(), inputs={"lines": source}, parallelism=parallelism,
                recovery=rt.Recovery(str(root / "store")), restore="latest" if restore else None) as job:
        threading.Thread(target=land_then_finish, args=(source, incoming, files, every), daemon=True).start()
        committed = write_parquet(job, "counts", str(root / "parquet"))   # until the query stops
    back = spark.read.parquet(str(root / "parquet"))                     # columns _1 (word), _2 (count), epoch
    totals = {row["_1"]: row["sum(_2)"] for row in back.groupBy("_1").sum("_2").collect()}
    batches = {row["epoch"]: row["sum(_2)"] for row in back.groupBy("epoch").sum("_2").collect()}
    return totals, batches, committed


def expected_counts(files: int) -> Counter:
    """The words of the first ``files`` landing files, counted in plain Python."""
    return Counter(word for index in range(files) for line in file_lines(index) for word in line.split())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="working directory: landing files, Spark checkpoint, snapshots, Parquet "
                                       "(default: a new temporary directory)")
    parser.add_argument("--files", type=int, default=6, help="files to land (default 6)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between two files (default 1)")
    parser.add_argument("--restore", action="store_true", help="go on from the snapshots of an earlier run in --root")
    parser.add_argument("--parallelism", type=int, default=2, help="replicas per vertex (default 2)")
    args = parser.parse_args(argv)

    connect_ray()
    spark = start_spark("raytide-streaming", configs={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(args.root or tempfile.mkdtemp(prefix="raytide-streaming-"))
    try:
        totals, batches, committed = stream_word_counts(spark, root, args.files, args.every, args.parallelism,
                                                        args.restore)
        for epoch in sorted(batches):
            print(f"BATCH {epoch}: {batches[epoch]} words")
        for word in sorted(totals, key=lambda w: (-totals[w], w)):
            print(f"RESULT word={word} count={totals[word]}")
        print(f"RESULT files={args.files} words={sum(totals.values())} batches_written_by_this_run={len(committed)}")
        if totals != dict(expected_counts(args.files)):
            raise SystemExit("the counts read back differ from the words of the files")
        print(f"counted in micro-batches on Ray at {ray.get_runtime_context().gcs_address}; output in {root / 'parquet'}")
    finally:
        stop_spark()
        ray.shutdown()


if __name__ == "__main__":
    main()
