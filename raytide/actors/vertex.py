"""Where the Vertex API was imported from before it moved to :mod:`raytide.core.vertex`.

Kept so that ``from raytide.actors.vertex import Vertex`` goes on working.
"""

from raytide.core.vertex import Vertex as Vertex
from raytide.core.vertex import VertexContext as VertexContext

__all__ = ["Vertex", "VertexContext"]
