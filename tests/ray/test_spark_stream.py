"""A Spark Structured Streaming query feeding a job (``from_spark_stream``), on real Spark
through RayDP and a real Ray: files land in a directory while the query runs, micro-batch
``n`` is epoch ``n``, and every file's words are counted exactly once, across a replica
SIGKILLed mid-stream and across a job stopped with a savepoint and restored on the same
checkpoint; a rate source's numbered rows, once each across a savepoint. Counted against
a plain-Python reference (:mod:`tests.delivery`): per epoch, the words of the files Spark
put in that micro-batch."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import raytide as rt
from raytide.errors import SparkIntegrationError
from raytide.integrations.parquet import ParquetSink
from raytide.integrations.spark import from_spark_stream
from tests.delivery import count_delivery

pytestmark = [pytest.mark.ray, pytest.mark.spark]

LINES = 40


def file_words(index: int) -> Counter:
    """The words of file ``index``: ``w0``..``w4`` 8 times each, and its own tag 40 times."""
    return Counter(word for j in range(LINES) for word in (f"w{j % 5}", f"f{index}"))


def land(directory: Path, index: int) -> None:
    """Write file ``index`` into ``directory`` whole (a rename), as an upstream system would."""
    staged = directory.parent / f"staged-{index}.txt"
    staged.write_text("\n".join(f"w{j % 5} f{index}" for j in range(LINES)) + "\n")
    os.rename(staged, directory / f"part-{index:04d}.txt")


def word_count() -> rt.Dataflow:
    flow = rt.Dataflow("streamwc")
    flow.input("lines").flat_map(lambda row: row["value"].split()).count_by_key(lambda word: word).output("counts")
    return flow


class Stream:
    """A directory of landing files, a file-source query's checkpoint and a snapshot store."""

    def __init__(self, root: Path) -> None:
        root.mkdir(exist_ok=True)
        self.incoming, self.checkpoint, self.store = root / "in", str(root / "checkpoint"), str(root / "store")
        self.parquet = str(root / "parquet")
        self.incoming.mkdir()
        self.landed = 0

    def land(self, count: int = 1) -> None:
        for _ in range(count):
            land(self.incoming, self.landed)
            self.landed += 1

    def run(self, spark, restore: int | str | None = None) -> rt.Job:
        frame = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(self.incoming))
        source = from_spark_stream(frame, self.checkpoint, processing_time="0.2 seconds", query_name="landing")
        return rt.run(word_count(), inputs={"lines": source}, parallelism=2, recovery=rt.Recovery(self.store),
                      restore=restore)


def consume(job: rt.Job, stream: Stream, handed: list, until_files: int, land_each: bool, timeout: float = 240.0,
            each=None) -> None:
    """Take epochs (into ``handed``, and the Parquet sink) until the files up to
    ``until_files`` have been counted; land one more file after each epoch if ``land_each``."""
    sink = ParquetSink(stream.parquet, "counts")
    deadline = time.monotonic() + timeout
    for epoch, records in job.results("counts", timeout=timeout):
        handed.append((epoch, records))
        if records:
            sink.write(epoch, records)
        if each is not None:
            each(len(handed))
        if land_each and stream.landed < until_files:
            stream.land()
        if len(files_seen(handed)) >= until_files or time.monotonic() > deadline:
            return


def files_seen(handed: list) -> list[int]:
    return [int(word[1:]) for _, records in handed for word, _ in records if word.startswith("f")]


def assert_each_file_once(handed: list, files: int) -> None:
    """Every landed file's words once, in the epoch of the micro-batch that read it, epochs in order."""
    seen = files_seen(handed)
    assert sorted(seen) == list(range(files)), f"files counted: {sorted(seen)}"
    expected: dict[int, Counter] = {}
    for epoch, records in handed:
        for word, _ in records:
            if word.startswith("f"):
                expected.setdefault(epoch, Counter()).update(file_words(int(word[1:])))
    delivery = count_delivery({e: Counter(dict(c)) for e, c in _as_pairs(expected).items()}, handed)
    assert delivery.exact, delivery
    epochs = [epoch for epoch, _ in handed]
    assert epochs == sorted(set(epochs)), f"epochs handed twice or out of order: {epochs}"


