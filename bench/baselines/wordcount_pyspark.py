"""Word count per epoch in plain PySpark (RDD API), for a reference number.

Same semantics as :mod:`bench.baselines.wordcount_ray`: ``"\\n"``-separated lines, words
split by :meth:`str.split`, ``n_epochs`` contiguous line-index epochs
(:func:`bench.baselines.data.epoch_bounds`), result ``{epoch: {word: count}}`` with every
epoch present.

Spark's text partitions are contiguous byte ranges in file order, so a first job counts
the lines of every partition and the driver turns the counts into each partition's first
global line index. The second job counts every partition's words per epoch with a
:class:`Counter` (a map-side combiner), shuffles ``((epoch, word), count)`` pairs with
``reduceByKey`` and collects them.

:func:`wordcount_pyspark` returns only the result; the caller times it. It takes a
``SparkSession`` (e.g. from :func:`local_spark`), whose start-up is not part of the job.
"""

from __future__ import annotations

import itertools
import operator
import os
from collections import Counter
from collections.abc import Iterable, Iterator

from pyspark.sql import SparkSession

from bench.baselines.data import PathLike, epoch_bounds

WordCounts = dict[int, dict[str, int]]

LINES_PER_BATCH = 50_000


def local_spark(
    cores: int = 2, shuffle_partitions: int | None = None, app_name: str = "raytide-baseline"
) -> SparkSession:
    """A plain local Spark session (``local[cores]``), or the already active session.

    Args:
        cores: Local worker threads.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; default ``2 * cores`` (Spark's
            default of 200 tiny partitions only adds overhead on a few local cores).
        app_name: Application name.

    Returns:
        The session; stop it with ``spark.stop()`` when done.
    """
    partitions = shuffle_partitions or 2 * cores
    return (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def count_partition_lines(lines: Iterable[object]) -> list[int]:
    """One-element list with the number of lines of a partition."""
    return [sum(1 for _ in lines)]


def count_epoch_words(
    lines: Iterator[str], first_line: int, bounds: list[int]
) -> Iterator[tuple[tuple[int, str], int]]:
    """Count the words of consecutive lines per epoch.

    Args:
        lines: Lines in file order.
        first_line: Global index of the first line.
        bounds: Epoch boundaries (:func:`bench.baselines.data.epoch_bounds`).

    Yields:
        ``((epoch, word), count)`` for every epoch touched and every word in it.
    """
    line = first_line
    for epoch in range(len(bounds) - 1):
        if bounds[epoch + 1] <= line:
            continue
        counts: Counter[str] = Counter()
        remaining = bounds[epoch + 1] - line
        while remaining:
            batch = list(itertools.islice(lines, min(remaining, LINES_PER_BATCH)))
            if not batch:
                break
            counts.update(" ".join(batch).split())
            remaining -= len(batch)
            line += len(batch)
        for word, count in counts.items():
            yield (epoch, word), count
        if remaining:
            return  # the partition ended inside this epoch


def wordcount_pyspark(
    spark: SparkSession, path: PathLike, n_epochs: int = 10, min_partitions: int | None = None
) -> WordCounts:
    """Word count per epoch with PySpark RDDs; the caller times it.

    Args:
        spark: A Spark session (see :func:`local_spark`).
        path: Text file of ``"\\n"``-separated lines.
        n_epochs: Number of contiguous line-index epochs.
        min_partitions: Minimum text partitions; default Spark's default parallelism.

    Returns:
        ``{epoch: {word: count}}`` for ``epoch`` in ``range(n_epochs)``.
    """
    sc = spark.sparkContext
    path = os.path.abspath(path)
    lines = sc.textFile(path, min_partitions)
    raw_lines = sc.textFile(path, min_partitions, use_unicode=False)  # same partitions; no decoding to count
    line_counts = raw_lines.mapPartitions(count_partition_lines).collect()
    bounds = epoch_bounds(sum(line_counts), n_epochs)
    firsts = list(itertools.accumulate([0, *line_counts[:-1]]))

    def count_partition(index: int, part: Iterator[str]) -> Iterator[tuple[tuple[int, str], int]]:
        return count_epoch_words(part, firsts[index], bounds)

    pairs = lines.mapPartitionsWithIndex(count_partition).reduceByKey(operator.add).collect()
    result: WordCounts = {e: {} for e in range(n_epochs)}
    for (epoch, word), count in pairs:
        result[epoch][word] = count
    return result
