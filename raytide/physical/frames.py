"""Frames on a byte stream: how a replica's calls travel over a socket to a peer on its node
(:mod:`raytide.actors.socket_hops`) instead of as Ray calls.

A frame is one call's arguments as the wire format already packs them
(:data:`~raytide.physical.pickled.Packed`: a blob, or a blob with its large buffers beside
it), behind a header that says its kind, how many buffers follow the blob and each part's
length. The large buffers go out as they are (no copy into the blob) and arrive as separate
``bytes``, which ``pickle.loads(blob, buffers=...)`` takes as a Ray call's out-of-band
buffers are taken.

Reading is incremental: :class:`FrameReader` is fed whatever a ``recv`` returned (half a
header, three frames and a piece of the fourth) and hands back the whole frames in the order
they were written, keeping the rest for the next feed. One stream carries one sender's
frames to one receiver, so the order of a stream is the order of its channels' messages:
FIFO per channel, as Ray's ordering of one caller's calls was.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, NamedTuple

from raytide.physical.pickled import Packed, pack_call

#: A frame's header: its kind, how many large buffers follow the blob, and the blob's length.
HEADER = struct.Struct("!BHI")
#: The length of each large buffer, after the header.
LENGTH = struct.Struct("!Q")
#: Frame kinds: a ``receive_many`` call's framed arguments; a ``receive_marker`` call's
#: arguments, pickled; the receiver's acknowledgement of frames it delivered (the blob: their
#: count); a progress actor's ``receive`` call's encoded argument; a replica's ``on_progress``
#: call's (a status push); one of the driver's calls into an input replica (:func:`call_frame`);
#: the progress actor's job events for the driver (:mod:`raytide.actors.event_feed`).
DATA, MARKER, ACK, PROGRESS, PUSH, CALL, EVENTS = 0, 1, 2, 3, 4, 5, 6
KINDS = (DATA, MARKER, ACK, PROGRESS, PUSH, CALL, EVENTS)
#: The driver's calls into an input replica that may travel as a :data:`CALL` frame: those
#: whose answer nobody reads (:mod:`raytide.driver.input_links`).
DRIVER_CALLS = frozenset({"push", "advance", "advance_quietly"})


class Frame(NamedTuple):
    """One frame read back: its kind and what was packed."""

    kind: int
    packed: Packed


def encode_frame(kind: int, packed: Packed) -> list[bytes | memoryview]:
    """The pieces to write, in order, for one frame of ``kind`` carrying ``packed`` (large
    buffers as views of themselves, not copied)."""
    if kind not in KINDS:
        raise ValueError(f"frame kind {kind!r} is not one of {KINDS}")
    blob, buffers = packed if isinstance(packed, tuple) else (packed, [])
    views = [memoryview(buffer).cast("B") for buffer in buffers]
    head = HEADER.pack(kind, len(views), len(blob)) + b"".join(LENGTH.pack(view.nbytes) for view in views)
    return [head + blob, *views] if len(blob) < 1 << 16 else [head, blob, *views]


def call_frame(method: str, args: tuple[Any, ...]) -> Packed:
    """One of the driver's :data:`DRIVER_CALLS` with its arguments, packed for a :data:`CALL`
    frame (large buffers beside the blob, as a Ray call's are)."""
    if method not in DRIVER_CALLS:
        raise ValueError(f"{method!r} is not a call the driver sends by socket; those are {sorted(DRIVER_CALLS)}")
    return pack_call((method, args))


def called(frame: Frame) -> tuple[str, tuple[Any, ...]]:
    """The method and arguments of a :data:`CALL` frame (refused unless one of :data:`DRIVER_CALLS`)."""
    blob, buffers = frame.packed if isinstance(frame.packed, tuple) else (frame.packed, [])
    method, args = pickle.loads(blob, buffers=buffers)
    if method not in DRIVER_CALLS:
        raise ValueError(f"a call frame names {method!r}, not one of {sorted(DRIVER_CALLS)}")
    return method, args


def replica_call(frame: Frame) -> tuple[str, tuple[Any, ...]]:
    """The vertex actor's method a frame to a replica stands for, with its arguments: a peer's
    data batches, a progress push or a marker, or the driver's call (:func:`called`)."""
    if frame.kind == CALL:
        return called(frame)
    if frame.kind == DATA:
        return "receive_many", (frame.packed,)
    if not isinstance(frame.packed, bytes) or frame.kind not in (PUSH, MARKER):
        raise ValueError(f"a frame of kind {frame.kind} is not one a replica takes")
    return ("on_progress", (frame.packed,)) if frame.kind == PUSH else ("receive_marker", pickle.loads(frame.packed))


def ack_frame(count: int) -> bytes:
    """An acknowledgement of ``count`` frames delivered, as bytes to write."""
    return b"".join(encode_frame(ACK, LENGTH.pack(count)))


def ack_count(frame: Frame) -> int:
    """How many frames an :data:`ACK` frame acknowledges."""
    assert isinstance(frame.packed, bytes)
    return int(LENGTH.unpack(frame.packed)[0])


class FrameReader:
    """Whole frames out of a byte stream fed in pieces of any size (see the module docstring)."""

    def __init__(self) -> None:
        self.pending = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """The frames completed by ``data``, in the order they were written."""
        self.pending += data
        frames = []
        offset = 0
        while True:
            frame, offset_after = self._one(offset)
            if frame is None:
                break
            frames.append(frame)
            offset = offset_after
        if offset:
            del self.pending[:offset]
        return frames

    def _one(self, offset: int) -> tuple[Frame | None, int]:
        """The frame starting at ``offset`` of what is pending, and where the next starts; None if it is not all here."""
        pending = self.pending
        if len(pending) - offset < HEADER.size:
            return None, offset
        kind, count, blob_length = HEADER.unpack_from(pending, offset)
        if kind not in KINDS:
            raise ValueError(f"a frame of unknown kind {kind} at byte {offset}: the stream is corrupt")
        start = offset + HEADER.size + count * LENGTH.size
        if len(pending) < start:
            return None, offset
        lengths = [LENGTH.unpack_from(pending, offset + HEADER.size + i * LENGTH.size)[0] for i in range(count)]
        end = start + blob_length + sum(lengths)
        if len(pending) < end:
            return None, offset
        blob = bytes(pending[start:start + blob_length])
        buffers, at = [], start + blob_length
        for length in lengths:
            buffers.append(bytes(pending[at:at + length]))
            at += length
        return Frame(kind, (blob, buffers) if count else blob), end

    @property
    def partial(self) -> bool:
        """Whether bytes of an unfinished frame are held (a stream that ends now was cut mid-frame)."""
        return bool(self.pending)
