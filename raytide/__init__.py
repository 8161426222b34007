"""raytide: Naiad-style timely dataflow on Ray, with Spark ingestion through RayDP.

Building a dataflow needs no Ray. Every public name but the errors is imported on first
use (``__getattr__``): ``import raytide`` stays cheap, the pure modules stay free of Ray,
and a host process, which imports ``raytide.actors.hosts`` on the clock of a job's first
start, loads its role's modules and not the builder's or the autoscaler's.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are imported on first use (``__getattr__``)
    from raytide.autoscale.config import Autoscale as Autoscale
    from raytide.core.arranged import Arranged as Arranged
    from raytide.core.collection import Collection as Collection
    from raytide.core.dataflow import Dataflow as Dataflow
    from raytide.core.dataflow import Loop as Loop
    from raytide.core.dataflow import Probe as Probe
    from raytide.core.dataflow import Stream as Stream
    from raytide.core.vertex import Vertex as Vertex
    from raytide.differential.updates import accumulate as accumulate
    from raytide.driver.pool import configure as configure_pool
    from raytide.driver.pool import shutdown as shutdown
    from raytide.driver.run import Job as Job
    from raytide.driver.run import run as run
    from raytide.progress.timestamps import Timestamp as Timestamp
    from raytide.snapshots.config import Recovery as Recovery
    from raytide.windows.event_time import EventTime as EventTime
    from raytide.windows.specs import Session as Session
    from raytide.windows.specs import Sliding as Sliding
    from raytide.windows.specs import Tumbling as Tumbling

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
from raytide.errors import StoreFencedError as StoreFencedError
from raytide.errors import StoreLeaseError as StoreLeaseError
from raytide.errors import UserCodeError as UserCodeError

#: Where each public name that is imported on first use lives, and its name there.
_LAZY = {
    "Arranged": ("raytide.core.arranged", "Arranged"),
    "Autoscale": ("raytide.autoscale.config", "Autoscale"),
    "Collection": ("raytide.core.collection", "Collection"),
    "Dataflow": ("raytide.core.dataflow", "Dataflow"),
    "accumulate": ("raytide.differential.updates", "accumulate"),
    "Loop": ("raytide.core.dataflow", "Loop"),
    "Probe": ("raytide.core.dataflow", "Probe"),
    "Stream": ("raytide.core.dataflow", "Stream"),
    "Vertex": ("raytide.core.vertex", "Vertex"),
    "Timestamp": ("raytide.progress.timestamps", "Timestamp"),
    "Recovery": ("raytide.snapshots.config", "Recovery"),
    "run": ("raytide.driver.run", "run"),
    "Job": ("raytide.driver.run", "Job"),
    "shutdown": ("raytide.driver.pool", "shutdown"),
    "configure_pool": ("raytide.driver.pool", "configure"),
    "EventTime": ("raytide.windows.event_time", "EventTime"),
    "Session": ("raytide.windows.specs", "Session"),
    "Sliding": ("raytide.windows.specs", "Sliding"),
    "Tumbling": ("raytide.windows.specs", "Tumbling"),
}

__all__ = [
    "ArgumentError",
    "Arranged",
    "Autoscale",
    "Collection",
    "Dataflow",
    "EventTime",
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
    "Session",
    "Sliding",
    "SourceError",
    "SparkIntegrationError",
    "StoreFencedError",
    "StoreLeaseError",
    "Stream",
    "Timestamp",
    "Tumbling",
    "UserCodeError",
    "Vertex",
    "accumulate",
    "configure_pool",
    "run",
    "shutdown",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use, so that ``import raytide.<module>`` (a host
    process starting, a worker unpickling user code) loads only what that module needs."""
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    if name == "sources":  # rt.sources.TextFileSource, without importing any source before it is used
        return importlib.import_module("raytide.sources")
    raise AttributeError(f"module 'raytide' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
