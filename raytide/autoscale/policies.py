"""Scaling policies: pure functions of a frozen JobStats snapshot that return ScalingDecision values.

Every policy has one method, ``decide(job) -> tuple[ScalingDecision, ...]``,
one decision per vertex it has an opinion on, each carrying its reason in
words. Policies do not apply cooldown, hysteresis or the CPU cap, and do not
combine with each other: those are separate steps in ``controls.py``, where
several policies combine by the rule "the largest target per vertex wins".

- ``ThresholdPolicy``: the MPR thesis's listing 7.2 (chapter 7.1), one vertex
  at a time, against a throughput goal, by steps of 4, 2 or 1 replicas.
- ``RatePolicy``: DS2 (Kalavri et al., OSDI 2018), every vertex at once from
  its true processing rate and the rate its input must sustain.
- ``FilePolicy``: the thesis's external interface (section 5.5): raytide writes
  ``stats.json`` (listing 5.11) and reads ``parameters.json`` (listing 5.12),
  so an algorithm in any language can decide. The JSON parsing and
  serialising are pure functions beside it; only ``FilePolicy`` touches files.

Example:
    >>> from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats
    >>> replica = ReplicaStats(records_in=40, records_out=40, busy_seconds=0.4, window_seconds=1.0)
    >>> job = JobStats((VertexStats("map", (replica,)),), edges=(("src", "map"),), source_rates={"src": 250.0})
    >>> ThresholdPolicy({"map": 100.0}).decide(job)[0].reason
    'throughput 40.0 < 0.5 x goal 100.0: scale up by 4'
    >>> RatePolicy().decide(job)[0].target
    3
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from raytide.autoscale.stats import JobStats, VertexStats
from raytide.errors import RescaleError

__all__ = [
    "FilePolicy",
    "RatePolicy",
    "ScalingDecision",
    "ScalingPolicy",
    "ThresholdPolicy",
    "append_stats_sample",
    "decisions_from_parameters",
    "format_parameters",
    "format_stats_document",
    "parse_parameters",
    "parse_stats_document",
    "rate_decision",
    "target_input_rates",
    "threshold_decision",
]


@dataclass(frozen=True)
class ScalingDecision:
    """A proposal to run ``target`` replicas of ``vertex`` instead of ``current``, and why.

    A decision with ``target == current`` is a decision to keep the vertex as it
    is; it still says why, so that the autoscaler's log explains every round.

    Attributes:
        vertex: The vertex's name.
        current: Replicas running when the stats were taken (>= 1).
        target: Replicas proposed (>= 1).
        reason: Why, in words (tests assert on it; the autoscaler logs it).
    """

    vertex: str
    current: int
    target: int
    reason: str

    def __post_init__(self) -> None:
        if self.current < 1 or self.target < 1:
            raise RescaleError(
                f"vertex {self.vertex!r}: parallelism must be >= 1, got current={self.current} target={self.target}"
            )

    @classmethod
    def keep(cls, vertex: str, current: int, reason: str) -> ScalingDecision:
        """A decision to leave ``vertex`` at ``current`` replicas."""
        return cls(vertex, current, current, reason)

    @property
    def delta(self) -> int:
        """Replicas to add (positive) or remove (negative)."""
        return self.target - self.current

    @property
    def changes(self) -> bool:
        """Whether the decision changes the parallelism."""
        return self.target != self.current

    def revised(self, target: int, reason: str) -> ScalingDecision:
        """The same decision with a new target and reason (used by the control steps)."""
        return replace(self, target=target, reason=reason)


class ScalingPolicy(Protocol):
    """Anything that turns a stats snapshot into decisions."""

    def decide(self, job: JobStats) -> tuple[ScalingDecision, ...]:
        """One decision per vertex the policy has an opinion on."""
        ...


def format_number(value: float) -> str:
    """A rate or a duration in a decision's reason: one decimal."""
    return f"{value:.1f}"


