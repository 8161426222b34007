"""Hops between a job's replicas on one node over Unix sockets instead of Ray calls.

A Ray actor call costs 330-830 us a hop on two cores; a Unix socket between two processes
costs about 8 us (issue 76). Ray keeps what it is good at: placement, the processes'
lifecycle and death detection. The sockets carry what a sender's ``receive_many`` and
``receive_marker`` calls carried, framed as before (:mod:`raytide.physical.frames`).

The receiving end (:class:`Inbound`), one per replica role: a listening socket, a *reader*
thread blocking on all its connections at once through a ``selectors`` selector, and a
*delivery* thread. The reader only reads: it never waits for the replica, so a sender's
write never waits for the replica's event in hand (no actor blocks on one that may be
waiting for it). The delivery thread hands the frames, in the order each connection brought
them, to ``deliver``, which runs them under the host's lock of the replica's calls
(:class:`~raytide.actors.hosts.VertexHost`): the core is never re-entered, a frame runs as a
Ray call's event ran, in turn with them. After each frame it acknowledges it on its
connection; a sender keeps at most ``max_inflight`` frames unacknowledged per receiver, as
it kept Ray calls (backpressure; sends out of a feedback vertex never wait).

The sending end (:class:`Outbound`), one per peer: a connected socket with a write timeout.
A peer that died closed its socket: the next write or acknowledgement read fails at once
(``ConnectionError``), which the transport reports as that replica lost, as it did a failed
Ray call. A peer on another node, or not yet connected, is reached by Ray calls
(:class:`~raytide.actors.ray_transport.RayTransport` keeps the choice, and switches a peer to
its socket only once its Ray calls to it have all run, and never back to Ray calls within an
incarnation, while frames may still wait here: the channel stays FIFO).
"""

from __future__ import annotations

import collections
import logging
import os
import select
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import ray

from raytide.physical.frames import ACK, Frame, FrameReader, ack_count, ack_frame, encode_frame
from raytide.physical.pickled import Packed

logger = logging.getLogger(__name__)

#: Seconds a write to a peer, or a wait for its acknowledgements, may take before the
#: sender gives up on it (a peer stopped, not dead: a dead one's socket fails at once).
WRITE_TIMEOUT_S = 120.0
#: Bytes read from a connection at once.
READ_BYTES = 1 << 18
#: The environment variable that turns the sockets off (``0``) for the jobs a driver starts after it
#: is set: every hop a Ray call, as before the sockets (to compare, or to rule them out).
SETTING = "RAYTIDE_SOCKET_HOPS"


def enabled() -> bool:
    """Whether replicas on one node talk over sockets (:data:`SETTING`: on unless ``0``)."""
    return os.environ.get(SETTING, "1") != "0"


def node_id() -> str:
    """The Ray node this process runs on (a peer elsewhere is reached by Ray calls)."""
    return str(ray.get_runtime_context().get_node_id())


class Inbound:
    """A replica's listening socket, its reader thread and its delivery thread (see the module docstring)."""

    def __init__(self, name: str, deliver: Callable[[Frame], None]) -> None:
        self.name, self.deliver = name, deliver
        self.path = _socket_path(f"raytide-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = socket.socketpair()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        self.inbox: collections.deque[tuple[socket.socket, Frame]] = collections.deque()
        self.arrived = threading.Condition()
        self.closed = False
        self.frames_in = 0
        self.reader = threading.Thread(target=self._read, name=f"raytide-read-{name}", daemon=True)
        self.delivery = threading.Thread(target=self._deliver, name=f"raytide-deliver-{name}", daemon=True)
        self.reader.start()
        self.delivery.start()

    def address(self) -> tuple[str, str]:
        """Where a peer connects: this node's id and the socket's path."""
        return node_id(), self.path

    def _read(self) -> None:
        """The reader thread: accept connections, read whatever arrives, queue whole frames."""
        while not self.closed:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj is not self.wake_r:
                    self._take(key.fileobj, key.data)  # type: ignore[arg-type]  # a connection we registered

    def _accept(self) -> None:
        try:
            connection, _ = self.listener.accept()
        except (BlockingIOError, OSError):
            return
        connection.setblocking(True)
        _write_timeout(connection)  # the acknowledgements' writes
        self.selector.register(connection, selectors.EVENT_READ, FrameReader())

    def _take(self, connection: socket.socket, reader: FrameReader) -> None:
        """Read one connection once; a closed one (its sender gone) is let go, and so is a
        corrupt one (its sender's next write fails: the peer is lost to it), not the reader."""
        try:
            data = connection.recv(READ_BYTES)
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(connection)
            connection.close()
            if reader.partial:
                logger.warning("socket hops %s: a sender's connection closed mid-frame (its sender died)", self.name)
            return
        try:
            frames = reader.feed(data)
        except ValueError:
            logger.exception("socket hops %s: a sender's stream is corrupt; its connection is closed", self.name)
            self.selector.unregister(connection)
            connection.close()
            return
        if frames:
            with self.arrived:
                self.inbox.extend((connection, frame) for frame in frames)
                self.arrived.notify()

    def _deliver(self) -> None:
        """The delivery thread: each frame to ``deliver``, in arrival order, then acknowledged.
        A frame whose delivery raised is logged and acknowledged, and the next ones are
        delivered, as an actor goes on after a call that raised: a delivery thread that died
        would leave every sender waiting for acknowledgements until its write timeout."""
        while True:
            with self.arrived:
                self.arrived.wait_for(lambda: self.inbox or self.closed)
                if self.closed:
                    return
                connection, frame = self.inbox.popleft()
            try:
                self.deliver(frame)
            except Exception:
                logger.exception("socket hops %s: delivering a frame of kind %d raised", self.name, frame.kind)
            self.frames_in += 1
            try:
                connection.sendall(ack_frame(1))
            except OSError:  # the sender is gone: nobody waits for the acknowledgement
                pass

    def close(self) -> None:
        """Stop reading and delivering (frames not delivered yet are dropped: the role is over),
        close every connection and remove the socket's file. Does not wait for the threads."""
        with self.arrived:
            self.closed = True
            self.inbox.clear()
            self.arrived.notify_all()
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass
        if not self.path.startswith("\0"):
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self.reader.join(timeout=5)
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]  # sockets only
        self.selector.close()
        self.wake_w.close()


