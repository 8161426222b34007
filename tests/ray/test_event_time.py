"""Event time on real Ray: clicks pushed out of order, with their own timestamps, through an
event-time input with a ``max_delay`` and a ``late_output`` into tumbling windows per page,
compared with a plain-Python reference: every window once with the count of its on-time
clicks, the late output exactly the clicks beyond the bound, counted in ``job.stats()``.
The clock and the windows are proven against brute force in tests/unit/test_event_time.py
and tests/sim/test_windowing_sim.py."""

from __future__ import annotations

import math
import os
import random
import signal
import time
from collections import Counter

import pytest

import raytide as rt
from tests.ray.test_windows_faults import two_readers_reference

pytestmark = pytest.mark.ray

DELAY, WINDOW = 3.0, 10


def test_out_of_order_clicks_fill_each_window_once_and_the_late_ones_go_to_the_late_output(ray_session):
    rng = random.Random(7)
    clicks = [{"page": rng.choice("abc"), "t": round(rng.uniform(0, 120), 2), "n": n} for n in range(600)]
    arrival = sorted(clicks, key=lambda c: c["t"] + rng.choice([0.0] * 9 + [8.0]) * rng.random())
    pushes = [arrival[i:i + 25] for i in range(0, len(arrival), 25)]
    late, highest = [], -math.inf  # the reference: late once the watermark before the push closed the epoch
    for push in pushes:
        late += [c for c in push if highest > -math.inf and math.floor(c["t"]) < math.floor(highest - DELAY)]
        highest = max(highest, *(c["t"] for c in push))
    on_time = [c for c in clicks if c not in late]
    expected = Counter((c["page"], w := math.floor(c["t"]) // WINDOW * WINDOW, w + WINDOW) for c in on_time)
    assert 5 <= len(late) <= 100, len(late)

    flow = rt.Dataflow("clicks")
    events = flow.input("clicks", event_time=rt.EventTime("t", max_delay=DELAY, late_output="late"))
    events.window(lambda c: c["page"], rt.Tumbling(WINDOW)).count().output("per_page")
    with rt.run(flow, parallelism=2) as job:
        for push in pushes:
            job.push("clicks", push)
        job.close("clicks")
        job.wait(timeout=60)
        windows = [r for records in job.collect("per_page").values() for r in records]
        got_late = [c for records in job.collect("late").values() for c in records]
        stats = job.stats()["late"]["clicks"]
    assert Counter(windows) == Counter({(page, start, end, count) for (page, start, end), count in expected.items()})
    assert len(windows) == len(expected)  # every window once
    assert sorted(c["n"] for c in got_late) == sorted(c["n"] for c in late)
    assert stats["records"] == len(late) and stats["by_epoch"] == dict(sorted(Counter(math.floor(c["t"]) for c in late).items()))
    assert stats["max_lateness_s"] > 0


IDLE = 1.0


def test_an_idle_partition_stops_holding_a_window_on_the_drivers_timer_and_a_killed_replica_replays_the_release(
        ray_session, tmp_path):
    """Partition 1 pushes once (t=5), partition 0 clicks up to t=100, then nothing is pushed
    while the user waits for the window [0, 10): the driver's timer finds partition 1 idle
    ``IDLE`` seconds after its push and releases the input to partition 0's watermark (99), so
    the window comes out without a push. Then input replica 0 (the released epochs went to both) is
    SIGKILLed (no snapshot committed: the recovery replays every logged call, the timer's
    release among them), partition 1 comes back with an old click (late: it was released
    past it) and partition 0 goes on: every window once, equal to a plain-Python reference."""
    spec = rt.EventTime("t", max_delay=1.0, late_output="late", idle_timeout=IDLE)
    flow = rt.Dataflow("idle-timer")
    flow.input("clicks", event_time=spec).window(lambda c: c["page"], rt.Tumbling(WINDOW)).count().output("per_page")
    first = {"page": 0, "t": 5.0, "n": -1}
    busy = [{"page": n % 3, "t": 4.0 + n * 0.5, "n": n} for n in range(253)]  # t 4 .. 130
    before, after = [c for c in busy if c["t"] <= 100], [c for c in busy if c["t"] > 100]
    comeback = {"page": 1, "t": 6.0, "n": -2}
    on_time = Counter((c["page"], math.floor(c["t"]) // WINDOW * WINDOW) for c in [first, *busy])
    expected = Counter({(page, start, start + WINDOW, n) for (page, start), n in on_time.items()})
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(str(tmp_path), interval=None, max_restarts=2)) as job:
        results = job.results("per_page", timeout=30, progress=False)
        job.push("clicks", [first], partition=1)
        idle_from = time.monotonic()
        for at in range(0, len(before), 40):
            job.push("clicks", before[at:at + 40], partition=0)
        got: dict[int, list] = {}
        while not any(start == 0 for _, start, _, _ in (r for records in got.values() for r in records)):
            epoch, records = next(results)
            got[epoch] = records
        waited = time.monotonic() - idle_from
        assert IDLE <= waited <= IDLE + 10, f"window [0, {WINDOW}) came out {waited:.2f} s after partition 1's push"
        os.kill(job.hosts()[f"{job.name}/{job.plan.chain_of('clicks').name}/0"], signal.SIGKILL)
        job.push("clicks", [comeback], partition=1)
        job.push("clicks", after, partition=0)
        job.close("clicks")
        for epoch, records in results:
            assert epoch not in got, f"epoch {epoch} handed out twice"
            got[epoch] = records
        late = [c for records in job.collect("late").values() for c in records]
        stats = job.stats()
    windows = [r for records in got.values() for r in records]
    assert Counter(windows) == expected and len(windows) == len(expected), "a window lost, wrong or emitted twice"
    assert late == [comeback] and stats["late"]["clicks"]["by_epoch"] == {6: 1}
    assert stats["recoveries"], "the SIGKILL was not recovered from"


def test_joins_across_time_on_event_time_inputs_match_a_plain_python_reference(ray_session):
    """Views and buys pushed with their own times (1-second epochs) into an interval join in
    seconds (a buy 0 to 2.5 s after a view of the same user), and the views joined with the
    latest price of their page from a stream of price updates: every pair and every enriched
    view once, as a plain-Python reference computes them (the state and its trimming are proven
    against brute force in tests/unit/test_temporal_joins.py and tests/sim/test_temporal_sim.py)."""
    rng = random.Random(4)
    views = [{"user": rng.randrange(4), "page": rng.randrange(3), "t": round(n * 0.3, 2), "n": n} for n in range(60)]
    buys = [{"user": rng.randrange(4), "t": round(n * 0.7 + 0.05, 2), "n": n} for n in range(25)]
    prices = [{"page": rng.randrange(3), "t": float(t), "price": t} for t in range(0, 18, 2)]
    flow = rt.Dataflow("time-joins")
    seen, bought, priced = (flow.input(name, event_time=rt.EventTime("t", max_delay=1.0))
                            for name in ("views", "buys", "prices"))
    seen.interval_join(bought, lambda r: r["user"], 0.0, 2.5).output("pairs")
    seen.join_latest(priced, lambda r: r["page"]).output("priced")
    with rt.run(flow, parallelism=2) as job:
        for name, records in (("prices", prices), ("views", views), ("buys", buys)):
            for at in range(0, len(records), 10):
                job.push(name, records[at:at + 10])
            job.close(name)
        job.wait(timeout=60)
        pairs = [r for records in job.collect("pairs").values() for r in records]
        enriched = [r for records in job.collect("priced").values() for r in records]
    expected = Counter((v["user"], v["n"], b["n"]) for v in views for b in buys
                       if v["user"] == b["user"] and 0.0 <= b["t"] - v["t"] <= 2.5)
    assert Counter((key, v["n"], b["n"]) for key, v, b in pairs) == expected and expected
    want = Counter()
    for v in views:  # the updates of the latest epoch at or before the view's that has any for its page
        epochs = [math.floor(p["t"]) for p in prices if p["page"] == v["page"] and math.floor(p["t"]) <= math.floor(v["t"])]
        latest = [p["price"] for p in prices if epochs and p["page"] == v["page"] and math.floor(p["t"]) == max(epochs)]
        want.update((v["page"], v["n"], price) for price in latest or [None])
    assert Counter((key, v["n"], value if value is None else value["price"]) for key, v, value in enriched) == want


def test_a_ray_dataset_with_event_time_goes_to_windows_each_reader_with_its_own_watermark(ray_session):
    """A Ray Dataset of four Arrow blocks read in the replicas with ``event_time="t"`` (reader
    ``r`` reads blocks ``r, r + 2``, each a producer with its own watermark) into tumbling
    counts with a late output: the windows of the records not late, the late ones exactly those
    behind their reader's watermark (one per block after the first of each reader)."""
    import pyarrow as pa
    import ray

    from raytide.integrations.ray_data import from_dataset

    rng = random.Random(9)
    blocks = []
    for index in range(4):
        base = 100.0 + index // 2 * 20.0
        rows = [{"page": rng.randrange(3), "t": base + rng.uniform(0, 20), "n": index * 100 + i} for i in range(40)]
        rows.append({"page": 0, "t": base - 15.0, "n": index * 100 + 99})  # late unless its reader read nothing yet
        blocks.append(rows)
    late, on_time = two_readers_reference(blocks, DELAY, WINDOW)
    flow = rt.Dataflow("ray-data-event-time")
    events = flow.input("clicks", event_time=rt.EventTime("t", max_delay=DELAY, late_output="late"))
    events.window(lambda c: c["page"], rt.Tumbling(WINDOW)).count().output("per_page")
    dataset = ray.data.from_arrow([pa.Table.from_pylist(rows) for rows in blocks])
    with rt.run(flow, parallelism=2, inputs={"clicks": from_dataset(dataset, event_time="t")}) as job:
        job.wait(timeout=60)
        windows = [r for records in job.collect("per_page").values() for r in records]
        got_late = sorted(c["n"] for records in job.collect("late").values() for c in records)
        stats = job.stats()["late"]["clicks"]
    assert late == [299, 399] and got_late == late and stats["records"] == len(late)
    assert Counter(windows) == Counter({(p, s, s + WINDOW, n) for (p, s), n in on_time.items()}) and len(windows) == len(on_time)
