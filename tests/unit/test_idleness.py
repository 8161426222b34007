"""Idleness (``EventTime(idle_timeout=)``, :mod:`raytide.windows.idleness`): the one rule by
which the driver's clock of pushed partitions and a stream's replicas stop holding the
watermark back, with a fake clock (time injected, no sleeps). A stream's dealing and its
replicas' clocks (:mod:`raytide.sources.clocked_stream`) against a brute-force reference over
random timestamps, starved replicas, gaps between batches and clocks restored anywhere; and
through the driver's inputs (:class:`~raytide.driver.event_inputs.EventTimeInputs`), a replica
given no records that stops holding tumbling windows back after the timeout."""

from __future__ import annotations

import math
import pickle
import random
from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.physical.plan import compile_plan
from raytide.sources.clocked_stream import ClockedStream, Share, StreamClock
from raytide.windows.event_time import LateRecords
from raytide.windows.idleness import Idleness
from tests.unit.test_clocked_stream import random_stream
from tests.unit.test_event_time import Recorded


def test_the_rule_holds_at_the_least_active_watermark_and_leaves_out_the_idle():
    rule = Idleness(timeout=5.0)
    rule.heard("a", 0.0, mark=10.0)
    rule.heard("b", 0.0)  # known, no watermark yet: holds the input at its start
    assert rule.combined(4.9) == -math.inf
    assert rule.idle("b", 5.0) and rule.combined(5.0) == 10.0, "a is idle too: the largest watermark"
    rule.heard("a", 5.0, mark=12.0)
    assert rule.combined(5.0) == 12.0, "b idle, a active: a's"
    rule.heard("b", 6.0, mark=3.0)  # b came back, behind: it counts again
    assert rule.combined(6.0) == 3.0
    rule.heard("b", 7.0, mark=1.0, active=False)  # news of a mark, no activity: marks never go back
    assert rule.marks["b"] == 3.0 and rule.active_at["b"] == 6.0
    assert rule.combined(10.9) == 3.0 and rule.combined(11.0) == 12.0, "both idle: the largest"
    never = Idleness(timeout=None)
    never.heard("a", 0.0, mark=1.0)
    never.heard("b", 0.0, mark=9.0)
    assert never.combined(1e9) == 1.0 and not never.idle("a", 1e9)


def stream_reference(stream: list[list[list[dict]]], width: int, spec: rt.EventTime, times: list[float]):
    """From scratch: the late records' numbers and every replica's epoch after each batch, the
    driver dealing batch ``b`` and reading its answers at ``times[b]``."""
    granularity, timeout = spec.granularity, spec.idle_timeout
    own, epoch = [-math.inf] * width, [0] * width
    marks: dict[int, float] = {}
    active: dict[int, float] = {}
    late, after = set(), []
    for batch_id, parts in enumerate(stream):
        now = times[batch_id]
        shares: list[list[dict]] = [[] for _ in range(width)]
        for index, part in enumerate(parts):
            shares[(batch_id + index) % width] += part
        for replica in range(width):
            active.setdefault(replica, now)
        idle = {r for r in range(width) if timeout is not None and now - active[r] >= timeout}
        holding = [r for r in range(width) if r not in idle]
        if not marks or any(r not in marks for r in holding):
            target = -math.inf
        else:
            target = min(marks[r] for r in holding) if holding else max(marks.values())
        for replica, records in enumerate(shares):
            if replica in idle and target > marks.get(replica, -math.inf):
                own[replica] = max(own[replica], target)
                epoch[replica] = max(epoch[replica], math.floor(own[replica] / granularity))
            late |= {r["n"] for r in records if math.floor(r["t"] / granularity) < epoch[replica]}
            if records:
                own[replica] = max(own[replica], max(r["t"] for r in records) - spec.max_delay)
                epoch[replica] = max(epoch[replica], math.floor(own[replica] / granularity))
                active[replica] = now
            if own[replica] > -math.inf:
                marks[replica] = own[replica]
        after.append(list(epoch))
    return late, after


def take(clock: StreamClock, share: Share, at: int, sent: Counter, late: set[int]) -> int:
    """The replica takes ``share``; returns its input's epoch afterwards (it was at ``at``)."""
    for epoch, batch in clock.take(list(share.refs), share.release):
        assert epoch >= at, "an input replica's epochs never go back"
        at = epoch
        if isinstance(batch, LateRecords):
            late |= {record["n"] for record in batch}
        else:
            sent.update((record["n"], epoch) for record in batch)
    return at


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(1, 14), st.sampled_from([1.0, 2.5]),
       st.sampled_from([0.0, 3.0]), st.sampled_from([None, 1.0, 4.0]))
