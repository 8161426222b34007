"""Event time (:mod:`raytide.windows.event_time`, :mod:`raytide.driver.event_inputs`): the
clock against a from-scratch reference over random event times, arrival orders, partitions,
batchings and idleness (an injected clock); the driver's calls it makes, without Ray; the
spec's and the records' errors."""

from __future__ import annotations

import datetime
import math
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.driver.event_inputs import EventTimeInputs
from raytide.physical.plan import compile_plan
from raytide.physical.wire import unpack
from raytide.windows.event_time import EventClock, EventTime, seconds_of

Push = tuple[int | None, list[float], float]  # partition (None: a tick of the timer, no push), timestamps, clock time


def reference(pushes: list[Push], granularity: float, delay: float, idle: float | None):
    """From scratch, per push (or tick: partition None, which pushes nothing and is no
    partition's activity): its late records (by index), the input's epoch after it; and for
    every record not late, the push after which it must have been sent (the first whose
    epoch reaches its own), or None (sent at the close)."""
    epoch, mark = 0, -math.inf
    late, after, due = [], [], {}
    waiting: list[tuple[int, int, int]] = []  # (push, index, epoch) not due yet
    for k, (_, stamps, now) in enumerate(pushes):
        late.append([i for i, t in enumerate(stamps) if math.floor(t / granularity) < epoch])
        waiting += [(k, i, math.floor(t / granularity)) for i, t in enumerate(stamps) if i not in late[-1]]
        seen = [push for push in pushes[: k + 1] if push[0] is not None]
        parts = {p for p, _, _ in seen}
        last = {p: max(n for q, _, n in seen if q == p) for p in parts}
        stamps_of = {p: [t for q, s, _ in seen if q == p for t in s] for p in parts}
        active = [p for p in parts if idle is None or now - last[p] < idle]
        if any(not stamps_of[p] for p in active):
            candidate = -math.inf
        elif active:
            candidate = min(max(stamps_of[p]) - delay for p in active)
        else:
            candidate = max((max(s) - delay for s in stamps_of.values() if s), default=-math.inf)
        mark = max(mark, candidate)
        if mark > -math.inf:
            epoch = max(epoch, math.floor(mark / granularity))
        after.append(epoch)
        for item in [w for w in waiting if w[2] <= epoch]:
            due[item[:2]] = k
            waiting.remove(item)
    for k, i, _ in waiting:
        due[(k, i)] = None
    return late, after, due


def run_clock(pushes: list[Push], granularity: float, delay: float, idle: float | None):
    """The clock over ``pushes`` (records are ``(push, index)``): what each push released and
    made late, the epochs after, the close's release."""
    now = [0.0]
    clock = EventClock(EventTime("t", granularity, delay, idle_timeout=idle), now=lambda: now[0])
    released, late, after = [], [], []
    for k, (partition, stamps, at) in enumerate(pushes):
        now[0] = at
        before = clock.epoch
        if partition is None:
            assigned = clock.tick()
            assert not assigned.late, "a tick makes nothing late"
        else:
            assigned = clock.push([(k, i) for i in range(len(stamps))], stamps, partition)
        assert all(epoch >= before for epoch, _ in assigned.sends), "a send into the input's past"
        assert [e for e, _ in assigned.sends] == sorted({e for e, _ in assigned.sends}), "sends out of epoch order"
        assert all(epoch <= assigned.epoch for epoch, _ in assigned.sends)
        released.append(assigned.sends)
        late.append(sorted(one.record[1] for one in assigned.late))
        after.append(assigned.epoch)
    closing = clock.close().sends
    return released, late, after, closing, clock


def pushes_strategy(max_partitions: int = 3):
    stamp = st.floats(min_value=0, max_value=60, allow_nan=False).map(lambda x: round(x, 2))
    push = st.tuples(st.integers(0, max_partitions - 1), st.lists(stamp, max_size=6), st.floats(0, 3))
    tick = st.tuples(st.none(), st.just([]), st.floats(0, 3))
    return st.lists(push | tick, max_size=12).map(lambda ps: [(p, s, t) for (p, s, t) in _increasing_times(ps)])


def _increasing_times(pushes):
    clock = 0.0
    for partition, stamps, step in pushes:
        clock += step
        yield partition, stamps, clock


@settings(max_examples=300, deadline=None)
@given(pushes=pushes_strategy(), granularity=st.sampled_from([0.5, 1.0, 2.5, 10.0]),
       delay=st.sampled_from([0.0, 0.7, 3.0, 12.0]), idle=st.sampled_from([None, 1.0, 4.0]))
