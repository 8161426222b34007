"""The logical model, pure: the dataflow builder, the Vertex API, the built-in operators,
batches, key groups and routing. Imports neither Ray nor the runtime (``raytide.actors``),
so a dataflow can be built, checked and tested anywhere."""

import importlib
from typing import TYPE_CHECKING, Any

from raytide.core.vertex import Vertex as Vertex
from raytide.core.vertex import VertexContext as VertexContext

if TYPE_CHECKING:  # imported on first use (``__getattr__``): a host needs the vertices, not the builder
    from raytide.core.dataflow import Dataflow as Dataflow
    from raytide.core.dataflow import Loop as Loop
    from raytide.core.dataflow import Probe as Probe
    from raytide.core.dataflow import Stream as Stream

#: Where each name imported on first use lives, and its name there.
_LAZY = {name: ("raytide.core.dataflow", name) for name in ("Dataflow", "Loop", "Probe", "Stream")}

__all__ = ["Dataflow", "Loop", "Probe", "Stream", "Vertex", "VertexContext"]


def __getattr__(name: str) -> Any:
    """The builder's names, imported on first use."""
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'raytide.core' has no attribute {name!r}")
