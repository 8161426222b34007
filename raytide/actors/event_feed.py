"""The progress actor's job events written to the driver's socket as they are logged
(issue 76), instead of answering its long poll.

The driver's long poll (``next_events``) costs an epoch a Ray call's answer on its critical
path, and the driver a new call per poll. A driver on the progress actor's node subscribes
instead (:mod:`raytide.driver.event_link`): it gives its listener's address, a token and its
cursor, and the progress actor writes every event logged from that cursor on to it, in
order, as ``(token, first, count, body)`` frames (:data:`~raytide.physical.frames.EVENTS`):
``first`` the number of the first event, ``body`` the events pickled. The driver drops frames
of an older token (it takes a new one whenever a recovery or a rescale replaces or restores
the progress actor) and events it has (numbers below its cursor).

An event that holds an object ref (an output's large part, owned by the replica that put it)
must reach the driver through Ray, which counts who borrows it: its frame carries no body (a
*hint*), the events stay in the log from there on, and the driver fetches them with a
``next_events`` call of its own. Events written with a body are in the driver's socket buffer:
they leave the log, so a job that runs for weeks keeps no more than it does polled. A write
that fails (the driver closed its end) ends the subscription; the events stay in the log
for a poll.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import ray

from raytide.actors.socket_hops import Outbound, node_id
from raytide.physical.frames import EVENTS


class EventFeed:
    """The driver's subscription at the progress actor: its socket, its token, the hinted events (see the module docstring)."""

    def __init__(self) -> None:
        self.link: Outbound | None = None
        self.token = -1
        #: The first and the end of the events hinted and not polled yet (None: none): the log keeps them.
        self.hinted: tuple[int, int] | None = None
        self.frames = 0  # frames written (``stats()["event_frames"]``)

    def subscribe(self, token: int, address: tuple[str, str]) -> bool:
        """Write the events to the driver's listener at ``address`` from now on, tagged with
        ``token``; False if the driver is on another node or cannot be reached (it polls)."""
        self.close()
        if address[0] != node_id():
            return False
        try:
            self.link = Outbound("the driver", address[1])
        except OSError:
            return False
        self.token, self.hinted = token, None
        return True

    def send(self, first: int, events: list[Any]) -> bool:
        """Write ``events``, numbered from ``first``; whether they may leave the log (written
        with a body, and no hinted event before them still waits for the driver's poll)."""
        if self.link is None or not events:
            return False
        body = None if any(_holds_ref(event) for event in events) else _dumps(events)
        if body is None:
            start = first if self.hinted is None else self.hinted[0]
            self.hinted = (start, first + len(events))
        try:
            self.link.send(EVENTS, pickle.dumps((self.token, first, len(events), body), pickle.HIGHEST_PROTOCOL), None)
        except (OSError, TimeoutError):  # the driver's end closed: it polls from its cursor
            self.close()
            return False
        self.frames += 1
        return body is not None and self.hinted is None

    def polled(self, end: int) -> None:
        """A poll handed the driver the events before ``end``: hinted ones among them are in hand."""
        if self.hinted is not None and end >= self.hinted[1]:
            self.hinted = None

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
        self.link, self.hinted = None, None


def _dumps(events: list[Any]) -> bytes | None:
    """The events pickled (cloudpickle: a failure's error may be of a user's class); None if they do not pickle."""
    try:
        return cloudpickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # the driver polls for them, as before
        return None


def _holds_ref(event: Any) -> bool:
    """Whether ``event`` is an output epoch with a part left in the object store."""
    return any(isinstance(part, ray.ObjectRef) for part in getattr(event, "parts", ()))
