"""Frozen statistics snapshots the scaling policies read: per replica, per vertex, per job.

A replica reports, for one monitoring window, how many records it consumed and
produced, how long it was busy processing them, how long it was blocked by
backpressure and how long its input queue was at the end of the window. From
these follow the rates the policies use (DS2, Kalavri et al., OSDI 2018):

- *true processing rate*: records consumed per **busy** second, what one replica
  could sustain if it never waited for input nor for downstream capacity;
- *observed rates*: records per **window** second, what actually flowed;
- *selectivity*: records produced per record consumed.

Example:
    >>> r = ReplicaStats(records_in=200, records_out=100, busy_seconds=0.5, window_seconds=2.0)
    >>> r.true_processing_rate, r.observed_input_rate, r.selectivity, r.utilization
    (400.0, 100.0, 0.5, 0.25)
    >>> job = JobStats(
    ...     vertices=(VertexStats("parse", (r, r)),),
    ...     edges=(("source", "parse"),),
    ...     source_rates={"source": 300.0},
    ... )
    >>> job.topological_order(), job.upstream_of("parse"), job.vertex("parse").parallelism
    (('source', 'parse'), ('source',), 2)
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from raytide.errors import GraphError

__all__ = ["JobStats", "ReplicaStats", "VertexStats"]


def _ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None when the denominator is zero (nothing observed)."""
    return numerator / denominator if denominator > 0 else None


