"""Socket hops without Ray: frames read back whole and in order from a stream cut anywhere,
and the reader's end (:class:`~raytide.actors.socket_hops.Inbound`) under many senders at
once, with backpressure, a sender dying mid-frame and a receiver that closed."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.actors.socket_hops import Inbound, Outbound
from raytide.physical.frames import (
    ACK,
    DATA,
    MARKER,
    PUSH,
    Frame,
    FrameReader,
    ack_count,
    ack_frame,
    encode_frame,
    replica_call,
)

blobs = st.binary(max_size=300)
packeds = st.one_of(blobs, st.tuples(blobs, st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=3)))
frames = st.lists(st.tuples(st.sampled_from([DATA, MARKER]), packeds), max_size=12)


def _as_read(packed: bytes | tuple[bytes, list[bytes]]) -> bytes | tuple[bytes, list[bytes]]:
    return packed if isinstance(packed, bytes) else (packed[0], list(packed[1]))


@settings(max_examples=60, deadline=None)
@given(sent=frames, cuts=st.lists(st.integers(0, 4000), max_size=20))
def test_frames_come_back_whole_and_in_order_however_the_stream_is_cut(sent, cuts):
    stream = b"".join(bytes(piece) for kind, packed in sent for piece in encode_frame(kind, packed))
    reader = FrameReader()
    got: list[Frame] = []
    last = 0
    for cut in sorted({c % (len(stream) + 1) for c in cuts}) + [len(stream)]:
        got.extend(reader.feed(stream[last:cut]))
        last = cut
    assert got == [Frame(kind, _as_read(packed)) for kind, packed in sent]
    assert not reader.partial


def test_an_acknowledgement_counts_and_a_corrupt_stream_is_named():
    (frame,) = FrameReader().feed(ack_frame(3))
    assert frame.kind == ACK and ack_count(frame) == 3
    with pytest.raises(ValueError, match="unknown kind 9"):
        FrameReader().feed(b"\x09" + bytes(20))
    with pytest.raises(ValueError, match="frame kind 7"):
        encode_frame(7, b"")


def _receiver() -> tuple[Inbound, dict[int, list[int]], threading.Condition]:
    """An inbound end that records each sender's numbers (first byte: sender, then the
    number); its condition (standing for the host's lock of the replica's calls) is
    notified at each frame."""
    got: dict[int, list[int]] = {}
    delivered = threading.Condition()

    def deliver(frame: Frame) -> None:
        with delivered:
            blob = frame.packed if isinstance(frame.packed, bytes) else frame.packed[0]
            got.setdefault(blob[0], []).append(int.from_bytes(blob[1:5], "big"))
            delivered.notify_all()

    return Inbound("test", deliver), got, delivered


def test_many_senders_each_fifo_with_backpressure_and_large_buffers():
    inbound, got, delivered = _receiver()
    senders, count = 6, 300

    def send(sender: int) -> None:
        out = Outbound(f"sender {sender}", inbound.path)
        for number in range(count):
            blob = bytes([sender]) + number.to_bytes(4, "big")
            packed = (blob, [bytes(70_000)]) if number % 50 == 0 else blob  # some frames need several reads
            out.send(DATA, packed, window=2 if sender % 2 else None)
            assert out.unacked <= 2 or sender % 2 == 0
        out.close()

    threads = [threading.Thread(target=send, args=(sender,)) for sender in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    with delivered:
        delivered.wait_for(lambda: sum(map(len, got.values())) >= senders * count, timeout=30)
    inbound.close()
    assert got == {sender: list(range(count)) for sender in range(senders)}


def test_a_sender_dying_mid_frame_leaves_the_others_served():
    inbound, got, delivered = _receiver()
    dying = Outbound("dying", inbound.path)
    (piece,) = encode_frame(DATA, bytes([1]) + (7).to_bytes(4, "big") + bytes(100))
    dying.socket.sendall(bytes(piece)[:20])  # half a frame, then the process "dies"
    dying.close()
    other = Outbound("other", inbound.path)
    other.send(DATA, bytes([2]) + (5).to_bytes(4, "big"), None)
    other.send(MARKER, bytes([2]) + (6).to_bytes(4, "big"), None)
    with delivered:
        assert delivered.wait_for(lambda: len(got.get(2, ())) == 2, timeout=10), \
            "the live sender's frames were not delivered after another sender died"
    inbound.close()
    assert got == {2: [5, 6]}


def test_a_closed_receiver_is_a_connection_error_not_a_hang():
    inbound, _, _ = _receiver()
    out = Outbound("closed peer", inbound.path)
    out.send(DATA, bytes([0]) + bytes(4), None)
    inbound.close()
    started = time.monotonic()
    with pytest.raises(ConnectionError):
        for _ in range(100):  # the first writes after the close may still land in the kernel's buffer
            out.send(DATA, bytes([0]) + bytes(4), window=1)
    assert time.monotonic() - started < 5


def test_a_frame_whose_delivery_raises_is_acknowledged_and_the_next_ones_delivered():
    got: list[bytes] = []
    delivered = threading.Condition()

    def deliver(frame: Frame) -> None:
        assert isinstance(frame.packed, bytes)
        if frame.packed == b"bad":
            raise ValueError("a frame that does not decode")
        with delivered:
            got.append(frame.packed)
            delivered.notify_all()

    inbound = Inbound("raising", deliver)
    out = Outbound("sender", inbound.path)
    for blob in (b"bad", b"after", b"last"):
        out.send(DATA, blob, None)
    with delivered:
        assert delivered.wait_for(lambda: len(got) == 2, timeout=10), "the delivery thread stopped at the frame that raised"
    out.send(DATA, b"more", window=1)  # waits for every acknowledgement but this one's
    assert out.unacked <= 1
    out.close()
    inbound.close()
    assert got[:2] == [b"after", b"last"]


def test_a_corrupt_stream_closes_its_connection_and_leaves_the_others_served():
    inbound, got, delivered = _receiver()
    corrupt = Outbound("corrupt", inbound.path)
    corrupt.socket.sendall(b"\x09" + bytes(20))  # a frame of no kind
    other = Outbound("other", inbound.path)
    other.send(DATA, bytes([3]) + (1).to_bytes(4, "big"), None)
    with delivered:
        assert delivered.wait_for(lambda: got.get(3) == [1], timeout=10), "the reader stopped at the corrupt stream"
    with pytest.raises(ConnectionError):
        for _ in range(100):  # from the second on, each waits for the one before's acknowledgement
            corrupt.send(DATA, bytes([4]) + bytes(4), window=1)
    inbound.close()


def test_a_frame_to_a_replica_names_the_call_it_stands_for_and_another_kind_is_refused():
    import pickle

    assert replica_call(Frame(DATA, b"batches")) == ("receive_many", (b"batches",))
    assert replica_call(Frame(PUSH, b"push")) == ("on_progress", (b"push",))
    assert replica_call(Frame(MARKER, pickle.dumps((1, "marker")))) == ("receive_marker", (1, "marker"))
    with pytest.raises(ValueError, match="kind 2 is not one a replica takes"):
        replica_call(Frame(ACK, b"x"))
