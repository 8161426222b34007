"""A replica's numbered channels in the engine (:mod:`raytide.engine.numbered_channels`):
the replica core numbers its sends per channel and keeps them, drops a duplicate, refuses a
gap naming where, saves where it is at a snapshot's barrier, restores there, trims its log
when a barrier says a snapshot committed, and replays a receiver from its position. The job
is the protocol model's (:func:`raytide.testing.alone.running_counts`): ``x`` -> ``count``
(2 replicas, by key, a running count per key) -> ``sink``."""

from __future__ import annotations

from typing import Any

import pytest

from raytide.engine.replica import ReplicaCore
from raytide.errors import RecoveryError
from raytide.physical.protocol import ChannelId, Marker, MarkerKind, ReplicaKey
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.replica_state import LocalSnapshot, Sequences
from raytide.testing.alone import running_counts
from tests.unit.test_replica_core import Recorder

PLAN = running_counts(2)
X, COUNT = PLAN.chain_of("x").name, PLAN.chain_of("count").name
#: The channel from ``x``'s replica into ``count``, as ``count``'s replicas see it.
CHANNEL = ChannelId("x", 0, 0, 0)
T0 = Timestamp(0)


class Numbers(Recorder):
    """A recording transport that also keeps each send's receiver and number, the markers
    forwarded and the local snapshots taken."""

    def __init__(self) -> None:
        super().__init__()
        self.numbered: list[tuple[ReplicaKey, ChannelId, Any, int | None]] = []
        self.markers: list[tuple[ReplicaKey, Marker]] = []
        self.snapshots: list[LocalSnapshot] = []
        self.order: list[tuple[ReplicaKey, str, int | None]] = []  # data (its number) and markers (their id), in order

    def send(self, to, channel, vertex, time, batch, sequence=None):
        super().send(to, channel, vertex, time, batch, sequence)
        self.numbered.append((to, channel, batch, sequence))
        self.order.append((to, "data", sequence))

    def send_marker(self, to, channel, vertex, marker):
        self.markers.append((to, marker))
        self.order.append((to, "marker", marker.marker_id))

    def local_snapshot(self, snapshot):
        self.snapshots.append(snapshot)


def core(chain: str, replica: int = 0, numbered: bool = True) -> tuple[ReplicaCore, Numbers]:
    transport = Numbers()
    return ReplicaCore(PLAN, chain, replica, transport, keep_outputs=True, numbered=numbered), transport


def counts_sent(transport: Numbers) -> list:
    """The ``(key, count)`` records a counting replica sent to the sink, in order."""
    return [record for _, _, batch, _ in transport.numbered for record in batch]


def test_an_input_numbers_each_channel_from_zero_and_replays_a_receiver_from_its_position():
    x, sent = core(X)
    for key in range(12):
        x.push_input("x", [key], 0)
    per_receiver: dict[int, list] = {0: [], 1: []}
    for to, _, batch, sequence in sent.numbered:
        per_receiver[to.replica].append((sequence, batch))
    assert [s for s, _ in per_receiver[0]] == list(range(len(per_receiver[0]))) and len(per_receiver[0]) >= 2
    assert [s for s, _ in per_receiver[1]] == list(range(len(per_receiver[1]))) and per_receiver[1]
    assert x.outbox.numbering.kept() == 12
    sent.numbered.clear()
    assert x.outbox.replay(ReplicaKey(COUNT, 0), {CHANNEL: 1}) == len(per_receiver[0]) - 1
    assert [(sequence, batch) for _, _, batch, sequence in sent.numbered] == per_receiver[0][1:], "same numbers"


def test_off_by_default_nothing_is_numbered_or_kept_and_every_message_is_taken():
    x, sent = core(X, numbered=False)
    x.push_input("x", [1], 0)
    assert [sequence for *_, sequence in sent.numbered] == [None] and x.outbox.numbering.kept() == 0
    count, out = core(COUNT, numbered=False)
    count.on_messages([(CHANNEL, "count", T0, [1], 0), (CHANNEL, "count", T0, [1], 0)])
    assert counts_sent(out) == [(1, 1), (1, 2)]


