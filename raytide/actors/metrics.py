"""A replica's statistics as Ray metrics, which Ray's Prometheus endpoint exports.

Each replica publishes, at most once per :data:`PUBLISH_INTERVAL`, gauges tagged by job,
vertex and replica (Ray adds the ``ray_`` prefix):

* ``raytide_records_in`` / ``raytide_records_out``: records each hosted vertex received
  and sent;
* ``raytide_busy_seconds`` / ``raytide_blocked_seconds``: time the replica spent handling
  events, and waiting for a receiver's window (backpressure); tagged with the chain's name
  (its fused vertices, joined by ``+``).

They are the figures ``job.stats()`` returns, so a dashboard and an autoscaler reading
either see the same thing. Gauges, not counters: a replica restored by a recovery starts
counting again, and a gauge shows that rather than adding it up.
"""

from __future__ import annotations

import time
from typing import Any

from ray.util.metrics import Gauge

#: Seconds between two publications of a replica's figures.
PUBLISH_INTERVAL = 1.0

_TAGS = ("job", "vertex", "replica")
_GAUGES: dict[str, Gauge] = {}


def _gauge(name: str, description: str) -> Gauge:
    """The process's gauge ``name`` (made once: several replicas may share a process over time)."""
    if name not in _GAUGES:
        _GAUGES[name] = Gauge(name, description=description, tag_keys=_TAGS)
    return _GAUGES[name]


class ReplicaMetrics:
    """Publishes one replica's statistics (see the module docstring)."""

    def __init__(self, job: str, chain: str, replica: int) -> None:
        self.job, self.chain, self.replica = job, chain, str(replica)
        self.last = 0.0

    def due(self, now: float) -> bool:
        """Whether the figures should be published again at ``now`` (``time.perf_counter``)."""
        return now - self.last >= PUBLISH_INTERVAL

    def publish(self, stats: dict[str, Any]) -> None:
        """Set the gauges from a replica's ``stats()``."""
        self.last = time.perf_counter()
        records_in = _gauge("raytide_records_in", "records a vertex replica received")
        records_out = _gauge("raytide_records_out", "records a vertex replica sent")
        for vertex, counters in stats["vertices"].items():
            tags = {"job": self.job, "vertex": vertex, "replica": self.replica}
            records_in.set(counters["records_in"], tags=tags)
            records_out.set(counters["records_out"], tags=tags)
        tags = {"job": self.job, "vertex": self.chain, "replica": self.replica}
        _gauge("raytide_busy_seconds", "seconds a replica spent handling events").set(stats["busy_s"], tags=tags)
        _gauge("raytide_blocked_seconds", "seconds a replica waited for a receiver's window (backpressure)").set(
            stats["blocked_s"], tags=tags)


def busy_and_blocked(busy: float, blocked: float, in_event: tuple[float, float] | None,
                     blocked_since: float | None) -> tuple[float, float]:
    """A replica's seconds busy handling events and blocked by backpressure, the event in hand
    (when it began, and ``blocked`` then) and the wait in hand (since when) included. Read from
    the ``inspect`` thread while they change: each total is read before what is in hand, which
    is cleared before it is added to the total, so a reading may miss the moment of an ending
    but never counts it twice (the caller reads them in this order)."""
    now = time.perf_counter()
    blocking = now - blocked_since if blocked_since is not None else 0.0
    if in_event is not None:
        started, blocked_then = in_event
        busy += max(0.0, now - started - (blocked - blocked_then) - blocking)
    return busy, blocked + blocking
