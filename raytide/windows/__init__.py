"""Windows over epochs, pure: the window specs (:mod:`raytide.windows.specs`) and a replica's
pending windows per key (:mod:`raytide.windows.pending`). The dataflow's windowed operators
(:mod:`raytide.core.windowing`) are thin vertices around them; see docs/windows.md.

The names below are imported on first use: a vertex host imports this package for event
time (a stream's clock) and must not pay for the window specs in a job without windows.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytide.windows.pending import Closed as Closed
    from raytide.windows.pending import Fold as Fold
    from raytide.windows.pending import Pending as Pending
    from raytide.windows.pending import add as add
    from raytide.windows.pending import close as close
    from raytide.windows.pending import merge as merge
    from raytide.windows.pending import split as split
    from raytide.windows.specs import Session as Session
    from raytide.windows.specs import Sliding as Sliding
    from raytide.windows.specs import Tumbling as Tumbling
    from raytide.windows.specs import Window as Window
    from raytide.windows.specs import WindowSpec as WindowSpec

_HOMES = {
    **dict.fromkeys(("Closed", "Fold", "Pending", "add", "close", "merge", "split"), "raytide.windows.pending"),
    **dict.fromkeys(("Session", "Sliding", "Tumbling", "Window", "WindowSpec"), "raytide.windows.specs"),
}

__all__ = ["Closed", "Fold", "Pending", "Session", "Sliding", "Tumbling", "Window", "WindowSpec", "add", "close",
           "merge", "split"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'raytide.windows' has no attribute {name!r}")
