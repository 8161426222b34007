"""raytide: Naiad-style timely dataflow on Ray, with Spark ingestion through RayDP."""

from raytide.actors.replica import UserCodeError as UserCodeError
from raytide.actors.runtime import Job as Job
from raytide.actors.runtime import JobTimeout as JobTimeout
from raytide.actors.runtime import run as run
from raytide.actors.vertex import Vertex as Vertex
from raytide.dataflow import Dataflow as Dataflow
from raytide.dataflow import Probe as Probe
from raytide.dataflow import Stream as Stream
from raytide.errors import GraphError as GraphError
from raytide.errors import ProgressError as ProgressError
from raytide.errors import RaytideError as RaytideError
from raytide.progress import Timestamp as Timestamp

__all__ = [
    "Dataflow",
    "GraphError",
    "Job",
    "JobTimeout",
    "Probe",
    "ProgressError",
    "RaytideError",
    "Stream",
    "Timestamp",
    "UserCodeError",
    "Vertex",
    "run",
]
