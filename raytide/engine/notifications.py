"""The notifications a replica's vertices wait for, and which of them are due.

A notification at time ``t`` is due when no timestamp at or before ``t`` may still
arrive at any input of its vertex; due notifications are delivered in timestamp order.
For a vertex on a cycle a notification's own output may come back to it, so only one
round is delivered at a time: the due times with no pending time strictly before them
(the replica then waits until the tracker has absorbed that round).

>>> from raytide.progress import Timestamp
>>> queue = NotificationQueue(["sum"])
>>> queue.request("sum", Timestamp(1)), queue.request("sum", Timestamp(0)), queue.request("sum", Timestamp(0))
(True, True, False)
>>> queue.take_due("sum", lambda t: True, one_round=False)
[Timestamp(0), Timestamp(1)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from raytide.progress.timestamps import Timestamp


class NotificationQueue:
    """Pending notification times per hosted vertex."""

    def __init__(self, vertices: Iterable[str]) -> None:
        self.pending: dict[str, set[Timestamp]] = {name: set() for name in vertices}

    def request(self, vertex: str, time: Timestamp) -> bool:
        """``vertex`` asks to be notified at ``time``; True when it was not pending yet."""
        pending = self.pending[vertex]
        if time in pending:
            return False
        pending.add(time)
        return True

    def cancel(self, vertex: str, time: Timestamp) -> bool:
        """``vertex`` no longer waits for ``time``; True when it was pending."""
        pending = self.pending[vertex]
        if time not in pending:
            return False
        pending.discard(time)
        return True

    def take_before(self, vertex: str, epoch: int | None) -> list[Timestamp]:
        """Remove and return ``vertex``'s pending times before ``epoch`` (None: all of them)."""
        pending = self.pending[vertex]
        taken = [time for time in pending if epoch is None or time.epoch < epoch]
        pending.difference_update(taken)
        return taken

    def of(self, vertex: str) -> set[Timestamp]:
        """The times ``vertex`` waits for (a pending notification lets it send at them)."""
        return self.pending[vertex]

    def take_due(self, vertex: str, ready: Callable[[Timestamp], bool], one_round: bool) -> list[Timestamp]:
        """Remove and return ``vertex``'s due notifications in timestamp order.

        Args:
            ready: whether nothing at or before a time may still arrive at the vertex.
            one_round: only the due times that no pending time is strictly before
                (for a vertex on a cycle).
        """
        pending = self.pending[vertex]
        due = sorted(filter(ready, pending), key=Timestamp.sort_key)
        if one_round:
            due = [t for t in due if not any(other.less_than(t) for other in pending)]
        pending.difference_update(due)
        return due