def _as_pairs(expected: dict[int, Counter]) -> dict[int, Counter]:
    """Per epoch, the word counts as the job emits them: one ``(word, count)`` record per word."""
    return {epoch: Counter(counts.items()) for epoch, counts in expected.items()}


def test_micro_batches_are_epochs_exactly_once_across_a_savepoint_and_a_restart_on_the_same_checkpoint(
        ray_session, spark, tmp_path):
    stream = Stream(tmp_path)
    stream.land(2)
    handed: list = []
    job = stream.run(spark)
    consume(job, stream, handed, until_files=4, land_each=True)
    savepoint = job.stop()
    for epoch, records in sorted(job.collect("counts").items()):  # polled before the savepoint, not yet read
        handed.append((epoch, records))
        ParquetSink(stream.parquet, "counts").write(epoch, records)
    first_run = len(handed)
    with stream.run(spark) as fresh, pytest.raises(rt.RaytideError, match="micro-batches of an earlier run"):
        fresh.wait(timeout=120)  # a job started afresh would not hold what the checkpoint says was taken
    elsewhere = Stream(tmp_path / "elsewhere")
    elsewhere.store = stream.store
    with elsewhere.run(spark, restore=savepoint) as lost, pytest.raises(rt.RaytideError, match="no record of them"):
        lost.wait(timeout=120)  # the query would start over on a new checkpoint location
    stream.land(2)  # while no query runs
    with stream.run(spark, restore=savepoint) as job:
        consume(job, stream, handed, until_files=7, land_each=True)
        job.stop()
    assert first_run < len(handed)
    assert_each_file_once(handed, 7)
    written = ds.dataset(stream.parquet, partitioning="hive").to_table().to_pylist()
    by_epoch: dict[int, Counter] = {}
    for row in written:
        by_epoch.setdefault(row["epoch"], Counter())[(row["_1"], row["_2"])] += 1
    assert by_epoch == {epoch: Counter(records) for epoch, records in handed if records}


@pytest.mark.parametrize("victim", ["replica", "progress", "coordinator"])
def test_an_actor_killed_mid_stream_loses_and_repeats_nothing(ray_session, spark, tmp_path, victim):
    stream = Stream(tmp_path)
    stream.land(1)
    handed: list = []
    with stream.run(spark) as job:
        host = {"replica": f"{job.plan.chain_of('counts').name}/1"}.get(victim, victim)

        def kill_at_the_second_epoch(taken: int) -> None:
            if taken == 2:
                os.kill(job.hosts()[f"{job.name}/{host}"], signal.SIGKILL)

        consume(job, stream, handed, until_files=6, land_each=True, each=kill_at_the_second_epoch)
        recoveries = job.stats()["recoveries"]
        job.stop()
    assert recoveries["count"] >= 1, f"the {victim} was killed: the job recovered ({recoveries})"
    assert_each_file_once(handed, 6)


def test_a_rate_source_continues_across_a_savepoint_with_every_value_once(ray_session, spark, tmp_path):
    """Spark's rate source numbers its rows 0, 1, 2, ...: across two runs on one checkpoint,
    every value up to the last one seen comes once (a micro-batch lost or repeated would show)."""
    flow = rt.Dataflow("rate")
    flow.input("rows").map(lambda row: row["value"]).output("values")
    checkpoint, store = str(tmp_path / "checkpoint"), str(tmp_path / "store")
    handed: list = []
    restore = None
    for _ in range(2):
        frame = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
        source = from_spark_stream(frame, checkpoint, processing_time="0.3 seconds")
        with rt.run(flow, inputs={"rows": source}, recovery=rt.Recovery(store), restore=restore) as job:
            for epoch, values in job.results("values", timeout=120):
                handed.append((epoch, values))
                if sum(1 for _, v in handed if v) % 3 == 0 and values:
                    break
            restore = job.stop()
            handed.extend(sorted(job.collect("values").items()))  # polled before the savepoint, not yet read
    values = sorted(v for _, vs in handed for v in vs)
    assert values == list(range(len(values))) and len(values) > 0, "rate values lost or repeated"
    epochs = [epoch for epoch, _ in handed]
    assert epochs == sorted(set(epochs))