def test_idle_stream_replicas_are_released_to_the_others_watermark_exactly_as_the_reference(
        seed, width, batches, granularity, delay, timeout):
    rng = random.Random(seed)
    spec = rt.EventTime("t", granularity=granularity, max_delay=delay, idle_timeout=timeout)
    stream = random_stream(rng, batches, delay)
    times = [0.0]
    for _ in stream[1:]:
        times.append(times[-1] + rng.choice([0.0, 0.5, 1.0, 3.0]))
    dealer = ClockedStream(spec, "stream", True)
    clocks: list[StreamClock | None] = [None] * width
    at, after, sent, late = [0] * width, [], Counter(), set()
    for batch_id, parts in enumerate(stream):
        shares = dealer.shares(parts, batch_id, width, times[batch_id])
        for replica, share in enumerate(shares):
            if clocks[replica] is None or rng.random() < 0.3:  # a snapshot here, restored into a new replica
                state = pickle.loads(pickle.dumps(clocks[replica].position())) if clocks[replica] is not None else None
                clocks[replica] = share.clock(state)
            at[replica] = take(clocks[replica], share, at[replica], sent, late)
        dealer.taken([clock.heard(replica) for replica, clock in enumerate(clocks)], times[batch_id])
        after.append(list(at))
    want_late, want_after = stream_reference(stream, width, spec, times)
    assert late == want_late
    assert after == want_after
    numbers = {r["n"]: r["t"] for parts in stream for part in parts for r in part}
    for clock in clocks:
        for epoch, batch in clock.close():
            sent.update((record["n"], epoch) for record in batch)
    assert sent == Counter({n: math.floor(t / granularity) for n, t in numbers.items() if n not in late}.items())


class TestStream:
    """A stream source as ``clock_stream`` sees it: one that says what its rows are."""

    event_time = None

    def event_time_schema(self) -> tuple[str, pa.Schema]:
        return "a test stream", pa.schema([("t", pa.float64()), ("n", pa.int64())])


def windows_closed(timeout: float | None) -> tuple[list[int], dict[int, int]]:
    """A stream into 2 replicas through the driver's inputs: replica 0 gets a batch of 10
    seconds of records each second, replica 1 nothing but one old record at the last batch.
    Returns the input's frontier (the least replica epoch) after each batch and the starved
    replica's late count by epoch."""
    now = [0.0]
    spec = rt.EventTime("t", granularity=1.0, max_delay=1.0, idle_timeout=timeout)
    flow = rt.Dataflow("idle")
    flow.input("clicks", event_time=spec).output("out")
    plan = compile_plan(flow, 2)
    inputs = Recorded(plan, {name: [0, 1] for name in plan.inputs}, 4, 100, lambda: None, keep_calls=True,
                      now=lambda: now[0])
    inputs.sent = []
    inputs.clock_stream("clicks", TestStream())
    clocks: list[StreamClock] = []
    at, frontier, sent, late = [0, 0], [], Counter(), set[int]()
    for batch_id in range(8):
        now[0] = float(batch_id)
        busy = [{"t": 10.0 * batch_id + i, "n": 10 * batch_id + i} for i in range(10)]
        starved = [{"t": 5.0, "n": 999}] if batch_id == 7 else []
        inputs.push_batch("clicks", [busy, starved] if batch_id % 2 == 0 else [starved, busy], batch_id)
        for replica, method, (_, share) in inputs.sent:
            assert method == "push_stream" and share.upto == batch_id + 1
            if len(clocks) == replica:
                clocks.append(share.clock(None))  # as a replica makes its clock at its first share
            at[replica] = take(clocks[replica], share, at[replica], sent, late)
        inputs.sent.clear()
        inputs.taken("clicks", [clock.heard(replica) for replica, clock in enumerate(clocks)])
        frontier.append(min(at))
    return frontier, dict(clocks[1].late.by_epoch)


def test_a_stream_replica_given_no_records_stops_holding_the_windows_back_after_the_idle_timeout():
    """Without idleness the starved replica holds the input at epoch 0: no 10-second window
    closes until it has records. With a 2-second timeout it is idle from the batch at 2 s,
    released each batch to the busy replica's watermark as the driver knew it after the batch
    before, so the frontier follows one batch behind; its old record, when one comes, is late."""
    frontier, late = windows_closed(None)
    assert frontier == [0] * 7 + [4] and not late, "only its own record moves it"
    frontier, late = windows_closed(2.0)
    assert frontier == [0, 0, 18, 28, 38, 48, 58, 68]  # the busy replica's watermark after the batch before
    assert late == {5: 1}
    assert sum(end <= frontier[-1] for end in range(10, 80, 10)) == 6, "windows [0, 10) .. [50, 60) closed"
