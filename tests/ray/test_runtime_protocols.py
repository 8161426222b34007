"""Backpressure on a real local Ray: a sender waits while its receiver's window is full."""

from __future__ import annotations

import time

import pytest
import ray

import raytide as rt

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class Gate:
    """The test's hold on the consumer: counts the batches the producer hands on and opens at a number."""

    def __init__(self, opens_at: int) -> None:
        self.handed_on, self.opens_at = 0, opens_at
        self.seen: list[int] = []

    def hand_on(self) -> None:
        self.handed_on += 1

    def is_open(self) -> bool:
        return self.handed_on >= self.opens_at

    def look(self) -> None:
        """Note how many batches have been handed on by now."""
        self.seen.append(self.handed_on)

    def looks(self) -> list[int]:
        return self.seen


#: How long the consumer keeps its first batch once the gate is open, before it looks again:
#: a producer that did not wait would hand on more batches meanwhile.
HOLD_AFTER_OPENING = 0.3


class Held(rt.Vertex):
    """Holds its first batch until the gate opens (and a little longer), then passes on batch sizes."""

    def __init__(self, gate) -> None:
        self.gate, self.held = gate, False

    def on_recv(self, edge, message, t):
        if not self.held:
            self.held = True
            deadline = time.monotonic() + 60
            while not ray.get(self.gate.is_open.remote()):
                if time.monotonic() > deadline:
                    raise TimeoutError("the producer never handed on enough batches to open the gate")
                time.sleep(0.005)
            time.sleep(HOLD_AFTER_OPENING)
            ray.get(self.gate.look.remote())
        self.send_by(0, [len(message)], t)


def test_backpressure_bounds_in_flight_batches(ray_session):
    # The consumer holds its first batch until the producer has handed on bound + 1 batches:
    # then `bound` calls are outstanding (the held one and those queued behind it), the window
    # is full, and the producer's next send must wait: it cannot hand on batch bound + 2 while
    # the consumer still holds the first. Not chained: the producer is a host of its own (the
    # input seated in it), so its sends to the consumer go by Ray calls in a window; an input
    # replica chained with the producer would be seated in the consumer's host and call it in process.
    bound = 4
    gate = Gate.remote(opens_at=bound + 1)

    def hand_on(batch):
        ray.get(gate.hand_on.remote())
        return batch

    flow = rt.Dataflow("backpressure")
    (flow.input("numbers").map_batches(hand_on, batch_format="list", name="fast")
        .unary(lambda: Held(gate), exchange=lambda x: 0, name="slow").output("out"))
    with rt.run(flow, parallelism=1, max_inflight=bound, batch_size=10, chaining=False) as job:
        job.push("numbers", list(range(3000)))
        job.close("numbers")
        job.wait(timeout=120)
        stats = job.stats()
        total = sum(n for records in job.collect("out").values() for n in records)
    assert total == 3000
    assert stats["backpressure_waits"] > 0, "the fast producer must have been held back"
    assert stats["max_inflight_seen"] == bound, "the window filled up to its bound and no further"
    assert ray.get(gate.looks.remote()) == [bound + 1], "the producer went on while the window was full"
