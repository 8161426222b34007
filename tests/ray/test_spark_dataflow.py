"""Spark DataFrames through a raytide job and back, compared with Spark's own computation."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

import raytide as rt
from raytide.integrations.spark import from_spark, to_spark

pytestmark = [pytest.mark.ray, pytest.mark.spark]

LINES = [(i % 3, f"w{i % 5} w{i % 2} {'x' if i % 7 == 0 else 'y'}") for i in range(2000)]


def word_count_flow():
    flow = rt.Dataflow("sparkwc")
    flow.input("rows").flat_map(lambda row: row["line"].split()).count_by_key(lambda w: w).output("counts")
    return flow


def spark_counts(df, by_epoch):
    words = df.select(*(["epoch"] if by_epoch else []), F.explode(F.split("line", " ")).alias("word"))
    grouped = words.groupBy(*(["epoch"] if by_epoch else []), "word").count()
    if by_epoch:
        return {(r["epoch"], r["word"]): r["count"] for r in grouped.collect()}
    return {r["word"]: r["count"] for r in grouped.collect()}


def test_word_count_per_epoch_from_a_column_equals_spark_group_by(ray_session, spark):
    df = spark.createDataFrame(LINES, ["epoch", "line"]).repartition(37)
    with rt.run(word_count_flow(), inputs={"rows": from_spark(df, epoch_column="epoch")}, parallelism=2) as job:
        job.wait(timeout=180)
        result = job.collect("counts")
        back = to_spark(job, "counts")
        assert back.columns == ["_1", "_2", "epoch"]
        expected = spark_counts(df, by_epoch=True)
        assert {(r["epoch"], r["_1"]): r["_2"] for r in back.collect()} == expected
    assert {(e, w): n for e, pairs in result.items() for w, n in pairs} == expected


def test_a_stream_of_dataframes_one_epoch_each_and_an_empty_one(ray_session, spark):
    frames = [spark.createDataFrame(LINES[:500], ["epoch", "line"]), spark.createDataFrame([], "epoch long, line string"),
              spark.createDataFrame(LINES[500:600], ["epoch", "line"])]
    pulled = []

    def generate():
        for index, frame in enumerate(frames):
            pulled.append(index)
            yield frame

    with rt.run(word_count_flow(), inputs={"rows": from_spark(generate())}, parallelism=2) as job:
        job.wait(timeout=180)
        result = job.collect("counts")
        single = to_spark(job, "counts", epoch=2)
        assert single.columns == ["_1", "_2"]
    assert pulled == [0, 1, 2]
    assert {w: n for w, n in result[0]} == spark_counts(frames[0], by_epoch=False)
    assert 1 not in result or result[1] == []
    assert {w: n for w, n in result[2]} == spark_counts(frames[2], by_epoch=False)
    assert {r["_1"]: r["_2"] for r in single.collect()} == spark_counts(frames[2], by_epoch=False)


def test_outputs_convert_to_spark_after_the_job_is_torn_down(ray_session, spark):
    df = spark.createDataFrame(LINES[:100], ["epoch", "line"])
    with rt.run(word_count_flow(), inputs={"rows": from_spark(df)}, parallelism=1) as job:
        job.wait(timeout=180)
    back = to_spark(job, "counts", epoch=0)
    assert {r["_1"]: r["_2"] for r in back.collect()} == spark_counts(df, by_epoch=False)
