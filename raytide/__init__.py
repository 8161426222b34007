"""raytide: Naiad-style timely dataflow on Ray, with Spark ingestion through RayDP.

Building a dataflow needs no Ray; ``run`` and ``Job`` (which do) are imported on first
use, so ``import raytide`` stays cheap and the pure modules stay free of Ray.
"""

from typing import Any

from raytide.autoscale.config import Autoscale as Autoscale
from raytide.core.dataflow import Dataflow as Dataflow
from raytide.core.dataflow import Loop as Loop
from raytide.core.dataflow import Probe as Probe
from raytide.core.dataflow import Stream as Stream
from raytide.core.vertex import Vertex as Vertex
from raytide.errors import ArgumentError as ArgumentError
from raytide.errors import GraphError as GraphError
from raytide.errors import JobCancelled as JobCancelled
from raytide.errors import JobTimeout as JobTimeout
from raytide.errors import ProgressError as ProgressError
from raytide.errors import RaytideError as RaytideError
from raytide.errors import RecordError as RecordError
from raytide.errors import RecoveryError as RecoveryError
from raytide.errors import ReplicaLost as ReplicaLost
from raytide.errors import RescaleError as RescaleError
from raytide.errors import SourceError as SourceError
from raytide.errors import SparkIntegrationError as SparkIntegrationError
from raytide.errors import UserCodeError as UserCodeError
from raytide.progress import Timestamp as Timestamp
from raytide.snapshots.config import Recovery as Recovery

_RUNTIME = {"run", "Job"}
_POOL = {"shutdown": "shutdown", "configure_pool": "configure"}

__all__ = [
    "ArgumentError",
    "Autoscale",
    "Dataflow",
    "GraphError",
    "Job",
    "JobCancelled",
    "JobTimeout",
    "Loop",
    "Probe",
    "ProgressError",
    "RaytideError",
    "RecordError",
    "Recovery",
    "RecoveryError",
    "ReplicaLost",
    "RescaleError",
    "SourceError",
    "SparkIntegrationError",
    "Stream",
    "Timestamp",
    "UserCodeError",
    "Vertex",
    "configure_pool",
    "run",
    "shutdown",
]


def __getattr__(name: str) -> Any:
    if name in _RUNTIME:
        from raytide.driver import run

        return getattr(run, name)
    if name in _POOL:
        from raytide.driver import pool

        return getattr(pool, _POOL[name])
    if name == "sources":  # rt.sources.TextFileSource, without importing any source before it is used
        import raytide.sources

        return raytide.sources
    raise AttributeError(f"module 'raytide' has no attribute {name!r}")
