"""The progress actor: a thin Ray shell around :class:`FrontierPublisher`.

Vertex replicas call :meth:`ProgressActor.apply` (fire and forget; Ray keeps one
caller's calls in order, which the progress protocol needs). The actor never waits for
anyone: pushes to replicas and the "finished" signal to the collector are fire and forget.
"""

from __future__ import annotations

from typing import Any, Hashable

from raytide.progress.graph import ProgressGraph
from raytide.progress.publisher import FrontierPublisher
from raytide.progress.reachability import Location
from raytide.progress.tracker import Pointstamp, Tracker


class ProgressActor:
    """Owns the tracker; applies progress batches and pushes frontier changes."""

    def __init__(self, graph: ProgressGraph) -> None:
        self.publisher = FrontierPublisher(Tracker(graph))
        self.handles: dict[Hashable, Any] = {}
        self.collector: Any = None
        self.finished = False

    def connect(self, collector: Any, replicas: dict[Hashable, tuple[Any, list[Location]]],
                initial: list[tuple[Pointstamp, int]]) -> None:
        """Learn the collector, every replica's handle and locations, and the pointstamps
        held before anything runs; push the initial statuses."""
        self.publisher.initialize(initial)
        self.collector = collector
        for key, (handle, locations) in replicas.items():
            self.handles[key] = handle
            statuses, acked = self.publisher.subscribe(key, locations)
            handle.on_progress.remote(statuses, acked)
        self._check_finished()

    def apply(self, sender: Hashable, changes: list[tuple[Pointstamp, int]], ack: bool) -> None:
        """Apply a batch of deltas from replica ``sender`` and push what changed."""
        for key, (statuses, acked) in self.publisher.apply(sender, changes, ack).items():
            self.handles[key].on_progress.remote(statuses, acked)
        self._check_finished()

    def declare(self, sender: Hashable, interests: dict[Location, list]) -> None:
        """Replica ``sender`` now waits on ``interests``; push it what already answers them."""
        for key, (statuses, acked) in self.publisher.declare(sender, interests).items():
            self.handles[key].on_progress.remote(statuses, acked)

    def frontier(self, location: Location) -> list:
        """The frontier at ``location`` (for probes)."""
        return self.publisher.tracker.frontier(location)

    def active(self, limit: int = 20) -> list[str]:
        """Up to ``limit`` active pointstamps, described for error messages."""
        active = sorted(self.publisher.tracker.active_pointstamps().items(), key=lambda kv: (kv[0][1], str(kv[0][0])))
        return [f"{count} x {time} at {location}" for (location, time), count in active[:limit]]

    def ping(self) -> bool:
        """Liveness check for the driver."""
        return True

    def stats(self) -> dict[str, int]:
        """How many batches were applied and pushes sent."""
        return {"batches_applied": self.publisher.batches_applied, "pushes": self.publisher.pushes}

    def _check_finished(self) -> None:
        if not self.finished and self.publisher.is_idle():
            self.finished = True
            self.collector.finished.remote()
