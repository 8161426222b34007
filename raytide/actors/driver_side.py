"""The driver's side of a running job, besides its inputs: the outputs it receives and the
liveness of the actors it watches.

* :class:`OutputCollector` takes the progress actor's job events with a long poll
  (``next_events``), keeps each completed output epoch's record parts, and fetches and
  unpacks records when asked (large parts stay in the object store until then).
* :class:`Liveness` pings every actor at most once a second without waiting for the
  answers, and reports the first one that died.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Hashable, Mapping
from typing import Any

import ray

from raytide.actors.protocol import EpochComplete, JobFailed, JobFinished
from raytide.actors.wire import pack_records, unpack_records

#: Extra time a long poll's Ray call may take beyond the poll's own timeout.
POLL_SLACK = 30.0
#: Seconds between two rounds of liveness pings.
PING_INTERVAL = 1.0


class OutputCollector:
    """Completed output epochs as the progress actor reports them."""

    def __init__(self, progress: Any, outputs: list[str]) -> None:
        self.progress = progress
        self.parts: dict[str, dict[int, list]] = {name: {} for name in outputs}
        self.fetched: dict[str, dict[int, list]] = {name: {} for name in outputs}
        self.cursor = 0
        self.finished = False

    def poll(self, timeout: float) -> list[Any]:
        """Take new events, waiting up to ``timeout`` seconds for one; returns the failures among them.

        Raises:
            ray.exceptions.RayActorError: the progress actor died.
        """
        call = self.progress.next_events.remote(self.cursor, timeout)
        events, self.cursor = ray.get(call, timeout=timeout + POLL_SLACK)
        failures = []
        for event in events:
            if isinstance(event, EpochComplete):
                self.parts[event.output][event.epoch] = event.parts
            elif isinstance(event, JobFailed):
                failures.append(event.error)
            elif isinstance(event, JobFinished):
                self.finished = True
        return failures

    def epochs(self, name: str) -> list[int]:
        """The completed epochs of output ``name`` so far, in order."""
        return sorted(self.parts[name])

    def records(self, name: str, epoch: int) -> list:
        """The records of a completed epoch (fetched and unpacked once)."""
        fetched = self.fetched[name]
        if epoch not in fetched:
            parts = self.parts[name][epoch]
            refs = [p for p in parts if isinstance(p, ray.ObjectRef)]
            loaded = dict(zip(map(id, refs), ray.get(refs)))
            fetched[epoch] = list(itertools.chain.from_iterable(unpack_records(loaded.get(id(p), p)) for p in parts))
        return fetched[epoch]

    def keep_locally(self) -> list[tuple[str, int]]:
        """Fetch every completed epoch now (the actors that own the parts are about to go);
        returns the epochs that could not be fetched."""
        lost = []
        for name, epochs in self.parts.items():
            for epoch in epochs:
                try:
                    self.records(name, epoch)
                except Exception:  # the owner may already be gone; nothing more to keep
                    lost.append((name, epoch))
        return lost

    def packed(self, name: str, kept: bool) -> dict[int, list]:
        """Record parts per completed epoch; re-packed from the driver's copy when ``kept``
        (after teardown, when the object store no longer holds the parts)."""
        if kept:
            return {epoch: [pack_records(self.records(name, epoch))] for epoch in self.epochs(name)}
        return {epoch: self.parts[name][epoch] for epoch in self.epochs(name)}

    def latest(self) -> dict[str, int | None]:
        """The latest completed epoch per output, for timeout messages."""
        return {name: max(epochs, default=None) for name, epochs in self.parts.items()}


class Liveness:
    """Pings actors in the background and reports the first one found dead."""

    def __init__(self, actors: Mapping[Hashable, Any]) -> None:
        self.actors = actors
        self.pings: dict[Hashable, Any] = {}
        self.last = 0.0

    def check(self) -> tuple[Hashable, BaseException] | None:
        """At most once per :data:`PING_INTERVAL`: the key of an actor that died, and the error."""
        now = time.monotonic()
        if now - self.last < PING_INTERVAL:
            return None
        self.last = now
        for key, actor in self.actors.items():
            ref = self.pings.get(key)
            if ref is None:
                self.pings[key] = actor.ping.remote()
                continue
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                del self.pings[key]
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    return key, error
        return None