class Outbound:
    """One peer's connection: frames out, acknowledgements back (see the module docstring)."""

    def __init__(self, peer: str, path: str) -> None:
        self.peer = peer
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.connect(path)
        _write_timeout(self.socket)
        self.acks = FrameReader()
        self.unacked = 0
        self.frames_out = 0

    def send(self, kind: int, packed: Packed, window: int | None) -> float:
        """Write one frame; first, if ``window`` is given, wait until fewer than ``window``
        frames are unacknowledged. Returns the seconds it waited for that. Raises
        ``ConnectionError`` if the peer is gone, ``TimeoutError`` naming it if it stopped."""
        waited = 0.0
        self._drain(block=False)
        if window is not None and self.unacked >= window:
            started = time.perf_counter()
            while self.unacked >= window:
                self._drain(block=True)
            waited = time.perf_counter() - started
        try:
            self._write(encode_frame(kind, packed))
        except BlockingIOError as error:  # SO_SNDTIMEO ran out
            raise TimeoutError(f"socket hop to {self.peer}: a write took over {WRITE_TIMEOUT_S} s") from error
        self.unacked += 1
        self.frames_out += 1
        return waited

    def room(self, window: int, timeout: float) -> bool:
        """Whether fewer than ``window`` frames are unacknowledged, waiting up to ``timeout``
        seconds for acknowledgements (a caller that checks something else between its waits,
        as the driver checks its job's failure). Raises ``ConnectionError`` if the peer is gone."""
        self._drain(block=False)
        deadline = time.monotonic() + timeout
        while self.unacked >= window:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.socket], [], [], left)[0]:
                return False
            self._drain(block=False)
        return True

    def _write(self, pieces: list[bytes | memoryview]) -> None:
        for piece in pieces:
            self.socket.sendall(piece)

    def _drain(self, block: bool) -> None:
        """Read the acknowledgements that arrived (waiting for one if ``block``)."""
        if block and not select.select([self.socket], [], [], WRITE_TIMEOUT_S)[0]:
            raise TimeoutError(f"socket hop to {self.peer}: no acknowledgement for {WRITE_TIMEOUT_S} s "
                               f"with {self.unacked} frames unacknowledged")
        try:
            data = self.socket.recv(READ_BYTES, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if not data:
            raise ConnectionResetError(f"socket hop to {self.peer}: the peer closed its end")
        for frame in self.acks.feed(data):
            if frame.kind == ACK:
                self.unacked -= ack_count(frame)

    def close(self) -> None:
        self.socket.close()


def _socket_path(name: str) -> str:
    """Where a listener binds: on Linux in the abstract namespace (no file: nothing is left
    behind by a process that was killed), elsewhere a file in the temporary directory."""
    if sys.platform == "linux":
        return f"\0{name}"
    return os.path.join(tempfile.gettempdir(), f"{name}.sock")


def _write_timeout(connection: socket.socket) -> None:
    """A blocking socket whose writes fail after :data:`WRITE_TIMEOUT_S` (reads wait in ``select``)."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(WRITE_TIMEOUT_S), 0))


def connect_ready(pending: Any, peer: str) -> Outbound | None:
    """The connection to a peer whose address ``pending`` (an object ref of its
    ``socket_address`` call) has arrived, if it is on this node; None if it is elsewhere or
    has no listener (sockets off there)."""
    address = ray.get(pending)
    if address is None or address[0] != node_id():
        return None
    try:
        return Outbound(peer, address[1])
    except OSError:
        logger.warning("socket hops: could not connect to %s at %s; Ray calls it is", peer, address[1])
        return None
