"""What a hosted vertex sees of its replica: its :class:`~raytide.core.vertex.VertexContext`
(sending, asking for and withdrawing notifications, all passed on to the replica's core,
which checks them) and the counters the replica keeps of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from raytide.progress.timestamps import Timestamp


class Sender(Protocol):
    """The replica core's side of a vertex's context (:class:`~raytide.engine.replica.ReplicaCore`)."""

    def send(self, context: ReplicaContext, output: int, message: Any, time: Timestamp) -> None: ...

    def request_notification(self, context: ReplicaContext, time: Timestamp) -> None: ...

    def cancel_notification(self, context: ReplicaContext, time: Timestamp) -> None: ...


@dataclass
class VertexCounters:
    """Counters of one hosted vertex in this replica."""

    records_in: int = 0
    records_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    notifications: int = 0


class ReplicaContext:
    """The :class:`~raytide.core.vertex.VertexContext` of one hosted vertex."""

    def __init__(self, core: Sender, vertex: str, replica: int, parallelism: int) -> None:
        self.core, self.vertex, self.replica, self.parallelism = core, vertex, replica, parallelism
        self.current: Timestamp | None = None

    def send_by(self, output: int, message: Any, time: Timestamp) -> None:
        self.core.send(self, output, message, time)

    def notify_at(self, time: Timestamp) -> None:
        self.core.request_notification(self, time)

    def cancel_notify(self, time: Timestamp) -> None:
        self.core.cancel_notification(self, time)
