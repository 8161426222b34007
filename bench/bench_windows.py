"""Event-time windows (issue 72): 10-second tumbling and 60/10-second sliding counts per key over
events read from Parquet, raytide against Bytewax 0.21 and PyFlink's SQL windows, and raytide's
window result latency.

Run with ``python -m bench windows --repeat 3 --param bytewax_python=PATH --param
pyflink_python=PATH`` (each peer in a venv of its own: ``python3.11 -m venv bw &&
bw/bin/pip install 'bytewax==0.21.*' pyarrow``; ``python3.11 -m venv pf && pf/bin/pip install
apache-flink``, with a Java 11+ on the path). Without a peer's Python, that peer is not run.

**Data** (:func:`make_events`, written once per set of parameters to Parquet, and to CSV for
PyFlink, under ``$TMPDIR/raytide-bench-windows``, outside every clock): ``events`` events
with ``keys`` keys over ``seconds`` seconds of event time (from ``T0``, a multiple of 60 s),
in arrival order: most carry their arrival time as their event
time (in order); 5% are up to ``0.9 * max_delay`` behind it (out of order,
but within the bound in every system below); 1% are beyond the bound, ``max_delay + 70`` to
``max_delay + 130`` seconds behind (late in every system: every window, tumbling or sliding,
they fall in is closed when they come). Timestamps are whole milliseconds, a
``timestamp[ms, UTC]`` column ``t``, keys an ``int32`` column ``key``. The events go to two
files by key parity, each in arrival order (two partitions of a stream, as a Kafka topic
partitioned by key: one reader, worker or source subtask per file).

**What is compared.** Each system's windows, as ``(key, start_s, end_s, count)``, with no
window twice, against the reference computed in NumPy over every event but the 1% beyond the
bound. raytide's must equal it exactly, and its ``late_output`` must be exactly the 1% (and
``job.stats()``'s late count). The peers' late semantics differ from the reference's on a few
events, so they are checked as accounted for (:func:`check_accounted`): each count at most
the one over every event and at least the reference's less the on-time events the system
left out. Bytewax's clocks are per key and also move with wall-clock time between a key's
items, so it may send a few on-time events to its window steps' ``late`` streams: it must
count no late event, and its late stream must hold exactly the 1% plus what it left out
(``bytewax_on_time_left_out``). Flink judges lateness against the least watermark of its
source subtasks, emitted every 200 ms of wall time, and drops late events silently (only its
metrics count them): it must leave out no on-time event and may count some of the late 1%
(``pyflink_late_counted``). The out-of-order 5% stay within 0.9 of the bound and the late 1%
are far beyond it so that the three ways of telling late from on time agree on all but those.

**Throughput** (events/s, ``events`` over seconds):

* ``raytide_s``: ``rt.run(flow, inputs={"events": ArrowDatasetSource(files)}, parallelism=2)``
  to ``job.wait()`` and both outputs and the late one collected in the driver, actor start-up
  included. The input is ``flow.input("events", event_time=rt.EventTime("t",
  granularity=10.0, max_delay=max_delay, late_output="late"))`` read **in the input
  replicas** (each reader a producer with its own watermark: docs/windows.md), the faster of
  the two honest paths: the driver path (``job.push`` without an epoch) turns every record
  into a Python row in the driver to read its time. Then ``map_batches`` to the key column
  (a NumPy array) and ``window(lambda k: k, rt.Tumbling(1)).count()`` and ``rt.Sliding(6,
  1)``: epochs of 10 s, so 10-second and 60/10-second windows. The driver's first job starts
  its hosts cold (seconds at this width); later runs reuse them.
* ``bytewax_s`` (``--param bytewax_python=PATH``): ``bench/baselines/windows_bytewax.py``,
  two processes of one worker each (2 cores), ``count_window`` with an ``EventClock`` and a
  ``TumblingWindower`` / ``SlidingWindower``; from its dataflow's start to its end.
* ``pyflink_s`` (``--param pyflink_python=PATH``): ``bench/baselines/windows_pyflink.py``,
  ``TUMBLE`` and ``HOP`` window TVFs with ``WATERMARK FOR t AS t - INTERVAL 'max_delay'
  SECOND`` on a filesystem table, parallelism 2, one streaming job; from submitting it to its
  end (the JVM's start left out). It reads the same rows from CSV files (``key,t_ms``,
  written beside the Parquet ones, outside the clock): ``apache-flink`` from PyPI ships no
  Parquet format (``flink-sql-parquet`` is a Maven artifact, and Maven cannot be reached
  here), so Flink parses text where the others decode Parquet.

**Latency** (``latency_s`` seconds of wall time, 0 to skip): the same windows over an
event-time input (granularity 10 s, ``max_delay``) fed from the driver (an iterable of record
lists, pushed list by list from a thread of the driver), a list every ``tick_s`` holding
``latency_speed * tick_s`` seconds of event time at ``latency_rate`` events per second (the
same mix of in-order, out-of-order and late events): event time runs ``latency_speed`` times
faster than the wall clock, so ``keys * latency_speed / 10`` tumbling windows and as many
sliding ones are due per second. A window ending at ``E`` is due when the watermark (the
largest time pushed minus ``max_delay``) reaches ``E``: its latency runs from the moment the
list that moved the watermark there was handed to the input to the moment
``job.results`` yields it in the driver. ``latency_p50_ms``, ``latency_p99_ms`` over every
window (tumbling and sliding), ``latency_windows_per_s`` the windows yielded per second.
The peers are not measured this way: neither hands its results to a driver process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as csv
import pyarrow.parquet as pq

import raytide as rt
from bench.harness import ensure_ray
from raytide.sources.arrow import ArrowDatasetSource

PARAMS = {"events": 10_000_000, "keys": 1_000, "seconds": 500, "max_delay": 5, "seed": 0, "parallelism": 2,
          "bytewax_python": None, "pyflink_python": None, "latency_s": 30.0, "latency_speed": 20.0,
          "latency_rate": 2_000, "tick_s": 0.05, "only": None}
REPEAT = 3
RATIOS = [
    ("raytide/Bytewax throughput", "raytide_events_per_s", "bytewax_events_per_s"),
    ("raytide/PyFlink throughput", "raytide_events_per_s", "pyflink_events_per_s"),
]

T0 = 1_700_000_040  # a multiple of 60 s
TUMBLE_S, SLIDE_SIZE_S = 10, 60
DATA = Path(os.environ.get("TMPDIR", "/tmp")) / "raytide-bench-windows"


def make_events(events: int, keys: int, seconds: float, max_delay: float, seed: int) -> dict[str, np.ndarray]:
    """``key``, ``t_ms`` (event time) in arrival order, and ``beyond`` (the 1% late beyond the bound)."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(T0 * 1000, int((T0 + seconds) * 1000), events, dtype=np.int64))
    key = rng.integers(0, keys, events, dtype=np.int32)
    t_ms = arrival.copy()
    late_from = (T0 + max_delay + 140) * 1000
    eligible = np.flatnonzero(arrival >= late_from)
    beyond_at = rng.choice(eligible, size=min(len(eligible), round(0.01 * events)), replace=False)
    t_ms[beyond_at] -= int(max_delay * 1000) + rng.integers(70_000, 130_000, len(beyond_at))
    rest = np.setdiff1d(np.arange(events), beyond_at)
    delayed_at = rng.choice(rest, size=round(0.05 * events), replace=False)
    t_ms[delayed_at] -= rng.integers(0, int(0.9 * max_delay * 1000), len(delayed_at))
    beyond = np.zeros(events, dtype=bool)
    beyond[beyond_at] = True
    return {"key": key, "t_ms": t_ms, "beyond": beyond}


