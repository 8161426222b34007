"""Snapshots, pure parts: barrier alignment (barriers.py), the checkpoint-interval model (interval.py)
and the store of committed snapshots (store.py).

The names below are imported on first use: a vertex host imports this package for what a
replica saves (``replica_state``) and the barriers, and must not pay for the store, its
lease and the interval model in a job without recovery (the first job's start-up).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .barriers import BarrierAligner as BarrierAligner
    from .barriers import Decision as Decision
    from .barriers import ForwardBarrier as ForwardBarrier
    from .barriers import Release as Release
    from .barriers import SnapshotComplete as SnapshotComplete
    from .barriers import TakeSnapshot as TakeSnapshot
    from .interval import DEFAULT_PRIOR_FAILURES as DEFAULT_PRIOR_FAILURES
    from .interval import DEFAULT_PRIOR_RATE as DEFAULT_PRIOR_RATE
    from .interval import DurationEstimator as DurationEstimator
    from .interval import FailureRateEstimator as FailureRateEstimator
    from .interval import IntervalTuner as IntervalTuner
    from .interval import lambert_w0 as lambert_w0
    from .interval import optimal_interval as optimal_interval
    from .interval import utilization as utilization
    from .listing import describe as describe
    from .store import Manifest as Manifest
    from .store import PartInfo as PartInfo
    from .store import SnapshotStore as SnapshotStore

_HOMES = {
    **dict.fromkeys(("BarrierAligner", "Decision", "ForwardBarrier", "Release", "SnapshotComplete", "TakeSnapshot"),
                    "raytide.snapshots.barriers"),
    **dict.fromkeys(("DEFAULT_PRIOR_FAILURES", "DEFAULT_PRIOR_RATE", "DurationEstimator", "FailureRateEstimator",
                     "IntervalTuner", "lambert_w0", "optimal_interval", "utilization"), "raytide.snapshots.interval"),
    **dict.fromkeys(("Manifest", "PartInfo", "SnapshotStore"), "raytide.snapshots.store"),
    "describe": "raytide.snapshots.listing",
}

__all__ = ["BarrierAligner", "DEFAULT_PRIOR_FAILURES", "DEFAULT_PRIOR_RATE", "Decision", "DurationEstimator",
           "FailureRateEstimator", "ForwardBarrier", "IntervalTuner", "Manifest", "PartInfo", "Release",
           "SnapshotComplete", "SnapshotStore", "TakeSnapshot", "describe", "lambert_w0", "optimal_interval",
           "utilization"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'raytide.snapshots' has no attribute {name!r}")
