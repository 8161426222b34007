"""raytide: Naiad-style timely dataflow on Ray, with Spark ingestion through RayDP."""

from raytide.errors import GraphError as GraphError
from raytide.errors import ProgressError as ProgressError
from raytide.errors import RaytideError as RaytideError
from raytide.progress import Timestamp as Timestamp

__all__ = ["GraphError", "ProgressError", "RaytideError", "Timestamp"]
