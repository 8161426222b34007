"""Collections that change by additions and deletions: the pure algorithms (differential dataflow's).

A collection's changes are updates ``(record, diff)`` at times (:mod:`.updates`); a keyed
operator keeps what it has seen in a :class:`~.trace.Trace`, compacted once epochs are over;
:class:`~.reduce.Reduction` keeps a group-and-reduce up to date, :class:`~.join.Join` a join,
and an :class:`~.arranged.SharedArrangement` holds one trace that several of them read.
The vertices that run them, and the ``Collection`` API, live in ``raytide.core``.
"""

from raytide.differential.arranged import SharedArrangement
from raytide.differential.columns import DIFF, checked_update_columns, is_update_columns, update_columns, update_records
from raytide.differential.join import Join
from raytide.differential.reduce import Logic, Reduction
from raytide.differential.sums import Sums
from raytide.differential.trace import EPOCH_DONE, Trace, epoch_done, later_times
from raytide.differential.updates import Change, accumulate, canonical, check_updates, consolidate

__all__ = [
    "DIFF", "EPOCH_DONE", "Join", "Logic", "Reduction", "SharedArrangement", "Sums", "Trace", "Change", "accumulate",
    "canonical", "check_updates",
    "checked_update_columns", "consolidate", "epoch_done", "is_update_columns", "later_times", "update_columns",
    "update_records",
]