def write_files(data: dict[str, np.ndarray], folder: Path) -> list[str]:
    """Two Parquet files by key parity, each in arrival order (their paths), and the same rows as
    CSV (``key,t_ms``) in ``folder/csv`` for PyFlink, which has no Parquet format."""
    (folder / "csv").mkdir(parents=True, exist_ok=True)
    paths = []
    for part in range(2):
        rows = data["key"] % 2 == part
        table = pa.table({"key": pa.array(data["key"][rows], pa.int32()),
                          "t": pa.array(data["t_ms"][rows], pa.timestamp("ms", tz="UTC"))})
        path = folder / f"part-{part}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
        csv.write_csv(pa.table({"key": table.column("key"), "t_ms": pa.array(data["t_ms"][rows])}),
                      folder / "csv" / f"part-{part}.csv", csv.WriteOptions(include_header=False))
    return paths


def dataset(events: int, keys: int, seconds: float, max_delay: float, seed: int) -> tuple[dict, list[str]]:
    """The events and their Parquet files (written once per set of parameters)."""
    data = make_events(events, keys, seconds, max_delay, seed)
    folder = DATA / f"e{events}-k{keys}-s{seconds}-d{max_delay}-r{seed}"
    paths = [str(folder / f"part-{part}.parquet") for part in range(2)]
    if not all(Path(p).exists() for p in paths) or not (folder / "csv" / "part-1.csv").exists():
        paths = write_files(data, folder)
    return data, paths


