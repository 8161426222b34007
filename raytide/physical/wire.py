"""How batches and output records travel between actors.

Ray serialises a list of small Python objects element by element; one pickle of the
whole list is about 8 times faster (3 ms against 24 ms for 25,000 ``(word, count)``
pairs on the 2-core machine), and Ray passes ``bytes`` through almost for free. Columnar
batches go the same way: a Ray call whose argument is a dict of two 3,000-row NumPy
columns cost its caller 810-910 us of CPU against 590-640 us for the same dict pickled
first (Ray serialises each array on its own, with its metadata), and an incremental
epoch of connected components, made of such calls, about 10% less CPU in all processes.
So every batch but an Arrow one (a list of records, a NumPy array, a dict of columns, a
lazy batch) travels as one cloudpickle blob (cloudpickle, because records may hold
objects plain pickle cannot, such as instances of classes defined in ``__main__``); Arrow
tables, which Ray ships as their buffers, travel as they are. For the same reason a data
call has one argument (:func:`frame`): its batches' headers, payloads and the progress
batches riding with them in one plain pickle.

Large buffers inside records (a NumPy array's data, an Arrow column) would be copied
into the blob, and out of it again, at every hop. Pickle protocol 5 hands them over
beside the blob instead (*out of band*): a record list with buffers of at least
:data:`OUT_OF_BAND_BYTES` travels as ``(blob, buffers)``, and Ray writes those buffers
into its object store once and lets the receiver read them in place. They arrive
read-only, as the NumPy arrays Ray ships always do. Smaller buffers stay in the blob, so
a list of small records is still one ``bytes`` (see docs/large-records.md), and the
columns of a small batch arrive as writable copies.

An output keeps a columnar batch (a NumPy array, a dict of columns, an Arrow table) as
one :class:`BatchRows` among its records rather than as one record per row: a row-wise
list of 100,000 ``(node, label)`` pairs costs 26 ms to build, 17 ms to pickle and 24 ms
to unpickle, the array almost nothing. :func:`unpack_records` turns it into its records,
unless it is asked for the batches (``job.results(name, batch_format=...)``).
"""

from __future__ import annotations

import gc
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

from raytide.core.batches import BatchFormat, concat_batches, is_arrow, to_records
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


def frame(calls: list[tuple[Any, Any, bool]], riding: Sequence[Any]) -> Packed:
    """The arguments of one data call (:meth:`~raytide.actors.vertex_actor.VertexActor.receive_many`)
    as one plain pickle, large buffers beside it: each batch's ``(header, payload, packed)``,
    its payload already packed, and the progress batches riding with them.

    Ray serialises each argument of a call on its own: on the 2-core machine every argument
    beyond the first cost the caller about 65 us, and a list of three small tuples about
    200 us. What is framed is importable classes, bytes, pickle buffers and Arrow tables,
    which the C pickler takes (see :func:`~raytide.physical.protocol.encode`)."""
    return _pickled(pickle.dumps, (calls, riding))


def unframe(framed: Packed) -> tuple[list[tuple[Any, Any, bool]], list[Any]]:
    """What :func:`frame` was given (large buffers as views, not copies)."""
    calls, riding = unpack_items(framed)[0]
    return calls, riding


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


class BatchRows:
    """The records of a columnar batch, held as the batch: one item of an output's record
    list that stands for ``to_records(batch)`` (see the module docstring)."""

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _unpickled_batch_rows, (self.batch,)

    def __repr__(self) -> str:
        return f"BatchRows({self.batch!r})"


_unpickling = threading.local()  # how many BatchRows the current unpack_records met


def _unpickled_batch_rows(batch: Any) -> BatchRows:
    """Unpickling a :class:`BatchRows` counts it, so that a list without any is not scanned."""
    _unpickling.batch_rows = getattr(_unpickling, "batch_rows", 0) + 1
    return BatchRows(batch)


def output_records(batch: Any) -> list:
    """What an output keeps of a batch: a list of records as it is, a columnar batch as one
    :class:`BatchRows` (made records where they are read, not where they are made)."""
    if isinstance(batch, (np.ndarray, dict)) or is_arrow(batch):
        return [BatchRows(batch)]
    return to_records(batch)


def as_records(items: list) -> list:
    """``items`` with every :class:`BatchRows` replaced by its records, in place of it."""
    records: list = []
    for item in items:
        if type(item) is BatchRows:
            records.extend(to_records(item.batch))
        else:
            records.append(item)
    return records


def as_batch(items: list, batch_format: BatchFormat) -> Any:
    """``items`` (records and :class:`BatchRows`) as one batch in ``batch_format``: each
    :class:`BatchRows` converted as the batch it holds, the records between them as lists."""
    batches: list[Any] = []
    run: list = []
    for item in items:
        if type(item) is BatchRows:
            if run:
                batches.append(run)
                run = []
            batches.append(item.batch)
        else:
            run.append(item)
    if run:
        batches.append(run)
    return concat_batches(batches, batch_format)


def unpack_records(packed: Packed) -> list:
    """The list :func:`pack_records` was given, built with the cyclic garbage collector paused,
    each :class:`BatchRows` in it made its records.

    Large buffers are not copied: the records' arrays are views of them.

    Unpickling creates one tracked object per record (a tuple, a dict), and every 700 of
    them start a collection that walks the young objects again; a large batch also sets
    off full collections over the whole heap. Paused, the records are examined once, at
    the next collection after this call: the driver's ``collect`` of word count's 470,000
    ``(word, count)`` pairs took 0.08-0.26 s with the collector running and 0.03-0.06 s
    without it. Nothing escapes the collector: what was created meanwhile is examined at
    its next run.
    """
    items, batched = unpack_items(packed)
    return as_records(items) if batched else items


def unpack_items(packed: Packed) -> tuple[list, bool]:
    """The list :func:`pack_records` was given as it is, and whether it holds any
    :class:`BatchRows` (known from unpickling them, without looking at every record)."""
    blob, buffers = packed if isinstance(packed, tuple) else (packed, ())
    was_enabled = gc.isenabled()
    gc.disable()
    _unpickling.batch_rows = 0
    try:
        return pickle.loads(blob, buffers=buffers), _unpickling.batch_rows > 0
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
    """``(payload, packed)``: an Arrow batch stays as it is, any other becomes one blob
    (large buffers beside it)."""
    if is_arrow(batch):
        return batch, False
    return pack_records(batch), True


def unpack(payload: Any, packed: bool) -> Any:
    """The batch :func:`pack` was given."""
    return unpack_records(payload) if packed else payload


def unpack_for(payload: Any, packed: bool, where: Callable[[], str]) -> Any:
    """:func:`unpack`; a batch that does not unpickle in this process (a record type whose
    module it cannot import, or whose ``__setstate__`` fails) raises a :class:`RecordError`
    naming ``where()`` it was going (worded only then: this runs once per batch), so the job
    fails saying so."""
    try:
        return unpack(payload, packed)
    except Exception as error:
        raise RecordError(f"{where()}: a batch sent there did not unpickle in the receiving process: {error!r}") from error


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
