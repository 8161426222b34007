"""Parallel sources: read inside the input replicas (never through the driver), one reader each.

A source has ``readers(parallelism) -> list[reader]``; each reader is an iterable of
``(epoch, batch)`` pairs with epochs that never decrease. ``rt.run(flow, inputs={name:
source})`` starts one reader in each replica of the input; sends wait when downstream is
full, so reading is paced by the slowest consumer (backpressure).
"""

from raytide.sources.arrow import ArrowDatasetSource as ArrowDatasetSource
from raytide.sources.text import TextFileSource as TextFileSource

__all__ = ["ArrowDatasetSource", "TextFileSource"]
