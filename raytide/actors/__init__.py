"""The runtime: the Vertex API, replicas of fused vertex chains, channels, and jobs on Ray."""

from raytide.core.vertex import Vertex as Vertex
from raytide.core.vertex import VertexContext as VertexContext

__all__ = ["Vertex", "VertexContext"]
