"""Event time, pure: the spec of an event-time input (:class:`EventTime`), a record's
timestamp in seconds (:func:`seconds_of`), and the input's clock (:class:`EventClock`),
which turns pushes of timestamped records into epochs, a watermark and late records.

A record of timestamp ``t`` belongs to epoch ``floor(t / granularity)``. Each producer
(a *partition*: what pushes with ``job.push(name, records, partition=p)``; one by
default) has a watermark, the largest timestamp it pushed minus ``max_delay``; the
input's watermark is the smallest of the partitions' that are not idle (pushed within
``idle_timeout`` seconds of the clock), or, when all are idle, the largest, and it never
goes back (the rule of :mod:`raytide.windows.idleness`, which a stream's replicas share).
Epoch ``e`` is closed once ``floor(watermark / granularity) > e``, i.e. once the watermark
reached ``(e + 1) * granularity``: the input's epoch is the first open one.

A push is judged against the input's epoch before it: its records of earlier epochs are
*late* (their epoch is closed; the spec's ``late_output`` gets them, and the clock counts
them), those of the input's epoch go at once, those of later epochs are held until the
input reaches their epoch. Then the push moves the watermark, and the clock releases
what the epochs it closed held, in epoch order. Time passing moves it too: a partition goes
idle without a push, so the driver's timer ticks the clock (:meth:`EventClock.tick`), which
moves the watermark and releases exactly as a push without records would.

>>> clock = EventClock(EventTime("t", granularity=10, max_delay=5), now=lambda: 0.0)
>>> release = clock.push([{"t": 3}, {"t": 51}, {"t": 12}], [3.0, 51.0, 12.0])
>>> release.sends, release.epoch
([(0, [{'t': 3}]), (1, [{'t': 12}])], 4)
>>> clock.push([{"t": 4}], [4.0]).late[0].lateness
42.0
>>> clock.close().sends
[(5, [{'t': 51}])]
"""

from __future__ import annotations

import datetime
import math
import numbers
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytide.errors import ArgumentError
from raytide.windows.idleness import Idleness

#: A record's timestamp: a function of the record, or the name of a column or dict key.
TimestampOf = Callable[[Any], Any] | str


