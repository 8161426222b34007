"""Latency baseline: the Ray calls of a small keyed epoch, made by plain actors that do
nothing else.

The six-hop relay (:mod:`bench.baselines.relay_ray`) is the issue's comparator: the
critical path's hops one after the other. But a small epoch of ``input -> map ->
count_by_key`` at parallelism ``p`` makes more calls than its critical path, and on a
machine with fewer cores than processes they compete for the CPU. This module makes
exactly those calls, in the same order and between as many processes, with nothing done
at any of them but counting, so that raytide's own work is what the ratio against it
measures:

* the driver calls each of ``p`` input actors (the one with the epoch's records first);
* each input actor calls each of ``p`` merge actors (the records' partial counts, or its
  epoch token alone); its progress batch rides with its call to the first merge actor;
* a merge actor keeps a batch that came with a call until it takes its last input's call,
  then sends the progress actor its counts with the batches it kept;
* the progress actor answers the driver's long poll once every merge actor has sent.

At parallelism 2 that is two calls from the driver, four between inputs and merges, two
into the progress actor and the poll, the counts ``job.stats()`` reports for raytide's
epoch (``tests/ray/test_progress_messages.py`` pins them).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ray

from bench.baselines.relay_ray import POLL_TIMEOUT  # the relay's sink waits as long


@ray.remote(num_cpus=0, concurrency_groups={"poll": 1})
class Progress:
    """Counts the merge actors' calls per epoch; the driver long-polls it for a complete epoch."""

    def __init__(self, merges: int) -> None:
        self.merges = merges
        self.sent: dict[int, int] = {}
        self.complete = -1
        self.calls = 0
        self.changed = threading.Condition()

    def counts(self, epoch: int, payload: bytes, riding: int) -> None:
        """A merge actor's counts of ``epoch``, with the ``riding`` batches it kept (one call)."""
        with self.changed:
            self.calls += 1
            self.sent[epoch] = self.sent.get(epoch, 0) + 1
            if self.sent[epoch] == self.merges:
                del self.sent[epoch]
                self.complete = epoch
                self.changed.notify_all()

    def call_count(self) -> int:
        return self.calls

    @ray.method(concurrency_group="poll")
    def wait_for(self, epoch: int) -> int:
        with self.changed:
            self.changed.wait_for(lambda: self.complete >= epoch, POLL_TIMEOUT)
            return self.complete


@ray.remote(num_cpus=0)
class Merge:
    """Takes one call per input actor and epoch; the last one's sends the counts on, with
    the batches the calls carried."""

    def link(self, progress: Any, inputs: int) -> None:
        self.progress, self.inputs = progress, inputs
        self.taken: dict[int, tuple[int, int]] = {}  # epoch -> (calls taken, batches kept)

    def take(self, epoch: int, payload: bytes | None, riding: int) -> None:
        taken, kept = self.taken.get(epoch, (0, 0))
        self.taken[epoch] = (taken + 1, kept + riding)
        if taken + 1 == self.inputs:
            del self.taken[epoch]
            self.progress.counts.remote(epoch, b"c" * 100, kept + riding)


@ray.remote(num_cpus=0)
class Input:
    """Sends each merge actor its share of an epoch (or its token alone), its batch riding with the first."""

    def link(self, merges: list[Any]) -> None:
        self.merges = merges

    def advance(self, epoch: int, payload: bytes | None) -> None:
        for position, merge in enumerate(self.merges):
            merge.take.remote(epoch, payload, 1 if position == 0 else 0)


def keyed_calls_latencies(parallelism: int, epochs: int, warmup: int = 20) -> tuple[list[float], float]:
    """Seconds from each epoch's first call to the driver's poll returning it complete, for
    ``epochs`` epochs one after the other after ``warmup`` untimed ones; and the calls into
    the progress actor per epoch (all epochs counted)."""
    progress = Progress.remote(parallelism)
    merges = [Merge.remote() for _ in range(parallelism)]
    inputs = [Input.remote() for _ in range(parallelism)]
    ray.get([merge.link.remote(progress, parallelism) for merge in merges]
            + [actor.link.remote(merges) for actor in inputs])
    records = b"r" * 200
    latencies = []
    try:
        for epoch in range(warmup + epochs):
            started = time.perf_counter()
            for position, actor in enumerate(inputs):
                actor.advance.remote(epoch, records if position == 0 else None)
            complete = ray.get(progress.wait_for.remote(epoch), timeout=POLL_TIMEOUT + 30)
            if complete < epoch:
                raise TimeoutError(f"keyed calls: epoch {epoch} was not complete within {POLL_TIMEOUT} s")
            if epoch >= warmup:
                latencies.append(time.perf_counter() - started)
        calls = ray.get(progress.call_count.remote())
    finally:
        for actor in (progress, *merges, *inputs):
            ray.kill(actor)
    return latencies, calls / (warmup + epochs)
