"""Streams with event time (``sources/clocked_stream.py``): the shares a driver deals a batch
into and the clocks of the input replicas that take them, against a brute-force reference over
random timestamps, out-of-order arrival within and beyond ``max_delay``, batchings, part counts
and replica counts, with every clock snapshotted and restored (pickled) at random batch
boundaries; the batch boundary of a snapshot, read from the replicas' batch counts, and the
snapshot a restored job starts from."""

from __future__ import annotations

import math
import pickle
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.driver.streams import restore_id
from raytide.errors import SnapshotError
from raytide.physical.protocol import ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.recovery import JOB_PART
from raytide.snapshots.replica_state import ReplicaSummary
from raytide.snapshots.store import SnapshotStore
from raytide.sources.clocked_stream import ClockedStream, StreamClock, boundary_batch
from raytide.windows.event_time import LateRecords


def random_stream(rng: random.Random, batches: int, delay: float) -> list[list[list[dict]]]:
    """Batches of parts of records ``{"t", "n"}``: times rising with some out of order, within
    and beyond ``delay``, and some parts empty."""
    stream, number, now = [], 0, 100.0
    for _ in range(batches):
        parts = []
        for _ in range(rng.randint(0, 3)):
            part = []
            for _ in range(rng.randint(0, 5)):
                now += rng.uniform(0, 4)
                back = rng.choice([0.0, 0.0, rng.uniform(0, delay), rng.uniform(delay, 3 * delay + 20)])
                part.append({"t": round(now - back, 3), "n": number})
                number += 1
            parts.append(part)
        stream.append(parts)
    return stream


def reference(stream: list[list[list[dict]]], width: int, spec: rt.EventTime) -> tuple[dict[int, int], set[int]]:
    """Brute force: each record's epoch, and the numbers of the late ones: a record is late when
    its epoch is before its replica's epoch when its share came, the first epoch the largest
    timestamp that replica read before minus ``max_delay`` has not closed (0 before any)."""
    highest = [-math.inf] * width
    epochs, late = {}, set()
    for batch_id, parts in enumerate(stream):
        shares: list[list[dict]] = [[] for _ in range(width)]
        for index, part in enumerate(parts):
            shares[(batch_id + index) % width] += part
        for replica, records in enumerate(shares):
            at = max(0, math.floor((highest[replica] - spec.max_delay) / spec.granularity)) if highest[replica] > -math.inf else 0
            for record in records:
                epochs[record["n"]] = math.floor(record["t"] / spec.granularity)
                if epochs[record["n"]] < at:
                    late.add(record["n"])
            highest[replica] = max([highest[replica], *(r["t"] for r in records)])
    return epochs, late


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(1, 12), st.sampled_from([1.0, 2.5, 10.0]),
       st.sampled_from([0.0, 3.0, 12.0]), st.booleans())
def test_every_record_goes_once_to_its_epoch_or_is_late_exactly_as_the_reference_with_clocks_restored_anywhere(
        seed, width, batches, granularity, delay, late_out):
    rng = random.Random(seed)
    spec = rt.EventTime("t", granularity=granularity, max_delay=delay)
    stream = random_stream(rng, batches, delay)
    dealer = ClockedStream(spec, "stream", late_out)
    clocks: list[StreamClock | None] = [None] * width
    at = [0] * width  # each replica's input epoch, moved as the items say
    sent: Counter = Counter()
    late_seen: set[int] = set()
    for batch_id, parts in enumerate(stream):
        shares = dealer.shares(parts, batch_id, width)
        assert [share.upto for share in shares] == [batch_id + 1] * width
        for replica, share in enumerate(shares):
            if clocks[replica] is None or rng.random() < 0.3:  # a snapshot here, restored into a new replica
                state = pickle.loads(pickle.dumps(clocks[replica].position())) if clocks[replica] is not None else None
                clocks[replica] = share.clock(state)
            clock = clocks[replica]
            assert clock is not None and clock.clock.epoch == at[replica]
            for epoch, batch in clock.take(list(share.refs)):
                assert epoch >= at[replica], "an input replica's epochs never go back"
                at[replica] = epoch
                if isinstance(batch, LateRecords):
                    late_seen |= {record["n"] for record in batch}
                else:
                    sent.update((record["n"], epoch) for record in batch)
    for replica, clock in enumerate(clocks):
        for epoch, batch in clock.close() if clock is not None else []:
            assert epoch >= at[replica]
            at[replica] = epoch
            sent.update((record["n"], epoch) for record in batch)
    epochs, late = reference(stream, width, spec)
    on_time = {number: epoch for number, epoch in epochs.items() if number not in late}
    assert sent == Counter(on_time.items()), "every record not late is sent once, at its own epoch"
    assert late_seen == (late if late_out else set())
    counted = sum(clock.late.records for clock in clocks if clock is not None)
    assert counted == len(late)
    by_epoch = Counter()
    for clock in clocks:
        if clock is not None:
            by_epoch.update(clock.late.by_epoch)
    assert by_epoch == Counter(epochs[number] for number in late)


