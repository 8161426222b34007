"""Parallel sources: read inside the input replicas (never through the driver), one reader each.

A source has ``readers(parallelism) -> list[reader]``; each reader is an iterable of
``(epoch, batch)`` pairs with epochs that never decrease. ``rt.run(flow, inputs={name:
source})`` starts one reader in each replica of the input; sends wait when downstream is
full, so reading is paced by the slowest consumer (backpressure).

The sources are imported on first use: a replica that unpickles a text reader must not
pay for importing ``pyarrow.dataset`` (and pandas with it).
"""

import importlib
from typing import Any

_HOMES = {"ArrowDatasetSource": "raytide.sources.arrow", "TextFileSource": "raytide.sources.text"}

__all__ = ["ArrowDatasetSource", "TextFileSource"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'raytide.sources' has no attribute {name!r}")
