"""Closing a Spark source, and stopping and starting Spark on Ray again.

The restart leaves a fresh Spark running, which the files after this one use: this file runs
among the session's Spark users, not with those that leave it stopped (``stops_spark``, which
run last: tests/conftest.py). It used to run with them, and the Spark it found stopped cost a
start of its own (20-30 s on 2 cores).
"""

from __future__ import annotations

import pytest
import ray

from raytide.integrations.records import table_to_records
from raytide.integrations.spark import active_spark, from_spark, start_spark, stop_spark

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]


def ids(frame) -> list[int]:
    """The ``id`` column of a DataFrame, read through raytide's Spark -> Ray conversion."""
    [(_, blocks)] = list(from_spark(frame).epochs())
    return sorted(row["id"] for table in ray.get(blocks) for row in table_to_records(table))


def test_closing_a_spark_source_releases_the_data_it_cached_in_spark(spark):
    cached = spark.sparkContext._jsc.getPersistentRDDs  # Spark's own list of persisted RDDs
    before = cached().size()
    source = from_spark([spark.range(10), spark.range(20)])
    epochs = source.epochs()  # kept: a generator dropped half-way closes the source itself
    next(epochs)
    assert cached().size() == before + 1, "the conversion keeps its Arrow data cached in Spark"
    source.close()
    assert cached().size() == before


def test_spark_stopped_then_started_again_converts_as_before(spark):
    assert ids(spark.range(0, 30, numPartitions=3)) == list(range(30))
    stop_spark()
    assert active_spark() is None
    again = start_spark("raytide-tests")
    assert again is not spark and again.sparkContext.master.startswith("ray://")
    assert ids(again.range(0, 30, numPartitions=3)) == list(range(30))
