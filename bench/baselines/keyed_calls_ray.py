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
* the input actor with the records calls each of ``p`` merge actors (the records' partial
  counts, with its epoch tokens and the proxy tokens for the others); its progress batch
  rides with its call to the first merge actor;
* each other input actor moves quietly: it sends its progress batch to the progress actor
  itself (``raytide.engine.epoch_tokens.ProxyPlan``);
* a merge actor sends the progress actor its counts, with the batch that came with the call;
* the progress actor answers the driver's long poll once every merge actor and every quiet
  input actor has sent.

At parallelism 2 that is two calls from the driver, two between inputs and merges, three
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
    """Counts the calls of each epoch; the driver long-polls it for a complete epoch."""

    def __init__(self, callers: int) -> None:
        self.callers = callers
        self.sent: dict[int, int] = {}
        self.complete = -1
        self.calls = 0
        self.changed = threading.Condition()

    def counts(self, epoch: int, payload: bytes, riding: int) -> None:
        """A merge actor's counts of ``epoch`` with the ``riding`` batch that came to it, or a
        quiet input actor's batch (one call each)."""
        with self.changed:
            self.calls += 1
            self.sent[epoch] = self.sent.get(epoch, 0) + 1
            if self.sent[epoch] == self.callers:
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
    """Takes the call of the input actor with the records (its tokens close the others' epochs
    too) and sends the counts on, with the batch that came with it."""

    def link(self, progress: Any) -> None:
        self.progress = progress

    def take(self, epoch: int, payload: bytes, riding: int) -> None:
        self.progress.counts.remote(epoch, b"c" * 100, riding)


@ray.remote(num_cpus=0)
class Input:
    """Sends each merge actor its share of an epoch, its batch riding with the first; without
    records, sends its batch to the progress actor alone."""

    def link(self, merges: list[Any], progress: Any) -> None:
        self.merges, self.progress = merges, progress

    def advance(self, epoch: int, payload: bytes | None) -> None:
        if payload is None:
            self.progress.counts.remote(epoch, b"p" * 100, 1)
            return
        for position, merge in enumerate(self.merges):
            merge.take.remote(epoch, payload, 1 if position == 0 else 0)


def keyed_calls_latencies(parallelism: int, epochs: int, warmup: int = 20) -> tuple[list[float], float]:
    """Seconds from each epoch's first call to the driver's poll returning it complete, for
    ``epochs`` epochs one after the other after ``warmup`` untimed ones; and the calls into
    the progress actor per epoch (all epochs counted)."""
    progress = Progress.remote(2 * parallelism - 1)
    merges = [Merge.remote() for _ in range(parallelism)]
    inputs = [Input.remote() for _ in range(parallelism)]
    ray.get([merge.link.remote(progress) for merge in merges] + [actor.link.remote(merges, progress) for actor in inputs])
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