# ---------------------------------------------------------------- threshold (thesis listing 7.2)

# Listing 7.2, lines 5-7: with ratio = throughputApplication / throughputGoal,
# "if (ratio > 2) factor = 4; else if (ratio > 1.5) factor = 2; else if (ratio > 1.25) factor = 1".
_SCALE_DOWN_STEPS = ((2.0, 4), (1.5, 2), (1.25, 1))
# Listing 7.2, lines 12-14: "if (ratio < 0.5) factor = 4; else if (ratio < 0.75) factor = 2;
# else if (ratio < 0.9375) factor = 1".
_SCALE_UP_STEPS = ((0.5, 4), (0.75, 2), (0.9375, 1))


def _scale_down_step(throughput: float, goal: float) -> tuple[int, str]:
    """Listing 7.2 lines 5-8: the number of replicas to remove and the clause saying why."""
    ratio = throughput / goal
    for bound, factor in _SCALE_DOWN_STEPS:
        if ratio > bound:
            return factor, f"throughput {format_number(throughput)} > {bound:g} x goal {format_number(goal)}: scale down by {factor}"
    return 0, f"throughput {format_number(throughput)} <= 1.25 x goal {format_number(goal)}"


def _scale_up_step(throughput: float, goal: float) -> tuple[int, str]:
    """Listing 7.2 lines 12-15: the number of replicas to add and the clause saying why."""
    ratio = throughput / goal
    for bound, factor in _SCALE_UP_STEPS:
        if ratio < bound:
            return factor, f"throughput {format_number(throughput)} < {bound:g} x goal {format_number(goal)}: scale up by {factor}"
    return 0, f"throughput {format_number(throughput)} >= 0.9375 x goal {format_number(goal)}"


def threshold_decision(stats: VertexStats, goal: float, process_limit: int = 48) -> ScalingDecision:
    """The thesis's listing 7.2 for one vertex, transcribed operator for operator.

    "throughput" is the vertex's observed output rate: records produced by all
    its replicas per second of the window (listing 7.1, lines 13-25, sums
    ``ItemsProduced`` over every process of the stage and divides by the
    duration). With ``ratio = throughput / goal``:

    - throughput > goal (line 3): remove 4 if ratio > 2, 2 if ratio > 1.5,
      1 if ratio > 1.25, else 0 (lines 5-8); applied only if
      ``current > factor`` (line 9), otherwise nothing changes;
    - throughput < goal (line 10): add 4 if ratio < 0.5, 2 if ratio < 0.75,
      1 if ratio < 0.9375, else 0 (lines 12-15); applied only if
      ``current + factor < process_limit`` (line 16, where the thesis uses 48,
      its cluster's cores), otherwise nothing changes;
    - throughput == goal: nothing changes.

    So the guards do not clamp a step, they refuse it: with 46 replicas and a
    step of 4 the listing keeps 46. Targets stay within
    [1, process_limit - 1] when the current parallelism does.

    Args:
        stats: The vertex's stats for the last window.
        goal: The throughput goal in records produced per second, > 0.
        process_limit: The exclusive upper bound of line 16.

    Returns:
        The decision, with the listing's comparison in its reason.
    """
    if goal <= 0:
        raise ValueError(f"vertex {stats.vertex!r}: the throughput goal must be > 0, got {goal}")
    throughput, current = stats.observed_output_rate, stats.parallelism
    if throughput > goal:
        factor, why = _scale_down_step(throughput, goal)
        if factor == 0:
            return ScalingDecision.keep(stats.vertex, current, f"{why}: keep {current}")
        if current > factor:
            return ScalingDecision(stats.vertex, current, current - factor, why)
        return ScalingDecision.keep(
            stats.vertex, current, f"{why} refused, {current} is not above {factor}: keep {current}"
        )
    if throughput < goal:
        factor, why = _scale_up_step(throughput, goal)
        if factor == 0:
            return ScalingDecision.keep(stats.vertex, current, f"{why}: keep {current}")
        if current + factor < process_limit:
            return ScalingDecision(stats.vertex, current, current + factor, why)
        return ScalingDecision.keep(
            stats.vertex,
            current,
            f"{why} refused, {current} + {factor} is not below the limit {process_limit}: keep {current}",
        )
    return ScalingDecision.keep(
        stats.vertex, current, f"throughput {format_number(throughput)} equals goal {format_number(goal)}: keep {current}"
    )


