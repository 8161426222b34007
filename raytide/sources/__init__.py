"""Input sources: what an input reads, where it is read, and how far it has read.

Every input is fed from a :class:`~raytide.sources.base.Source` (``rt.run(flow,
inputs={name: source})``; a plain iterable of per-epoch record lists becomes one through
:func:`~raytide.sources.iterable.as_source`). The parallel sources here, text files and
Arrow datasets, are read inside the input replicas (never through the driver), one reader
each: ``readers(parallelism)`` gives one reader per replica, each an iterable of
``(epoch, batch)`` pairs with epochs that never decrease; sends wait when downstream is
full, so reading is paced by the slowest consumer (backpressure). Every reader can tell
its position and resume from one (:mod:`raytide.sources.base`); epochs taken from a
column are checked in one place (:mod:`raytide.sources.epoch_column`).

The sources are imported on first use: a replica that unpickles a text reader must not
pay for importing ``pyarrow.dataset`` (and pandas with it).
"""

import importlib
from typing import Any

_HOMES = {
    "ArrowDatasetSource": "raytide.sources.arrow",
    "TextFileSource": "raytide.sources.text",
    "Source": "raytide.sources.base",
    "DriverSource": "raytide.sources.base",
    "Reader": "raytide.sources.base",
    "Placement": "raytide.sources.base",
    "BlockRefs": "raytide.sources.base",
    "RemoteBatch": "raytide.sources.base",
    "as_source": "raytide.sources.iterable",
    "StreamSource": "raytide.sources.stream",
    "StreamReader": "raytide.sources.stream",
}

__all__ = ["ArrowDatasetSource", "BlockRefs", "DriverSource", "Placement", "Reader", "RemoteBatch", "Source",
           "StreamReader", "StreamSource", "TextFileSource", "as_source"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'raytide.sources' has no attribute {name!r}")