def test_the_clock_matches_the_reference_late_records_and_releases_exactly(pushes, granularity, delay, idle):
    released, late, after, closing, clock = run_clock(pushes, granularity, delay, idle)
    want_late, want_after, due = reference(pushes, granularity, delay, idle)
    assert late == want_late
    assert after == want_after
    sent = {record: (k, epoch) for k, sends in enumerate(released) for epoch, records in sends for record in records}
    sent.update({record: (None, epoch) for epoch, records in closing for record in records})
    assert len(sent) == sum(len(s) for _, s, _ in pushes) - sum(map(len, late)), "a record sent twice or lost"
    for (k, i), (when, epoch) in sent.items():
        assert epoch == math.floor(pushes[k][1][i] / granularity), "a record sent at another epoch than its own"
        assert when == due[(k, i)], f"record {(k, i)} released at push {when}, due at {due[(k, i)]}"
    counted = clock.late.as_dict()
    flat = [math.floor(pushes[k][1][i] / granularity) for k, indices in enumerate(late) for i in indices]
    assert counted["records"] == len(flat) and counted["by_epoch"] == dict(sorted(Counter(flat).items()))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), delay=st.sampled_from([1.0, 5.0]), batch=st.integers(1, 7))
def test_one_producer_within_max_delay_loses_nothing_and_beyond_it_exactly_the_records_past_the_bound(seed, delay, batch):
    """Event times shuffled by arrival: a record never more than ``max_delay`` behind the
    largest time before it is never late; one more than ``max_delay`` behind it (and in an
    epoch before the watermark's) is always late."""
    rng = random.Random(seed)
    times = sorted(round(rng.uniform(0, 100), 1) for _ in range(40))
    arrival = sorted(times, key=lambda t: t + rng.uniform(0, delay * 2))
    pushes = [(0, arrival[i:i + batch], 0.0) for i in range(0, len(arrival), batch)]
    _, late, _, _, _ = run_clock(pushes, 1.0, delay, None)
    highest = -math.inf
    for k, (_, stamps, _) in enumerate(pushes):
        bound = highest - delay
        for i, t in enumerate(stamps):
            assert (i in late[k]) == (bound > -math.inf and math.floor(t) < math.floor(bound)), (t, bound)
        highest = max(highest, *stamps)
    within = sorted(times, key=lambda t: t + rng.uniform(0, delay))  # never more than max_delay behind
    _, late, _, _, _ = run_clock([(0, within[i:i + batch], 0.0) for i in range(0, len(within), batch)], 1.0, delay, None)
    assert not any(late)


def test_an_idle_partition_stops_holding_the_watermark_back_after_the_timeout():
    now = [0.0]
    clock = EventClock(EventTime("t", 1.0, 0.0, idle_timeout=5.0), now=lambda: now[0])
    clock.push([1], [1.0], partition="a")
    assert clock.push([50], [50.0], partition="b").epoch == 1  # a holds it at 1
    now[0] = 4.9
    assert clock.push([60], [60.0], partition="b").epoch == 1
    now[0] = 5.0
    assigned = clock.push([70], [70.0], partition="b")  # a pushed nothing for 5 s: idle
    assert assigned.epoch == 70 and [e for e, _ in assigned.sends] == [50, 60, 70]
    assert clock.push([2], [2.0], partition="a").late[0].lateness == 68.0  # a came back: its old time is late


def test_timestamps_in_every_accepted_form_and_the_bad_ones_named():
    assert seconds_of(datetime.datetime(1970, 1, 2, tzinfo=datetime.timezone.utc)) == 86400.0
    assert seconds_of(datetime.datetime(1970, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))) == 0.0
    assert seconds_of(np.datetime64("1970-01-01T00:00:02.5")) == 2.5
    assert seconds_of(np.float32(1.5)) == 1.5 and seconds_of(np.int64(3)) == 3.0
    assert seconds_of(pa.scalar(datetime.datetime(1970, 1, 1, 0, 0, 7), pa.timestamp("ms"))) == 7.0
    for bad, message in [("12", "is not a timestamp"), (None, "is not a timestamp"), (True, "is not a timestamp"),
                         (float("nan"), "finite"), (np.datetime64("NaT"), "NaT")]:
        with pytest.raises((TypeError, ValueError), match=message):
            seconds_of(bad)


