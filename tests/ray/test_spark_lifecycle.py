"""Starting, stopping and restarting Spark on Ray; what is refused while it is not running.

The last two tests leave Spark stopped: this file has the ``stops_spark`` mark, so it runs after
every other file that uses the session's Spark (tests/conftest.py).
"""

from __future__ import annotations

import pytest
import ray
from pyspark.sql import SparkSession

import raytide as rt
from raytide.errors import SparkIntegrationError
from raytide.integrations.records import table_to_records
from raytide.integrations.spark import active_spark, from_spark, start_spark, stop_spark, to_spark

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow, pytest.mark.stops_spark]


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


def test_to_spark_while_spark_is_stopped_says_to_start_it(ray_session):
    stop_spark()
    flow = rt.Dataflow("no-spark")
    flow.input("words").count_by_key(lambda w: w).output("counts")
    with rt.run(flow, inputs={"words": [["a", "b", "a"]]}, parallelism=1) as job:
        job.wait(timeout=120)
        with pytest.raises(SparkIntegrationError, match=r"Spark on Ray is not running; call start_spark\(\) first"):
            to_spark(job, "counts")


def test_a_spark_session_that_does_not_run_on_ray_is_refused(ray_session):
    stop_spark()
    plain = SparkSession.builder.master("local[1]").appName("not-on-ray").getOrCreate()
    try:
        assert active_spark() is None, "a plain local session is not Spark on Ray"
        with pytest.raises(SparkIntegrationError, match="does not run on Ray is active .*'local\\[1\\]'.*stop it"):
            start_spark("raytide-tests")
        with pytest.raises(SparkIntegrationError, match="belongs to a Spark session that does not run on Ray"):
            list(from_spark(plain.range(3)).epochs())
    finally:
        plain.stop()
