"""The progress actor's shell logic, called directly (no Ray): buffering, ordering, output epochs."""

from __future__ import annotations

from raytide.progress import GraphBuilder, Location, Timestamp
from raytide.progress.actor import ProgressActor

SRC, OUT = Location.of_vertex("src"), Location.of_input("out", 0)
T0, T1, T2 = Timestamp(0), Timestamp(1), Timestamp(2)


def graph():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("out", outputs=0)
    b.add_edge("src", 0, "out", 0)
    return b.build()


class Handle:
    """Stands in for a replica's actor handle: records what the progress actor pushes."""

    def __init__(self) -> None:
        self.pushes: list = []
        self.on_progress = self

    def remote(self, statuses, acked):
        self.pushes.append((statuses, acked))


def test_calls_before_connect_wait_then_apply_in_sequence_order_and_release_output_epochs():
    actor = ProgressActor(graph(), ["out"], [((SRC, T0), 1)])
    source, sink = Handle(), Handle()
    # The sink's batch retires the message the source's batch announces; it arrives first,
    # and both arrive before the driver's connect (the driver does not wait for this actor).
    actor.apply("sink", 0, [((OUT, T0), -1)], False, {"out": {0: ["x"]}})
    actor.apply("src", 0, [((SRC, T0), -1), ((SRC, T1), 1), ((OUT, T0), 1)], False, {})
    assert actor.next_events(0, 0) == ([], 0), "nothing is applied before connect"
    actor.connect({"src": (source, []), "sink": (sink, [OUT])})
    assert sink.pushes[0] == ({OUT: [(T0, True)]}, False), "the initial status, taken at connect"
    assert actor.next_events(0, 0) == ([("epoch", "out", 0, ["x"])], 1)
    # The source's later batches arrive out of order: number 2 (closing the input) first.
    actor.apply("src", 2, [((SRC, T2), -1)], False, {})
    assert actor.next_events(1, 0) == ([], 1), "batch 2 waits for batch 1"
    actor.apply("src", 1, [((SRC, T1), -1), ((SRC, T2), 1)], False, {})
    assert actor.next_events(1, 0) == ([("finished",)], 2)


def test_interests_riding_on_a_batch_are_answered_and_failures_are_logged():
    actor = ProgressActor(graph(), ["out"], [((SRC, T0), 1)])
    sink = Handle()
    actor.connect({"sink": (sink, [OUT])})
    actor.apply("src", 0, [((SRC, T0), -1), ((SRC, T1), 1)], False, {})
    actor.apply("sink", 0, [], False, {}, {OUT: [T0]})
    assert sink.pushes[-1] == ({OUT: [(T1, True)]}, False), "epoch 0 is done at the sink"
    actor.fail("boom")
    assert actor.next_events(0, 0)[0][-1] == ("error", "boom")
