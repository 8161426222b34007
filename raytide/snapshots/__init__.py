"""Snapshots, pure parts: barrier alignment (barriers.py), the checkpoint-interval model (interval.py)
and the store of committed snapshots (store.py)."""

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

__all__ = [
    "BarrierAligner",
    "DEFAULT_PRIOR_FAILURES",
    "DEFAULT_PRIOR_RATE",
    "Decision",
    "DurationEstimator",
    "FailureRateEstimator",
    "ForwardBarrier",
    "IntervalTuner",
    "Manifest",
    "PartInfo",
    "Release",
    "SnapshotComplete",
    "SnapshotStore",
    "TakeSnapshot",
    "describe",
    "lambert_w0",
    "optimal_interval",
    "utilization",
]
