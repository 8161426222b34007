"""The Ray shells: the vertex, progress, coordinator and autoscaler actors, the hosts that
play them, and their metrics. Everything they run is pure and lives below them
(:mod:`raytide.engine`, :mod:`raytide.snapshots`, :mod:`raytide.rescale`).

Modules that lived here before the runtime was split by job keep their old import paths
(``raytide.actors.local``, ``raytide.actors.plan``, ...): :data:`MOVED` maps each old name
to its new home, and importing the old name gives the new module itself, so a class has
one identity whichever path named it.
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

#: Old module names under ``raytide.actors`` and the modules they moved to.
MOVED = {
    "plan": "raytide.physical.plan",
    "protocol": "raytide.physical.protocol",
    "wire": "raytide.physical.wire",
    "replica": "raytide.engine.replica",
    "outbox": "raytide.engine.outbox",
    "holdback": "raytide.engine.holdback",
    "notifications": "raytide.engine.notifications",
    "progress_core": "raytide.engine.progress_core",
    "output_gate": "raytide.engine.output_gate",
    "replica_state": "raytide.snapshots.replica_state",
    "recovery": "raytide.snapshots.recovery",
    "snapshot_writer": "raytide.snapshots.writer",
    "rescale": "raytide.rescale.widths",
    "layout": "raytide.rescale.layout",
    "reshard": "raytide.rescale.reshard",
    "runtime": "raytide.driver.run",
    "driver_inputs": "raytide.driver.inputs",
    "driver_side": "raytide.driver.outputs",
    "job_recovery": "raytide.driver.recovery",
    "job_rescale": "raytide.driver.rescale",
    "pool": "raytide.driver.pool",
    "pool_book": "raytide.driver.pool_book",
    "local": "raytide.testing.local",
    "allocator": "raytide.actors.hosts",
    "vertex": "raytide.core.vertex",
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
