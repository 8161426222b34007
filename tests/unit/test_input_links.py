"""The driver's calls into its input replicas by socket (:mod:`raytide.driver.input_links`),
with real sockets and no Ray: which calls go by socket, which wait for the frames before
them, the window of unacknowledged frames, a receiver gone, and the call frames themselves.
The handles are opaque values; ``window`` stands for the driver's Ray calls in flight."""

from __future__ import annotations

import pickle
import threading
import time
from collections import deque

import pytest

from raytide.actors.socket_hops import Inbound, Outbound
from raytide.driver import input_links
from raytide.driver.input_links import BY_CALL, InputLinks
from raytide.physical.frames import CALL, Frame, FrameReader, call_frame, called, encode_frame

ACTOR = "input replica 0"


class Replica:
    """An input replica's socket that records the calls it runs, each once ``gate`` is open
    (closed: frames wait at the receiver, as behind a replica's long event)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.ran: list[tuple[str, tuple]] = []
        self.changed = threading.Condition()
        self.inbound = Inbound("input-links", self._deliver)

    def _deliver(self, frame: Frame) -> None:
        assert frame.kind == CALL
        self.gate.wait(30)
        with self.changed:
            self.ran.append(called(frame))
            self.changed.notify_all()


@pytest.fixture
def replica():
    made = Replica()
    yield made
    made.gate.set()
    if not made.inbound.closed:
        made.inbound.close()


def _linked(replica: Replica) -> InputLinks:
    links = InputLinks(True)
    links.links[ACTOR] = Outbound(ACTOR, replica.inbound.path)
    return links


def _send(links: InputLinks, method: str, *args, window: deque | None = None, max_inflight: int = 4,
          check=lambda: None) -> bool:
    return links.sent(ACTOR, method, (0, "x", *args), deque() if window is None else window, max_inflight,
                      lambda window, ready: None, check)


def _ran(replica: Replica, count: int) -> list[tuple[str, tuple]]:
    with replica.changed:
        replica.changed.wait_for(lambda: len(replica.ran) >= count, timeout=10)
    return replica.ran


def test_a_call_goes_by_socket_only_once_the_ray_calls_ran_and_a_ray_call_waits_for_the_frames(replica, monkeypatch):
    monkeypatch.setattr(input_links, "ray_wait", lambda refs, **_: ([], refs))  # the Ray call never answers
    links = _linked(replica)
    assert not _send(links, "push", 1, window=deque(["a Ray call still in flight"]))  # a frame could overtake it
    assert links.frames == 0
    replica.gate.clear()
    assert all(_send(links, "advance", epoch) for epoch in range(3))  # held at the receiver
    threading.Timer(0.3, replica.gate.set).start()
    started = time.monotonic()
    assert not _send(links, "push_refs", [], 5)  # goes by Ray: only once the three frames ran
    assert time.monotonic() - started > 0.25 and replica.ran == [("advance", (0, "x", e)) for e in range(3)]
    large = (b"records", [pickle.PickleBuffer(bytearray(2 << 20))])  # beside the pickle: through the object store
    assert not _send(links, "push", large, True, 9) and _send(links, "push", b"records", True, 9)
    assert links.frames == 4


def test_the_window_of_frames_is_backpressure_and_its_wait_checks_the_job(replica, monkeypatch):
    monkeypatch.setattr(input_links, "ROOM_POLL", 0.02)
    links = _linked(replica)
    replica.gate.clear()
    assert _send(links, "advance", 1, max_inflight=2) and _send(links, "advance", 2, max_inflight=2)
    checks = []

    def check() -> None:
        checks.append(1)
        if len(checks) == 3:
            raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError, match="the job failed"):
        _send(links, "advance", 3, max_inflight=2, check=check)
    replica.gate.set()
    assert _send(links, "advance", 3, max_inflight=2)
    assert [args[-1] for _, args in _ran(replica, 3)] == [1, 2, 3]


def test_a_receiver_gone_sends_by_ray_from_then_on_and_a_reset_closes_every_socket(replica):
    links = _linked(replica)
    assert _send(links, "advance", 1)
    _ran(replica, 1)
    outbound = links.links[ACTOR]
    replica.inbound.close()
    assert not _send(links, "advance", 2) and links.links[ACTOR] == BY_CALL
    assert not _send(links, "advance", 3)
    other = Replica()
    links.links[ACTOR] = outbound = Outbound(ACTOR, other.inbound.path)
    links.reset()
    other.inbound.close()
    assert links.links == {} and outbound.socket.fileno() == -1


def test_a_sockets_off_driver_never_asks_and_a_call_frame_carries_large_buffers_and_only_driver_calls():
    off = InputLinks(False)
    assert not off.sent(ACTOR, "push", (0,), deque(), 4, lambda window, ready: None, lambda: None) and off.links == {}
    payload = (b"records", [pickle.PickleBuffer(bytearray(range(256)) * 8192)])  # 2 MiB: beside the blob
    pieces = encode_frame(CALL, call_frame("push", (3, "x", payload, True, 7, (), 8)))
    (frame,) = FrameReader().feed(b"".join(bytes(piece) for piece in pieces))
    method, (incarnation, vertex, (blob, buffers), packed, epoch, proxies, then) = called(frame)
    assert (method, incarnation, vertex, blob, packed, epoch, proxies, then) == ("push", 3, "x", b"records", True, 7, (), 8)
    assert bytes(buffers[0]) == bytes(bytearray(range(256)) * 8192)
    with pytest.raises(ValueError, match="'restore' is not a call the driver sends"):
        call_frame("restore", ())
    with pytest.raises(ValueError, match="names 'restore'"):
        called(Frame(CALL, pickle.dumps(("restore", ()))))
