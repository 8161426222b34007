"""Control steps between the policies and actuation: combine, clamp, hysteresis, cooldown, CPU cap.

Every step is a pure function from decisions (plus state and time passed in
as values; nothing here reads a clock) to decisions. A step that vetoes or
trims a change keeps the decision, revises its target and appends why to its
reason, so that the autoscaler's log explains every round.

The autoscaler applies them in this order each round:

1. ``combine``: several policies' decisions -> one per vertex. Rule: the
   largest target wins (missing capacity costs more than an idle replica);
   on a tie the earlier policy's decision wins.
2. ``clamp``: targets into ``[minimum, maximum]``.
3. ``ignore_small_changes``: hysteresis by size; a change of fewer than
   ``min_step`` replicas, or of less than ``min_fraction`` of the current
   parallelism, is ignored.
4. ``require_persistence``: hysteresis in time; a change passes only once
   the same direction has been proposed in ``rounds`` consecutive rounds.
5. ``apply_cooldown``: no change for a vertex within ``cooldown_seconds`` of
   its last change.
6. ``cap_by_free_cpus``: the replicas added in total never exceed the free
   CPUs; a short budget goes first to the vertex furthest behind its target.
   It comes last so that the budget goes only to changes that survive.

Then the autoscaler actuates the changes and calls ``record_changes``.

Example:
    >>> from raytide.autoscale.policies import ScalingDecision
    >>> rate = [ScalingDecision("map", 2, 6, "rate"), ScalingDecision("sink", 2, 1, "rate")]
    >>> threshold = [ScalingDecision("map", 2, 4, "threshold")]
    >>> decisions = clamp(combine(rate, threshold), maximum=8)
    >>> decisions = ignore_small_changes(decisions, min_step=1)
    >>> decisions, streaks = require_persistence(decisions, {}, rounds=1)
    >>> decisions = apply_cooldown(decisions, {"sink": 95.0}, now=100.0, cooldown_seconds=30.0)
    >>> decisions = cap_by_free_cpus(decisions, free_cpus=3)
    >>> [(d.vertex, d.target) for d in decisions]
    [('map', 5), ('sink', 2)]
    >>> decisions[0].reason
    'rate (largest of targets 6, 4); capped by free CPUs: 3 of 4 more replicas (room for 3, 4 requested in all)'
    >>> record_changes({"sink": 95.0}, decisions, now=100.0)
    {'sink': 95.0, 'map': 100.0}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from raytide.autoscale.policies import ScalingDecision

__all__ = [
    "Streak",
    "apply_cooldown",
    "cap_by_free_cpus",
    "clamp",
    "combine",
    "ignore_small_changes",
    "record_changes",
    "require_persistence",
]


def _keep(decision: ScalingDecision, why: str) -> ScalingDecision:
    """``decision`` revised to keep the current parallelism, saying why."""
    return decision.revised(decision.current, f"{decision.reason}; {why}: keep {decision.current}")


def combine(*decision_sets: Iterable[ScalingDecision]) -> tuple[ScalingDecision, ...]:
    """One decision per vertex from several policies: the largest target wins.

    Ties go to the earlier policy's decision. Vertices come out in the order
    they first appear. When several policies spoke about a vertex, the winning
    reason lists all their targets.

    Raises:
        ValueError: Two decisions for one vertex disagree on its current parallelism.
    """
    by_vertex: dict[str, list[ScalingDecision]] = {}
    for decisions in decision_sets:
        for decision in decisions:
            by_vertex.setdefault(decision.vertex, []).append(decision)
    return tuple(_combine_vertex(candidates) for candidates in by_vertex.values())


def _combine_vertex(candidates: list[ScalingDecision]) -> ScalingDecision:
    currents = {d.current for d in candidates}
    if len(currents) > 1:
        vertex = candidates[0].vertex
        raise ValueError(f"vertex {vertex!r}: decisions disagree on current parallelism {sorted(currents)}")
    winner = max(candidates, key=lambda d: d.target)  # max() returns the first of equal maxima
    if len(candidates) == 1:
        return winner
    targets = ", ".join(str(d.target) for d in candidates)
    return winner.revised(winner.target, f"{winner.reason} (largest of targets {targets})")


def clamp(
    decisions: Iterable[ScalingDecision], minimum: int = 1, maximum: int | None = None
) -> tuple[ScalingDecision, ...]:
    """Targets limited to ``[minimum, maximum]`` (no upper limit if ``maximum`` is None)."""
    upper = math.inf if maximum is None else maximum
    result = []
    for d in decisions:
        target = int(min(max(d.target, minimum), upper))
        result.append(d if target == d.target else d.revised(target, f"{d.reason}; clamped to {target}"))
    return tuple(result)


def ignore_small_changes(
    decisions: Iterable[ScalingDecision], min_step: int = 1, min_fraction: float = 0.0
) -> tuple[ScalingDecision, ...]:
    """Hysteresis by size: keep a change only if it is at least ``min_step`` replicas and ``min_fraction`` x current."""
    result = []
    for d in decisions:
        threshold = max(min_step, min_fraction * d.current)
        if d.changes and abs(d.delta) < threshold:
            d = _keep(d, f"change of {d.delta:+d} is smaller than {threshold:g}")
        result.append(d)
    return tuple(result)


@dataclass(frozen=True)
class Streak:
    """How many consecutive rounds a vertex's proposals went in one direction.

    Attributes:
        direction: +1 (up), -1 (down) or 0 (keep).
        rounds: Consecutive rounds with that direction, >= 1.
    """

    direction: int
    rounds: int


def _direction(decision: ScalingDecision) -> int:
    return (decision.delta > 0) - (decision.delta < 0)


def require_persistence(
    decisions: Iterable[ScalingDecision], streaks: Mapping[str, Streak], rounds: int
) -> tuple[tuple[ScalingDecision, ...], dict[str, Streak]]:
    """Hysteresis in time: a change passes once its direction was proposed ``rounds`` rounds in a row.

    The current round counts, so ``rounds=1`` lets every change through. A
    streak continues while the direction stays the same (also after a change
    passed, so a lasting signal keeps acting, paced by the cooldown) and
    restarts when the direction changes or a round proposes no change.

    Args:
        decisions: This round's decisions.
        streaks: The streaks returned by the previous round ({} at first).
        rounds: Consecutive rounds required, >= 1.

    Returns:
        The decisions, with changes whose streak is too short kept back, and the new streaks.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    result, new_streaks = [], {}
    for d in decisions:
        direction, previous = _direction(d), streaks.get(d.vertex)
        count = previous.rounds + 1 if previous is not None and previous.direction == direction else 1
        new_streaks[d.vertex] = Streak(direction, count)
        if d.changes and count < rounds:
            d = _keep(d, f"same direction {count} of {rounds} rounds")
        result.append(d)
    return tuple(result), new_streaks


