"""raytide: Naiad-style timely dataflow on Ray, with Spark ingestion through RayDP.

Building a dataflow needs no Ray; ``run`` and ``Job`` (which do) are imported on first
use, so ``import raytide`` stays cheap and the pure modules stay free of Ray.
"""

from typing import Any

from raytide.core.dataflow import Dataflow as Dataflow
from raytide.core.dataflow import Loop as Loop
from raytide.core.dataflow import Probe as Probe
from raytide.core.dataflow import Stream as Stream
from raytide.core.vertex import Vertex as Vertex
from raytide.errors import GraphError as GraphError
from raytide.errors import JobTimeout as JobTimeout
from raytide.errors import ProgressError as ProgressError
from raytide.errors import RaytideError as RaytideError
from raytide.errors import ReplicaLost as ReplicaLost
from raytide.errors import UserCodeError as UserCodeError
from raytide.progress import Timestamp as Timestamp

_RUNTIME = {"run", "Job"}

__all__ = [
    "Dataflow",
    "GraphError",
    "Job",
    "JobTimeout",
    "Loop",
    "Probe",
    "ProgressError",
    "RaytideError",
    "ReplicaLost",
    "Stream",
    "Timestamp",
    "UserCodeError",
    "Vertex",
    "run",
]


def __getattr__(name: str) -> Any:
    if name in _RUNTIME:
        from raytide.actors import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'raytide' has no attribute {name!r}")
