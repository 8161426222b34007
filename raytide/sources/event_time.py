"""Sources read in the replicas with ``event_time=``: each reader assigns its records to their
event-time epochs where it reads them.

Design: every reader of such a source (one per input replica, :mod:`raytide.sources.base`) is
wrapped in an :class:`EventTimeReader` with a :class:`~raytide.windows.source_clock.SourceClock`
of its own: a reader is one producer with its own watermark, and the input's frontier, the
least of its replicas' epochs, is the least of the readers' watermarks, as the frontier
combines pushed partitions. Records of epochs the watermark has not reached yet wait in the
reader; the reader's position is where its inner reader was before the batch in hand, the
clock as it was then, and how many of that batch's items were taken, so every snapshot
holds the clock (the held records and the late count included) with the records the replica
sent, and a recovery resumes exactly (the batch is read and cut again, the same way: nothing
here depends on a wall clock). The data never passes through the driver.

A late record (its epoch closed before its batch was read) is counted in the clock, which the
replica reports (``job.stats()["late"]``); when the input has a ``late_output``, it is sent,
as a row, at the epoch the reader was at, wrapped as :class:`LateRecords`, which the vertex
``<input>.split`` fused behind the input sends to the late output instead of the stream.

A batch's timestamps: the named column of an Arrow table (a timestamp, date, integer or
float type: seconds), or the function of each record (a text source's lines).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raytide.core.batches import is_arrow, to_records
from raytide.errors import GraphError, SourceError
from raytide.sources.base import Reader
from raytide.windows.event_time import EventTime, LateCount, LateRecords, timestamp_problem
from raytide.windows.source_clock import ClockState, EpochPiece, SourceClock


def event_time_of(source: str, name: str, given: Any, declared: EventTime | None) -> EventTime | None:
    """The event time input ``name`` is read with: the source's ``event_time=`` (a column, a
    function or an ``rt.EventTime``) over the input's ``flow.input(..., event_time=)``.

    Raises:
        GraphError: both give a whole spec, and they differ; or the source's spec has a
            ``late_output``, which only ``flow.input`` can make.
    """
    if given is None:
        return declared
    if not isinstance(given, EventTime):
        return replace(declared, timestamp=given) if declared is not None else EventTime(given)
    if given.late_output is not None:
        raise GraphError(f"input {name!r}: the {source}'s event_time has late_output={given.late_output!r}, but a "
                         f"late output is part of the dataflow: give it in flow.input({name!r}, event_time=...)")
    if declared is not None and replace(declared, late_output=None) != given:
        raise GraphError(f"input {name!r}: the {source}'s event_time {given} differs from the input's {declared}; "
                         f"give the spec once (or only the timestamp column to the source)")
    return declared if declared is not None else given


def check_schema(spec: EventTime, schema: pa.Schema | None, source: str) -> None:
    """Raise a SourceError, naming ``source`` and the column, unless its rows (``schema``;
    None: records without columns, a text source's lines) have ``spec``'s timestamp column
    of a time or number type. A function of a record is checked as records are read."""
    column = spec.timestamp
    if not isinstance(column, str):
        return
    if schema is None:
        raise SourceError(f"{source}: event_time column {column!r}: its records are lines of text, without columns; "
                          f"give event_time a function of a line")
    if column not in schema.names:
        raise SourceError(f"{source}: event_time column {column!r} is not a column (columns: {schema.names})")
    kind = schema.field(column).type
    if not _time_type(kind):
        raise SourceError(f"{source}: event_time column {column!r} has type {kind}; event times are timestamps, "
                          f"dates or numbers of seconds")


def _time_type(kind: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_integer(kind)
                or pa.types.is_floating(kind))


def stamps(spec: EventTime, batch: Any, source: str) -> np.ndarray:
    """Every record's timestamp in seconds, as floats; a SourceError naming the first bad one."""
    if is_arrow(batch) and isinstance(spec.timestamp, str):
        return _column_seconds(batch, spec.timestamp, source)
    records = to_records(batch)
    seconds = np.empty(len(records))
    for position, record in enumerate(records):
        try:
            seconds[position] = spec.stamp(record)
        except Exception as error:  # a timestamp function's own error too
            raise SourceError(f"{source}: record {position} of its batch ({record!r:.80}) "
                              f"{timestamp_problem(spec, error)}") from error
    return seconds


def _column_seconds(table: pa.Table, column: str, source: str) -> np.ndarray:
    values = table.column(column)
    if values.null_count:
        first = pc.index(pc.is_null(values), True).as_py()
        raise SourceError(f"{source}: event_time column {column!r} has {values.null_count} null value(s), the first "
                          f"in record {first} of its batch")
    kind = values.type
    if pa.types.is_date(kind):
        values, kind = values.cast(pa.timestamp("s")), pa.timestamp("s")
    if pa.types.is_timestamp(kind):
        per_second = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[kind.unit]
        return pc.cast(values, pa.int64()).to_numpy().astype(np.float64) / per_second
    seconds = values.to_numpy().astype(np.float64)
    if not np.isfinite(seconds).all():
        first = int(np.flatnonzero(~np.isfinite(seconds))[0])
        raise SourceError(f"{source}: event_time column {column!r} has a value that is not finite ({seconds[first]}) "
                          f"in record {first} of its batch")
    return seconds


def cut(spec: EventTime, batch: Any, seconds: np.ndarray) -> list[EpochPiece]:
    """The batch cut into one piece per epoch, epochs increasing, records in their order."""
    epochs = np.floor(seconds / spec.granularity).astype(np.int64)
    order = np.argsort(epochs, kind="stable")
    bounds = np.flatnonzero(np.diff(epochs[order])) + 1
    pieces = []
    for rows in np.split(order, bounds) if len(order) else []:
        piece = batch.take(pa.array(rows)) if is_arrow(batch) else [batch[i] for i in rows]
        pieces.append((int(epochs[rows[0]]), piece, len(rows), float(seconds[rows].min())))
    return pieces


@dataclass(frozen=True)
class EventTimePosition:
    """Where an :class:`EventTimeReader` is: its inner reader at ``inner``, its clock ``clock``
    after the batches read so far, and ``pending``, what those batches gave that was not
    taken yet (``(epoch, piece)``). Resuming needs no batch read again, so an inner reader
    that cuts its batches differently after a resume changes nothing already judged."""

    inner: Any
    clock: ClockState
    pending: tuple[tuple[int, Any], ...] = ()


@dataclass
class EventTimeReader(Reader[EventTimePosition]):
    """A reader whose records go to their event-time epochs (see the module docstring).

    Attributes:
        inner: the source's reader (its epochs are ignored).
        spec: the event time.
        source: how errors name the source and reader.
        late_out: send late records to the input's late output (as :class:`LateRecords`).
    """

    inner: Reader[Any]
    spec: EventTime
    source: str
    late_out: bool = False
    #: The late records so far (``job.stats()["late"]``); the clock's while it reads.
    late: LateCount = field(default_factory=LateCount)

    def start(self) -> EventTimePosition:
        return EventTimePosition(self.inner.start(), ClockState())

    def check_position(self, position: EventTimePosition) -> None:
        self.inner.check_position(position.inner)
        self.late = SourceClock.restored(self.spec, position.clock).late  # what a restored replica reports

    def read_from(self, position: EventTimePosition) -> Iterator[tuple[int, Any, EventTimePosition]]:
        clock = SourceClock.restored(self.spec, position.clock)
        self.late = clock.late
        self.inner.seek(position.inner)
        batches = iter(self.inner)
        at, pending = position, position.pending
        while True:
            for taken, (epoch, piece) in enumerate(pending, start=1):
                yield epoch, piece, replace(at, pending=pending[taken:])
            batch = next(batches, None)
            if batch is None and not clock.held:
                return
            items = judge(clock, [batch[1]], self.source, self.late_out) if batch is not None else clock.close()
            pending = tuple(items)
            at = EventTimePosition(self.inner.position(), clock.state(), pending)


def judge(clock: SourceClock, batches: list[Any], source: str, late_out: bool,
          release: float | None = None) -> list[tuple[int, Any]]:
    """What ``batches``, judged as one batch by ``clock``, give, as ``(epoch, batch)`` items in
    epoch order: with ``release`` (the replica is idle: the watermark to release it to,
    :meth:`SourceClock.release`), first what the clock held for the epochs it passes; then late
    records (at the epoch before the batch; as :class:`LateRecords` when ``late_out``, else only
    counted), the pieces sent, and, if the clock moved past them, an empty batch at its new
    epoch. Timestamps are read with the clock's spec; a bad one raises a SourceError naming ``source``."""
    pieces: list[EpochPiece] = []
    highest = -math.inf
    for batch in batches:
        seconds = stamps(clock.spec, batch, source)
        if len(seconds):
            pieces += cut(clock.spec, batch, seconds)
            highest = max(highest, float(seconds.max()))
    before = clock.epoch
    freed = clock.release(release) if release is not None else []
    taken = clock.take(pieces, highest)
    late = [(epoch, LateRecords(to_records(piece))) for epoch, piece in taken.late] if late_out else []
    items = freed + late + taken.sends
    reached = (items[-1][0] if items else before) == taken.epoch
    return items if reached else [*items, (taken.epoch, [])]


def with_event_time(readers: list[Reader[Any]], spec: EventTime, source: str, late_out: bool) -> list[Reader[Any]]:
    """Each reader wrapped in an :class:`EventTimeReader`, named ``source`` reader ``i``."""
    return [EventTimeReader(reader, spec, f"{source} reader {index}", late_out) for index, reader in enumerate(readers)]


def event_time_readers(source: Any, name: str, declared: EventTime | None, readers: list[Reader[Any]]) -> list[Reader[Any]]:
    """``source``'s readers of input ``name`` (whose ``flow.input`` spec is ``declared``), each
    wrapped in an :class:`EventTimeReader` when the source or the input has an event time
    (:func:`source_event_time`, which checks it before data moves)."""
    found = source_event_time(source, name, declared)
    if found is None:
        return readers
    spec, label = found
    return with_event_time(readers, spec, label, declared is not None and declared.late_output is not None)


def source_event_time(source: Any, name: str, declared: EventTime | None) -> tuple[EventTime, str] | None:
    """The event time input ``name`` (whose ``flow.input`` spec is ``declared``) is read from
    ``source`` with, and how messages name the source; None if neither gives one. The
    source's timestamp column is checked against its schema first, before data moves.

    Raises:
        GraphError: a source that cannot say what its rows are (not a text, Arrow, Ray Data
            or Spark stream source), or specs that disagree (:func:`event_time_of`).
        SourceError: the column is missing or of a type that is not a time, or the source
            was also given epochs some other way.
    """
    given = getattr(source, "event_time", None)
    if given is None and declared is None:
        return None
    describe = getattr(source, "event_time_schema", None)
    if describe is None:
        raise GraphError(f"input {name!r} takes its epochs from event times, but {type(source).__name__} has no "
                         f"event_time=: read it with a text, Arrow, Ray Data or Spark stream source, or push its records")
    label, schema = describe()
    spec = event_time_of(label, name, given, declared)
    assert spec is not None
    check_schema(spec, schema, label)
    return spec, label
