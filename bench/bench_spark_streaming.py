"""A Spark Structured Streaming query into a job (``from_spark_stream``): throughput against the
same files through ``from_spark``, and latency from a micro-batch's trigger to its output.

Run with ``python -m bench spark_streaming --repeat 3``. Ray runs locally with 2 CPUs, Spark
on it gets one. Every run:

* **Throughput.** ``files`` text files of ``lines`` lines each are counted word by word
  (flat_map, count_by_key, 2 replicas) two ways, in alternating order (AB BA ...), each
  ``rounds`` times: ``batch``, ``rt.run(flow, inputs={"lines": from_spark(spark.read.text(dir))})``
  until ``job.wait()``; ``stream``, ``from_spark_stream(spark.readStream.text(dir))`` with
  ``files_per_batch`` files per micro-batch, until every batch is held and the query stops
  (``processAllAvailable``, then ``stop``: the input closes and the job finishes). Both
  clocks run from ``rt.run`` to the job's end, start-up included (the stream's also
  includes starting the query). The counts must agree. Ratio: batch seconds over stream
  seconds (1.0: the stream is as fast).
* **Latency.** A stream with a ``trigger_s`` trigger runs while ``latency_files`` small
  files land one every ``gap_s`` seconds; for each micro-batch, the wall-clock time from
  its trigger (Spark's progress report, ``timestamp``) to ``job.results`` yielding its
  epoch. Reported as p50 and p99 (of ``latency_files`` samples, so p99 is near the
  maximum), with where the time goes: converting the micro-batch to Arrow, and from the
  batch reaching raytide to a committed snapshot holding it.
"""

from __future__ import annotations

import atexit
import itertools
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import raytide as rt
from bench.harness import ensure_ray

PARAMS = {"files": 8, "lines": 100_000, "files_per_batch": 4, "rounds": 2, "latency_files": 15, "trigger_s": 1.0,
          "gap_s": 1.3}
RATIOS = [("stream / batch throughput", "batch_s", "stream_s")]
REPEAT = 3

_state: dict[str, Any] = {}
_turn = itertools.count()


def word_count() -> rt.Dataflow:
    flow = rt.Dataflow("bench-streaming")
    flow.input("lines").flat_map(lambda row: row["value"].split()).count_by_key(lambda word: word).output("counts")
    return flow


def _spark():
    if "spark" not in _state:
        from raytide.integrations.spark import start_spark, stop_spark

        ensure_ray()
        spark = start_spark("raytide-bench-streaming", configs={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        atexit.register(stop_spark)
        _state["spark"] = spark
    return _state["spark"]


def _write_files(directory: Path, files: int, lines: int, offset: int = 0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(offset, offset + files):
        staged = directory.parent / f".staged-{index}"
        staged.write_text("".join(f"w{(index * 7 + j) % 97} x{j % 13} y{index}\n" for j in range(lines)))
        os.rename(staged, directory / f"part-{index:05d}.txt")


def _totals(handed) -> Counter:
    totals: Counter = Counter()
    for records in handed:
        for word, count in records:
            totals[word] += count
    return totals


def via_batch(directory: Path, _files_per_batch: int, _work: Path) -> tuple[Counter, float]:
    from raytide.integrations.spark import from_spark

    frame = _spark().read.text(str(directory))
    started = time.perf_counter()
    with rt.run(word_count(), inputs={"lines": from_spark(frame)}, parallelism=2) as job:
        job.wait(timeout=600)
        elapsed = time.perf_counter() - started
        return _totals(job.collect("counts").values()), elapsed


def via_stream(directory: Path, files_per_batch: int, work: Path) -> tuple[Counter, float]:
    from raytide.integrations.spark import from_spark_stream

    run = work / f"run-{next(_turn)}"
    frame = _spark().readStream.format("text").option("maxFilesPerTrigger", files_per_batch).load(str(directory))
    source = from_spark_stream(frame, str(run / "checkpoint"), processing_time="0.1 seconds")
    started = time.perf_counter()
    with rt.run(word_count(), inputs={"lines": source}, parallelism=2, recovery=rt.Recovery(str(run / "store"))) as job:
        threading.Thread(target=_finish, args=(source,), daemon=True).start()
        handed = [records for _, records in job.results("counts", timeout=600)]
        elapsed = time.perf_counter() - started
    return _totals(handed), elapsed


def _finish(source) -> None:
    """Let the query take every file there is, then stop it: the job's input closes."""
    while source.query is None:
        time.sleep(0.05)
    source.query.processAllAvailable()
    source.query.stop()


def latency(work: Path, files: int, trigger_s: float, gap_s: float) -> dict[str, float]:
    """Seconds from each micro-batch's trigger to its epoch's output, and where they went."""
    from raytide.integrations.spark import from_spark_stream

    incoming, run = work / "latency-in", work / f"latency-{next(_turn)}"
    _write_files(incoming, 1, 200)
    frame = _spark().readStream.format("text").option("maxFilesPerTrigger", 1).load(str(incoming))
    source = from_spark_stream(frame, str(run / "checkpoint"), processing_time=f"{trigger_s} seconds")
    outputs: dict[int, float] = {}
    with rt.run(word_count(), inputs={"lines": source}, parallelism=2, recovery=rt.Recovery(str(run / "store"))) as job:
        def land() -> None:
            for index in range(1, files):
                time.sleep(gap_s)
                _write_files(incoming, 1, 200, offset=index)
            _finish(source)

        threading.Thread(target=land, daemon=True).start()
        for epoch, _ in job.results("counts", timeout=600):
            outputs[epoch] = time.time()
        progress = {p["batchId"]: p["timestamp"] for p in source.query.recentProgress}
    seconds = sorted(outputs[batch] - _epoch_seconds(progress[batch]) for batch in outputs if batch in progress)
    return {"latency_p50_s": statistics.median(seconds), "latency_p99_s": seconds[min(len(seconds) - 1,
                                                                                       int(0.99 * len(seconds)))],
            "latency_samples": float(len(seconds)), "convert_p50_s": statistics.median(t[1] for t in source.timings),
            "hold_p50_s": statistics.median(t[2] for t in source.timings)}


def _epoch_seconds(timestamp: str) -> float:
    """Spark's progress ``timestamp`` (``2026-11-24T01:02:03.456Z``) as seconds since the epoch."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def measure(files: int, lines: int, files_per_batch: int, rounds: int, latency_files: int, trigger_s: float,
            gap_s: float) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="raytide-bench-streaming-"))
    directory = work / "in"
    _write_files(directory, files, lines)
    ways = {"batch": via_batch, "stream": via_stream}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    found = {}
    for _ in range(rounds):
        order = list(ways) if next(_turn) % 2 == 0 else list(reversed(ways))
        for name in order:
            found[name], elapsed = ways[name](directory, files_per_batch, work)
            seconds[name].append(elapsed)
    if found["batch"] != found["stream"] or sum(found["batch"].values()) != 3 * files * lines:
        raise AssertionError("the stream's word counts differ from the batch's")
    metrics = {f"{name}_s": statistics.median(values) for name, values in seconds.items()}
    metrics["stream_lines_per_s"] = files * lines / metrics["stream_s"]
    metrics.update(latency(work, latency_files, trigger_s, gap_s))
    return metrics
