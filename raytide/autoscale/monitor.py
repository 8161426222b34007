"""The autoscaler's *monitor* step: two readings of a running job make one window's :class:`JobStats`.

A reading (:class:`Sample`) holds every replica's cumulative counters as its actor reports
them (records in and out per vertex, seconds busy and blocked by backpressure, per chain
of fused vertices) and progress tracking's view per vertex (queued messages, frontier).
The window's statistics are the differences. A replica whose counters went back (a new
role after a rescale) counts from zero. Busy and blocked time are a chain's: every
vertex fused in one actor is charged its whole time, which makes a light vertex fused
behind a heavy one look slow (a rate policy then gives it the heavy one's width, which
it must keep anyway, :mod:`raytide.rescale.widths`).

>>> before = Sample(0.0, {("map", 0): {"busy_s": 0.0, "blocked_s": 0.0, "vertices": {"map": {"records_in": 0, "records_out": 0}}}},
...                 {"map": {"queued": 0, "frontier": 0}})
>>> after = Sample(2.0, {("map", 0): {"busy_s": 1.0, "blocked_s": 0.0, "vertices": {"map": {"records_in": 100, "records_out": 100}}}},
...                {"map": {"queued": 3, "frontier": 4}})
>>> stats = window_stats(before, after, {"map": ("map", 1)}, [("numbers", "map")], {"numbers": 80.0})
>>> stats.vertex("map").true_rate_per_replica, stats.vertex("map").queued, stats.epoch_seconds
(100.0, 3, 0.5)
>>> free_cpus(4, before, after)  # the replica was busy half the window: it holds a CPU
3.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats

#: A replica busy at least this share of a window holds a CPU (the others are mostly idle).
BUSY_SHARE = 0.5


@dataclass(frozen=True)
class Sample:
    """One reading of a job.

    Attributes:
        taken_at: when, in seconds on the reader's monotonic clock.
        replicas: per ``(chain, replica)``, the counters its actor reports
            (``busy_s``, ``blocked_s`` and ``vertices: {vertex: {records_in, records_out}}``).
        progress: per vertex, ``queued`` and ``frontier`` (the earliest epoch that may
            still arrive; None once none can).
    """

    taken_at: float
    replicas: Mapping[tuple[str, int], Mapping[str, Any]]
    progress: Mapping[str, Mapping[str, int | None]]


def _delta(after: float, before: float | None) -> float:
    """A counter's growth; from zero if it went back (a new role)."""
    return after if before is None or after < before else after - before


def window_stats(before: Sample, after: Sample, placement: Mapping[str, tuple[str, int]],
                 edges: Iterable[tuple[str, str]], source_rates: Mapping[str, float]) -> JobStats:
    """The statistics of the window between two readings.

    Args:
        before, after: the readings at the window's start and end.
        placement: per vertex to report, its chain and width (``(chain, n)``).
        edges: ``(upstream, downstream)`` vertex names (back edges left out: the rate
            policy needs a DAG).
        source_rates: the rate each input must sustain (records per second).
    """
    window = max(after.taken_at - before.taken_at, 1e-6)
    latest = _latest_frontier(after)
    vertices = []
    for vertex, (chain, width) in placement.items():
        replicas = []
        for replica in range(width):
            now = after.replicas.get((chain, replica))
            if now is None:
                continue
            then = before.replicas.get((chain, replica), {})
            counts, old = now["vertices"].get(vertex, {}), then.get("vertices", {}).get(vertex, {})
            restarted = bool(then) and now["busy_s"] < then["busy_s"]
            base = {} if restarted else old
            replicas.append(ReplicaStats(
                records_in=int(_delta(counts.get("records_in", 0), base.get("records_in"))),
                records_out=int(_delta(counts.get("records_out", 0), base.get("records_out"))),
                busy_seconds=min(window, _delta(now["busy_s"], None if restarted else then.get("busy_s"))),
                window_seconds=window,
                blocked_seconds=min(window, _delta(now["blocked_s"], None if restarted else then.get("blocked_s")))))
        if replicas:
            progress = after.progress.get(vertex, {})
            frontier = progress.get("frontier")
            lag = latest - frontier if latest is not None and frontier is not None else None
            vertices.append(VertexStats(vertex, tuple(replicas), int(progress.get("queued") or 0), lag))
    reported = {v.vertex for v in vertices} | set(source_rates)
    return JobStats(tuple(vertices), tuple((a, b) for a, b in edges if a in reported and b in reported),
                    source_rates, after.taken_at, _epoch_seconds(before, after, window))


def _epoch_seconds(before: Sample, after: Sample, window: float) -> float | None:
    """Seconds per epoch by which the latest frontier moved in the window."""
    start, end = _latest_frontier(before), _latest_frontier(after)
    return window / (end - start) if start is not None and end is not None and end > start else None


def _latest_frontier(sample: Sample) -> int | None:
    """The latest epoch any vertex's frontier has reached (None: no vertex expects any)."""
    frontiers = [frontier for p in sample.progress.values() if (frontier := p.get("frontier")) is not None]
    return max(frontiers, default=None)


def free_cpus(total_cpus: float, before: Sample, after: Sample) -> float:
    """CPUs the job could still use: the cluster's less one per replica (a process, however
    many vertices are fused in it) busy at least :data:`BUSY_SHARE` of the window (the
    autoscaler never asks for more replicas)."""
    window = max(after.taken_at - before.taken_at, 1e-6)
    busy = 0
    for key, now in after.replicas.items():
        then = before.replicas.get(key, {})
        grown = _delta(now["busy_s"], then.get("busy_s"))
        busy += grown / window >= BUSY_SHARE
    return max(0.0, float(total_cpus - busy))