def test_shares_are_dealt_by_batch_id_so_a_replayed_batch_is_dealt_as_before():
    dealer = ClockedStream(rt.EventTime("t"), "q", False)
    assert [share.refs for share in dealer.shares(["a"], 0, 2)] == [("a",), ()]
    assert [share.refs for share in dealer.shares(["a"], 1, 2)] == [(), ("a",)]
    assert [share.refs for share in dealer.shares(["a", "b", "c"], 5, 3)] == [("b",), ("c",), ("a",)]
    assert dealer.shares(["a", "b"], 7, 2) == dealer.shares(["a", "b"], 7, 2)
    assert [(share.end, share.upto, share.refs) for share in dealer.ends(9, 2)] == [(True, 9, ()), (True, 9, ())]


def test_a_clocked_stream_is_at_a_boundary_when_every_replica_took_the_same_batches_and_none_closed():
    assert boundary_batch([4, 4, 4], [17, 19, 17]) == 4
    assert boundary_batch([4, 5], [17, 17]) is None
    assert boundary_batch([4, 4], [17, None]) is None
    assert boundary_batch([0], [0]) == 0


def commit(store: SnapshotStore, replicas: list[tuple[int, int | None]]) -> int:
    """A committed snapshot whose replicas of input ``clicks`` had ``(batch count, epoch)``."""
    snapshot_id = store.next_id()
    summaries = {ReplicaKey("clicks", index): ReplicaSummary(
        [] if epoch is None else [((Location.of_vertex("clicks"), Timestamp(epoch)), 1)], {"clicks": count}, {})
        for index, (count, epoch) in enumerate(replicas)}
    store.commit(snapshot_id, [store.write_part(snapshot_id, JOB_PART, pickle.dumps(summaries))], {})
    return snapshot_id


def test_a_restored_job_starts_from_the_latest_snapshot_where_every_replica_took_the_same_batches(tmp_path):
    store = SnapshotStore(str(tmp_path))
    first = commit(store, [(3, 170), (3, 168)])  # epochs apart: event time; counts equal: a boundary
    cut = commit(store, [(4, 171), (3, 168)])  # a snapshot between the replicas' calls of batch 3
    assert restore_id(store, "latest", ["clicks"], clocked={"clicks"}) == first
    with pytest.raises(SnapshotError, match=rf"snapshot {cut} cut stream inputs .*batch counts \[4, 3\]"):
        restore_id(store, cut, ["clicks"], clocked={"clicks"})
    with pytest.raises(SnapshotError, match="cut stream inputs"):  # read by epochs, the first is no boundary
        restore_id(store, first, ["clicks"])
    closed = commit(store, [(5, None), (5, None)])
    assert restore_id(store, "latest", ["clicks"], clocked={"clicks"}) == first != closed


def test_a_restored_replica_keeps_its_clock_in_every_snapshot_until_a_share_comes_and_takes_it_up_from_there():
    """The clock is the replica's source position, so in its snapshot; one restored and
    snapshotted again before the next share (a recovery's first snapshot) keeps it; the next
    share (here the stream's end) goes on from it; the input's command count is the next
    batch id whatever moves the share made."""
    from unittest import mock

    from raytide.actors.pushed import take_share
    from raytide.engine.replica import ReplicaCore
    from raytide.physical.plan import compile_plan
    from tests.unit.test_replica_core import Recorder

    spec = rt.EventTime("t", granularity=10, max_delay=5)
    flow = rt.Dataflow("clocked")
    flow.input("clicks", event_time=spec).map(lambda click: click).output("out")
    plan = compile_plan(flow, 1, True)
    first, started, marker = ReplicaCore(plan, plan.chain_of("clicks").name, 0, Recorder()), {}, mock.Mock(delivered={})
    first.source_positions = lambda: {name: reader.position() for name, reader in started.items()}
    dealer = ClockedStream(spec, "q", False)
    [share] = dealer.shares([[{"t": 3}, {"t": 51}, {"t": 12}]], 0, 1)
    take_share(first, started, "clicks", share, list(share.refs))
    state = first._state(marker)
    assert (state.positions["clicks"], state.input_epochs["clicks"]) == (1, 4)
    assert state.sources["clicks"].held == ((5, ([{"t": 51}],)),)
    restored = ReplicaCore(plan, plan.chain_of("clicks").name, 0, recorder := Recorder())
    restored._restore(pickle.loads(pickle.dumps(state)), [])
    assert restored._state(marker).sources == state.sources, "a snapshot before the next share keeps the clock"
    [end] = dealer.ends(2, 1)
    take_share(restored, again := {}, "clicks", end, [])
    assert (restored.positions["clicks"], restored.input_epochs["clicks"]) == (2, None)
    shipped = [(epoch, records) for _, _, outputs in recorder.flushes for epoch, records in outputs.get("out", {}).items()]
    assert again["clicks"].position().held == () and shipped == [(5, [{"t": 51}])], "the held click goes at its epoch"


def test_a_stream_that_cannot_say_what_its_rows_are_is_refused_on_an_event_time_input():
    from raytide.errors import GraphError
    from raytide.sources.event_time import source_event_time
    from raytide.sources.stream import StreamSource

    class Plain(StreamSource):
        def reader(self):  # pragma: no cover - never read
            raise AssertionError

    assert source_event_time(Plain(), "clicks", None) is None
    with pytest.raises(GraphError, match="input 'clicks' takes its epochs from event times, but Plain has no event_time="):
        source_event_time(Plain(), "clicks", rt.EventTime("t"))
