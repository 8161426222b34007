"""How batches and output records travel between actors.

Ray serialises a list of small Python objects element by element; one pickle of the
whole list is about 8 times faster (3 ms against 24 ms for 25,000 ``(word, count)``
pairs on the 2-core machine), and Ray passes ``bytes`` through almost for free. NumPy
arrays and Arrow tables are better left to Ray, which ships their buffers without
copying. So a list of records travels as one cloudpickle blob (cloudpickle, because
records may hold objects plain pickle cannot, such as instances of classes defined in
``__main__``) and every other batch as it is.

Large buffers inside records (a NumPy array's data, an Arrow column) would be copied
into the blob, and out of it again, at every hop. Pickle protocol 5 hands them over
beside the blob instead (*out of band*): a record list with buffers of at least
:data:`OUT_OF_BAND_BYTES` travels as ``(blob, buffers)``, and Ray writes those buffers
into its object store once and lets the receiver read them in place. They arrive
read-only, as the NumPy arrays Ray ships always do. Smaller buffers stay in the blob, so
a list of small records is still one ``bytes`` (see docs/large-records.md).
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

import cloudpickle

from raytide.errors import RecordError

#: Buffers of records at least this large travel beside the pickle, not in it (see the module docstring).
OUT_OF_BAND_BYTES = 1 << 20

#: A packed list of records: one blob, or a blob and its large buffers (``pickle.PickleBuffer``
#: objects when packed, Ray's read-only buffers once they travelled).
Packed = bytes | tuple[bytes, list[Any]]


def pack_records(records: list) -> Packed:
    """A list of records as one blob, with its large buffers beside it (see the module docstring)."""
    large: list[pickle.PickleBuffer] = []

    def in_band(buffer: pickle.PickleBuffer) -> bool:
        if memoryview(buffer).nbytes < OUT_OF_BAND_BYTES:
            return True
        large.append(buffer)
        return False

    blob = cloudpickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=in_band)
    return (blob, large) if large else blob


def unpack_records(packed: Packed) -> list:
    """The list :func:`pack_records` was given, built with the cyclic garbage collector paused.

    Large buffers are not copied: the records' arrays are views of them.

    Unpickling creates one tracked object per record (a tuple, a dict), and every 700 of
    them start a collection that walks the young objects again; a large batch also sets
    off full collections over the whole heap. Paused, the records are examined once, at
    the next collection after this call: the driver's ``collect`` of word count's 470,000
    ``(word, count)`` pairs took 0.08-0.26 s with the collector running and 0.03-0.06 s
    without it. Nothing escapes the collector: what was created meanwhile is examined at
    its next run.
    """
    blob, buffers = packed if isinstance(packed, tuple) else (packed, ())
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(blob, buffers=buffers)
    finally:
        if was_enabled:
            gc.enable()


def packed_size(packed: Packed) -> int:
    """Bytes of a packed list of records, its large buffers included."""
    if isinstance(packed, bytes):
        return len(packed)
    blob, buffers = packed
    return len(blob) + sum(memoryview(buffer).nbytes for buffer in buffers)


def pack(batch: Any) -> tuple[Any, bool]:
    """``(payload, packed)``: a list becomes one blob, any other batch stays as it is."""
    if isinstance(batch, list):
        return pack_records(batch), True
    return batch, False


def unpack(payload: Any, packed: bool) -> Any:
    """The batch :func:`pack` was given."""
    return unpack_records(payload) if packed else payload


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
