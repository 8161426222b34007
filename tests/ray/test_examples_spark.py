"""The Spark examples: spark_wordcount's word count against Spark's groupBy, and the demo end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from examples.spark_wordcount import sample_lines, word_count

pytestmark = [pytest.mark.ray, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.slow
def test_demo_runs_in_a_fresh_process_and_prints_its_summary(tmp_path, own_ray_env):
    # Output goes to files, not pipes: Ray's and Spark's helper processes inherit the
    # descriptors, and reading a pipe to its end would also wait for them.
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        demo = subprocess.Popen([sys.executable, "examples/demo.py", "--lines", "20000", "--epochs", "4"], cwd=ROOT,
                                env=own_ray_env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            demo.wait(timeout=240)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    out, err = stdout.read_text(), stderr.read_text()
    assert demo.returncode == 0, f"exit code {demo.returncode}\n{out[-3000:]}\n{err[-5000:]}"
    assert "records in:  20,000 lines" in out and "lines/s" in out and "words/s" in out, out
    assert all(f"  epoch {epoch}: " in out for epoch in range(4)), out
    assert "back in Spark" in out and "|    word|" in out, out
