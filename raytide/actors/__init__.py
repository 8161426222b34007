"""The Ray shells: the vertex, progress, coordinator and autoscaler actors, the hosts that
play them, and their metrics. Everything they run is pure and lives below them
(:mod:`raytide.engine`, :mod:`raytide.snapshots`, :mod:`raytide.rescale`).

Three modules that users could import from here, as earlier versions' README and docs
named them, keep those paths: ``raytide.actors.local`` (``LocalJob``, now
:mod:`raytide.testing`), ``raytide.actors.vertex`` (``Vertex``) and ``raytide.actors.wire``.
:data:`MOVED` maps each old name to its home, and importing the old name gives that module
itself, so a class has one identity whichever path named it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

from raytide.core.vertex import Vertex as Vertex
from raytide.core.vertex import VertexContext as VertexContext

__all__ = ["Vertex", "VertexContext"]

#: Old module names under ``raytide.actors`` that users imported, and the modules they moved to.
MOVED = {
    "local": "raytide.testing.local",
    "vertex": "raytide.core.vertex",
    "wire": "raytide.physical.wire",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``raytide.actors.<old name>`` and loads it as the module it moved to."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns whatever sys.modules holds under the name after this call.
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__.rpartition(".")[2]])


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