@dataclass(frozen=True)
class ThresholdPolicy:
    """The thesis's threshold table (listing 7.2) applied to each vertex that has a goal.

    Attributes:
        goals: Throughput goal per vertex, in records produced per second.
        process_limit: The exclusive bound of listing 7.2's line 16 (48 there).
    """

    goals: Mapping[str, float]
    process_limit: int = 48

    def __post_init__(self) -> None:
        object.__setattr__(self, "goals", MappingProxyType(dict(self.goals)))

    def decide(self, job: JobStats) -> tuple[ScalingDecision, ...]:
        """One decision per vertex with a goal, in the goals' order.

        Raises:
            RescaleError: A vertex with a goal has no stats in ``job``.
        """
        reported = {v.vertex for v in job.vertices}
        missing = [name for name in self.goals if name not in reported]
        if missing:
            raise RescaleError(f"no stats for vertices with a throughput goal: {missing}")
        return tuple(threshold_decision(job.vertex(n), g, self.process_limit) for n, g in self.goals.items())


# ---------------------------------------------------------------- rate (DS2)

_CEIL_TOLERANCE = 1e-9


def _ceil(value: float) -> int:
    """Ceiling that ignores float noise: 4.0000000001 rounds to 4, not 5."""
    return math.ceil(value - _CEIL_TOLERANCE * max(1.0, abs(value)))


def _sum_known(rates: list[float | None]) -> float | None:
    """The sum of ``rates``, or None if there are none or one of them is unknown."""
    known = [r for r in rates if r is not None]
    return sum(known) if rates and len(known) == len(rates) else None


def target_input_rates(job: JobStats) -> dict[str, float | None]:
    """The rate (records per second) every non-source vertex must consume so the sources' rates are sustained.

    DS2's propagation, in topological order: a source's target output rate is
    its given rate; a vertex's target input rate is the sum of its upstream
    nodes' target output rates, and its target output rate is that times its
    observed selectivity. A rate is None (unknown) when the vertex, or a vertex
    upstream of it, consumed nothing (selectivity unknown), or when it has no
    upstream nodes and is not a source.

    Raises:
        GraphError: The job graph has a cycle.
    """
    output: dict[str, float | None] = {}
    needed: dict[str, float | None] = {}
    for node in job.topological_order():
        if node in job.source_rates:
            output[node] = job.source_rates[node]
            continue
        rate = _sum_known([output[up] for up in job.upstream_of(node)])
        selectivity = job.vertex(node).selectivity
        needed[node] = rate
        output[node] = rate * selectivity if rate is not None and selectivity is not None else None
    return needed


