"""Idleness, pure: which producers hold an event-time input's watermark back (Flink's
``withIdleness``), the one rule by which both kinds of event-time clock combine producers.

A *partition* is one producer of an input: a caller of ``job.push(name, records, partition=p)``
(the driver's :class:`~raytide.windows.event_time.EventClock` keeps one :class:`Idleness` over
them), or an input replica taking its shares of a stream with event time
(:class:`~raytide.sources.clocked_stream.ClockedStream`, the driver's side of the stream, keeps
one over the replicas). Each has a watermark (none until it has had records) and the time it
was last *active* (what counts is the caller's: a push, a share with records). A partition not
active for ``timeout`` seconds is **idle**. The input's combined watermark is:

* the least of the watermarks of the partitions that are not idle;
* ``-inf`` while a partition that is not idle has no watermark yet (it holds the input at its
  start until it has records or goes idle);
* the largest of all when every partition is idle;

and the clocks that use it never let their own watermark go back. An idle partition so stops
holding the others back; when it is active again it counts again, and its records older than
the watermark it was released to are late.

>>> rule = Idleness(timeout=5.0)
>>> rule.heard("a", 0.0, mark=1.0); rule.heard("b", 3.0, mark=50.0)
>>> rule.combined(4.9), rule.idle("a", 5.0), rule.combined(5.0), rule.combined(8.0)
(1.0, True, 50.0, 50.0)
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class Idleness:
    """Partitions' watermarks and when each was last active (see the module docstring).

    Attributes:
        timeout: seconds without activity after which a partition is idle (None: never).
        marks: per partition, its watermark (seconds), once it has one.
        active_at: per partition, when it was last active (the clock's seconds, any origin).
    """

    timeout: float | None
    marks: dict[Hashable, float] = field(default_factory=dict)
    active_at: dict[Hashable, float] = field(default_factory=dict)

    def heard(self, partition: Hashable, now: float, mark: float | None = None, active: bool = True) -> None:
        """News of ``partition`` at ``now``: its watermark ``mark`` (None: none yet), and whether
        it was active; a partition first heard of counts as active then (its idleness starts)."""
        if active or partition not in self.active_at:
            self.active_at[partition] = now
        if mark is not None and mark > self.marks.get(partition, -math.inf):
            self.marks[partition] = mark

    def idle(self, partition: Hashable, now: float) -> bool:
        """Whether ``partition`` has not been active for the timeout."""
        return self.timeout is not None and now - self.active_at[partition] >= self.timeout

    def combined(self, now: float) -> float:
        """The input's watermark by the rule of the module docstring (``-inf``: none yet)."""
        if not self.marks:
            return -math.inf
        holding = [partition for partition in self.active_at if not self.idle(partition, now)]
        if any(partition not in self.marks for partition in holding):
            return -math.inf
        return min(self.marks[p] for p in holding) if holding else max(self.marks.values())