def reference(data: dict[str, np.ndarray], everything: bool = False) -> dict[str, set]:
    """The tumbling and sliding windows, ``(key, start_s, end_s, count)``, of every event but the
    late 1% (``everything``: of every event)."""
    on_time = np.ones(len(data["key"]), dtype=bool) if everything else ~data["beyond"]
    keys = data["key"][on_time].astype(np.int64)
    slot = data["t_ms"][on_time] // (TUMBLE_S * 1000)
    pairs, counts = np.unique(keys * 10**12 + slot, return_counts=True)
    key, slot = pairs // 10**12, pairs % 10**12
    tumbling = set(zip(key.tolist(), (slot * TUMBLE_S).tolist(), ((slot + 1) * TUMBLE_S).tolist(), counts.tolist()))
    steps = SLIDE_SIZE_S // TUMBLE_S  # a slot is in the windows starting at it and the 5 slots before
    starts = np.concatenate([pairs - j for j in range(steps)])
    sliding_pairs, index = np.unique(starts, return_inverse=True)
    sliding_counts = np.bincount(index, weights=np.tile(counts, steps)).astype(np.int64)
    key, slot = sliding_pairs // 10**12, sliding_pairs % 10**12
    sliding = set(zip(key.tolist(), (slot * TUMBLE_S).tolist(), (slot * TUMBLE_S + SLIDE_SIZE_S).tolist(),
                      sliding_counts.tolist()))
    return {"tumbling": tumbling, "sliding": sliding}


def check_accounted(system: str, got: dict[str, list], on_time: dict[str, set], everything: dict[str, set]) -> tuple[int, int]:
    """For a peer whose own late semantics may differ from the reference's on a few events: every
    window once, and each count between the reference's over the on-time events less what the
    system left out and the one over every event. Returns, over the tumbling windows, the on-time
    events the system left out (``missing``: Bytewax's clock, which also moves with wall time,
    may take a few as late) and the late ones it counted (``extra``: Flink's watermark, the least
    of its source subtasks', may let some in); the caller checks them against the system's own
    count of late events where it has one."""
    missing = extra = 0
    for kind in ("tumbling", "sliding"):
        windows = got[kind]
        assert len(windows) == len(set(windows)), f"{system}: a {kind} window emitted twice"
        low = {w[:3]: w[3] for w in on_time[kind]}
        high = {w[:3]: w[3] for w in everything[kind]}
        mine = {w[:3]: w[3] for w in windows}
        assert set(mine) <= set(high), f"{system}: {kind} windows the events do not have"
        wrong = [w for w, n in mine.items() if n > high[w]]
        assert not wrong, f"{system}: {kind} counts above every event's, e.g. {wrong[:3]}"
        if kind == "tumbling":
            missing = sum(max(0, n - mine.get(w, 0)) for w, n in low.items())
            extra = sum(max(0, n - low.get(w, 0)) for w, n in mine.items())
    return missing, extra


def check(system: str, got: dict[str, list], expected: dict[str, set]) -> None:
    for kind in ("tumbling", "sliding"):
        windows = got[kind]
        assert len(windows) == len(set(windows)), f"{system}: a {kind} window emitted twice"
        if set(windows) != expected[kind]:
            missing, extra = expected[kind] - set(windows), set(windows) - expected[kind]
            raise AssertionError(f"{system}: {kind} windows differ from the reference: {len(missing)} missing "
                                 f"(e.g. {sorted(missing)[:3]}), {len(extra)} unexpected (e.g. {sorted(extra)[:3]})")


def _keys(batch: pa.Table | list) -> np.ndarray:
    """The key column of a batch (an Arrow table as a reader cut it; a list, were one ever passed)."""
    if isinstance(batch, list):
        return np.array([row["key"] for row in batch], dtype=np.int32)
    return batch.column("key").to_numpy()


