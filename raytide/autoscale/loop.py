"""One round of the autoscaler's MAPE loop, pure: statistics in, decisions and changes out.

The autoscaler actor (:mod:`raytide.actors.autoscaler_actor`) monitors
(:mod:`raytide.autoscale.monitor`) and the driver executes; between them each round
*analyses and plans* here: the policy's decisions for the vertices it may rescale, then
the control steps of :mod:`raytide.autoscale.controls` in their order (bounds, hysteresis,
persistence, cooldown, the free CPUs). Vertices that keep one width
(:func:`raytide.rescale.widths.group_leaders`) are one decision from the start, their
leader's, with the largest target any of them was given (as
:func:`~raytide.autoscale.controls.combine` decides): the controls then count each group's
replicas once.

>>> from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats
>>> busy = ReplicaStats(records_in=100, records_out=100, busy_seconds=1.0, window_seconds=1.0)
>>> stats = JobStats((VertexStats("rows", (busy,)),), (("numbers", "rows"),), {"numbers": 250.0})
>>> loop = ControlLoop(Autoscale(policy="rate", rate=250.0, max_parallelism=8), scaled={"rows"},
...                    leaders={"rows": "rows"})
>>> decisions, changes = loop.round(stats, now=10.0, free_cpus=4)
>>> changes, decisions[0].reason
({'rows': 3}, 'needs 250.0 records/s in at a true rate of 100.0 per replica: ceil(2.50) = 3')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from raytide.autoscale.config import Autoscale
from raytide.autoscale.controls import (
    Streak,
    apply_cooldown,
    cap_by_free_cpus,
    clamp,
    ignore_small_changes,
    record_changes,
    require_persistence,
)
from raytide.autoscale.latency import LatencyPolicy
from raytide.autoscale.policies import FilePolicy, RatePolicy, ScalingDecision, ScalingPolicy, ThresholdPolicy
from raytide.autoscale.stats import JobStats


def make_policy(config: Autoscale, scaled: Set[str], max_parallelism: int) -> ScalingPolicy:
    """The policy ``config`` names, for the vertices in ``scaled``."""
    if config.policy == "rate":
        return RatePolicy(max_parallelism)
    if config.policy == "threshold":
        goal = config.throughput
        assert goal is not None
        # the table's own guard refuses a step past its limit (48, the thesis's cores); the
        # clamp to max_parallelism comes after it and trims the step instead
        return ThresholdPolicy(dict(goal) if isinstance(goal, Mapping) else dict.fromkeys(sorted(scaled), goal),
                               process_limit=max(48, max_parallelism + 1))
    if config.policy == "file":
        assert config.parameters is not None and config.stats is not None
        return FilePolicy(Path(config.parameters), Path(config.stats))
    assert config.latency is not None
    return LatencyPolicy(config.latency)


@dataclass
class ControlLoop:
    """The analysis and planning of every round, with what it remembers between rounds.

    Attributes:
        config: the goal and the limits.
        scaled: the vertices the autoscaler may rescale.
        leaders: per vertex, the leader of those that keep its width.
        max_parallelism: the most replicas of a vertex (the config's, else the cluster's CPUs).
    """

    config: Autoscale
    scaled: Set[str]
    leaders: Mapping[str, str]
    max_parallelism: int = 8
    streaks: dict[str, Streak] = field(default_factory=dict)
    last_changed: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.policy = make_policy(self.config, self.scaled, self.max_parallelism)
        self.shortfall = 0

    def round(self, stats: JobStats, now: float, free_cpus: float) -> tuple[tuple[ScalingDecision, ...], dict[str, int]]:
        """This round's decisions (every step's reason in them) and the changes to make:
        ``{leader: replicas}``, one per group of vertices that keep one width."""
        decisions = self.per_group(d for d in self.policy.decide(stats) if d.vertex in self.scaled)
        decisions = clamp(decisions, self.config.min_parallelism, self.max_parallelism)
        decisions = ignore_small_changes(decisions, min_step=1)
        decisions, self.streaks = require_persistence(decisions, self.streaks, self.config.rounds)
        decisions = apply_cooldown(decisions, self.last_changed, now, self.config.cooldown)
        wanted = sum(max(0, d.delta) for d in decisions)
        decisions = cap_by_free_cpus(decisions, free_cpus)
        #: Replicas the free CPUs could not hold this round (what to ask the cluster for).
        self.shortfall = wanted - sum(max(0, d.delta) for d in decisions)
        self.last_changed = record_changes(self.last_changed, decisions, now)
        return decisions, {d.vertex: d.target for d in decisions if d.changes}

    def per_group(self, decisions: Iterable[ScalingDecision]) -> tuple[ScalingDecision, ...]:
        """One decision per group of vertices that keep one width, named after its leader:
        the largest target any member was given, and why."""
        chosen: dict[str, ScalingDecision] = {}
        for d in decisions:
            leader = self.leaders.get(d.vertex, d.vertex)
            if d.vertex != leader:
                d = replace(d, vertex=leader, reason=f"{d.reason} (for {d.vertex!r}, which moves with {leader!r})")
            if leader not in chosen or d.target > chosen[leader].target:
                chosen[leader] = d
        return tuple(chosen.values())


#: Why a round's changes were not made when the job finished with them still to make.
FINISHED_FIRST = "the job finished before the driver made it"


def settled(rounds: list[dict[str, Any]], job_finished: bool) -> list[dict[str, Any]]:
    """A copy of ``rounds`` as the user reads it. A round with changes and no ``rescale`` yet
    is waiting for the driver; once the job has finished it never will be made, and says so
    (``{"not_made": ...}``) instead of reading as made."""
    copies = [dict(entry) for entry in rounds]
    if job_finished:
        for entry in copies:
            if entry["changes"] and entry["rescale"] is None:
                entry["rescale"] = {"not_made": FINISHED_FIRST}
    return copies
