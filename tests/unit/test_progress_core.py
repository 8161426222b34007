"""The progress actor's logic, called directly (no Ray): buffering, ordering, output epochs, the event log."""

from __future__ import annotations

from raytide.actors.progress_actor import ProgressActor
from raytide.driver.outputs import fetch_records
from raytide.engine.progress_core import ProgressCore
from raytide.physical.protocol import (
    EpochComplete,
    JobFailed,
    JobFinished,
    OutputFrontier,
    ProgressBatch,
    ReplicaKey,
    Sequenced,
    StatusPush,
    decode,
    encode,
)
from raytide.progress import GraphBuilder, Location, Timestamp

SRC, OUT = Location.of_vertex("src"), Location.of_input("out", 0)
T0, T1, T2 = Timestamp(0), Timestamp(1), Timestamp(2)
SOURCE, SINK = ReplicaKey("src", 0), ReplicaKey("out", 0)


def graph():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("out", outputs=0)
    b.add_edge("src", 0, "out", 0)
    return b.build()


def batch(sender, sequence, changes, ack=False, interests=None, outputs=None):
    return Sequenced(sender, sequence, ProgressBatch(changes, ack, interests, outputs))


def test_messages_before_connect_wait_then_apply_in_sequence_order_and_release_output_epochs():
    core = ProgressCore(graph(), ["out"], [((SRC, T0), 1)])
    # The sink's batch retiring its message, with the records, arrives first, and everything
    # arrives before connect (the driver does not wait for the progress actor).
    assert core.receive(batch(SINK, 0, [((OUT, T0), -1)], outputs={"out": {0: ["x"]}})).events == []
    core.receive(batch(SOURCE, 0, [((SRC, T0), -1), ((SRC, T1), 1), ((OUT, T0), 1)]))
    effects = core.connect({SOURCE: [], SINK: [OUT]})
    assert (SINK, StatusPush({OUT: [(T0, True)]}, False)) in effects.pushes, "the initial status, taken at connect"
    assert effects.events == [EpochComplete("out", 0, ["x"]), OutputFrontier("out", 1)]
    # The source's later batches arrive out of order: number 2 (closing the input) first.
    assert core.receive(batch(SOURCE, 2, [((SRC, T2), -1)])).events == [], "batch 2 waits for batch 1"
    assert core.receive(batch(SOURCE, 1, [((SRC, T1), -1), ((SRC, T2), 1)])).events == [
        OutputFrontier("out", float("inf")), JobFinished()], "epoch 1 completed empty, then all did"


def test_records_after_their_epoch_completed_fail_the_job_naming_the_output():
    core = ProgressCore(graph(), ["out"], [((SRC, T0), 1)])
    core.connect({SOURCE: [], SINK: [OUT]})
    core.receive(batch(SOURCE, 0, [((SRC, T0), -1), ((SRC, T1), 1)]))
    events = core.receive(batch(SINK, 0, [], outputs={"out": {0: ["late"]}})).events
    assert len(events) == 1 and isinstance(events[0], JobFailed)
    assert "output 'out'" in str(events[0].error) and "epoch 0" in str(events[0].error)


class Handle:
    """Stands in for a replica's actor handle: records what the progress actor pushes, and
    the bundles of pushes it sends the replica's host as a relay (``fan_out``)."""

    def __init__(self) -> None:
        self.pushes: list = []
        self.bundles: list = []
        self.on_progress = self
        self.fan_out = _Calls(self.bundles)

    def remote(self, encoded):
        incarnation, push = decode(encoded)
        self.pushes.append((incarnation, *push))


class _Calls:
    def __init__(self, into: list) -> None:
        self.into = into

    def remote(self, encoded):
        self.into.append(decode(encoded))


def receive(actor: ProgressActor, incarnation: int, *calls: Sequenced) -> None:
    """A replica's call to the progress actor, encoded as the replicas send it."""
    actor.receive(encode((incarnation, calls)))


def test_interests_riding_on_a_batch_are_answered_and_failures_are_logged():
    actor = ProgressActor(graph(), ["out"], [((SRC, T0), 1)])
    sink = Handle()
    actor.connect({SINK: (sink, [OUT], ())})
    receive(actor, 0, batch(SOURCE, 0, [((SRC, T0), -1), ((SRC, T1), 1)]))
    receive(actor, 0, batch(SINK, 0, [], interests={OUT: [(T0, False)]}))
    assert sink.pushes[-1] == (0, {OUT: [(T1, True)]}, False), "epoch 0 is done at the sink"
    actor.fail(0, "boom")
    assert actor.next_events(0, 0)[0][-1] == JobFailed("boom")


