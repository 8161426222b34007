"""A Spark executor SIGKILLed under a running job, recovered in place (issue 74): a batch
``from_spark`` job whose executor dies after caching the DataFrame and before any partition is
read, and a stream whose executor dies after caching a micro-batch; the same driver goes on and
every row (every file) is counted once.

These tests leave behind a Spark whose executors were killed and restarted by Ray. Nothing else
should run on that Spark: were a restart to go wrong, every later Spark test would wait on it
(a CI run once hung past its 90 minutes that way). So this file has the ``stops_spark`` mark
(it runs after every other user of the session's Spark, tests/conftest.py) and stops Spark
when it ends; the next file that asks for Spark starts a fresh one.
"""

from __future__ import annotations

from collections import Counter

import pytest

import raytide as rt
from raytide.integrations.spark import from_spark
from tests.ray.test_spark_dataflow import LINES, word_count_flow
from tests.ray.test_spark_stream import Stream, assert_each_file_once, consume

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.stops_spark]


@pytest.fixture(scope="module", autouse=True)
def _spark_stopped_after_the_kills(ray_session):
    """Stop the session's Spark once this file's tests are done (the module docstring)."""
    yield
    from raytide.integrations.spark import stop_spark

    stop_spark()


def test_a_spark_executor_killed_mid_read_is_read_again_in_place_and_every_row_counted_once(
        ray_session, spark, monkeypatch):
    """Issue 73, case 8: a batch ``from_spark`` job whose Spark executor is SIGKILLed once Spark has
    computed and cached the DataFrame's Arrow partitions, before any is read into Ray. Ray restarts
    the executor actor under its name, it joins Spark under a new id with its cache empty; the read
    tasks wait for it and read again, the executor computing the partitions again: the job goes on,
    every row counted exactly once (the plain-Python count of the same lines)."""
    from raytide.integrations.spark import source
    from tests.executor_kills import kill_executor, restarts

    killed: dict[str, int] = {}

    def cache_then_kill(frame, what, cache=source.cache_partitions):
        cached = cache(frame, what)
        for name in sorted({partition.executor for partition in cached.partitions}):
            before = restarts(name)
            kill_executor(name)
            killed[name] = before
        return cached

    monkeypatch.setattr(source, "cache_partitions", cache_then_kill)
    df = spark.createDataFrame(LINES, ["epoch", "line"]).repartition(4)
    with rt.run(word_count_flow(), inputs={"rows": from_spark(df)}, parallelism=2) as job:
        job.wait(timeout=180)
        result = job.collect("counts")
    assert killed and all(restarts(name) > before for name, before in killed.items()), killed
    reference = Counter(word for _, line in LINES for word in line.split())
    assert Counter(dict(result[0])) == reference and len(result[0]) == len(reference)


def test_a_spark_executor_killed_mid_stream_is_read_again_in_place_by_the_same_driver(
        ray_session, spark, tmp_path, monkeypatch):
    """Issue 74: the Spark executor caching micro-batch 2 is SIGKILLed once Spark has computed and
    cached the batch, before the input replicas read it. Ray restarts the executor actor under its
    name and it joins Spark under a new id, its cache empty: the replicas' reads wait for it and read
    again (the executor computes the batch again from the query's plan), and the batches after it,
    cached under the new id, are read from the actor named through RayDP's map of restarted
    executors. The same driver goes on, no recovery of the job's actors, every file counted once."""
    from raytide.integrations.spark import stream as spark_stream
    from tests.executor_kills import kill_executor, restarts

    killed: dict[str, int] = {}

    def cache_then_kill(frame, what, cache=spark_stream.cache_partitions):
        cached = cache(frame, what)
        if what.startswith("micro-batch 2 ") and not killed:
            for name in sorted({partition.executor for partition in cached.partitions}):
                killed[name] = restarts(name)
                kill_executor(name)
        return cached

    monkeypatch.setattr(spark_stream, "cache_partitions", cache_then_kill)
    stream = Stream(tmp_path)
    stream.land(1)
    handed: list = []
    with stream.run(spark) as job:
        consume(job, stream, handed, until_files=6, land_each=True)
        recoveries = job.stats()["recoveries"]
        job.stop()
    assert killed and all(restarts(name) > before for name, before in killed.items()), killed
    assert recoveries["count"] == 0, f"an executor's death is recovered in place, not by the job: {recoveries}"
    assert_each_file_once(handed, 6)
