"""The autoscaler actor: a thin shell that runs the MAPE loop of ``rt.run(..., autoscale=...)``.

Every interval its clock thread *monitors* (reads every replica's counters and progress
tracking's per-vertex view, :mod:`raytide.autoscale.monitor`), *analyses and plans*
(:class:`~raytide.autoscale.loop.ControlLoop`: the policy, then the control steps) and
records the round on its timeline. A round that wants changes leaves them for the driver,
which *executes* them (``job.rescale``) while it waits on the job and reports back::

    autoscaler ──stats()──▶ every replica, progress actor     (waits, bounded)
    driver ──next_change(timeout)──▶ autoscaler               (long poll; returns the changes)
    driver: job.rescale(changes)
    driver ──rescaled(record, plan, replicas)──▶ autoscaler    (the new configuration)

The autoscaler waits for no one who waits for it: replicas and the progress actor never
call it, and the driver's long poll returns by itself. While a rescale runs it plans no
other, and the window after one starts afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import ray

from raytide.autoscale.config import Autoscale
from raytide.autoscale.loop import ControlLoop, settled
from raytide.autoscale.monitor import Sample, free_cpus, window_stats
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.widths import group_leaders

logger = logging.getLogger(__name__)


class AutoscalerActor:
    """The MAPE loop of one job; see the module docstring."""

    def __init__(self, job: str, config: Autoscale, plan: PhysicalPlan, peers: dict[ReplicaKey, Any], progress: Any,
                 cpus_per_replica: float) -> None:
        self.job, self.config = job, config
        self.cpus_per_replica = cpus_per_replica
        self.total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        scaled = set(config.vertices) if config.vertices is not None else {
            name for name in plan.vertices if name not in plan.inputs}
        unknown = sorted(scaled - set(plan.vertices))
        if unknown:
            raise ValueError(f"Autoscale vertices {unknown} are not vertices of job {job!r}: {sorted(plan.vertices)}")
        self.loop = ControlLoop(config, scaled, group_leaders(plan),
                                config.max_parallelism or max(config.min_parallelism, int(self.total_cpus)))
        self.lock = threading.Condition()
        self.rounds: list[dict[str, Any]] = []
        self.pending: dict[str, int] | None = None
        self.rescaling = False
        self.stopped = False
        self._configure(plan, peers, progress)
        self.thread = threading.Thread(target=self._clock, name="raytide-autoscaler", daemon=True)
        self.thread.start()

    def _configure(self, plan: PhysicalPlan, peers: dict[ReplicaKey, Any], progress: Any) -> None:
        self.plan, self.peers, self.progress = plan, peers, progress
        self.previous: Sample | None = None  # the window starts afresh

    def ping(self) -> bool:
        return True

    # -- the loop ------------------------------------------------------------------------------

    def _clock(self) -> None:
        while not self.stopped:
            started = time.monotonic()
            try:
                self._round()
            except Exception as error:  # a replica restarting, say: this round is skipped
                logger.info("job %r: autoscaler round skipped: %r", self.job, error)
                with self.lock:
                    self.previous = None
            time.sleep(max(0.0, self.config.interval - (time.monotonic() - started)))

    def _round(self) -> None:
        with self.lock:
            if self.rescaling or self.pending is not None:
                return
            plan, peers, progress = self.plan, self.peers, self.progress
        sample = self._sample(plan, peers, progress)
        with self.lock:
            previous, self.previous = self.previous, sample
            if previous is None or self.rescaling or plan is not self.plan:
                return
            stats = window_stats(previous, sample, _placement(plan, [name for name in plan.vertices
                                                                     if name not in plan.inputs]),
                                 _edges(plan), self._source_rates(plan, previous, sample))
            free = self._free_cpus(previous, sample)
            decisions, changes = self.loop.round(stats, sample.taken_at, free)
            self.rounds.append({
                "at": time.time(), "window_s": sample.taken_at - previous.taken_at, "free_cpus": free,
                "parallelism": {v.vertex: v.parallelism for v in stats.vertices},
                "throughput": {v.vertex: v.observed_output_rate for v in stats.vertices},
                "records_in": {v.vertex: v.observed_input_rate for v in stats.vertices},
                "utilization": {v.vertex: v.utilization for v in stats.vertices},
                "frontier_lag": {v.vertex: v.frontier_lag for v in stats.vertices},
                "decisions": [{"vertex": d.vertex, "current": d.current, "target": d.target, "reason": d.reason}
                              for d in decisions],
                "changes": changes, "rescale": None})
            if changes:
                self.pending = changes
                self.lock.notify_all()
            if self.config.request_resources and self.loop.shortfall:
                self._ask_the_cluster_for_more(self.loop.shortfall)

    def _sample(self, plan: PhysicalPlan, peers: dict[ReplicaKey, Any], progress: Any) -> Sample:
        """Every replica's counters and the progress actor's per-vertex view, now."""
        keys = list(peers)
        timeout = max(5.0, 2 * self.config.interval)
        answers = ray.get([peers[key].stats.remote() for key in keys] + [progress.stats.remote()], timeout=timeout)
        return Sample(time.monotonic(), {(key.chain, key.replica): answer for key, answer in zip(keys, answers[:-1])
                                         if answer is not None}, (answers[-1] or {}).get("vertices", {}))

    def _source_rates(self, plan: PhysicalPlan, previous: Sample, sample: Sample) -> dict[str, float]:
        """The rate each input must sustain: the goal's (``rate``), else what it took in the window."""
        goal = self.config.rate
        if isinstance(goal, Mapping):
            return {name: float(goal[name]) for name in plan.inputs if name in goal}
        if goal is not None:
            return dict.fromkeys(plan.inputs, float(goal))
        observed = window_stats(previous, sample, _placement(plan, plan.inputs), (), {})
        return {v.vertex: v.observed_output_rate for v in observed.vertices}

    def _free_cpus(self, previous: Sample, sample: Sample) -> float:
        """CPUs for more replicas: Ray's free ones when replicas reserve CPUs, else the
        cluster's less those the job's busy replicas use."""
        if self.cpus_per_replica > 0:
            return float(ray.available_resources().get("CPU", 0.0)) / self.cpus_per_replica
        return free_cpus(self.total_cpus, previous, sample)

    def _ask_the_cluster_for_more(self, replicas: int) -> None:
        """Ask Ray's cluster autoscaler for CPUs for ``replicas`` more replicas."""
        from ray.autoscaler.sdk import request_resources

        request_resources(num_cpus=int(self.total_cpus + replicas * max(1.0, self.cpus_per_replica)))

    # -- the driver's side -----------------------------------------------------------------------

    @ray.method(concurrency_group="poll")
    def next_change(self, timeout: float) -> dict[str, int] | None:
        """The next changes to make (``{vertex: replicas}``), or None after ``timeout`` seconds
        without any. The driver makes them, then calls :meth:`rescaled`."""
        with self.lock:
            self.lock.wait_for(lambda: self.pending is not None or self.stopped, timeout)
            changes, self.pending = self.pending, None
            self.rescaling = changes is not None
            return changes

    def rescaled(self, record: dict[str, Any] | None, plan: PhysicalPlan, peers: dict[ReplicaKey, Any],
                 progress: Any) -> None:
        """The driver made the changes (``record``: what the rescale did, or ``{"not_made": why}``;
        None: a recovery replaced actors): read the job as it is now."""
        with self.lock:
            if record is not None and self.rounds:
                self.rounds[-1]["rescale"] = record
            self.rescaling = False
            self._configure(plan, peers, progress)

    def timeline(self, job_finished: bool = False) -> list[dict[str, Any]]:
        """Every round so far: the window's figures, the decisions with their reasons, the
        changes and the rescale that made them (with its pause); see :func:`settled`."""
        with self.lock:
            return settled(self.rounds, job_finished)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()


def _edges(plan: PhysicalPlan) -> list[tuple[str, str]]:
    """The plan's edges between vertices, without those out of a feedback vertex (a loop's
    back edge: rates need a DAG)."""
    return [(edge.source, name) for name in plan.vertices for port in plan.vertex(name).inputs for edge in port
            if plan.vertex(edge.source).role != "feedback"]


def _placement(plan: PhysicalPlan, names: list[str]) -> dict[str, tuple[str, int]]:
    """Per vertex of ``names``, its chain and width: where the monitor finds its counters."""
    return {name: (plan.vertex(name).chain, plan.width(name)) for name in names}


_REMOTE_CLASS: list[Any] = []


def remote_class() -> Any:
    """The autoscaler actor's Ray class (made once: ray.remote pickles the class)."""
    if not _REMOTE_CLASS:
        _REMOTE_CLASS.append(ray.remote(max_concurrency=3, concurrency_groups={"poll": 1})(AutoscalerActor))  # type: ignore[call-overload]
    return _REMOTE_CLASS[0]