def test_a_streaming_dataframe_is_required_and_a_socket_refused(spark, tmp_path):
    with pytest.raises(SparkIntegrationError, match="for a DataFrame read in batch, use from_spark"):
        from_spark_stream(spark.range(3), str(tmp_path / "c"))
    socket = spark.readStream.format("socket").option("host", "localhost").option("port", 9).load()
    with pytest.raises(SparkIntegrationError, match="socket source cannot replay"):
        from_spark_stream(socket, str(tmp_path / "c"))
    rate = spark.readStream.format("rate").load()
    with pytest.raises(SparkIntegrationError, match="checkpoint_location must name a directory"):
        from_spark_stream(rate, "")
    intervals = rate.selectExpr("make_interval(0, 0, 0, 1) as gap")
    with pytest.raises(SparkIntegrationError, match="gap"):
        from_spark_stream(intervals, str(tmp_path / "c"))
    with pytest.raises(rt.ArgumentError, match=r"stream inputs \['lines'\] need recovery"):
        rt.run(word_count(), inputs={"lines": from_spark_stream(rate, str(tmp_path / "c"))})


def test_a_batch_not_held_in_time_fails_the_job_naming_the_input_and_the_batch(ray_session, spark, tmp_path):
    stream = Stream(tmp_path)
    stream.land(1)
    frame = spark.readStream.format("text").load(str(stream.incoming))
    source = from_spark_stream(frame, stream.checkpoint, processing_time="0.2 seconds", hold_timeout=0.001)
    with rt.run(word_count(), inputs={"lines": source}, recovery=rt.Recovery(stream.store)) as job:
        with pytest.raises(rt.RaytideError, match="stream input 'lines'.* batch 0 .*within 0.001 s"):
            job.wait(timeout=120)


def test_a_checkpoint_of_another_query_or_of_an_earlier_run_is_refused_before_data_moves(
        ray_session, spark, tmp_path):
    stream = Stream(tmp_path)
    stream.land(1)
    (Path(stream.checkpoint) / "commits").mkdir(parents=True)  # a query that did not feed raytide wrote it
    with stream.run(spark) as job, pytest.raises(rt.RaytideError, match="did not feed raytide"):
        job.wait(timeout=120)


def test_a_query_failing_inside_spark_names_the_query_and_the_micro_batch(ray_session, spark, tmp_path):
    stream = Stream(tmp_path)
    stream.land(1)
    frame = (spark.readStream.format("text").load(str(stream.incoming))
             .selectExpr("if(value like 'w4%', raise_error('bad line'), value) as value"))
    source = from_spark_stream(frame, stream.checkpoint, processing_time="0.2 seconds", query_name="failing")
    with rt.run(word_count(), inputs={"lines": source}, recovery=rt.Recovery(stream.store)) as job:
        with pytest.raises(rt.RaytideError) as error:
            job.wait(timeout=120)
    message = str(error.value)
    assert "query 'failing'" in message and "micro-batch 0" in message and "bad line" in message, message


def test_an_event_time_column_that_is_missing_or_not_a_time_is_refused_naming_the_query_and_the_column(spark, tmp_path):
    """The rate source has ``timestamp`` (a time) and ``value`` (a number of seconds); before anything runs."""
    from raytide.errors import SourceError

    rate = spark.readStream.format("rate").load().selectExpr("timestamp", "value", "'x' as page")
    assert from_spark_stream(rate, str(tmp_path / "c"), event_time="timestamp").event_time == "timestamp"
    with pytest.raises(SourceError, match=r"checkpointed at .*: event_time column 't' is not a column \(columns: "):
        from_spark_stream(rate, str(tmp_path / "c"), event_time="t")
    with pytest.raises(SourceError, match="event_time column 'page' has type string"):
        from_spark_stream(rate, str(tmp_path / "c"), event_time=rt.EventTime("page", max_delay=2))
