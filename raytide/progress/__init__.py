"""Progress tracking, pure: timestamps, path summaries, antichains, reachability and the tracker."""

from raytide.progress.antichain import Antichain as Antichain
from raytide.progress.antichain import MutableAntichain as MutableAntichain
from raytide.progress.change_batch import ChangeBatch as ChangeBatch
from raytide.progress.graph import Edge as Edge
from raytide.progress.graph import GraphBuilder as GraphBuilder
from raytide.progress.graph import ProgressGraph as ProgressGraph
from raytide.progress.graph import VertexShape as VertexShape
from raytide.progress.reachability import Location as Location
from raytide.progress.summaries import PathSummary as PathSummary
from raytide.progress.timestamps import Timestamp as Timestamp
from raytide.progress.tracker import Tracker as Tracker

__all__ = [
    "Antichain",
    "ChangeBatch",
    "Edge",
    "GraphBuilder",
    "Location",
    "MutableAntichain",
    "PathSummary",
    "ProgressGraph",
    "Timestamp",
    "Tracker",
    "VertexShape",
]
