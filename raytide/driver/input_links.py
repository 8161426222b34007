"""The driver's calls into its input replicas on its node over their sockets
(:mod:`raytide.actors.socket_hops`) instead of Ray calls (issue 76).

An epoch's push and advance cost a Ray call per input replica (``push(..., then=)`` to each
replica with records, ``advance`` or ``advance_quietly`` to the others: :mod:`raytide.driver.inputs`),
about half a millisecond of CPU at each end on two cores; as a
:data:`~raytide.physical.frames.CALL` frame on the replica's socket, a few tens of
microseconds. The replica's delivery thread runs the frame as the Ray call would have run,
under its host's lock of the replica's calls, and acknowledges it once run.

Only the calls whose answer nobody reads travel so (:data:`~raytide.physical.frames.DRIVER_CALLS`),
and only small ones: a push with a buffer large enough to travel beside its pickle
(:data:`~raytide.physical.pickled.OUT_OF_BAND_BYTES`) goes through Ray's object store, which
the replica reads in place, where a socket would copy it four times. The others (object
refs, which Ray must see, a stream's batches, whose answers the driver reads) stay Ray
calls. Per replica, the channel stays FIFO across the two transports, by the rule the
replicas follow between themselves (:class:`~raytide.actors.ray_transport.RayTransport`):

* the first call asks the replica its socket's address and goes by Ray call, as the next
  ones do, until the answer is in; then the driver waits until every Ray call to it has run
  (its window of calls in flight is empty) and only then sends a frame, which cannot
  overtake a Ray call still queued;
* a call that must go by Ray waits first until every frame sent was run (acknowledged), so
  it cannot overtake a frame still queued at the replica's socket.

The window of unacknowledged frames is the window of calls in flight (backpressure), waited
for in steps of :data:`ROOM_POLL` seconds between which the driver checks its job's failure,
as it does for Ray calls. A replica elsewhere, or without a listener (sockets off), stays on
Ray calls. A socket that fails is the replica's role gone (dead, or its lease over): that call
and the next go by Ray, which fail as calls to a dead replica do (a recovery sends them again
from the call log). A recovery or a rescale (:meth:`InputLinks.reset`, under every input's
lock) closes every socket: the replicas may be new, and a replica restored in place drops
what its socket still holds, which is of the old incarnation; calls go by Ray until each
replica's window is empty again. Before a rescale's cut the driver waits until every frame
sent was run (:meth:`InputLinks.settle`), as it waits for the Ray calls in flight.

A replica's calls are made under its input's lock, so one thread at a time uses its link.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import ray

from raytide.actors.socket_hops import Outbound, connect_ready
from raytide.driver.connected import ray_wait
from raytide.physical.frames import CALL, DRIVER_CALLS, call_frame

#: An input replica the driver reaches by Ray calls only (elsewhere, or without a socket).
BY_CALL = "ray"
#: How long one wait for a replica's acknowledgements lasts before the job's failure is checked again.
ROOM_POLL = 1.0


class InputLinks:
    """Per input replica's handle: its socket, the pending answer of its address, or :data:`BY_CALL`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.links: dict[Any, Any] = {}
        self.frames = 0  # calls sent by socket (``job.stats()["input_frames"]``)

    def sent(self, actor: Any, method: str, args: tuple[Any, ...], window: deque, max_inflight: int,
             answered: Callable[[deque, list], None], check: Callable[[], None]) -> bool:
        """Send ``method(*args)`` to ``actor`` by socket if its channel goes by socket now, and
        say so; False: the caller sends it by Ray call, which may go now (every frame sent
        before it has run). ``window``: the Ray calls to ``actor`` in flight, of which
        ``answered(window, ready)`` forgets those ``ready``; ``check`` raises the job's failure
        between waits. The first switch waits for the window to empty (a driver that pushes
        without pause would never see it empty); a switch back after a Ray call does not."""
        link = self.links.get(actor)
        if link is None and self.enabled and method in DRIVER_CALLS:
            self.links[actor] = actor.socket_address.remote()
            return False
        if link is None or link == BY_CALL:
            return False
        frame = call_frame(method, args) if method in DRIVER_CALLS else None
        if isinstance(frame, tuple):  # large buffers beside it: by Ray, through the object store
            frame = None
        if isinstance(link, Outbound):
            if frame is not None and window:
                answered(window, ray_wait(list(window), num_returns=len(window), timeout=0)[0])
            if frame is not None and not window:
                return self._write(actor, link, frame, max_inflight, check)
            self._drained(actor, link, check)  # a Ray call next: every frame before it has run
        elif frame is not None and ray_wait([link], timeout=0)[0]:
            while window:  # every Ray call to it has run before the first frame
                check()
                answered(window, ray_wait(list(window), num_returns=len(window), timeout=ROOM_POLL)[0])
            link = self.links[actor] = self._connect(actor, link)
            return isinstance(link, Outbound) and self._write(actor, link, frame, max_inflight, check)
        return False

    @staticmethod
    def _connect(actor: Any, address: Any) -> Outbound | str:
        try:
            outbound = connect_ready(address, f"input replica {actor}")
        except ray.exceptions.RayActorError:  # it died: its calls fail as Ray calls
            outbound = None
        return BY_CALL if outbound is None else outbound

    def _write(self, actor: Any, link: Outbound, frame: bytes, max_inflight: int, check: Callable[[], None]) -> bool:
        """One frame, once the window has room; False if the socket failed (the role is gone:
        this call and the next go by Ray)."""
        try:
            self._wait(link, max_inflight, check)
            link.send(CALL, frame, None)
        except (OSError, TimeoutError):
            link.close()
            self.links[actor] = BY_CALL
            return False
        self.frames += 1
        return True

    @staticmethod
    def _wait(link: Outbound, window: int, check: Callable[[], None]) -> None:
        """Until fewer than ``window`` frames are unacknowledged, checking the job between waits."""
        while not link.room(window, ROOM_POLL):
            check()

    def settle(self, check: Callable[[], None]) -> None:
        """Wait until every frame sent to every replica has run (a rescale's cut comes after them)."""
        for actor, link in list(self.links.items()):
            if isinstance(link, Outbound):
                self._drained(actor, link, check)

    def _drained(self, actor: Any, link: Outbound, check: Callable[[], None]) -> None:
        """Wait until every frame sent on ``link`` has run; a replica whose socket failed is
        gone, and nothing of it is waited for (its link is dropped: Ray calls from now on)."""
        try:
            self._wait(link, 1, check)
        except (OSError, TimeoutError):
            link.close()
            self.links[actor] = BY_CALL

    def reset(self) -> None:
        """A recovery or a rescale: every socket closed, every replica asked again (see the module docstring)."""
        for link in self.links.values():
            if isinstance(link, Outbound):
                link.close()
        self.links = {}
