"""Pickling for the wire: a list of records, or a data call's arguments, as one blob with
its large buffers beside it. Needs neither NumPy nor the batch types, so that the progress
actor, which packs outputs, starts without them; :mod:`raytide.physical.wire` unpacks.

Ray serialises a list of small Python objects element by element; one pickle of the
whole list is about 8 times faster (3 ms against 24 ms for 25,000 ``(word, count)``
pairs), and Ray passes ``bytes`` through almost for free.

Large buffers inside records (a NumPy array's data, an Arrow column) would be copied
into the blob, and out of it again, at every hop. Pickle protocol 5 hands them over
beside the blob instead (*out of band*): a record list with buffers of at least
:data:`OUT_OF_BAND_BYTES` travels as ``(blob, buffers)``, and Ray writes those buffers
into its object store once and lets the receiver read them in place. They arrive
read-only, as the NumPy arrays Ray ships always do. Smaller buffers stay in the blob, so
a list of small records is still one ``bytes`` (see docs/large-records.md), and the
columns of a small batch arrive as writable copies.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from raytide.errors import RecordError

#: Buffers of records at least this large travel beside the pickle, not in it (see the module docstring).
OUT_OF_BAND_BYTES = 1 << 20

#: A packed list of records: one blob, or a blob and its large buffers (``pickle.PickleBuffer``
#: objects when packed, Ray's read-only buffers once they travelled).
Packed = bytes | tuple[bytes, list[Any]]


def pack_records(records: Any) -> Packed:
    """A list of records (or any batch but an Arrow one) as one blob, with its large buffers
    beside it (see the module docstring)."""
    return _pickled(cloudpickle.dumps, records)


def copied(records: Any, where: Callable[[], str]) -> Any:
    """A batch as another process would get it: every record (and buffer) copied, so that
    changing the copy cannot change ``records``; what a fused consumer of a stream read twice
    gets. Large buffers are copied too (not handed beside the blob as :func:`pack_records`
    does: in one process they would still be the same memory). Raises the :class:`RecordError`
    of :func:`unpicklable`, naming ``where()`` (built only then), if a record does not pickle
    (as it could not travel to another process either)."""
    try:
        blob = cloudpickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        raise unpicklable(records if isinstance(records, list) else [records], error, where()) from error
    return pickle.loads(blob)


def frame(calls: list[tuple[Any, Any, bool]], riding: Sequence[Any]) -> Packed:
    """The arguments of one data call (:meth:`~raytide.actors.vertex_actor.VertexActor.receive_many`)
    as one plain pickle, large buffers beside it: each batch's ``(header, payload, packed)``,
    its payload already packed, and the progress batches riding with them.

    Ray serialises each argument of a call on its own: every argument beyond the first
    costs the caller about 65 us, and a list of three small tuples about 200 us. What is
    framed is importable classes, bytes, pickle buffers and Arrow tables, which the C
    pickler takes (see :func:`~raytide.physical.protocol.encode`)."""
    return _pickled(pickle.dumps, (calls, riding))


def pack_call(value: Any) -> Packed:
    """A call's method and arguments (importable classes, bytes, packed payloads) as one plain
    pickle with its large buffers beside it: one of the driver's calls on a socket
    (:func:`~raytide.physical.frames.call_frame`)."""
    return _pickled(pickle.dumps, value)


def _pickled(dumps: Callable[..., bytes], value: Any) -> Packed:
    """``value`` pickled by ``dumps`` (protocol 5) with its buffers of at least
    :data:`OUT_OF_BAND_BYTES` beside the blob."""
    large: list[pickle.PickleBuffer] = []

    def in_band(buffer: pickle.PickleBuffer) -> bool:
        if memoryview(buffer).nbytes < OUT_OF_BAND_BYTES:
            return True
        large.append(buffer)
        return False

    blob = dumps(value, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=in_band)
    return (blob, large) if large else blob


def packed_size(packed: Packed) -> int:
    """Bytes of a packed list of records, its large buffers included."""
    if isinstance(packed, bytes):
        return len(packed)
    blob, buffers = packed
    return len(blob) + sum(memoryview(buffer).nbytes for buffer in buffers)


def unpicklable(records: list, error: Exception, where: str, offset: int = 0, then: str = "") -> RecordError:
    """The error for ``records`` that did not pickle (``error``): it names ``where`` they were
    going (an input and epoch, an output and epoch, a channel), the first offending record
    (its index, counting from ``offset``, and type) and what ``then`` happened."""
    index, record = first_unpicklable(records)
    text = repr(record)
    shown = text if len(text) <= 80 else text[:77] + "..."
    return RecordError(f"{where}: record {offset + index}, of type {type(record).__qualname__} ({shown}), cannot be "
                       f"pickled, so it cannot travel to another process: {error}{then}")


def first_unpicklable(records: list) -> tuple[int, Any]:
    """The index and the first of ``records`` that does not pickle (for error messages, after
    :func:`pack_records` failed); ``(-1, records)`` if each pickles on its own."""
    for index, record in enumerate(records):
        try:
            cloudpickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return index, record
    return -1, records
