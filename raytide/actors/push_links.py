"""The progress actor's status pushes to the replicas on its node, over their sockets
(:mod:`raytide.actors.socket_hops`) instead of Ray calls.

A push carries a replica's statuses as they are now (``statuses.update`` where it lands),
so a replica must take its pushes in the order they were made: a later one overtaken by an
earlier one would set a frontier back. So, per replica: the first push asks it for its
socket's address and goes by Ray call, as the next ones do, each call's ref kept, until the
address is in and every one of those calls has run; from then on its pushes go by socket.
The progress actor never waits: it looks (``ray.wait`` with no timeout) at each push. A socket
that fails (the replica's role is gone) is dropped and its pushes go by Ray call again: the
replica is dead or replaced, and the driver learns of that from Ray, as before.
"""

from __future__ import annotations

from typing import Any

import ray

from raytide.actors.socket_hops import Outbound, connect_ready
from raytide.physical.frames import PUSH
from raytide.physical.protocol import ReplicaKey

#: A replica that the progress actor reaches by Ray call only (elsewhere, or without a socket).
BY_CALL = "ray"


class PushLinks:
    """Per replica: its socket, or the pending answer of its address with the pushes since (see the module docstring)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.handles: dict[ReplicaKey, Any] = {}
        self.links: dict[ReplicaKey, Any] = {}  # an Outbound, BY_CALL, or (address ref, [push refs])
        self.frames = 0  # pushes sent by socket

    def reset(self, handles: dict[ReplicaKey, Any]) -> None:
        """The job's replicas now (a connect or a restore): every socket closed, every link asked again."""
        for link in self.links.values():
            if isinstance(link, Outbound):
                link.close()
        self.handles, self.links = handles, {}

    def replace(self, key: ReplicaKey, handle: Any) -> None:
        """Replica ``key`` is played by ``handle`` now (recovered alone): its link is asked again."""
        self.drop(key)
        self.handles[key] = handle

    def drop(self, key: ReplicaKey) -> None:
        """Replica ``key`` left the job: its link closed, its handle forgotten."""
        link = self.links.pop(key, None)
        if isinstance(link, Outbound):
            link.close()
        self.handles.pop(key, None)

    def push(self, key: ReplicaKey, encoded: bytes) -> None:
        """One push to replica ``key``, by socket if its link is up, else by Ray call."""
        link = self._link(key)
        if link is not None:
            try:
                link.send(PUSH, encoded, None)
                self.frames += 1
                return
            except (OSError, TimeoutError):
                link.close()
                self.links[key] = BY_CALL
        ref = self.handles[key].on_progress.remote(encoded)
        pending = self.links.get(key)
        if isinstance(pending, tuple):
            pending[1].append(ref)

    def _link(self, key: ReplicaKey) -> Outbound | None:
        link = self.links.get(key)
        if isinstance(link, Outbound):
            return link
        if not self.enabled or link == BY_CALL:
            return None
        if link is None:
            self.links[key] = (self.handles[key].socket_address.remote(), [])
            return None
        address, calls = link
        ready, _ = ray.wait([address, *calls], num_returns=len(calls) + 1, timeout=0)
        if len(ready) < len(calls) + 1:
            done = set(ready)
            calls[:] = [call for call in calls if call not in done]
            return None
        try:
            outbound = connect_ready(address, f"replica {key}")
        except ray.exceptions.RayActorError:
            outbound = None
        self.links[key] = outbound if outbound is not None else BY_CALL
        return outbound
