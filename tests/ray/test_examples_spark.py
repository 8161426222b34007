"""The Spark examples: spark_wordcount's word count against Spark's groupBy, spark_streaming's
counts of files landing under a streaming query against plain Python, and the demo end to end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from examples.spark_streaming import expected_counts, stream_word_counts
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


def test_streaming_word_count_of_landing_files_written_and_read_back_equals_plain_python(ray_session, spark, tmp_path):
    totals, batches, committed = stream_word_counts(spark, tmp_path, files=3, every=0.3)
    assert totals == dict(expected_counts(3))
    assert sorted(batches) == committed and sum(batches.values()) == sum(totals.values())


#: Lines of Ray's, Spark's or log4j's logging that say WARN or ERROR (Spark's "26/11/22 12:50:07 WARN
#: Utils: ...", log4j's "ERROR StatusConsoleListener ...", Ray's "2026-11-22 ... WARNING dataset.py:8601"
#: and its C++ "[2026-11-22 ... W 3680 3778] file.cc:96:"), and Spark's default-log-level banner.
NOISE = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR) "
    r"|ERROR StatusConsoleListener"
    r"|\S+ \S+\s+(WARNING|ERROR) \S+\.py:\d+ -- "
    r"|\[\S+ \S+ [WEF] \d+ \d+\] \S+\.cc:\d+:"
    r"|Setting default log level)"
)


@pytest.mark.slow
def test_demo_runs_in_a_fresh_process_quietly_with_a_moving_bar_and_its_summary(tmp_path, own_ray_env):
    epochs = 4
    out, err = run_demo(tmp_path, own_ray_env, "--lines", "20000", "--epochs", str(epochs))
    assert "records in:  20,000 lines" in out and "lines/s" in out and "words/s" in out, out
    assert re.search(r"^start-up: +\d+\.\d s", out, re.MULTILINE), out
    assert re.search(r"^processing: +\d+\.\d s", out, re.MULTILINE), out
    assert all(f"  epoch {epoch}: " in out for epoch in range(epochs)), out
    assert "back in Spark" in out and "|    word|" in out, out
    assert [line for line in (out + err).splitlines() if NOISE.match(line)] == [], out + err
    # tqdm redraws the bar on stderr after \r, at most every 0.1 s: a bar that never moved before
    # the end (results arriving in one burst) draws only 0/N and N/N.
    drawn = {int(done) for done in re.findall(rf"\b(\d+)/{epochs} \[", err)}
    assert drawn & set(range(1, epochs)), err


def run_demo(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[str, str]:
    """Run examples/demo.py in a fresh process; its stdout and stderr, after checking it exited with 0."""
    # Output goes to files, not pipes: Ray's and Spark's helper processes inherit the
    # descriptors, and reading a pipe to its end would also wait for them.
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        demo = subprocess.Popen([sys.executable, "examples/demo.py", *args], cwd=ROOT,
                                env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            demo.wait(timeout=240)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    out, err = stdout.read_text(), stderr.read_text()
    assert demo.returncode == 0, f"exit code {demo.returncode}\n{out[-3000:]}\n{err[-5000:]}"
    return out, err