def test_bad_specs_are_refused_naming_the_argument():
    for kwargs, message in [({"granularity": 0}, "granularity"), ({"granularity": -1.0}, "granularity"),
                            ({"max_delay": -0.5}, "max_delay"), ({"idle_timeout": 0}, "idle_timeout"),
                            ({"late_output": ""}, "late_output"), ({"granularity": float("inf")}, "granularity")]:
        with pytest.raises(rt.ArgumentError, match=message):
            rt.EventTime("t", **kwargs)
    with pytest.raises(rt.ArgumentError, match="timestamp"):
        rt.EventTime(3)
    with pytest.raises(rt.ArgumentError, match="input 'clicks': event_time must be"):
        rt.Dataflow("d").input("clicks", event_time=5.0)
    assert rt.EventTime("t", granularity=0.5).epochs(60) == 120
    with pytest.raises(rt.ArgumentError, match="not a multiple of the event-time granularity 7"):
        rt.EventTime("t", granularity=7).epochs(60)
    with pytest.raises(rt.ArgumentError, match="Session\\(gap\\) must be a positive integer"):
        rt.Session(0)


class Recorded(EventTimeInputs):
    """The driver's input feeds with every call to a replica recorded instead of sent (by the
    feeds' sender, where every call into an input replica leaves the driver)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list = []
        self.sender.send = self._record

    def _record(self, actor, method, args):
        self.sent.append((actor, method, args))
        return None


def feeds(delay: float = 2.0, late_output: str | None = "late") -> Recorded:
    flow = rt.Dataflow("clicks")
    flow.input("clicks", event_time=rt.EventTime("t", 1.0, delay, late_output=late_output)).output("out")
    flow.input("plain").output("plain_out")
    plan = compile_plan(flow, 1)
    inputs = Recorded(plan, {name: [name] for name in plan.inputs}, 4, 100, lambda: None)
    inputs.sent = []
    return inputs


def test_the_driver_pushes_each_epoch_when_the_watermark_reaches_it_and_late_records_to_the_late_input():
    inputs = feeds()
    inputs.push("clicks", [{"t": 0.5}, {"t": 3.2}, {"t": 1.1}])  # watermark 1.2: epoch 1
    inputs.push("clicks", [{"t": 0.9}, {"t": 6.0}])  # 0.9 late (epoch 0 closed); watermark 4.0: epochs 1-3 close
    inputs.close("clicks")
    inputs.flush()
    pushed = [(actor, unpack(args[1], args[2]), args[3]) for actor, method, args in inputs.sent if method == "push"]
    assert ("clicks", [{"t": 0.5}], 0) in pushed and ("clicks", [{"t": 1.1}], 1) in pushed
    assert ("clicks", [{"t": 3.2}], 3) in pushed and ("clicks", [{"t": 6.0}], 6) in pushed
    assert ("clicks.late", [{"t": 0.9}], 1) in pushed  # at the epoch the input was at when it came
    assert inputs.epochs["clicks"] is None and inputs.epochs["clicks.late"] is None
    assert inputs.late_stats() == {"clicks": {"records": 1, "by_epoch": {0: 1}, "max_lateness_s": pytest.approx(0.3)}}


def test_bad_pushes_name_the_input_and_the_record_and_send_nothing():
    inputs = feeds()
    with pytest.raises(rt.RecordError, match=r"input 'clicks': record 1 of the push \(\{'x': 1\}\) has no timestamp 't'"):
        inputs.push("clicks", [{"t": 1.0}, {"x": 1}])
    with pytest.raises(rt.RecordError, match=r"record 2 .* has a bad timestamp: '5' \(str\) is not a timestamp"):
        inputs.push("clicks", [{"t": 1.0}, {"t": 2.0}, {"t": "5"}])
    with pytest.raises(rt.GraphError, match="input 'clicks' takes its epochs from its records' timestamps"):
        inputs.push("clicks", [{"t": 1.0}], 3)
    with pytest.raises(rt.GraphError, match="input 'clicks' moves with its records' timestamps"):
        inputs.advance("clicks", 3)
    with pytest.raises(rt.ArgumentError, match="input 'plain' is not an event-time input"):
        inputs.push("plain", [1], partition=2)
    with pytest.raises(rt.ArgumentError, match="not by object refs of batches"):
        inputs.push_refs("clicks", [], 0)
    inputs.flush()
    assert inputs.sent == [] and inputs.clocks["clicks"].held == {}


def idle_feeds(now: list[float]) -> Recorded:
    """Input ``clicks`` (1-second epochs, ``max_delay`` 1 s, idle after 2 s, late output) at
    width 2, its calls logged for a recovery, with the clock ``now[0]``."""
    flow = rt.Dataflow("idle")
    flow.input("clicks", event_time=rt.EventTime("t", 1.0, 1.0, late_output="late", idle_timeout=2.0)).output("out")
    plan = compile_plan(flow, 2)
    inputs = Recorded(plan, {name: [f"{name}/0", f"{name}/1"] for name in plan.inputs}, 4, 100, lambda: None,
                      keep_calls=2, now=lambda: now[0])
    inputs.sent = []
    return inputs


def test_the_timer_releases_what_an_idle_partition_held_back_through_the_calls_a_push_makes_and_logs():
    """Partition 1 pushes once (t=5), partition 0 up to t=100, then nothing is pushed: the
    input stays at partition 1's epoch 4 until the timer finds it idle (2 s after its push),
    then every held epoch goes and the input (and its late input) moves to 99, in calls the
    replay log keeps as it keeps a push's; partition 1's next record, older, is late."""
    now = [0.0]
    inputs = idle_feeds(now)
    inputs.push("clicks", [{"t": 5.0}], partition=1)
    now[0] = 0.5
    inputs.push("clicks", [{"t": float(t)} for t in range(101)], partition=0)
    assert inputs.epochs["clicks"] == 4
    before = list(inputs.sent)
    now[0] = 1.99
    inputs.release_idle()
    assert inputs.sent == before and inputs.epochs["clicks"] == 4, "not idle yet: the timer does nothing"
    now[0] = 2.0
    with inputs.clock_locks["clicks"]:  # a push under way: the timer leaves the input to it
        inputs.release_idle()
    assert inputs.sent == before
    inputs.release_idle()
    assert inputs.epochs["clicks"] == inputs.epochs["clicks.late"] == 99
    inputs.flush()
    pushed = [(args[3], unpack(args[1], args[2])) for _, method, args in inputs.sent if method == "push" and args[0] == "clicks"]
    assert pushed == [(e, [{"t": float(e)}] * (2 if e == 5 else 1)) for e in range(4, 100)]  # 0-3 were late; 100 waits
    for replica in (0, 1):  # every call made is in the log a recovery replays, in order
        mine = [(method, args) for actor, method, args in inputs.sent if actor == f"clicks/{replica}"]
        assert inputs.logs.after(("clicks", replica), 0) == mine
    inputs.push("clicks", [{"t": 6.0}], partition=1)  # back: counts again, its old record is late
    assert inputs.late_stats()["clicks"]["by_epoch"] == {0: 1, 1: 1, 2: 1, 3: 1, 6: 1}


def test_the_timer_does_nothing_without_an_idle_timeout_or_event_time_inputs():
    now = [0.0]
    inputs = idle_feeds(now)
    inputs.clocks["clicks"].spec = rt.EventTime("t", 1.0, 1.0, idle_timeout=None)  # type: ignore[misc]
    inputs.push("clicks", [{"t": 5.0}], partition=1)
    inputs.push("clicks", [{"t": 50.0}], partition=0)
    sent, now[0] = list(inputs.sent), 1e9
    inputs.release_idle()
    assert inputs.sent == sent and inputs.epochs["clicks"] == 4
    plain = feeds()
    plain.clocks.clear()  # as after a source read in the replicas took the input over
    plain.release_idle()
    assert plain.sent == []


def test_a_timestamp_function_that_fails_names_the_input_the_record_and_its_error_and_sends_nothing():
    flow = rt.Dataflow("clicks")
    flow.input("clicks", event_time=rt.EventTime(lambda click: click["t"] / click["scale"])).output("out")
    plan = compile_plan(flow, 1)
    inputs = Recorded(plan, {name: [name] for name in plan.inputs}, 4, 100, lambda: None)
    inputs.sent = []
    with pytest.raises(rt.RecordError, match=r"input 'clicks': record 1 of the push \(\{'t': 2.0, 'scale': 0\}\) has no "
                                             r"timestamp: the timestamp function raised ZeroDivisionError: .*; nothing"):
        inputs.push("clicks", [{"t": 1.0, "scale": 1}, {"t": 2.0, "scale": 0}])
    inputs.flush()
    assert inputs.sent == []