def test_a_duplicate_is_dropped_and_a_gap_is_refused_naming_the_replica_channel_and_epoch():
    count, out = core(COUNT)
    count.on_messages([(CHANNEL, "count", T0, ["a"], 0), (CHANNEL, "count", T0, ["a"], 1)])
    count.on_messages([(CHANNEL, "count", T0, ["a"], 1)])  # sent again by a sender restored alone
    assert counts_sent(out) == [("a", 1), ("a", 2)], "the duplicate changed nothing"
    with pytest.raises(RecoveryError, match=r"count\[0\].*message 3 on channel .*epoch 0 came before 2\.\.2"):
        count.on_messages([(CHANNEL, "count", Timestamp(0), ["a"], 3)])


def test_a_snapshot_saves_the_position_at_its_barrier_and_a_restore_starts_there():
    """Messages after the barrier are not in the snapshot's position; the sink's channel is
    marked where the barrier left; a restored replica drops what it had and takes the next."""
    count, out = core(COUNT)
    count.on_messages([(CHANNEL, "count", T0, ["a"], 0), (CHANNEL, "count", T0, ["b"], 1)])
    count.on_marker(CHANNEL, Marker(1, MarkerKind.SNAPSHOT))
    count.on_messages([(CHANNEL, "count", T0, ["a"], 2)])
    [snapshot] = out.snapshots
    restored, again = core(COUNT)
    restored.restore(snapshot.data)
    numbering = restored.outbox.numbering
    sink = (ReplicaKey(PLAN.chain_of("sink").name, 0), ChannelId("count", 0, 0, 0))
    assert numbering.dedup.positions() == {CHANNEL: 2} and numbering.log.positions() == {sink: 2}
    restored.resume()
    restored.on_messages([(CHANNEL, "count", T0, ["b"], 1), (CHANNEL, "count", T0, ["a"], 2)])
    assert counts_sent(again) == [("a", 2)] and [s for *_, s in again.numbered] == [2], "numbered on from the mark"


def test_a_barrier_saying_a_snapshot_committed_trims_the_log_to_that_snapshots_marks():
    x, _ = core(X)
    x.push_input("x", [1], 0)
    x.inject_marker(Marker(1, MarkerKind.SNAPSHOT))
    x.push_input("x", [1], 0)
    x.push_input("x", [2], 0)
    assert x.outbox.numbering.kept() == 3
    x.inject_marker(Marker(2, MarkerKind.SNAPSHOT, committed=1))
    assert x.outbox.numbering.kept() == 2, "what went before snapshot 1's barrier is forgotten"
    x.inject_marker(Marker(3, MarkerKind.SNAPSHOT, committed=2))
    assert x.outbox.numbering.kept() == 0


def test_a_rescales_state_or_one_taken_with_numbering_off_restores_every_channel_at_zero():
    count, _ = core(COUNT)
    count.on_messages([(CHANNEL, "count", T0, ["a"], 0)])
    count.outbox.numbering.restore(None)
    assert count.outbox.numbering.dedup.positions() == {} and count.outbox.numbering.log.positions() == {}
    count.outbox.numbering.restore(Sequences({CHANNEL: 4}, {}))
    assert count.outbox.numbering.admit(CHANNEL, 3) is False and count.outbox.numbering.admit(CHANNEL, 4) is True


def test_a_relays_run_keeps_each_figures_latest_total():
    from raytide.engine.progress_runs import merge_runs
    from raytide.physical.protocol import ProgressBatch, Sequenced
    from raytide.progress.reachability import Location

    figure = (True, Location.of_input("sink", 0), T0, ReplicaKey("sink", 0), ChannelId("count", 0, 0, 0))
    sender = ReplicaKey(COUNT, 0)
    calls = [Sequenced(sender, 0, ProgressBatch([], figures={figure: 1})), Sequenced(sender, 1, ProgressBatch([])),
             Sequenced(sender, 2, ProgressBatch([], figures={figure: 3}))]
    [run] = merge_runs(calls)
    assert run.message.figures == {figure: 3}