def window_flow(max_delay: float, late: bool) -> rt.Dataflow:
    flow = rt.Dataflow("bench-windows")
    spec = rt.EventTime("t", granularity=float(TUMBLE_S), max_delay=float(max_delay),
                        late_output="late" if late else None)
    keys = flow.input("events", event_time=spec).map_batches(_keys)
    keys.window(lambda k: k, rt.Tumbling(1)).count().output("tumbling")
    keys.window(lambda k: k, rt.Sliding(SLIDE_SIZE_S // TUMBLE_S, 1)).count().output("sliding")
    return flow


def in_seconds(records: list) -> list[tuple[int, int, int, int]]:
    return [(key, start * TUMBLE_S, end * TUMBLE_S, count) for key, start, end, count in records]


def raytide_run(paths: list[str], max_delay: float, parallelism: int, data: dict) -> dict[str, float]:
    flow = window_flow(max_delay, late=True)
    start = time.perf_counter()
    with rt.run(flow, inputs={"events": ArrowDatasetSource(paths)}, parallelism=parallelism) as job:
        job.wait(timeout=3600, progress=False)
        got = {kind: [r for records in job.collect(kind).values() for r in records] for kind in ("tumbling", "sliding")}
        late = [r for records in job.collect("late").values() for r in records]
        seconds = time.perf_counter() - start
        late_count = job.stats()["late"]["events"]["records"]
    got = {kind: in_seconds(records) for kind, records in got.items()}
    beyond = int(data["beyond"].sum())
    assert late_count == len(late) == beyond, f"raytide: {late_count} late counted, {len(late)} sent, {beyond} expected"
    late_stamps = sorted(round(r["t"].timestamp() * 1000) for r in late)
    assert late_stamps == sorted(data["t_ms"][data["beyond"]].tolist()), "raytide: the late records are not the 1%"
    return {"raytide": got, "raytide_s": seconds}


def bytewax_run(python: str, paths: list[str], max_delay: float, parallelism: int, data: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-bytewax-") as out:
        spec = {"files": paths, "max_delay": max_delay, "processes": parallelism, "out": out,
                "port": 2101 + os.getpid() % 1000 * 4}
        Path(f"{out}/spec.json").write_text(json.dumps(spec))
        subprocess.run([python, str(Path(__file__).parent / "baselines" / "windows_bytewax.py"), f"{out}/spec.json"],
                       check=True, capture_output=True)
        timings = [json.loads(Path(f"{out}/timing-{i}.json").read_text()) for i in range(parallelism)]
        got: dict[str, list] = {"tumbling": [], "sliding": []}
        for i in range(parallelism):
            for line in Path(f"{out}/windows-{i}.csv").read_text().splitlines():
                kind, key, window_id, count = line.split(",")
                start = int(window_id) * TUMBLE_S
                size = TUMBLE_S if kind == "tumbling" else SLIDE_SIZE_S
                got[kind].append((int(key), start, start + size, int(count)))
    assert sum(t["items"] for t in timings) == len(data["key"]), "Bytewax did not read every event"
    return {"bytewax": got, "bytewax_s": max(t["end"] for t in timings) - min(t["start"] for t in timings),
            "bytewax_late": sum(t["late_tumbling"] for t in timings),
            "bytewax_late_sliding": float(sum(t["late_sliding"] for t in timings))}


def pyflink_run(python: str, paths: list[str], max_delay: float, parallelism: int) -> dict:
    from datetime import datetime, timezone

    with tempfile.TemporaryDirectory(prefix="bench-pyflink-") as out:
        spec = {"folder": str(Path(paths[0]).parent / "csv"), "max_delay": max_delay, "parallelism": parallelism, "out": out}
        Path(f"{out}/spec.json").write_text(json.dumps(spec))
        done = subprocess.run([python, str(Path(__file__).parent / "baselines" / "windows_pyflink.py"),
                               f"{out}/spec.json"], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"PyFlink failed ({done.returncode}): {done.stderr[-3000:]}")
        seconds = json.loads(Path(f"{out}/timing.json").read_text())["run_s"]
        got: dict[str, list] = {"tumbling": [], "sliding": []}
        for kind in got:
            for path in Path(out, kind).rglob("*"):
                if not path.is_file() or path.name.startswith("_") or path.name.endswith(".crc"):
                    continue
                for line in path.read_text().splitlines():
                    key, start, end, count = line.split(",")
                    start_s, end_s = (round(datetime.fromisoformat(s.strip('"')).replace(tzinfo=timezone.utc).timestamp())
                                      for s in (start, end))
                    got[kind].append((int(key), start_s, end_s, int(count)))
    return {"pyflink": got, "pyflink_s": seconds}


def latency(seconds: float, speed: float, rate: int, tick_s: float, keys: int, max_delay: float, seed: int,
            parallelism: int) -> dict[str, float]:
    """Window result latency with the driver feeding paced lists (see the module docstring)."""
    event_s = seconds * speed
    data = make_events(int(event_s * rate), keys, event_s, max_delay, seed + 1)
    per_tick = speed * tick_s * 1000  # milliseconds of arrival time per list
    arrival = np.maximum.accumulate(data["t_ms"])  # the largest time pushed so far, in arrival order
    bounds = np.searchsorted(arrival, T0 * 1000 + per_tick * np.arange(1, math.ceil(event_s / (speed * tick_s)) + 1))
    lists = np.split(np.arange(len(data["t_ms"])), bounds)
    highest = [int(arrival[rows[-1]]) for rows in lists if len(rows)]
    lists = [rows for rows in lists if len(rows)]
    fed_at: list[float] = []

    def feed() -> Iterator[list[dict]]:
        start = time.monotonic()
        for i, rows in enumerate(lists):
            records = [{"key": k, "t": t / 1000} for k, t in zip(data["key"][rows].tolist(), data["t_ms"][rows].tolist())]
            time.sleep(max(0.0, start + i * tick_s - time.monotonic()))
            fed_at.append(time.monotonic())
            yield records

    watermark_ms = np.array(highest) - int(max_delay * 1000)
    flow = rt.Dataflow("bench-windows-latency")
    spec = rt.EventTime("t", granularity=float(TUMBLE_S), max_delay=float(max_delay))
    stream = flow.input("events", event_time=spec)
    tumbling = stream.window("key", rt.Tumbling(1)).count()
    sliding = stream.window("key", rt.Sliding(SLIDE_SIZE_S // TUMBLE_S, 1)).count()
    tumbling.concat(sliding).output("windows")
    samples: list[float] = []
    count, first, last = 0, None, None
    with rt.run(flow, inputs={"events": feed()}, parallelism=parallelism) as job:
        for epoch, records in job.results("windows", timeout=seconds * 10 + 600, progress=False):
            if not records:
                continue
            now = time.monotonic()
            end_ms = (epoch + 1) * TUMBLE_S * 1000
            due = int(np.searchsorted(watermark_ms, end_ms))  # the first list whose watermark reached the end
            if due < len(fed_at):  # not the windows the input's close flushed
                samples += [now - fed_at[due]] * len(records)
            count += len(records)
            first = now if first is None else first
            last = now
    samples.sort()
    return {"latency_p50_ms": samples[len(samples) // 2] * 1000,
            "latency_p99_ms": samples[min(len(samples) - 1, int(0.99 * len(samples)))] * 1000,
            "latency_windows": float(len(samples)),
            "latency_windows_per_s": count / (last - first) if last and first and last > first else float("nan")}


def measure(events: int, keys: int, seconds: float, max_delay: float, seed: int, parallelism: int,
            bytewax_python: str | None, pyflink_python: str | None, latency_s: float, latency_speed: float,
            latency_rate: int, tick_s: float, only: str | None) -> dict[str, float]:
    ensure_ray()
    metrics: dict[str, float] = {}
    if only in (None, "throughput"):
        data, paths = dataset(events, keys, seconds, max_delay, seed)
        expected, everything = reference(data), reference(data, everything=True)
        runs = [lambda: raytide_run(paths, max_delay, parallelism, data)]
        if bytewax_python:
            runs.append(lambda: bytewax_run(bytewax_python, paths, max_delay, parallelism, data))
        if pyflink_python:
            runs.append(lambda: pyflink_run(pyflink_python, paths, max_delay, parallelism))
        for run in runs:
            result = run()
            for system in ("raytide", "bytewax", "pyflink"):
                if system not in result:
                    continue
                if system == "raytide":
                    check(system, result.pop(system), expected)
                else:
                    missing, extra = check_accounted(system, result.pop(system), expected, everything)
                    metrics[f"{system}_on_time_left_out"], metrics[f"{system}_late_counted"] = missing, extra
                    if system == "bytewax":  # what it left out, it sent to its late stream
                        assert extra == 0 and result["bytewax_late"] == int(data["beyond"].sum()) + missing, (
                            f"Bytewax: {result['bytewax_late']} late, {missing} on-time left out, {extra} late counted")
                    else:  # Flink drops late events silently: all on time are in, at most the late 1% more
                        assert missing == 0 and extra <= int(data["beyond"].sum()), f"PyFlink: {missing}, {extra}"
                metrics[f"{system}_events_per_s"] = events / result[f"{system}_s"]
            metrics.update(result)
            time.sleep(1.0)
        metrics["windows"] = float(len(expected["tumbling"]) + len(expected["sliding"]))
    if only in (None, "latency") and latency_s:
        metrics.update(latency(latency_s, latency_speed, latency_rate, tick_s, keys, max_delay, seed, parallelism))
    return metrics
