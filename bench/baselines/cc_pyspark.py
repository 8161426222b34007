"""Connected components by label propagation in plain PySpark DataFrames, for a reference number.

The same algorithm as :mod:`bench.baselines.cc_ray`: every node starts with its own id as
label; each round joins the directed edges (both directions of every undirected edge)
with the labels, takes the minimum label arriving at every node (``groupBy`` + ``min``),
lowers labels with it and counts how many changed. Rounds repeat until one changes
nothing (that last, confirming round is counted).

The edges are read once, hash-partitioned by source and cached. The labels of each round
are cut from their lineage with an eager ``localCheckpoint``, so the plan of round ``k``
does not grow with ``k`` and earlier rounds are never recomputed. By default the labels
(the small side) are broadcast into the join with the edges, which spares a sort of the
edges every round. Nodes without edges keep their own id and never enter Spark.

:func:`connected_components_pyspark` returns ``(labels, rounds)`` (per-round times on
request); the caller times the whole call.
It takes a ``SparkSession`` (e.g. :func:`bench.baselines.wordcount_pyspark.local_spark`),
whose start-up is not part of the job.
"""

from __future__ import annotations

import os
import time

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.baselines.data import PathLike

EDGE_SCHEMA = "src LONG, dst LONG"


def read_directed_edges(spark: SparkSession, path: PathLike, partitions: int) -> DataFrame:
    """Both directions of every ``"u v"`` edge line, hash-partitioned by ``src`` and cached.

    Args:
        spark: The session.
        path: File written by :func:`bench.baselines.data.write_edges`.
        partitions: Number of hash partitions.

    Returns:
        A cached DataFrame ``(src, dst)``.
    """
    undirected = spark.read.csv(os.path.abspath(path), sep=" ", schema=EDGE_SCHEMA)
    reverse = undirected.select(F.col("dst").alias("src"), F.col("src").alias("dst"))
    return undirected.unionByName(reverse).repartition(partitions, "src").cache()


def propagate_once(edges: DataFrame, labels: DataFrame, broadcast_labels: bool) -> DataFrame:
    """One synchronous round: every node's label becomes the minimum over itself and its neighbours.

    Args:
        edges: Directed edges ``(src, dst)``.
        labels: ``(id, label)`` for every node that has an edge.
        broadcast_labels: Hint a broadcast hash join of the labels with the edges, which
            spares sorting the edges every round (the labels are the small side).

    Returns:
        ``(id, label, changed)`` with the new labels.
    """
    sources = F.broadcast(labels) if broadcast_labels else labels
    incoming = (
        edges.join(sources, edges.src == sources.id)
        .groupBy(edges.dst.alias("id"))
        .agg(F.min("label").alias("incoming"))
    )
    joined = labels.join(incoming, "id", "left")
    lower = F.col("incoming").isNotNull() & (F.col("incoming") < F.col("label"))
    return joined.select(
        "id",
        F.when(lower, F.col("incoming")).otherwise(F.col("label")).alias("label"),
        lower.alias("changed"),
    )


def labels_to_array(labels: DataFrame, nodes: int) -> np.ndarray:
    """Collect ``(id, label)`` into a length-``nodes`` array; absent nodes keep their own id."""
    out = np.arange(nodes, dtype=np.int64)
    pairs = np.array(labels.select("id", "label").collect(), dtype=np.int64).reshape(-1, 2)
    out[pairs[:, 0]] = pairs[:, 1]
    return out


def connected_components_pyspark(
    spark: SparkSession,
    edges_path: PathLike,
    nodes: int,
    partitions: int | None = None,
    broadcast_labels: bool = True,
    max_rounds: int = 10_000,
    round_seconds: list[float] | None = None,
) -> tuple[np.ndarray, int]:
    """Label-propagation connected components in PySpark DataFrames; the caller times it.

    Args:
        spark: A Spark session (e.g. ``local[2]``).
        edges_path: File of ``"u v"`` lines (:func:`bench.baselines.data.write_edges`).
        nodes: Number of nodes; ids are ``0 .. nodes - 1``.
        partitions: Hash partitions of the cached edges; default
            ``spark.sql.shuffle.partitions``.
        broadcast_labels: Join the labels to the edges by broadcast (see :func:`propagate_once`).
        max_rounds: Safety cap on rounds.
        round_seconds: If given, the wall-clock duration of every round is appended to it
            (reading and caching the edges and collecting the labels are outside the rounds).

    Returns:
        ``(labels, rounds)``: ``labels[v]`` is the smallest node id of ``v``'s component;
        ``rounds`` counts every round run, including the last one, which changed nothing.
    """
    partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    edges = read_directed_edges(spark, edges_path, partitions)
    try:
        edges.count()  # materialise the cache before the first round
        labels = (
            edges.select(F.col("src").alias("id")).distinct().withColumn("label", F.col("id")).localCheckpoint()
        )
        rounds = 0
        while rounds < max_rounds:
            started = time.perf_counter()
            step = propagate_once(edges, labels, broadcast_labels).localCheckpoint()  # eager: runs the round once
            labels = step.select("id", "label")
            changed = not step.filter("changed").isEmpty()
            rounds += 1
            if round_seconds is not None:
                round_seconds.append(time.perf_counter() - started)
            if not changed:
                break
        return labels_to_array(labels, nodes), rounds
    finally:
        edges.unpersist()