def test_with_relays_the_pushes_go_to_the_relay_at_the_top_of_each_path_in_one_bundle():
    """The sink's path is the source's host (its node's relay): its push goes there, in a
    bundle, not to the sink (:mod:`raytide.physical.relay_tree`)."""
    actor = ProgressActor(graph(), ["out"], [((SRC, T0), 1)])
    source, sink = Handle(), Handle()
    actor.connect({SOURCE: (source, [], (SOURCE,)), SINK: (sink, [OUT], (SOURCE,))})
    receive(actor, 0, batch(SOURCE, 0, [((SRC, T0), -1), ((SRC, T1), 1)]))
    receive(actor, 0, batch(SINK, 0, [], interests={OUT: [(T0, False)]}))
    assert sink.pushes == [] and source.pushes == []
    incarnation, bundle = source.bundles[-1]
    assert incarnation == 0 and bundle.via == {} and bundle.pushes[-1][0] == SINK
    assert bundle.pushes[-1][1] == ({OUT: [(T1, True)]}, 0), "epoch 0 is done at the sink"
    assert actor.stats()["fan_outs"] == len(source.bundles) > 0


def test_the_event_log_keeps_only_what_the_driver_has_not_read():
    actor = ProgressActor(graph(), ["out"], [((SRC, T0), 1)])
    actor.connect({SINK: (Handle(), [OUT], ())})
    cursor = 0
    for epoch in range(1000):
        receive(actor, 0, batch(SINK, epoch, [((OUT, Timestamp(epoch)), -1)], outputs={"out": {epoch: [epoch]}}))
        receive(actor, 0, batch(SOURCE, epoch, [((SRC, Timestamp(epoch)), -1), ((SRC, Timestamp(epoch + 1)), 1),
                                               ((OUT, Timestamp(epoch)), 1)]))
        events, cursor = actor.next_events(cursor, 0)
        assert events == [EpochComplete("out", epoch, [epoch]), OutputFrontier("out", epoch + 1)]
        assert len(actor.events) <= 2, "events the driver has read are dropped at its next poll"
    assert cursor == 2000, "two events an epoch: its records, then how far the output is complete"


def test_a_restored_progress_actor_drops_older_incarnations_and_what_the_driver_has():
    actor = ProgressActor(graph(), ["out"], [((SRC, T0), 1)])
    sink = Handle()
    actor.connect({SINK: (sink, [OUT], ())})
    receive(actor, 0, batch(SOURCE, 0, [((SRC, T0), -1), ((SRC, T1), 1), ((OUT, T0), 1)]))
    _, cursor = actor.next_events(0, 0)
    # Restored: the source holds epoch 1; epoch 0's records were kept by the sink, epoch 0 was delivered.
    actor.restore(1, [((SRC, T1), 1), ((OUT, T1), 1)], {"out": 0}, {"out": {0: [["old"]], 1: [["kept"]]}},
                  {SINK: (sink, [OUT], ())}, cursor)
    assert sink.pushes[-1][0] == 1, "pushes carry the new incarnation"
    receive(actor, 0, batch(SINK, 0, [((OUT, T1), -1)]))  # from before the rollback: dropped
    actor.fail(0, "late")
    assert actor.next_events(cursor, 0) == ([], cursor)
    receive(actor, 1, batch(SINK, 0, [((OUT, T1), -1)]))
    receive(actor, 1, batch(SOURCE, 0, [((SRC, T1), -1)]))
    events, _ = actor.next_events(cursor, 0)
    assert [(e.epoch, fetch_records(e.parts)) for e in events if isinstance(e, EpochComplete)] == [(1, ["kept"])]


def test_the_slowest_location_is_the_last_one_holding_the_earliest_time():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("busy")
    b.add_vertex("out", outputs=0)
    b.add_edge("src", 0, "busy", 0)
    b.add_edge("busy", 0, "out", 0)
    core = ProgressCore(b.build(), ["out"], [((SRC, T0), 1)])
    core.connect({SOURCE: [], SINK: [OUT]})
    busy, stuck = Location.of_input("busy", 0), ReplicaKey("busy", 0)
    core.receive(batch(SOURCE, 0, [((SRC, T0), -1), ((busy, T0), 5), ((busy, T1), 9)]))
    core.receive(batch(stuck, 0, [((busy, T0), -1), ((OUT, T0), 1)]))
    # 4 messages wait at busy (upstream, backpressured) and 1 at out: the one downstream is named
    assert core.describe()["slowest (the earliest pending work)"] == "vertex 'out' (1 x Timestamp(0) at out[in 0])"
    core.receive(batch(SINK, 0, [((OUT, T0), -1)]))
    assert core.describe()["slowest (the earliest pending work)"] == "vertex 'busy' (4 x Timestamp(0) at busy[in 0])"
