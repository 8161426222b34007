"""The publisher pushes a subscriber a status only when one of its questions gets a new answer."""

from __future__ import annotations

import collections
import random

import pytest

from raytide.progress import GraphBuilder, Location, Timestamp, Tracker
from raytide.progress.publisher import FrontierPublisher, Update, answers, declaration
from tests.strategies import random_graph


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
    assert statuses == {B_IN: [(Timestamp(0), True)]} and acked == 0
    # Nothing declared: moving the frontier is not pushed.
    assert publisher.apply("src", [((SRC, Timestamp(0)), -1), ((SRC, Timestamp(1)), 1)], ack=False) == {}
    # Declaring interest in epoch 0 pushes at once, since epoch 0 is already complete at b.
    pushes = publisher.declare("b", {B_IN: [(Timestamp(0), False)]})
    assert pushes == {"b": ({B_IN: [(Timestamp(1), True)]}, False)}
    publisher.declare("b", {B_IN: [(Timestamp(5), False)]})
    assert publisher.apply("src", [((SRC, Timestamp(1)), -1), ((SRC, Timestamp(2)), 1)], ack=False) == {}
    # An acknowledged batch while nothing b waits on is ready: the acknowledgement waits...
    assert publisher.apply("b", [], ack=True) == {}
    assert publisher.apply("b", [], ack=True) == {}
    assert publisher.apply("src", [((SRC, Timestamp(2)), -1), ((SRC, Timestamp(3)), 1)], ack=False) == {}
    # ... for the push that makes it ready, with every unseen status and both acknowledgements.
    pushes = publisher.apply("src", [((SRC, Timestamp(3)), -1), ((SRC, Timestamp(6)), 1)], ack=False)
    assert pushes == {"b": ({B_IN: [(Timestamp(6), True)]}, 2)}


def test_an_acknowledgement_goes_at_once_to_a_replica_that_may_then_run_a_notification():
    publisher = FrontierPublisher(Tracker(pipeline()))
    publisher.initialize([((SRC, Timestamp(0)), 1)])
    publisher.subscribe("b", [B_IN])
    publisher.apply("src", [((SRC, Timestamp(0)), -1), ((SRC, Timestamp(2)), 1)], ack=False)
    # b waits on epoch 1, ready already (as b would see once told): the acknowledgement goes now.
    pushes = publisher.apply("b", [], ack=True, interests={B_IN: [(Timestamp(1), False)]})
    assert pushes == {"b": ({B_IN: [(Timestamp(2), True)]}, 1)}
    # Epoch 1 is ready with what b has seen: the next acknowledgement goes alone.
    assert publisher.apply("b", [], ack=True) == {"b": ({}, 1)}


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


