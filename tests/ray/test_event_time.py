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
    the window comes out without a push. Then the input replica holding the released epochs is
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
