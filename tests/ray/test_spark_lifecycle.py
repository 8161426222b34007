"""What is refused while Spark on Ray is not running (restarting it: ``test_spark_restart.py``).

The tests leave Spark stopped: this file has the ``stops_spark`` mark, so it runs after every
other file that uses the session's Spark (tests/conftest.py). It starts no Spark on Ray: it
finds the one ``test_spark_executor_kills.py`` stopped before it, or stops it itself.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

import raytide as rt
from raytide.errors import SparkIntegrationError
from raytide.integrations.spark import active_spark, from_spark, start_spark, stop_spark, to_spark

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow, pytest.mark.stops_spark]


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
