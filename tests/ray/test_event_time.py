"""Event time on real Ray: clicks pushed out of order, with their own timestamps, through an
event-time input with a ``max_delay`` and a ``late_output`` into tumbling windows per page,
compared with a plain-Python reference: every window once with the count of its on-time
clicks, the late output exactly the clicks beyond the bound, counted in ``job.stats()``.
The clock and the windows are proven against brute force in tests/unit/test_event_time.py
and tests/sim/test_windowing_sim.py."""

from __future__ import annotations

import math
import random
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
