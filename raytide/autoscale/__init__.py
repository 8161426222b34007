"""Autoscaling: stats snapshots, scaling policies, control steps and key-group assignment (pure)."""

from raytide.core.keygroups import DEFAULT_KEY_GROUPS as DEFAULT_KEY_GROUPS
from raytide.core.keygroups import KeyGroupAssignment as KeyGroupAssignment
from raytide.core.keygroups import KeyGroupMove as KeyGroupMove
from raytide.core.keygroups import key_group as key_group

from .controls import Streak as Streak
from .controls import apply_cooldown as apply_cooldown
from .controls import cap_by_free_cpus as cap_by_free_cpus
from .controls import clamp as clamp
from .controls import combine as combine
from .controls import ignore_small_changes as ignore_small_changes
from .controls import record_changes as record_changes
from .controls import require_persistence as require_persistence
from .policies import FilePolicy as FilePolicy
from .policies import RatePolicy as RatePolicy
from .policies import ScalingDecision as ScalingDecision
from .policies import ScalingPolicy as ScalingPolicy
from .policies import ThresholdPolicy as ThresholdPolicy
from .stats import JobStats as JobStats
from .stats import ReplicaStats as ReplicaStats
from .stats import VertexStats as VertexStats

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "FilePolicy",
    "JobStats",
    "KeyGroupAssignment",
    "KeyGroupMove",
    "RatePolicy",
    "ReplicaStats",
    "ScalingDecision",
    "ScalingPolicy",
    "Streak",
    "ThresholdPolicy",
    "VertexStats",
    "apply_cooldown",
    "cap_by_free_cpus",
    "clamp",
    "combine",
    "ignore_small_changes",
    "key_group",
    "record_changes",
    "require_persistence",
]
