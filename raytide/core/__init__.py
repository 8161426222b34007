"""The logical model, pure: the dataflow builder, the Vertex API, the built-in operators,
batches, key groups and routing. Imports neither Ray nor the runtime (``raytide.actors``),
so a dataflow can be built, checked and tested anywhere."""

from raytide.core.dataflow import Dataflow as Dataflow
from raytide.core.dataflow import Loop as Loop
from raytide.core.dataflow import Probe as Probe
from raytide.core.dataflow import Stream as Stream
from raytide.core.vertex import Vertex as Vertex
from raytide.core.vertex import VertexContext as VertexContext

__all__ = ["Dataflow", "Loop", "Probe", "Stream", "Vertex", "VertexContext"]
