"""How batches and output records travel between actors: packed, unpacked, and kept by outputs.

Every batch but an Arrow one (a list of records, a NumPy array, a dict of columns, a lazy
batch) travels as one cloudpickle blob, packed by :mod:`raytide.physical.pickled`, large
buffers beside it (cloudpickle, because records may hold objects plain pickle cannot, such
as instances of classes defined in ``__main__``); Arrow tables, which Ray ships as their
buffers, travel as they are. Columnar batches are pickled too: a Ray call whose argument
is a dict of two 3,000-row NumPy columns cost its caller 810-910 us of CPU against 590-640
us for the same dict pickled first (Ray serialises each array on its own, with its
metadata), and an incremental epoch of connected components, made of such calls, about
10% less CPU in all processes. For the same reason a data call has one argument
(:func:`~raytide.physical.pickled.frame`): its batches' headers, payloads and the progress
batches riding with them in one plain pickle.

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
from collections.abc import Callable
from typing import Any

import numpy as np

from raytide.core.batches import BatchFormat, concat_batches, is_arrow, to_records
from raytide.errors import RecordError

# Packing lived here before it moved to raytide.physical.pickled: its names stay importable from here (``as``).
from raytide.physical.pickled import OUT_OF_BAND_BYTES as OUT_OF_BAND_BYTES
from raytide.physical.pickled import Packed, pack_records
from raytide.physical.pickled import first_unpicklable as first_unpicklable
from raytide.physical.pickled import frame as frame
from raytide.physical.pickled import packed_size as packed_size
from raytide.physical.pickled import unpicklable as unpicklable


def unframe(framed: Packed) -> tuple[list[tuple[Any, Any, bool]], list[Any]]:
    """What :func:`~raytide.physical.pickled.frame` was given (large buffers as views, not copies)."""
    calls, riding = unpack_items(framed)[0]
    return calls, riding


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