def _real(value: Any, what: str, *, low: float, strict: bool) -> float:
    """``value`` as a finite float, at least ``low`` (above it when ``strict``), or an ArgumentError."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        number = float(value)
        if number > low or (number == low and not strict):
            return number
    bound = f"above {low:g}" if strict else f"at least {low:g}"
    raise ArgumentError(f"{what} must be a finite number of seconds {bound}, not {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class EventTime:
    """How an input assigns records to epochs by their own time: ``flow.input(name, event_time=rt.EventTime(...))``.

    Args:
        timestamp: a function of a record, or the name of a column (a dict key), giving its
            time: seconds since the Unix epoch as a float or int, or a ``datetime`` (naive ones
            are taken as UTC), ``numpy.datetime64`` or Arrow timestamp.
        granularity: seconds per epoch: a record goes to epoch ``floor(timestamp / granularity)``.
        max_delay: how far out of order records may come, in seconds: an epoch stays open
            until a timestamp ``max_delay`` past its end was seen.
        late_output: the name of an output that gets the late records, as they came (None:
            late records are only counted, in ``job.stats()["late"]``).
        idle_timeout: seconds after which a producer that gave nothing stops holding the
            watermark back (Flink's ``withIdleness``): a partition of ``job.push`` that pushed
            nothing, or an input replica of a stream (``from_spark_stream``) given no records;
            None: never. Readers of files and datasets finish instead (docs/windows.md).

    Raises:
        ArgumentError: an argument of the wrong type or out of range, naming it.
    """

    timestamp: TimestampOf
    granularity: float = 1.0
    max_delay: float = 0.0
    late_output: str | None = None
    idle_timeout: float | None = 10.0

    def __post_init__(self) -> None:
        if not (callable(self.timestamp) or (isinstance(self.timestamp, str) and self.timestamp)):
            raise ArgumentError(f"EventTime(timestamp): give a function of a record or the name of a column, not "
                                f"{self.timestamp!r} ({type(self.timestamp).__name__})")
        object.__setattr__(self, "granularity", _real(self.granularity, "EventTime(granularity)", low=0, strict=True))
        object.__setattr__(self, "max_delay", _real(self.max_delay, "EventTime(max_delay)", low=0, strict=False))
        if self.idle_timeout is not None:
            object.__setattr__(self, "idle_timeout", _real(self.idle_timeout, "EventTime(idle_timeout)", low=0,
                                                           strict=True))
        if self.late_output is not None and not (isinstance(self.late_output, str) and self.late_output):
            raise ArgumentError(f"EventTime(late_output) must be the name of an output, not {self.late_output!r}")

    def epoch_of(self, seconds: float) -> int:
        """The epoch of a timestamp (seconds since the Unix epoch)."""
        return math.floor(seconds / self.granularity)

    def epochs(self, seconds: float) -> int:
        """A duration in seconds as a number of epochs, for window specs: ``rt.Tumbling(spec.epochs(60))``.

        Raises:
            ArgumentError: ``seconds`` is not a positive multiple of the granularity.
        """
        count = _real(seconds, "EventTime.epochs(seconds)", low=0, strict=True) / self.granularity
        if abs(count - round(count)) > 1e-9 * max(1.0, count) or round(count) < 1:
            raise ArgumentError(f"a window of {seconds!r} s is not a multiple of the event-time granularity "
                                f"{self.granularity:g} s: windows are whole epochs")
        return round(count)

    def stamp(self, record: Any) -> float:
        """The record's timestamp in seconds.

        Raises:
            LookupError: the record has no such column; TypeError / ValueError: its time is
            not a timestamp (the caller names the input and the record's position).
        """
        value = record[self.timestamp] if isinstance(self.timestamp, str) else self.timestamp(record)
        return seconds_of(value)


def timestamp_problem(spec: EventTime, error: Exception) -> str:
    """What was wrong with a record whose ``spec.stamp`` raised ``error``, for a message that
    names the input or source and the record's position: ``"has no timestamp 't'"``, ``"has a
    bad timestamp: ..."``, or the timestamp function's own error."""
    if isinstance(spec.timestamp, str) and isinstance(error, LookupError):
        return f"has no timestamp {spec.timestamp!r}"
    if isinstance(error, (TypeError, ValueError)):
        return f"has a bad timestamp: {error}"
    return f"has no timestamp: the timestamp function raised {type(error).__name__}: {error}"


_UNIX = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def seconds_of(value: Any) -> float:
    """A timestamp value as seconds since the Unix epoch.

    >>> seconds_of(datetime.datetime(1970, 1, 1, 0, 1, 30)), seconds_of(2), seconds_of(2.5)
    (90.0, 2.0, 2.5)

    Raises:
        TypeError: not a number, ``datetime``, ``numpy.datetime64`` or Arrow timestamp.
        ValueError: NaN, an infinity or NaT.
    """
    if hasattr(value, "as_py") and not isinstance(value, (numbers.Real, datetime.datetime)):
        value = value.as_py()  # an Arrow scalar: a timestamp becomes a datetime
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (aware - _UNIX).total_seconds()
    if type(value).__name__ == "datetime64":
        nanos = value.astype("datetime64[ns]").astype("int64")
        if value != value:  # NaT
            raise ValueError("NaT (not a time)")
        return int(nanos) / 1e9
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{value!r} is not a finite number of seconds")
        return seconds
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a timestamp: give seconds as a float or int, or "
                    f"a datetime, numpy.datetime64 or Arrow timestamp")


@dataclass(frozen=True)
class Late:
    """A late record: its epoch was closed when it came, ``lateness`` seconds behind the watermark."""

    record: Any
    epoch: int
    lateness: float


class LateRecords(list):
    """Late records a source's reader sends into its event-time input, at the epoch it was at:
    the vertex fused behind an input with a ``late_output`` sends them there, not down the stream."""


@dataclass
class Assigned:
    """What one push (or the close) of an event-time input does.

    Attributes:
        sends: ``(epoch, records)`` to push, in increasing epoch order, the first at or after
            the input's epoch before (pushing at a later epoch moves the input there first).
        late: the push's late records (never any in a close's release).
        epoch: the input's epoch afterwards (None: closed); advance the input to it.
    """

    sends: list[tuple[int, list]]
    late: list[Late]
    epoch: int | None


@dataclass
class LateCount:
    """What ``job.stats()["late"][input]`` reports: how many late records, per epoch they
    belonged to, and the most any was behind the watermark."""

    records: int = 0
    by_epoch: Counter = field(default_factory=Counter)
    max_lateness_s: float = 0.0

    def add(self, late: Sequence[Late]) -> None:
        for one in late:
            self.records += 1
            self.by_epoch[one.epoch] += 1
            self.max_lateness_s = max(self.max_lateness_s, one.lateness)

    def as_dict(self) -> dict[str, Any]:
        return {"records": self.records, "by_epoch": dict(sorted(self.by_epoch.items())),
                "max_lateness_s": self.max_lateness_s}


class EventClock:
    """An event-time input's watermark, epoch and held records (see the module docstring).

    ``now`` gives the time idleness is measured by (``time.monotonic``; a test injects its own).
    """

    def __init__(self, spec: EventTime, now: Callable[[], float] = time.monotonic) -> None:
        self.spec, self.now = spec, now
        self.epoch: int | None = 0
        self.watermark = -math.inf
        #: Per partition, its watermark (largest timestamp pushed minus ``max_delay``) and when it last pushed.
        self.partitions = Idleness(spec.idle_timeout)
        self.held: dict[int, list] = {}
        self.late = LateCount()

    def push(self, records: Sequence[Any], stamps: Sequence[float], partition: Hashable = 0) -> Assigned:
        """Take one push of ``partition``: ``records`` with their timestamps ``stamps`` (seconds)."""
        assert self.epoch is not None, "a closed event-time input takes no push"
        current, epoch_of = self.epoch, self.spec.epoch_of
        now: list = []
        late: list[Late] = []
        for record, stamp in zip(records, stamps):
            epoch = epoch_of(stamp)
            if epoch < current:
                late.append(Late(record, epoch, self.watermark - stamp))
            elif epoch == current:
                now.append(record)
            else:
                self.held.setdefault(epoch, []).append(record)
        self.late.add(late)
        at = self.now()
        self.partitions.heard(partition, at, max(stamps) - self.spec.max_delay if stamps else None)
        sends = [(current, now)] if now else []
        return Assigned(sends + self._move(at), late, self.epoch)

    def tick(self) -> Assigned:
        """No push, only time passing (the driver's timer of idleness, as Flink's ``withIdleness``):
        the partitions idle by now stop holding the watermark back, and the input moves and
        releases exactly as a push that brought no records would have moved it (no late records,
        no activity). Nothing changes while no partition went idle since the last push or tick."""
        assert self.epoch is not None, "a closed event-time input has no clock to tick"
        return Assigned(self._move(self.now()), [], self.epoch)

    def _move(self, at: float) -> list[tuple[int, list]]:
        """The watermark by the partitions at ``at`` (never going back), and the release of the
        epochs it closed (:meth:`_release`)."""
        self.watermark = max(self.watermark, self.partitions.combined(at))
        assert self.epoch is not None
        moved = max(self.epoch, self.spec.epoch_of(self.watermark)) if self.watermark > -math.inf else self.epoch
        return self._release(moved)

    def close(self) -> Assigned:
        """No more pushes: everything held goes, in epoch order, and the input closes."""
        self.epoch = None
        return Assigned(released(self.held, None), [], None)

    def _release(self, epoch: int) -> list[tuple[int, list]]:
        """Move to ``epoch``: the records held for it and the epochs before it, in order."""
        self.epoch = epoch
        return released(self.held, epoch)


def released(held: dict[int, list], upto: int | None) -> list[tuple[int, list]]:
    """Take out of ``held`` (epoch -> what waits for it) the epochs up to ``upto`` (None: all), in
    epoch order: what a clock lets go once its watermark reaches them, or when its input closes."""
    return [(epoch, held.pop(epoch)) for epoch in sorted(e for e in held if upto is None or e <= upto)]


def checked_event_time(name: str, event_time: Any) -> EventTime | None:
    """``flow.input``'s ``event_time=``: None or an :class:`EventTime`, else an ArgumentError naming the input."""
    if event_time is not None and not isinstance(event_time, EventTime):
        raise ArgumentError(f"input {name!r}: event_time must be an rt.EventTime(timestamp, ...), not {event_time!r} "
                            f"({type(event_time).__name__})")
    return event_time


def late_input(name: str) -> str:
    """The input that carries event-time input ``name``'s late records to its ``late_output``."""
    return f"{name}.late"
