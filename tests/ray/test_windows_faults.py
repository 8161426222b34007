"""Windows through failures on real Ray, against a plain-Python reference.

A keyed tumbling-window count over an event-time input fed steadily (out of order within
``max_delay``, a few clicks beyond it), with a replica of the windowed vertex SIGKILLed
mid-window (the job recovers from its snapshots) and then the windowed vertex rescaled live
from 2 to 3 replicas: every window's count comes out exactly once, equal to the reference,
and the late clicks all reach the late output. Then event time read in the replicas: Parquet
files through an Arrow source with ``event_time=``, each reader a producer with its own
watermark. The pure logic is proven against brute force in tests/unit/test_source_event_time.py,
tests/unit/test_event_time.py and tests/sim/test_windowing_sim.py."""

from __future__ import annotations

import math
import os
import random
import signal
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raytide as rt
from raytide.sources.arrow import ArrowDatasetSource

pytestmark = pytest.mark.ray

DELAY, WINDOW = 2.0, 5


def clicks_and_pushes(seed: int) -> tuple[list[dict], list[list[dict]]]:
    rng = random.Random(seed)
    clicks = [{"page": rng.randrange(12), "t": round(n * 0.1 + rng.uniform(0, 0.1), 3), "n": n} for n in range(1200)]
    late_ones = set(rng.sample(range(300, 1200), 12))  # arrive 6 s after their time: beyond max_delay
    arrival = sorted(clicks, key=lambda c: c["t"] + (6.0 if c["n"] in late_ones else rng.uniform(0, DELAY)))
    return clicks, [arrival[i:i + 20] for i in range(0, len(arrival), 20)]


def reference(clicks: list[dict], pushes: list[list[dict]]) -> tuple[Counter, list[int]]:
    """Windows of the clicks not late (late: an epoch the watermark before its push had closed), and the late ones."""
    late, highest = [], -math.inf
    for push in pushes:
        late += [c["n"] for c in push if highest > -math.inf and math.floor(c["t"]) < math.floor(highest - DELAY)]
        highest = max(highest, *(c["t"] for c in push))
    counts = Counter((c["page"], math.floor(c["t"]) // WINDOW * WINDOW) for c in clicks if c["n"] not in late)
    return Counter({(page, start, start + WINDOW, n) for (page, start), n in counts.items()}), late


def test_windows_come_out_once_through_a_killed_replica_and_a_live_rescale(ray_session, tmp_path):
    clicks, pushes = clicks_and_pushes(11)
    expected, late = reference(clicks, pushes)
    assert 5 <= len(late) <= 20
    flow = rt.Dataflow("windows-faults")
    events = flow.input("clicks", event_time=rt.EventTime("t", max_delay=DELAY, late_output="late"))
    events.window(lambda c: c["page"], rt.Tumbling(WINDOW), name="windows").count().output("per_page")
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.3, max_restarts=3)
    third = len(pushes) // 3
    with rt.run(flow, parallelism=2, recovery=recovery) as job:
        results = job.results("per_page", timeout=120)
        for push in pushes[:third]:
            job.push("clicks", push)
        got = dict([next(results)])  # the first windows are out; later ones are open (mid-window)
        chain = job.plan.chain_of("windows").name
        os.kill(job.hosts()[f"{job.name}/{chain}/1"], signal.SIGKILL)
        for push in pushes[third:2 * third]:
            job.push("clicks", push)
        job.rescale({"windows": 3}, timeout=120)
        assert job.parallelism()["windows"] == 3
        for push in pushes[2 * third:]:
            job.push("clicks", push)
        job.close("clicks")
        for epoch, records in results:
            assert epoch not in got, f"epoch {epoch} handed out twice"
            got[epoch] = records
        got_late = [c["n"] for records in job.collect("late").values() for c in records]
        stats = job.stats()
    windows = [r for records in got.values() for r in records]
    assert len(windows) == len(set(windows)) == len(expected), "a window lost or emitted twice"
    assert Counter(windows) == expected
    assert sorted(got_late) == sorted(late)
    assert stats["late"]["clicks"]["records"] == len(late)
    assert stats["recoveries"], "the SIGKILL was not recovered from"


def two_readers_reference(blocks: list[list[dict]], delay: float, window: int) -> tuple[list[int], Counter]:
    """``(late, on_time)`` for ``blocks`` read by two readers in turn (block ``i`` by reader
    ``i % 2``), each with its own watermark: the numbers of the records behind their reader's
    watermark (``delay`` behind the highest time it read before), and the on-time records'
    count per ``(page, window start)`` of tumbling ``window``-second windows."""
    late, highest = [], {0: -math.inf, 1: -math.inf}  # per reader, as from scratch
    for index, rows in enumerate(blocks):
        reader = index % 2
        late += [r["n"] for r in rows if highest[reader] > -math.inf and math.floor(r["t"]) < math.floor(highest[reader] - delay)]
        highest[reader] = max(highest[reader], *(r["t"] for r in rows))
    on_time = Counter((r["page"], math.floor(r["t"]) // window * window) for rows in blocks for r in rows if r["n"] not in late)
    return late, on_time


def test_parquet_read_in_the_replicas_goes_to_event_time_windows_each_reader_with_its_own_watermark(ray_session, tmp_path):
    rng = random.Random(5)
    files: list[list[dict]] = []  # one file a batch: each reader reads every other file, in order
    for index in range(8):
        base = index // 2 * 10.0  # the two readers' files cover the same stretch of time
        rows = [{"page": rng.randrange(5), "t": base + rng.uniform(0, 10), "n": index * 100 + i} for i in range(60)]
        if index >= 4:
            rows.append({"page": 0, "t": base - 8.0, "n": index * 100 + 99})  # behind the reader's watermark
        files.append(rows)
        pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / f"part-{index}.parquet"))
    late, on_time = two_readers_reference(files, DELAY, WINDOW)
    flow = rt.Dataflow("parquet-event-time")
    events = flow.input("clicks", event_time=rt.EventTime("t", max_delay=DELAY, late_output="late"))
    events.window(lambda c: c["page"], rt.Tumbling(WINDOW)).count().output("per_page")
    paths = [str(tmp_path / f"part-{index}.parquet") for index in range(8)]
    with rt.run(flow, parallelism=2, inputs={"clicks": ArrowDatasetSource(paths, event_time="t")}) as job:
        job.wait(timeout=60)
        windows = [r for records in job.collect("per_page").values() for r in records]
        got_late = [c["n"] for records in job.collect("late").values() for c in records]
        stats = job.stats()["late"]["clicks"]
    assert len(late) == 4
    assert Counter(windows) == Counter({(p, s, s + WINDOW, n) for (p, s), n in on_time.items()})
    assert len(windows) == len(on_time)
    assert sorted(got_late) == sorted(late) and stats["records"] == len(late)
