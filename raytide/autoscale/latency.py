"""A latency goal from progress tracking: find the bottleneck vertex, loops included, and widen it.

Progress tracking knows, per vertex, the earliest epoch that may still arrive there (its
frontier) and the messages queued for it. An epoch's results are out once the output's
frontier has passed it, so an output whose frontier trails the inputs by ``lag`` epochs,
while the inputs advance one epoch every ``s`` seconds, hands out results about
``lag x s`` seconds after their input: the latency. The vertex that holds it back is the
*bottleneck*: among the vertices with work queued, the busiest (the highest share of the
window its replicas were busy; ties go to the one with more work queued). A vertex inside
a loop is found the same way: its frontier is the epoch of its earliest pending round.

The rule, one vertex per round (the cooldown paces the rounds):

- latency above the goal: the bottleneck grows in proportion,
  ``ceil(p x latency / goal)`` replicas, at least one more and at most twice as many;
- latency under half the goal: the least busy vertex with more than one replica and
  busy less than a third of the window gives one back;
- otherwise every vertex keeps its replicas.

>>> from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats
>>> busy, idle = ReplicaStats(10, 10, 1.9, 2.0), ReplicaStats(10, 10, 0.2, 2.0)
>>> job = JobStats((VertexStats("parse", (idle,), 0, 0), VertexStats("score", (busy,), 40, 6),
...                 VertexStats("out", (idle,), 0, 6)), epoch_seconds=0.5)
>>> [(d.vertex, d.target) for d in LatencyPolicy(1.0).decide(job) if d.changes]
[('score', 2)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from raytide.autoscale.policies import ScalingDecision, format_number
from raytide.autoscale.stats import JobStats, VertexStats


def latency_seconds(job: JobStats) -> float | None:
    """How long after its input an epoch's results come out now: the largest frontier lag
    times the seconds per epoch (None if the inputs did not advance in the window)."""
    lags = [v.frontier_lag for v in job.vertices if v.frontier_lag is not None]
    if job.epoch_seconds is None or not lags:
        return None
    return max(lags) * job.epoch_seconds


def bottleneck(job: JobStats) -> VertexStats | None:
    """The busiest vertex with work queued (ties: the most queued); None if nothing is queued."""
    waiting = [v for v in job.vertices if v.queued > 0]
    return max(waiting, key=lambda v: (v.utilization, v.queued), default=None)


@dataclass(frozen=True)
class LatencyPolicy:
    """Widen the bottleneck until results come within ``goal`` seconds of their input.

    Attributes:
        goal: the latency goal, in seconds.
    """

    goal: float

    def decide(self, job: JobStats) -> tuple[ScalingDecision, ...]:
        """A decision per vertex: the bottleneck grows, an idle one shrinks, or all keep."""
        latency = latency_seconds(job)
        keep = {v.vertex: ScalingDecision.keep(v.vertex, v.parallelism, "") for v in job.vertices}
        if latency is None:
            why = "latency unknown (the inputs did not advance)"
        elif latency > self.goal and (slow := bottleneck(job)) is not None:
            p = slow.parallelism
            target = min(2 * p, max(p + 1, math.ceil(p * latency / self.goal)))
            keep[slow.vertex] = ScalingDecision(
                slow.vertex, p, target,
                f"latency {format_number(latency)} s > goal {format_number(self.goal)} s; bottleneck {slow.vertex!r} (busy "
                f"{slow.utilization:.0%}, {slow.queued} queued): ceil({p} x {latency / self.goal:.2f}) = {target}")
            why = f"latency {format_number(latency)} s > goal; {slow.vertex!r} is the bottleneck"
        elif latency < self.goal / 2 and (idle := self._idle(job)) is not None:
            keep[idle.vertex] = ScalingDecision(
                idle.vertex, idle.parallelism, idle.parallelism - 1,
                f"latency {format_number(latency)} s < half the goal {format_number(self.goal)} s and {idle.vertex!r} busy "
                f"{idle.utilization:.0%}: one replica fewer")
            why = f"latency {format_number(latency)} s < half the goal; {idle.vertex!r} gives one back"
        else:
            why = f"latency {format_number(latency)} s within the goal {format_number(self.goal)} s"
        return tuple(d if d.reason else d.revised(d.target, f"{why}: keep {d.current}") for d in keep.values())

    @staticmethod
    def _idle(job: JobStats) -> VertexStats | None:
        """The least busy vertex that has replicas to spare (busy under a third of the window)."""
        spare = [v for v in job.vertices if v.parallelism > 1 and v.utilization < 1 / 3]
        return min(spare, key=lambda v: v.utilization, default=None)