def rate_decision(stats: VertexStats, needed_rate: float | None, max_parallelism: int | None = None) -> ScalingDecision:
    """DS2's parallelism for one vertex: ceil(needed input rate / true processing rate per replica).

    Args:
        stats: The vertex's stats; the true rate per replica is the mean of its
            busy replicas' records consumed per busy second.
        needed_rate: The input rate the vertex must sustain (``target_input_rates``),
            None if unknown.
        max_parallelism: Optional inclusive upper bound on the target.

    Returns:
        The decision; the target is at least 1. Without a known needed rate or
        true rate, the decision keeps the current parallelism.
    """
    current = stats.parallelism
    if needed_rate is None:
        return ScalingDecision.keep(stats.vertex, current, f"needed input rate unknown: keep {current}")
    true_rate = stats.true_rate_per_replica
    if true_rate is None:
        return ScalingDecision.keep(stats.vertex, current, f"no busy time observed, true rate unknown: keep {current}")
    quotient = needed_rate / true_rate
    wanted = _ceil(quotient)
    reason = (
        f"needs {format_number(needed_rate)} records/s in at a true rate of {format_number(true_rate)} per replica: "
        f"ceil({quotient:.2f}) = {wanted}"
    )
    if wanted < 1:
        wanted, reason = 1, f"{reason}, at least 1"
    if max_parallelism is not None and wanted > max_parallelism:
        wanted, reason = max_parallelism, f"{reason}, capped at {max_parallelism}"
    return ScalingDecision(stats.vertex, current, wanted, reason)


@dataclass(frozen=True)
class RatePolicy:
    """DS2: the parallelism of every vertex at once, from true rates and source rates.

    Attributes:
        max_parallelism: Optional inclusive upper bound on every target.
    """

    max_parallelism: int | None = None

    def decide(self, job: JobStats) -> tuple[ScalingDecision, ...]:
        """One decision per non-source vertex, in topological order.

        Raises:
            GraphError: The job graph has a cycle (DS2 needs a DAG).
        """
        needed = target_input_rates(job)
        return tuple(rate_decision(job.vertex(n), needed[n], self.max_parallelism) for n in needed)


# ---------------------------------------------------------------- file interface (thesis section 5.5)


def parse_parameters(text: str) -> dict[str, int]:
    """Parse a ``parameters.json`` (listing 5.12): ``{"vertex": replicas, ...}``.

    Raises:
        RescaleError: The text is not a JSON object of positive integers, naming the offending key.
    """
    document = _json_object(text, "parameters.json")
    for name, value in document.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RescaleError(f"parameters.json: {name!r} must be a positive integer, got {value!r}")
    return dict(document)


def format_parameters(targets: Mapping[str, int]) -> str:
    """Serialise parallelism per vertex as a ``parameters.json`` (listing 5.12)."""
    return json.dumps(dict(targets), indent=2) + "\n"


def decisions_from_parameters(job: JobStats, targets: Mapping[str, int]) -> tuple[ScalingDecision, ...]:
    """Decisions for every reported vertex named in ``targets``, in the job's vertex order.

    Names of sources without stats are ignored (listing 5.12 names the source
    and sink stages too); any other name unknown to the job is an error.

    Raises:
        RescaleError: ``targets`` names a node the job does not have.
    """
    unknown = sorted(set(targets) - set(job.nodes))
    if unknown:
        raise RescaleError(f"parameters.json names vertices the job does not have: {unknown}")
    return tuple(
        ScalingDecision(v.vertex, v.parallelism, n, f"parameters.json asks for {n} replicas")
        for v in job.vertices
        if (n := targets.get(v.vertex)) is not None
    )


def parse_stats_document(text: str) -> dict[str, Any]:
    """Parse a ``stats.json`` written by ``format_stats_document``.

    Raises:
        RescaleError: The text is not a JSON object.
    """
    return _json_object(text, "stats.json")


