"""Latency baseline: a message relayed through a chain of Ray actors back to the driver.

The floor under raytide's epoch latency on the same machine. A small epoch of a keyed
pipeline crosses six Ray hops one after the other whatever the implementation: driver ->
input replica (advance), input -> merge replica (the partial counts), merge -> progress
actor (the consumed records), progress actor -> merge (the epoch is complete: notify),
merge -> progress actor (the counts), progress actor -> driver (the reply to its long
poll). :func:`relay_latencies` times exactly that many plain Ray calls, the same way:
fire-and-forget calls between actors and a long poll the driver waits on, with nothing
done at any hop but forwarding 100 bytes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ray

#: Seconds a long poll waits before it answers with what it has.
POLL_TIMEOUT = 30.0


@ray.remote(num_cpus=0)
class Relay:
    """Forwards a message to the next relay, the last one to the sink."""

    def link(self, following: Any, sink: Any) -> None:
        self.following, self.sink = following, sink

    def forward(self, payload: bytes, hops_left: int) -> None:
        if hops_left:
            self.following.forward.remote(payload, hops_left - 1)
        else:
            self.sink.arrive.remote(payload)


@ray.remote(num_cpus=0, concurrency_groups={"poll": 1})
class Sink:
    """Counts arrivals; the driver long-polls it, as raytide's driver polls the progress actor."""

    def __init__(self) -> None:
        self.arrived = 0
        self.changed = threading.Condition()

    def arrive(self, payload: bytes) -> None:
        with self.changed:
            self.arrived += 1
            self.changed.notify_all()

    @ray.method(concurrency_group="poll")
    def wait_for(self, count: int) -> int:
        with self.changed:
            self.changed.wait_for(lambda: self.arrived >= count, POLL_TIMEOUT)
            return self.arrived


def relay_latencies(hops: int, messages: int, warmup: int = 20, relays: int = 4) -> list[float]:
    """Seconds for each of ``messages`` messages to cross ``hops`` Ray hops (the driver's
    call to the first relay and the sink's reply to the driver's poll included), one after
    the other, after ``warmup`` untimed ones. ``relays`` actors take the hops between
    actors in turn (raytide's pipeline spreads its hops over four vertex actors too)."""
    if hops < 3:
        raise ValueError(f"a relay takes at least 3 hops (driver -> relay -> sink -> driver), not {hops}")
    chain = [Relay.remote() for _ in range(relays)]
    sink = Sink.remote()
    ray.get([relay.link.remote(chain[(i + 1) % relays], sink) for i, relay in enumerate(chain)])
    payload = b"x" * 100
    latencies = []
    try:
        for sent in range(1, warmup + messages + 1):
            started = time.perf_counter()
            chain[0].forward.remote(payload, hops - 3)
            arrived = ray.get(sink.wait_for.remote(sent), timeout=POLL_TIMEOUT + 30)
            if arrived != sent:
                raise TimeoutError(f"relay: message {sent} did not reach the sink within {POLL_TIMEOUT} s")
            if sent > warmup:
                latencies.append(time.perf_counter() - started)
    finally:
        for actor in (*chain, sink):
            ray.kill(actor)
    return latencies
