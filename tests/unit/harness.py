"""Driving a vertex by hand, as a replica would, without the runtime."""

from __future__ import annotations

from typing import Any

from raytide.core.vertex import Vertex
from raytide.progress.timestamps import Timestamp


class RecordingContext:
    """A vertex context that keeps what the vertex sends and the notifications it asks for."""

    vertex, replica, parallelism = "v", 0, 1

    def __init__(self, notifications: list[Timestamp] | None = None) -> None:
        self.sent: list[tuple[Timestamp, Any]] = []
        self.notifications: list[Timestamp] = list(notifications or [])

    def send_by(self, output: int, message: Any, time: Timestamp) -> None:
        self.sent.append((time, message))

    def notify_at(self, time: Timestamp) -> None:
        self.notifications.append(time)

    def cancel_notify(self, time: Timestamp) -> None:
        self.notifications = [t for t in self.notifications if t != time]

    def pairs_by_epoch(self) -> dict[int, list]:
        """Everything sent, concatenated per epoch."""
        out: dict[int, list] = {}
        for time, message in self.sent:
            out.setdefault(time.epoch, []).extend(message)
        return out


def bound(vertex: Vertex, context: RecordingContext | None = None) -> tuple[Vertex, RecordingContext]:
    """``vertex`` bound to ``context`` (a fresh one by default), as the runtime binds it before any callback."""
    context = context or RecordingContext()
    vertex.bind(context)
    return vertex, context


def complete(vertex: Vertex, context: RecordingContext, until: Timestamp | None = None) -> None:
    """Times up to ``until`` (every time, by default) are complete: deliver their pending
    notifications in timestamp order, each once, as a replica would."""
    while True:
        due = [t for t in context.notifications if until is None or t.less_equal(until)]
        if not due:
            return
        time = min(due, key=tuple)
        context.notifications = [t for t in context.notifications if t != time]
        vertex.on_notify(time)