def test_replace_sets_what_the_tracker_counts_of_a_replica_to_its_restored_figures():
    """A counting replica took 3 messages and sent 3 (applied); restored at a snapshot where it
    had taken 1 and sent 1, the tracker counts 2 messages pending at its input again and 2 fewer
    sent to the sink; its lost incarnation's late messages are dropped."""
    from raytide.engine.progress_core import ProgressCore
    from raytide.physical.protocol import ProgressBatch, Sequenced
    from raytide.progress.reachability import Location

    counting, sink = Location.of_input("count", 0), Location.of_input("sink", 0)
    key, to_sink = ReplicaKey(COUNT, 0), ReplicaKey(PLAN.chain_of("sink").name, 0)
    taken = (False, counting, T0, key, CHANNEL)
    sent = (True, sink, T0, to_sink, ChannelId("count", 0, 0, 0))
    core = ProgressCore(PLAN.graph, PLAN.outputs, PLAN.initial_pointstamps() + [((counting, T0), 3)])
    core.connect({key: [counting]})
    core.receive(Sequenced(key, 0, ProgressBatch([((counting, T0), -3), ((sink, T0), 3)], figures={taken: 3, sent: 3})))
    core.replace(key, {taken: 1, sent: 1}, first=1 << 40, locations=[counting])
    counts = core.publisher.tracker.active_pointstamps()
    assert counts[(counting, T0)] == 2 and counts[(sink, T0)] == 1
    core.receive(Sequenced(key, 1, ProgressBatch([((counting, T0), -1)])))  # the lost one's, late: dropped
    assert core.publisher.tracker.active_pointstamps()[(counting, T0)] == 2
    core.receive(Sequenced(key, 1 << 40, ProgressBatch([((counting, T0), -2), ((sink, T0), 2)])))
    assert (counting, T0) not in core.publisher.tracker.active_pointstamps()


def test_a_replay_carries_the_barriers_after_the_restored_snapshot_in_their_places():
    x, sent = core(X)
    to = ReplicaKey(COUNT, 0)
    for key in range(40):
        x.push_input("x", [key], 0)
        to_it = [entry for entry in sent.order if entry[0] == to and entry[1] == "data"]
        if len(to_it) == 1 and not sent.markers:
            x.inject_marker(Marker(1, MarkerKind.SNAPSHOT))
        if len(to_it) == 2:
            break
    sent.order.clear()
    x.outbox.replay(to, {CHANNEL: 0}, after=0)
    assert [entry[1:] for entry in sent.order if entry[0] == to] == [("data", 0), ("marker", 1), ("data", 1)]
    sent.order.clear()
    x.outbox.replay(to, {CHANNEL: 1}, after=1)
    assert [entry[1:] for entry in sent.order if entry[0] == to] == [("data", 1)], "restored from 1: it had the barrier"


def test_a_barrier_sent_again_on_a_channel_is_dropped():
    count, out = core(COUNT)
    count.on_marker(CHANNEL, Marker(1, MarkerKind.SNAPSHOT))
    count.on_marker(CHANNEL, Marker(1, MarkerKind.SNAPSHOT))  # replayed: the aligner would refuse it
    assert len(out.snapshots) == 1 and [m.marker_id for _, m in out.markers] == [1]


class Packing(Numbers):
    """A transport that, as Ray's does, hands back what it made of a numbered batch (here a
    tagged copy) and takes that back in a replay."""

    def send(self, to, channel, vertex, time, batch, sequence=None):
        super().send(to, channel, vertex, time, batch, sequence)
        return None if sequence is None else ("packed", list(batch) if isinstance(batch, list) else batch)


def test_the_log_keeps_what_the_transport_made_of_a_batch_and_a_replay_sends_that():
    transport = Packing()
    x = ReplicaCore(PLAN, X, 0, transport, keep_outputs=True, numbered=True)
    for key in range(6):
        x.push_input("x", [key], 0)
    to = ReplicaKey(COUNT, 0)
    first = [batch for receiver, _, batch, _ in transport.numbered if receiver == to]
    transport.numbered.clear()
    x.outbox.replay(to, {CHANNEL: 0})
    assert [(batch, sequence) for _, _, batch, sequence in transport.numbered] == [
        (("packed", batch), sequence) for sequence, batch in enumerate(first)]
