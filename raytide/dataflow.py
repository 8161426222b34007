"""Where the logical dataflow was imported from before it moved to :mod:`raytide.core.dataflow`.

Kept so that ``from raytide.dataflow import Dataflow, Stream`` goes on working.
"""

from raytide.core.dataflow import Dataflow as Dataflow
from raytide.core.dataflow import FeedbackHandle as FeedbackHandle
from raytide.core.dataflow import Loop as Loop
from raytide.core.dataflow import Probe as Probe
from raytide.core.dataflow import Stream as Stream

__all__ = ["Dataflow", "FeedbackHandle", "Loop", "Probe", "Stream"]