@dataclass(frozen=True)
class ReplicaStats:
    """What one replica of a vertex did during one monitoring window.

    Attributes:
        records_in: Records consumed in the window.
        records_out: Records produced in the window (on all outputs).
        busy_seconds: Seconds spent processing (not waiting for input, not blocked).
        window_seconds: Length of the monitoring window, > 0.
        blocked_seconds: Seconds the replica could not send because downstream
            channels were full (backpressure).
        queue_length: Batches waiting in the replica's input queue at the end of the window.

    busy_seconds + blocked_seconds is expected not to exceed window_seconds, but
    measurement jitter may make it slightly larger, so that is not enforced.
    """

    records_in: int
    records_out: int
    busy_seconds: float
    window_seconds: float
    blocked_seconds: float = 0.0
    queue_length: int = 0

    def __post_init__(self) -> None:
        if self.window_seconds <= 0:
            raise ValueError(f"window_seconds must be > 0, got {self.window_seconds}")
        for name in ("records_in", "records_out", "busy_seconds", "blocked_seconds", "queue_length"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def true_processing_rate(self) -> float | None:
        """Records consumed per busy second; None if the replica was never busy."""
        return _ratio(self.records_in, self.busy_seconds)

    @property
    def true_output_rate(self) -> float | None:
        """Records produced per busy second; None if the replica was never busy."""
        return _ratio(self.records_out, self.busy_seconds)

    @property
    def observed_input_rate(self) -> float:
        """Records consumed per second of the window."""
        return self.records_in / self.window_seconds

    @property
    def observed_output_rate(self) -> float:
        """Records produced per second of the window."""
        return self.records_out / self.window_seconds

    @property
    def selectivity(self) -> float | None:
        """Records produced per record consumed; None if nothing was consumed."""
        return _ratio(self.records_out, self.records_in)

    @property
    def utilization(self) -> float:
        """Fraction of the window spent busy."""
        return self.busy_seconds / self.window_seconds

    @property
    def backpressure_ratio(self) -> float:
        """Fraction of the window spent blocked by backpressure."""
        return self.blocked_seconds / self.window_seconds


@dataclass(frozen=True)
class VertexStats:
    """The stats of every running replica of one logical vertex, for one window.

    Attributes:
        vertex: The vertex's name.
        replicas: One entry per running replica, by replica index; its length is
            the vertex's current parallelism (at least 1).
        queued: Messages on their way to the vertex or waiting in its replicas at the
            end of the window (progress tracking's counts at its inputs).
        frontier_lag: Epochs its frontier trails the latest epoch any vertex's has
            reached (None: unknown, or nothing more can arrive at it).
    """

    vertex: str
    replicas: tuple[ReplicaStats, ...]
    queued: int = 0
    frontier_lag: int | None = None

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError(f"vertex {self.vertex!r} has no replica stats")

    @property
    def parallelism(self) -> int:
        """The number of running replicas."""
        return len(self.replicas)

    @property
    def records_in(self) -> int:
        """Records consumed by all replicas."""
        return sum(r.records_in for r in self.replicas)

    @property
    def records_out(self) -> int:
        """Records produced by all replicas."""
        return sum(r.records_out for r in self.replicas)

    @property
    def window_seconds(self) -> float:
        """The longest replica window (a replica started mid-window reports a shorter one)."""
        return max(r.window_seconds for r in self.replicas)

    @property
    def observed_input_rate(self) -> float:
        """Records consumed by all replicas per second of the window."""
        return self.records_in / self.window_seconds

    @property
    def observed_output_rate(self) -> float:
        """Records produced by all replicas per second of the window.

        This is the thesis's "throughput" (listing 7.1, lines 13-25: the items
        produced by every process of the stage, divided by the window's duration).
        """
        return self.records_out / self.window_seconds

    @property
    def selectivity(self) -> float | None:
        """Records produced per record consumed, over all replicas; None if nothing was consumed."""
        return _ratio(self.records_out, self.records_in)

    @property
    def utilization(self) -> float:
        """The mean fraction of the window its replicas were busy."""
        return sum(r.utilization for r in self.replicas) / len(self.replicas)

    @property
    def true_rate_per_replica(self) -> float | None:
        """Mean true processing rate of the replicas that were busy (DS2's aggregate / p).

        None if no replica was busy, so nothing is known about the vertex's capacity.
        """
        rates = [rate for r in self.replicas if (rate := r.true_processing_rate) is not None]
        return sum(rates) / len(rates) if rates else None


@dataclass(frozen=True)
class JobStats:
    """A snapshot of a whole job: vertex stats, the edges between vertices, source rates.

    Attributes:
        vertices: The stats of every vertex that reported, in any order; names unique.
        edges: (upstream, downstream) pairs of vertex or source names. Every
            record a vertex produces reaches each of its downstream vertices.
        source_rates: The rate (records per second) each source must sustain.
            Sources are graph nodes whose output rate is given rather than
            measured; they may also appear in ``vertices``.
        taken_at: When the snapshot was taken, in seconds on the caller's clock.
        epoch_seconds: Seconds per epoch the inputs advanced by in the window (None:
            they did not advance), which turns a frontier lag into seconds.
    """

    vertices: tuple[VertexStats, ...]
    edges: tuple[tuple[str, str], ...] = ()
    source_rates: Mapping[str, float] = field(default_factory=dict)
    taken_at: float = 0.0
    epoch_seconds: float | None = None

    def __post_init__(self) -> None:
        names = [v.vertex for v in self.vertices]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"vertices reported twice: {duplicates}")
        object.__setattr__(self, "source_rates", MappingProxyType(dict(self.source_rates)))
        for source, rate in self.source_rates.items():
            if rate < 0:
                raise ValueError(f"source {source!r} has a negative rate {rate}")
        unknown = sorted({n for edge in self.edges for n in edge} - set(self.nodes))
        if unknown:
            raise GraphError(f"edges name nodes that are neither vertices nor sources: {unknown}")

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every vertex and source name, sorted."""
        return tuple(sorted({v.vertex for v in self.vertices} | set(self.source_rates)))

    def vertex(self, name: str) -> VertexStats:
        """The stats of the vertex called ``name``.

        Raises:
            KeyError: No vertex of that name reported.
        """
        for stats in self.vertices:
            if stats.vertex == name:
                return stats
        raise KeyError(f"no stats for vertex {name!r}")

    def upstream_of(self, name: str) -> tuple[str, ...]:
        """The nodes with an edge into ``name``, in edge order."""
        return tuple(up for up, down in self.edges if down == name)

    def topological_order(self) -> tuple[str, ...]:
        """All nodes, every node after all of its upstream nodes (ties by name).

        Raises:
            GraphError: The edges form a cycle (a loop), naming the nodes on or after it.
        """
        indegree = {n: 0 for n in self.nodes}
        for _, down in self.edges:
            indegree[down] += 1
        ready = [n for n, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            node = heapq.heappop(ready)
            order.append(node)
            for up, down in self.edges:
                if up == node:
                    indegree[down] -= 1
                    if indegree[down] == 0:
                        heapq.heappush(ready, down)
        if len(order) < len(indegree):
            cyclic = sorted(set(indegree) - set(order))
            raise GraphError(f"the job graph has a cycle through or after {cyclic}; rates need a DAG")
        return tuple(order)
