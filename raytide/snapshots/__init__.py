"""Snapshots and recovery: consistent snapshots and the checkpoint-interval model (interval.py)."""

from .interval import DEFAULT_PRIOR_FAILURES as DEFAULT_PRIOR_FAILURES
from .interval import DEFAULT_PRIOR_RATE as DEFAULT_PRIOR_RATE
from .interval import DurationEstimator as DurationEstimator
from .interval import FailureRateEstimator as FailureRateEstimator
from .interval import IntervalTuner as IntervalTuner
from .interval import lambert_w0 as lambert_w0
from .interval import optimal_interval as optimal_interval
from .interval import utilization as utilization

__all__ = [
    "DEFAULT_PRIOR_FAILURES",
    "DEFAULT_PRIOR_RATE",
    "DurationEstimator",
    "FailureRateEstimator",
    "IntervalTuner",
    "lambert_w0",
    "optimal_interval",
    "utilization",
]
