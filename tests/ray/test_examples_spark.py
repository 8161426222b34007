"""The Spark examples: spark_wordcount's word count against Spark's groupBy, and spark_streaming's
counts of files landing under a streaming query against plain Python (the demo, which starts a
Ray and a Spark of its own, is tests/ray/test_demo.py)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from examples.spark_streaming import expected_counts, stream_word_counts
from examples.spark_wordcount import sample_lines, word_count

pytestmark = [pytest.mark.ray, pytest.mark.spark]


def spark_word_counts(lines, pattern: str = " ") -> dict[str, int]:
    words = lines.select(F.explode(F.split("value", pattern)).alias("word")).where(F.col("word") != "")
    return {row["word"]: row["count"] for row in words.groupBy("word").count().collect()}


def as_dict(counts) -> dict[str, int]:
    assert counts.columns == ["word", "count"]
    return {row["word"]: row["count"] for row in counts.collect()}


def test_word_count_of_generated_lines_equals_spark_group_by(ray_session, spark):
    lines = spark.createDataFrame([(line,) for line in sample_lines(3000)], ["value"]).repartition(5)
    assert as_dict(word_count(lines)) == spark_word_counts(lines)


def test_word_count_of_a_text_file_equals_spark_group_by(ray_session, spark, tmp_path):
    text = "héllo wörld  héllo\n\n  tabs\tand\tspaces  \nπ π π\n" * 50 + "last line without newline"
    (tmp_path / "lines.txt").write_text(text, encoding="utf-8")
    lines = spark.read.text(str(tmp_path / "lines.txt"))
    counts = as_dict(word_count(lines, parallelism=1))
    assert counts == spark_word_counts(lines, r"\s+")
    assert counts["héllo"] == 100 and counts["π"] == 150


def test_streaming_word_count_of_landing_files_written_and_read_back_equals_plain_python(ray_session, spark, tmp_path):
    totals, batches, committed = stream_word_counts(spark, tmp_path, files=3, every=0.3)
    assert totals == dict(expected_counts(3))
    assert sorted(batches) == committed and sum(batches.values()) == sum(totals.values())
