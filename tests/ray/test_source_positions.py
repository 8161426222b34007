"""Positions and resume of the Ray Data and Spark readers, and the Source protocol in a running job, on real Ray."""

from __future__ import annotations

import pytest

import raytide as rt
from raytide.errors import EpochColumnError, GraphError, RaytideError, SparkIntegrationError
from raytide.sources.base import BlockRefs
from tests.positions import check_resume_everywhere

pytestmark = pytest.mark.ray


def rows_of_tables(ray, key):
    def flatten(epoch, batch):
        tables = ray.get(list(batch.refs)) if isinstance(batch, BlockRefs) else [batch]
        return [(epoch, row[key]) for table in tables for row in table.to_pylist()]

    return flatten


@pytest.mark.parametrize("epoch_column", [None, "epoch"])
def test_ray_dataset_readers_resume_exactly(ray_session, epoch_column):
    from raytide.integrations.ray_data import from_dataset

    dataset = ray_session.data.from_items([{"id": i, "epoch": (i * 7) % 4} for i in range(60)], override_num_blocks=5)
    source = from_dataset(dataset, epoch_column=epoch_column)
    flatten = rows_of_tables(ray_session, "id")
    got = []
    for parallelism in (1, 2):
        for index in range(parallelism):
            got += check_resume_everywhere(lambda p=parallelism, i=index: source.readers(p)[i], flatten)
    expected = sorted(((i * 7) % 4 if epoch_column else 0, i) for i in range(60))
    assert sorted(got) == sorted(expected * 2)  # once with one reader, once with two


def test_an_unfit_epoch_column_fails_the_job_naming_the_input_and_the_column(ray_session):
    from raytide.integrations.ray_data import from_dataset

    dataset = ray_session.data.from_items([{"id": 1, "day": 2}, {"id": 2, "day": -3}])
    flow = rt.Dataflow("badepochs")
    flow.input("rows").output("out")
    with rt.run(flow, inputs={"rows": from_dataset(dataset, epoch_column="day")}, parallelism=1) as job:
        failure = r"input 'rows' replica 0: reading failed: EpochColumnError\(\"Ray Dataset: epoch column 'day' has"
        with pytest.raises(RaytideError, match=failure + r" the negative value -3; epochs must be non-negative"):
            job.wait(timeout=120)


def test_plain_iterables_feed_from_the_driver_and_anything_else_is_refused(ray_session):
    flow = rt.Dataflow("iterables")
    flow.input("numbers").map(lambda n: n * 10).output("out")
    with rt.run(flow, inputs={"numbers": (batch for batch in [[1, 2], [], [3]])}, parallelism=2) as job:
        job.wait(timeout=120)
        assert {e: sorted(r) for e, r in job.collect("out").items() if r} == {0: [10, 20], 2: [30]}
    with rt.run(flow, parallelism=1) as job:
        with pytest.raises(GraphError, match="input 'numbers': cannot read a str"):
            job.feed("numbers", "1 2 3")


@pytest.mark.spark
def test_spark_readers_resume_exactly(ray_session, spark):
    from raytide.integrations.spark import from_spark

    frames = [spark.range(10 * k, 10 * k + 3 + k, numPartitions=2) for k in range(3)]
    by_column = spark.range(0, 40, numPartitions=3).selectExpr("id", "cast(id % 3 * 2 as int) as day")
    flatten = rows_of_tables(ray_session, "id")
    listed = check_resume_everywhere(lambda: from_spark(frames).reader(), flatten)
    assert listed == [(k, i) for k in range(3) for i in range(10 * k, 10 * k + 3 + k)]
    source = from_spark(by_column, epoch_column="day")  # a position also serves the reader of the same source again
    columned = check_resume_everywhere(source.reader, flatten)
    assert sorted(columned) == sorted((i % 3 * 2, i) for i in range(40))


@pytest.mark.spark
def test_a_generator_of_dataframes_cannot_be_rewound(ray_session, spark):
    from raytide.integrations.spark import from_spark

    source = from_spark(spark.range(k + 1) for k in range(3))
    reader = source.reader()
    assert [epoch for epoch, _ in reader] == [0, 1, 2] and reader.position() == 3
    with pytest.raises(SparkIntegrationError, match="consumed only once: it cannot be rewound"):
        source.reader().seek(1)
    with pytest.raises(EpochColumnError, match="Spark DataFrame: epoch column 'id' has type string"):
        from_spark(spark.range(2).selectExpr("cast(id as string) as id"), epoch_column="id")