def apply_cooldown(
    decisions: Iterable[ScalingDecision], last_changed: Mapping[str, float], now: float, cooldown_seconds: float
) -> tuple[ScalingDecision, ...]:
    """No change for a vertex within ``cooldown_seconds`` of its last change.

    Args:
        decisions: This round's decisions.
        last_changed: When each vertex last changed, in seconds on the caller's clock.
        now: The current time on the same clock.
        cooldown_seconds: The minimum time between two changes of one vertex.
    """
    result = []
    for d in decisions:
        last = last_changed.get(d.vertex)
        if d.changes and last is not None and now - last < cooldown_seconds:
            d = _keep(d, f"cooldown: last change {now - last:.1f} s ago < {cooldown_seconds:.1f} s")
        result.append(d)
    return tuple(result)


def record_changes(
    last_changed: Mapping[str, float], decisions: Iterable[ScalingDecision], now: float
) -> dict[str, float]:
    """``last_changed`` updated with ``now`` for every vertex whose decision changes it."""
    return {**last_changed, **{d.vertex: now for d in decisions if d.changes}}


def _grant(ups: Sequence[ScalingDecision], budget: int) -> list[int]:
    """Split ``budget`` replicas over scale-ups, one at a time to the one furthest behind relative to its target."""
    granted = [0] * len(ups)
    for _ in range(min(budget, sum(d.delta for d in ups))):
        waiting = [i for i, d in enumerate(ups) if granted[i] < d.delta]
        i = min(waiting, key=lambda j: (ups[j].current + granted[j]) / ups[j].target)  # min(): ties go to the first
        granted[i] += 1
    return granted


#: Float rounding forgiven when free CPUs are divided into replicas.
CPU_ROUNDING = 1e-9


def cap_by_free_cpus(
    decisions: Iterable[ScalingDecision], free_cpus: float, cpus_per_replica: float = 1.0
) -> tuple[ScalingDecision, ...]:
    """Scale-ups trimmed so that all replicas added together fit in the free CPUs.

    The budget is ``floor(free_cpus / cpus_per_replica)`` replicas, up to
    :data:`CPU_ROUNDING` (free CPUs summed from floats may fall just short of a whole
    replica, and must not lose it). Scale-downs
    pass unchanged and do not add to the budget: a retiring replica frees its
    CPU only after it has drained. If the scale-ups ask for more than the
    budget, replicas are granted one at a time to the vertex with the smallest
    ``(current + granted) / target`` (ties: the earlier decision): under linear
    scaling that is the vertex furthest behind what it needs, so the slowest
    vertex's share of its need is as high as the budget allows.
    """
    decisions = tuple(decisions)
    budget = max(math.floor(free_cpus / cpus_per_replica + CPU_ROUNDING), 0)
    ups = [i for i, d in enumerate(decisions) if d.delta > 0]
    requested = sum(decisions[i].delta for i in ups)
    if requested <= budget:
        return decisions
    result = list(decisions)
    for i, got in zip(ups, _grant([decisions[i] for i in ups], budget)):
        d = decisions[i]
        why = f"capped by free CPUs: {got} of {d.delta} more replicas (room for {budget}, {requested} requested in all)"
        result[i] = d.revised(d.current + got, f"{d.reason}; {why}")
    return tuple(result)
