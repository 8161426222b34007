"""``rt.Autoscale``: what the autoscaler of ``rt.run(..., autoscale=...)`` aims for, and its limits."""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from raytide.core.arguments import positive_int
from raytide.errors import ArgumentError

#: How the autoscaler decides: DS2's rates, the thesis's threshold table, a file another
#: program writes, or the latency goal from progress tracking.
PolicyName = Literal["rate", "threshold", "file", "latency"]
POLICIES = ("rate", "threshold", "file", "latency")


@dataclass(frozen=True)
class Autoscale:
    """The autoscaler of ``rt.run(flow, ..., recovery=..., autoscale=rt.Autoscale(...))``.

    Every ``interval`` seconds it reads the job's statistics over that window, decides
    with its policy, passes the decisions through the control steps of
    :mod:`raytide.autoscale.controls` (bounds, hysteresis, cooldown, the free CPUs) and has
    the driver rescale (``job.rescale``) while it waits on the job. Its timeline, with
    every decision's reason and each rescale's pause, is ``job.stats()["autoscaler"]``.

    Args:
        policy: ``"rate"`` (DS2: every vertex at once, from its true processing rate and
            the ``rate`` its inputs must sustain), ``"threshold"`` (the MPR thesis's
            listing 7.2: steps of 4, 2 or 1 replicas towards a ``throughput`` goal),
            ``"file"`` (the thesis's interface: ``stats`` is written every interval,
            ``parameters`` followed, so a program in any language decides) or
            ``"latency"`` (the bottleneck by progress tracking, until an epoch's results
            come within ``latency`` seconds of its input).
        rate: records per second each input must be processed at (one number for every
            input, or per input), for ``"rate"``.
        throughput: records per second produced, the thesis's goal: one number for every
            vertex the autoscaler scales, or per vertex, for ``"threshold"``.
        latency: seconds from an epoch's input to its results, for ``"latency"``.
        parameters: the ``parameters.json`` path to follow, for ``"file"``.
        stats: the ``stats.json`` path to write, for ``"file"``.
        vertices: the vertices it may rescale (default: all but the inputs). A vertex
            fused behind another moves with it (:mod:`raytide.rescale.widths`).
        interval: seconds between two decisions (the statistics' window).
        cooldown: seconds after a vertex changed before it may change again.
        min_parallelism: the fewest replicas of a vertex.
        max_parallelism: the most (default: the cluster's CPUs).
        rounds: consecutive decisions in one direction before a change is made (1: at once).
        request_resources: when the free CPUs are short, ask Ray's cluster autoscaler for
            more (``ray.autoscaler.sdk.request_resources``); on a fixed cluster it does nothing.
    """

    policy: PolicyName = "rate"
    rate: float | Mapping[str, float] | None = None
    throughput: float | Mapping[str, float] | None = None
    latency: float | None = None
    parameters: str | None = None
    stats: str | None = None
    vertices: Sequence[str] | None = None
    interval: float = 2.0
    cooldown: float = 4.0
    min_parallelism: int = 1
    max_parallelism: int | None = None
    rounds: int = 1
    request_resources: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ArgumentError(f"Autoscale policy must be one of {POLICIES}, not {self.policy!r}")
        needs = {"rate": ("rate",), "threshold": ("throughput",), "file": ("parameters", "stats"),
                 "latency": ("latency",)}[self.policy]
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ArgumentError(f"Autoscale(policy={self.policy!r}) needs {' and '.join(missing)}=...")
        for name in ("rate", "throughput"):
            goal = getattr(self, name)
            for value in (goal.values() if isinstance(goal, Mapping) else [] if goal is None else [goal]):
                if not _positive(value):
                    raise ArgumentError(f"Autoscale {name} must be records per second above 0 and finite (a goal "
                                        f"it can meet), not {value!r}")
        for name in ("latency", "interval"):
            if getattr(self, name) is not None and not _positive(getattr(self, name)):
                raise ArgumentError(f"Autoscale {name} must be seconds above 0 and finite, not {getattr(self, name)!r}")
        self._check_files()
        if not isinstance(self.cooldown, (int, float)) or isinstance(self.cooldown, bool) or self.cooldown < 0:
            raise ArgumentError(f"Autoscale cooldown must be seconds, at least 0, not {self.cooldown!r}")
        positive_int(self.min_parallelism, "Autoscale min_parallelism")
        positive_int(self.rounds, "Autoscale rounds")
        if self.max_parallelism is not None and positive_int(self.max_parallelism, "Autoscale max_parallelism") \
                < self.min_parallelism:
            raise ArgumentError(f"Autoscale max_parallelism {self.max_parallelism} is below min_parallelism "
                                f"{self.min_parallelism}")
        if self.vertices is not None and (isinstance(self.vertices, str) or not all(
                isinstance(name, str) for name in self.vertices)):
            raise ArgumentError(f"Autoscale vertices must be a list of vertex names, not {self.vertices!r}")

    def _check_files(self) -> None:
        """``policy="file"``: the directories of ``parameters`` and ``stats`` must exist (a
        parameters file nobody can write there would never decide anything)."""
        if self.policy != "file":
            return
        for name in ("parameters", "stats"):
            path = getattr(self, name)
            directory = os.path.dirname(os.path.abspath(os.fspath(path)))
            if not os.path.isdir(directory):
                raise ArgumentError(f"Autoscale {name}={path!r}: its directory {directory!r} does not exist, so the "
                                    f"file policy would never read (or write) it")

    def check_names(self, vertices: Collection[str], inputs: Collection[str]) -> None:
        """Refuse names the job does not have (``rt.run`` calls this with the plan's):
        ``vertices`` to rescale (not inputs), ``rate`` per input, ``throughput`` per vertex.

        Raises:
            ArgumentError: names the setting, the unknown name and the names there are.
        """
        scalable = sorted(set(vertices) - set(inputs))
        for setting, names, known in (("vertices", self.vertices, scalable),
                                      ("rate", self.rate, sorted(inputs)), ("throughput", self.throughput, scalable)):
            if names is None or isinstance(names, (int, float)):
                continue
            unknown = sorted(set(names) - set(known))
            if unknown:
                raise ArgumentError(f"Autoscale {setting} names {unknown[0]!r}, which is not one of the job's "
                                    f"{'inputs' if setting == 'rate' else 'vertices it can rescale'}: {known}")


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)