class EveryStatusEveryTime:
    """The oracle: after each batch, every subscriber's every location, each status computed
    afresh from the tracker (what the publisher did before it cached statuses and looked only
    where a batch touched); an acknowledgement goes with the first push that tells its
    subscriber something it waits on, or at once if a notification of it may be ready."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.subscriptions: dict[str, list[Location]] = {}
        self.interests: dict[str, dict] = {}
        self.seen: dict[str, dict] = {}
        self.owed: collections.Counter = collections.Counter()

    def status(self, location: Location) -> list:
        frontier = sorted(self.tracker.frontier(location), key=Timestamp.sort_key)
        return [(f, self.tracker.is_blocked(location, f)) for f in frontier]

    def subscribe(self, subscriber: str, locations: list[Location]) -> dict:
        self.subscriptions[subscriber], self.interests[subscriber] = locations, {}
        self.seen[subscriber] = {location: self.status(location) for location in locations}
        return dict(self.seen[subscriber])

    def apply(self, sender: str, changes: list, ack: bool, interests: dict | None) -> dict:
        if interests is not None:
            self.interests[sender] = interests
        self.owed[sender] += ack
        self.tracker.update_all(changes)
        self.tracker.propagate()
        return self.pushes(list(self.subscriptions))

    def declare(self, subscriber: str, interests: dict) -> dict:
        self.interests[subscriber] = interests
        return self.pushes([subscriber])

    def apply_all(self, updates: list[Update]) -> dict:
        """Several updates, then one look at every subscriber."""
        for sender, changes, ack, interests, _ in updates:
            if interests is not None:
                self.interests[sender] = interests
            self.owed[sender] += ack
            self.tracker.update_all(changes or [])
        self.tracker.propagate()
        return self.pushes(list(self.subscriptions))

    def pushes(self, subscribers: list[str]) -> dict:
        pushes = {}
        for subscriber in subscribers:
            seen, waits = self.seen[subscriber], self.interests[subscriber]
            changed = {location: self.status(location) for location in self.subscriptions[subscriber]
                       if self.status(location) != seen[location]}
            told = {location: new for location, new in changed.items() if any(
                answers(seen[location], t)[0] != answers(new, t)[0]
                or (held and answers(seen[location], t)[1] != answers(new, t)[1])
                for t, held in waits.get(location, ()))}
            if self.owed[subscriber] and (told or self.may_run(subscriber, {**seen, **changed})):
                told = changed
            elif not told:
                continue
            seen.update(told)
            pushes[subscriber] = (told, self.owed.pop(subscriber, 0))
        return pushes

    def may_run(self, subscriber: str, statuses: dict) -> bool:
        """A time waited on (not for coverage) at every location of one vertex, ready at each;
        or a wait for coverage anywhere."""
        waits = self.interests[subscriber]
        if any(held for times in waits.values() for _, held in times):
            return True
        for vertex in {location.vertex for location in waits}:
            places = [location for location in waits if location.vertex == vertex]
            times = {t for location in places for t, _ in waits[location]}
            if any(all((t, False) in waits[location] and answers(statuses[location], t)[0] for location in places)
                   for t in times):
                return True
        return False


@pytest.mark.parametrize("grouped", [False, True], ids=["one by one", "several per call"])
@pytest.mark.parametrize("seed", range(40))
def test_pushes_are_those_of_computing_every_status_after_every_batch(seed, grouped):
    """Random graphs with (nested) loops, subscribers reading random input ports, random
    batches of pointstamp changes with random interests and acknowledgements: the same pushes
    as the oracle, batch after batch; or call after call, each of a few batches and
    declarations of random senders (:meth:`FrontierPublisher.apply_all`)."""
    rng = random.Random(seed)
    made = random_graph(seed, max_vertices=10)
    publisher, oracle = FrontierPublisher(Tracker(made.graph)), EveryStatusEveryTime(Tracker(made.graph))
    locations = sorted(made.graph.locations, key=str)

    def at(location: Location) -> Timestamp:
        depth = made.vertices[location.vertex].depth
        return Timestamp(rng.randrange(4), tuple(rng.randrange(3) for _ in range(depth)))

    counts: collections.Counter = collections.Counter()
    start = [((location, at(location)), 1) for location in rng.sample(locations, 3)]
    counts.update({pointstamp: delta for pointstamp, delta in start})
    publisher.initialize(start)
    oracle.tracker.update_all(start)
    oracle.tracker.propagate()
    inputs = [location for location in locations if location.port is not None]
    subscribers = [f"replica{i}" for i in range(4)]
    for subscriber in subscribers:
        reads = rng.sample(inputs, min(len(inputs), rng.randint(1, 3)))
        assert publisher.subscribe(subscriber, reads)[0] == oracle.subscribe(subscriber, reads)
    call: list[Update] = []
    for _ in range(60):
        sender = rng.choice(subscribers)
        interests = None
        if rng.random() < 0.4:
            interests = {location: [(at(location), rng.random() < 0.5)]
                         for location in rng.sample(oracle.subscriptions[sender], 1)}
        if rng.random() < 0.15:
            if grouped:
                call.append(declaration(sender, interests or {}))
            else:
                assert publisher.declare(sender, interests or {}) == oracle.declare(sender, interests or {})
            continue
        changes = []
        for _ in range(rng.randint(0, 4)):  # retire an active pointstamp, or add one
            active = [p for p, n in counts.items() if n > 0]
            if active and rng.random() < 0.5:
                changes.append((rng.choice(active), -1))
            else:
                location = rng.choice(locations)
                changes.append(((location, at(location)), 1))
            counts[changes[-1][0]] += changes[-1][1]
        ack = rng.random() < 0.3
        if grouped:
            call.append(Update(sender, changes, ack, interests))
            if rng.random() < 0.4:
                assert publisher.apply_all(call) == oracle.apply_all(call)
                call = []
        else:
            assert publisher.apply(sender, changes, ack, interests) == oracle.apply(sender, changes, ack, interests)
