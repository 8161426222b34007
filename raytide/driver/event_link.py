"""The driver's end of the progress actor's event feed (:mod:`raytide.actors.event_feed`):
the job's events pushed to the driver over a socket as they are logged, instead of polled.

On a node the progress actor shares with the driver, an epoch's completion then reaches the
driver in a socket's hop (tens of microseconds), not in the answer of a Ray call, and the
driver makes no call per poll. :class:`EventLink` listens (:class:`~raytide.actors.socket_hops.Inbound`:
a reader thread, and a delivery thread that queues each frame here), subscribes once with
its cursor (``subscribe``, a Ray call; polls go on meanwhile) and from then on waits on its
queue where it waited for a poll's answer (:class:`~raytide.driver.outputs.OutputCollector`).
Each subscription has a token: a recovery or a rescale (:meth:`EventLink.drop`, where the
driver drops its poll in flight) takes a new one, drops what was queued and subscribes
again, so no frame of the rolled-back run is taken in. Events come numbered; the collector
takes each once, in order (a poll answered while the subscription began may hold some too).
A frame without a body (a *hint*: its events hold object refs, which must travel by Ray) is
fetched with a ``next_events`` call from the collector's cursor.
"""

from __future__ import annotations

import collections
import pickle
import threading
from typing import Any

import ray

from raytide.actors.socket_hops import Inbound
from raytide.physical.frames import Frame

#: A frame taken from the feed: the number of its first event, their count, and the events (None: a hint).
Pushed = tuple[int, int, list[Any] | None]


class EventLink:
    """The driver's listener, its subscription and the frames queued (see the module docstring)."""

    def __init__(self, enabled: bool, name: str) -> None:
        self.enabled, self.name = enabled, name
        self.inbound: Inbound | None = None
        self.arrived = threading.Condition()
        self.queued: collections.deque[Pushed] = collections.deque()
        self.token = 0
        self.asked: Any = None  # the ``subscribe`` call in flight
        self.on = False  # subscribed: the events come here, no poll is made
        self.woken = False  # :meth:`wake` was called: the wait in hand returns

    def ask(self, progress: Any, cursor: int) -> None:
        """Subscribe at ``progress`` from ``cursor`` if not yet (one call; its answer looked at, never waited for)."""
        if self.on or not self.enabled:
            return
        if self.asked is None:
            if self.inbound is None:
                self.inbound = Inbound(f"{self.name}/driver", self._delivered)
            self.asked = progress.subscribe.remote(self.token, self.inbound.address(), cursor)
        elif ray.wait([self.asked], timeout=0)[0]:
            asked, self.asked = self.asked, None
            try:
                answer = ray.get(asked)
            except ray.exceptions.RayActorError:  # the progress actor died: the driver's watch notices
                return
            if answer is not None:  # None: a host that was not (or no longer) of this lease; asked again
                self.on = self.enabled = bool(answer)  # False: elsewhere, polled from now on

    def _delivered(self, frame: Frame) -> None:
        """A frame of the feed, on the listener's delivery thread: queued if of the current subscription."""
        assert isinstance(frame.packed, bytes)
        token, first, count, body = pickle.loads(frame.packed)
        events = None if body is None else pickle.loads(body)
        with self.arrived:
            if token == self.token:
                self.queued.append((first, count, events))
                self.arrived.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a frame, or until :meth:`wake`; whether one is queued."""
        with self.arrived:
            self.arrived.wait_for(lambda: self.queued or not self.on or self.woken, timeout)
            self.woken = False
            return bool(self.queued)

    def wake(self) -> None:
        """End the wait in hand now (a watched actor died: :class:`~raytide.driver.outputs.DeathAlarm`), so
        that its waiter looks at liveness at once instead of at the wait's end."""
        with self.arrived:
            self.woken = True
            self.arrived.notify_all()

    def take(self) -> list[Pushed]:
        """The frames queued, in order (taken)."""
        with self.arrived:
            taken = list(self.queued)
            self.queued.clear()
            return taken

    def drop(self) -> None:
        """A recovery or a rescale restores or replaces the progress actor: a new token, nothing
        queued kept, subscribed again at the next poll."""
        with self.arrived:
            self.token += 1
            self.queued.clear()
            self.on, self.asked = False, None
            self.arrived.notify_all()

    def close(self) -> None:
        """The job is over: stop listening."""
        self.drop()
        if self.inbound is not None:
            self.inbound.close()
            self.inbound = None