def _json_object(text: str, name: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object; a clear :class:`RescaleError` naming file ``name`` otherwise."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise RescaleError(f"{name} is not valid JSON: {error}") from error
    if not isinstance(document, dict):
        raise RescaleError(f"{name} must be a JSON object, got {type(document).__name__}")
    return document


def _replica_sample(stats: VertexStats) -> dict[str, dict[str, float]]:
    """Listing 5.11's per-process entry, keyed ``Replica<i>`` where MPR writes ``Compute<i>``."""
    return {
        f"Replica{index}": {
            "ItemsConsumed": replica.records_in,
            "ItemsProduced": replica.records_out,
            "averageItemsProduced": replica.observed_output_rate,
        }
        for index, replica in enumerate(stats.replicas)
    }


def append_stats_sample(document: Mapping[str, Any], job: JobStats, max_samples: int = 1000) -> dict[str, Any]:
    """A new stats document: ``document`` plus one sample of ``job``, in listing 5.11's shape.

    Shape: ``{vertex: {timestamp_ms: {replica: {"ItemsConsumed", "ItemsProduced",
    "averageItemsProduced"}}}}``, with the timestamp ``job.taken_at`` in
    milliseconds and ``averageItemsProduced`` the records produced per second
    of the window. Timestamps stay in increasing order (listing 7.1 iterates
    them in file order) and only the last ``max_samples`` per vertex are kept.

    Raises:
        ValueError: The sample is not later than a vertex's last sample.
    """
    timestamp = round(job.taken_at * 1000)
    result = {name: dict(samples) for name, samples in document.items()}
    for stats in job.vertices:
        samples = result.setdefault(stats.vertex, {})
        last = max((int(t) for t in samples), default=None)
        if last is not None and timestamp <= last:
            raise ValueError(f"stats sample at {timestamp} ms is not after {last} ms for vertex {stats.vertex!r}")
        samples[str(timestamp)] = _replica_sample(stats)
        kept = sorted(samples, key=int)[-max_samples:]
        result[stats.vertex] = {t: samples[t] for t in kept}
    return result


def format_stats_document(document: Mapping[str, Any]) -> str:
    """Serialise a stats document as ``stats.json`` text."""
    return json.dumps(document, indent=2) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a concurrent reader sees the old or the new file, never half."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


@dataclass(frozen=True)
class FilePolicy:
    """The thesis's file interface: write ``stats.json``, follow ``parameters.json``.

    On every ``decide`` it appends the snapshot to ``stats_path`` (listing 5.11,
    one document for all vertices, written atomically), then reads
    ``parameters_path`` (listing 5.12). If that file does not exist yet it is
    created with the current parallelism, so an external algorithm (such as
    listing 7.2) has values to update. A file that cannot be parsed (an
    external writer may be half-way through) or names unknown vertices yields
    decisions that keep every vertex, with the error as the reason.

    ``job.taken_at`` must be later at every call (use seconds since the Unix
    epoch, as MPR does, so that samples of a restarted job still increase).

    Attributes:
        parameters_path: The ``parameters.json`` an external algorithm writes.
        stats_path: The ``stats.json`` raytide writes.
        max_samples: Samples kept per vertex in ``stats.json``.
    """

    parameters_path: Path
    stats_path: Path
    max_samples: int = 1000

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters_path", Path(self.parameters_path))
        object.__setattr__(self, "stats_path", Path(self.stats_path))

    def decide(self, job: JobStats) -> tuple[ScalingDecision, ...]:
        """Write the stats sample, then turn ``parameters.json`` into decisions."""
        self.write_stats(job)
        if not self.parameters_path.exists():
            current = {v.vertex: v.parallelism for v in job.vertices}
            _write_atomically(self.parameters_path, format_parameters(current))
            return self._keep(job, f"created {self.parameters_path.name} with the current parallelism")
        try:
            return decisions_from_parameters(job, parse_parameters(self.parameters_path.read_text()))
        except RescaleError as error:
            return self._keep(job, f"{self.parameters_path.name} ignored: {error}")

    def write_stats(self, job: JobStats) -> None:
        """Append one sample of ``job`` to ``stats_path``."""
        existing = parse_stats_document(self.stats_path.read_text()) if self.stats_path.exists() else {}
        document = append_stats_sample(existing, job, self.max_samples)
        _write_atomically(self.stats_path, format_stats_document(document))

    @staticmethod
    def _keep(job: JobStats, why: str) -> tuple[ScalingDecision, ...]:
        return tuple(
            ScalingDecision.keep(v.vertex, v.parallelism, f"{why}: keep {v.parallelism}") for v in job.vertices
        )
