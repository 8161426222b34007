"""The publisher pushes a subscriber a status only when one of its questions gets a new answer."""

from __future__ import annotations

from raytide.progress import GraphBuilder, Location, Timestamp, Tracker
from raytide.progress.publisher import FrontierPublisher, answers


def pipeline():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("a")
    b.add_vertex("b", outputs=0)
    b.add_edge("src", 0, "a", 0)
    b.add_edge("a", 0, "b", 0)
    return b.build()


SRC, A_IN, B_IN = Location.of_vertex("src"), Location.of_input("a", 0), Location.of_input("b", 0)


def test_answers():
    status = [(Timestamp(1), True)]
    assert answers(status, Timestamp(0)) == (True, False)
    assert answers(status, Timestamp(1)) == (False, True)
    assert answers([(Timestamp(1), False)], Timestamp(1)) == (False, False)
    assert answers(status, Timestamp(2)) == (False, True)


def test_pushes_follow_interests_and_acks():
    publisher = FrontierPublisher(Tracker(pipeline()))
    publisher.initialize([((SRC, Timestamp(0)), 1)])
    statuses, acked = publisher.subscribe("b", [B_IN])
    assert statuses == {B_IN: [(Timestamp(0), True)]} and not acked
    # Nothing declared: moving the frontier is not pushed.
    assert publisher.apply("src", [((SRC, Timestamp(0)), -1), ((SRC, Timestamp(1)), 1)], ack=False) == {}
    # Declaring interest in epoch 0 pushes at once, since epoch 0 is already complete at b.
    pushes = publisher.declare("b", {B_IN: [(Timestamp(0), False)]})
    assert pushes == {"b": ({B_IN: [(Timestamp(1), True)]}, False)}
    publisher.declare("b", {B_IN: [(Timestamp(5), False)]})
    assert publisher.apply("src", [((SRC, Timestamp(1)), -1), ((SRC, Timestamp(2)), 1)], ack=False) == {}
    # An acknowledged batch gets every unseen status, even when nothing it waits on changed.
    pushes = publisher.apply("b", [], ack=True)
    assert pushes == {"b": ({B_IN: [(Timestamp(2), True)]}, True)}


def test_held_progress_is_told_when_it_is_no_longer_covered():
    publisher = FrontierPublisher(Tracker(pipeline()))
    publisher.initialize([((SRC, Timestamp(0)), 1), ((A_IN, Timestamp(0)), 1)])
    publisher.subscribe("a", [A_IN])
    publisher.declare("a", {A_IN: [(Timestamp(0), True)]})  # a holds the -1 of a message at epoch 0
    pushes = publisher.apply("src", [((SRC, Timestamp(0)), -1)], ack=False)
    assert pushes == {"a": ({A_IN: [(Timestamp(0), False)]}, False)}, "no longer held by the source"


def test_a_notification_is_not_told_that_its_time_is_no_longer_covered():
    """Only held-back progress acts on that; a notification waits for its time to be ready."""
    publisher = FrontierPublisher(Tracker(pipeline()))
    publisher.initialize([((SRC, Timestamp(0)), 1), ((A_IN, Timestamp(0)), 1)])
    publisher.subscribe("a", [A_IN])
    publisher.declare("a", {A_IN: [(Timestamp(0), False)]})  # a awaits a notification at epoch 0
    assert publisher.apply("src", [((SRC, Timestamp(0)), -1)], ack=False) == {}, "epoch 0 is not ready yet"
    pushes = publisher.apply("a", [((A_IN, Timestamp(0)), -1)], ack=False)
    assert pushes == {"a": ({A_IN: []}, False)}, "now it is"


def test_a_batch_can_carry_new_interests_which_it_answers_at_once():
    publisher = FrontierPublisher(Tracker(pipeline()))
    publisher.initialize([((SRC, Timestamp(0)), 1)])
    publisher.subscribe("b", [B_IN])
    publisher.apply("src", [((SRC, Timestamp(0)), -1), ((SRC, Timestamp(1)), 1)], ack=False)
    # b's batch (here empty) declares it waits on epoch 0, which is already complete: pushed with the batch.
    pushes = publisher.apply("b", [], ack=False, interests={B_IN: [(Timestamp(0), False)]})
    assert pushes == {"b": ({B_IN: [(Timestamp(1), True)]}, False)}
    assert publisher.apply("b", [], ack=False) == {}, "nothing new to tell"
