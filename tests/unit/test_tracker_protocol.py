"""Safety of the tracker under the real protocol: batched deltas, per-worker FIFO, any interleaving.

Workers own pending events (messages at input ports, capabilities and notification
requests at vertices). Processing an event retires it (-1) and creates new events (+1)
that may belong to other workers; the worker accumulates these deltas and ships them as
one batch (Naiad's rule: a -1 travels with the +1s it caused) on a FIFO queue to the
tracker. Batches from different workers are applied in any order, so counts go negative
transiently. The oracle knows every pending event, shipped or not; a notification may
only fire when none of them could-result-in it.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.progress import ChangeBatch, Location, Timestamp, Tracker
from tests.oracles import ReachabilityOracle, blocked_by
from tests.strategies import random_graph

MAX_COUNTER = 2
EPOCHS = 3
#: At most this many vertices per graph: events multiply at every fan-out, and larger graphs
#: take millions of steps to drain.
MAX_VERTICES = 10
#: A simulation still busy after this many steps is stuck: a notification is never delivered.
#: (The largest graphs of the generator drain in a few hundred thousand.)
MAX_STEPS = 1_000_000
#: Events a simulation creates at most: some graphs multiply events at every fan-out and
#: would not drain within MAX_STEPS (seed 1340 held 13,000 pending events after a million
#: steps, growing); past the budget, processing creates nothing more and everything drains.
MAX_EVENTS = 5_000


class Simulation:
    """Workers, their pending events and outgoing batch queues, and the tracker."""

    def __init__(self, seed: int, workers: int) -> None:
        self.rng = random.Random(seed)
        spec = random_graph(seed, max_vertices=MAX_VERTICES)
        self.graph = spec.graph
        self.tracker = Tracker(self.graph)
        self.oracle = ReachabilityOracle(spec, cap=MAX_COUNTER + 1)
        self.run_time = ReachabilityOracle(spec, cap=MAX_COUNTER, bounded=True)  # where records really go
        self.pending: list[list[tuple[Location, Timestamp]]] = [[] for _ in range(workers)]
        self.local: list[ChangeBatch] = [ChangeBatch() for _ in range(workers)]
        self.queues: list[list[list]] = [[] for _ in range(workers)]
        self.notifications_fired = 0
        self.created = 0
        for vertex, shape in self.graph.vertices.items():
            if shape.inputs == 0:
                capability = (Location.of_vertex(vertex), Timestamp(0))
                self.pending[0].append(capability)
                self.tracker.update(*capability, 1)
        self.tracker.propagate()

    def create(self, worker: int, event: tuple[Location, Timestamp]) -> None:
        if self.created >= MAX_EVENTS:
            return
        self.created += 1
        owner = self.rng.randrange(len(self.pending))
        self.pending[owner].append(event)
        self.local[worker].update(event, 1)

    def process(self, worker: int, index: int) -> bool:
        """Process one pending event of ``worker``; False if it is a notification not yet deliverable."""
        location, time = self.pending[worker][index]
        shape = self.graph.vertices[location.vertex]
        if location.port is None and shape.inputs > 0:
            if not self.tracker.may_notify(location.vertex, time):
                return False
            all_pending = [e for events in self.pending for e in events]
            assert not blocked_by(self.oracle, all_pending, (location, time)), "notification fired too early"
            self.notifications_fired += 1
        self.pending[worker].pop(index)
        self.local[worker].update((location, time), -1)
        if location.port is None and shape.inputs == 0 and time.epoch + 1 < EPOCHS:
            self.create(worker, (location, Timestamp(time.epoch + 1)))
        if location.port is not None and self.rng.random() < 0.3:
            self.create(worker, (Location.of_vertex(location.vertex), time))
        self.emit(worker, location, time)
        return True

    def emit(self, worker: int, location: Location, time: Timestamp) -> None:
        for following in self.run_time.next_times(Location.of_vertex(location.vertex), time):
            if self.rng.random() < 0.7:
                self.create(worker, following)

    def flush(self, worker: int) -> None:
        if not self.local[worker].is_empty():
            self.queues[worker].append(self.local[worker].drain())

    def deliver(self, worker: int) -> None:
        batch = self.queues[worker].pop(0)
        self.tracker.update_all(batch)
        self.tracker.propagate()

    def step(self) -> bool:
        """One random action; False when nothing is left to do."""
        actions = []
        for w in range(len(self.pending)):
            if self.pending[w]:
                actions.append(("process", w))
            if not self.local[w].is_empty():
                actions.append(("flush", w))
            if self.queues[w]:
                actions.append(("deliver", w))
        if not actions:
            return False
        kind, w = self.rng.choice(actions)
        if kind == "process":
            self.process(w, self.rng.randrange(len(self.pending[w])))
        elif kind == "flush":
            self.flush(w)
        else:
            self.deliver(w)
        return True


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 100_000), st.integers(1, 4))
def test_no_notification_fires_while_a_pending_event_could_result_in_it(seed, workers):
    sim = Simulation(seed, workers)
    for _ in range(MAX_STEPS):
        if not sim.step():
            break
    else:
        pytest.fail("the simulation did not finish: a notification was never delivered")
    assert sim.tracker.is_idle()


class RetirementsShippedFirst(Simulation):
    """Breaks Naiad's rule: the -1s of a flush travel in a batch ahead of the +1s they caused."""

    def flush(self, worker: int) -> None:
        changes = self.local[worker].drain()
        self.queues[worker].append([c for c in changes if c[1] < 0])
        self.queues[worker].append([c for c in changes if c[1] > 0])


def test_the_oracle_catches_a_protocol_that_breaks_the_batching_rule():
    caught = 0
    for seed in range(60):
        sim = RetirementsShippedFirst(seed, 3)
        try:
            while sim.step():
                pass
        except AssertionError:
            caught += 1
    assert caught > 0
