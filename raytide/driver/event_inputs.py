"""The driver's side of event-time inputs (``flow.input(name, event_time=rt.EventTime(...))``):
:class:`EventTimeInputs`, the job's :class:`~raytide.driver.inputs.InputFeeds` with an
:class:`~raytide.windows.event_time.EventClock` per event-time input.

``job.push(name, records, partition=p)`` on such an input (no epoch: records carry their
time) reads every record's timestamp first (a record without one, or with one that is not
a time, raises a RecordError naming the input, the record's position and what was wrong,
and nothing is sent), then hands the push to the input's clock and does what it says:
records of the input's epoch are pushed at once, those of later epochs wait in the driver
until the watermark reaches them (then they are pushed at their epoch, which first moves
the input there), and the input advances to the first open epoch. A late record goes, as
it came, into the input that feeds the spec's ``late_output``, at the epoch the event-time
input was at when the record came; that input follows the event-time input's epochs and
closes with it. ``job.close(name)`` pushes everything held, in epoch order, and closes both.

A partition is one producer's order: its watermark is its own largest timestamp minus
``max_delay``, and the input's is the least of its partitions' (one partition, ``0``, unless
``job.push`` names another). A partition goes idle by time alone, so the driver also looks at
idleness on a timer (:meth:`EventTimeInputs.release_idle`, at each of the supervisor's pumps:
whenever the driver takes events: every 0.1 s with recovery, 0.5 s without, while a thread waits on the
job): an input its idle partitions held back moves then, through :meth:`EventTimeInputs._apply`
as after a push, so the release's calls are the same calls, in the same call log a recovery
replays (:class:`~raytide.supervisor.replay.ReplayLog`): a recovery sends the same epochs again,
whatever the wall clock says then. Records held in the driver for later epochs are not in any
snapshot: a driver that dies loses them, as it loses what it had not pushed yet.

A stream source (``from_spark_stream``) into an input with event time, or one given
``event_time=`` itself, is clocked in the input's replicas instead (:meth:`EventTimeInputs.clock_stream`,
:mod:`raytide.sources.clocked_stream`): each batch dealt as shares, the late input closed at once;
the replicas' answers to a batch (:meth:`EventTimeInputs.taken`) tell which are idle, and their
next shares release them to the others' watermark (the rule the driver's clocks use,
:mod:`raytide.windows.idleness`, measured by the same ``now``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from raytide.core.batches import to_records
from raytide.driver.inputs import InputFeeds, pushed_batch
from raytide.errors import ArgumentError, GraphError, RecordError
from raytide.physical.pickled import unpicklable
from raytide.physical.plan import PhysicalPlan
from raytide.physical.wire import pack
from raytide.sources.base import Reader
from raytide.sources.clocked_stream import ClockedStream
from raytide.windows.event_time import Assigned, EventClock, EventTime, LateCount, late_input, timestamp_problem


class EventTimeInputs(InputFeeds):
    """A job's inputs, the event-time ones fed through their clocks (see the module docstring)."""

    def __init__(self, plan: PhysicalPlan, replicas: dict[str, list[Any]], *args: Any,
                 now: Callable[[], float] | None = None, **kwargs: Any) -> None:
        """As :class:`InputFeeds`; ``now``: the clock idleness is measured by (tests inject one)."""
        super().__init__(plan, replicas, *args, **kwargs)
        self.plan, self.now = plan, now if now is not None else time.monotonic
        specs = {name: plan.vertex(name).event_time for name in plan.inputs}
        self.clocks = {name: EventClock(spec, self.now) for name, spec in specs.items() if spec is not None}
        #: One lock per event-time input around its clock and the calls it decides (a push's lock is taken inside).
        self.clock_locks = {name: threading.Lock() for name in self.clocks}
        #: Per stream input with event time, how it is clocked in its replicas (None once ended) and its next batch id.
        self.streams: dict[str, ClockedStream | None] = {}
        self.next_batch: dict[str, int] = {}

    def push(self, name: str, records: Any, epoch: Any = None, partition: Hashable | None = None) -> None:
        """Push into input ``name``: at ``epoch``, or through its clock for an event-time input."""
        clock = self.clocks.get(name)
        if clock is None:
            if partition is not None:
                raise ArgumentError(f"input {name!r} is not an event-time input: partition= is for those")
            return super().push(name, records, epoch)
        self.check(name)
        if epoch is not None:
            raise GraphError(f"input {name!r} takes its epochs from its records' timestamps (event_time=); push "
                             f"without an epoch, not at epoch {epoch!r}")
        rows = to_records(pushed_batch(name, None, records))
        stamps = _stamps(name, clock.spec, rows)
        _check_pickles(name, rows)
        with self.clock_locks[name]:
            if self.epochs[name] is None:
                raise GraphError(f"input {name!r} is closed; it takes no more records")
            before = self.epochs[name]
            self._apply(name, clock.push(rows, stamps, 0 if partition is None else partition), before)

    def release_idle(self) -> None:
        """The timer of idleness (see the module docstring): each event-time input with an
        ``idle_timeout`` moves as far as its partitions idle by now let it, its release pushed
        and logged as a push's is. An input another thread is pushing to is left alone (that
        push looks at idleness itself): the timer never waits for a feeder. Nothing to do,
        and nothing done, for a job without event-time inputs."""
        for name, clock in list(self.clocks.items()):
            lock = self.clock_locks[name]
            if clock.spec.idle_timeout is None or not lock.acquire(blocking=False):
                continue
            try:
                if self.epochs[name] is not None and name in self.clocks:
                    self._apply(name, clock.tick(), self.epochs[name])
            finally:
                lock.release()

    def advance(self, name: str, epoch: Any) -> None:
        if name in self.clocks:
            raise GraphError(f"input {name!r} moves with its records' timestamps (event_time=): it cannot be advanced "
                             f"to epoch {epoch!r}; job.close({name!r}) flushes it")
        super().advance(name, epoch)

    def close(self, name: str) -> None:
        """Close input ``name``; an event-time input first pushes every epoch its clock held (a
        stream's replicas, what their clocks held)."""
        if name in self.streams:
            stream, self.streams[name] = self.streams[name], None
            if stream is not None:
                upto = self.next_batch[name] + 1
                self.push_shares(name, stream.ends(upto, len(self.replicas[name])), upto)
            return None
        clock = self.clocks.get(name)
        if clock is None:
            return super().close(name)
        self.check(name)
        with self.clock_locks[name]:
            if self.epochs[name] is not None:
                self._apply(name, clock.close(), self.epochs[name])

    def push_refs(self, name: str, refs: list, epoch: Any) -> None:
        self._refuse_source(name, "object refs of batches")
        super().push_refs(name, refs, epoch)

    def hand_over(self, name: str, readers: list[Reader[Any]], timeout: float, source: Any = None) -> None:
        """Input ``name`` is read in its replicas from now on; with event time (the input's or
        ``source``'s), each reader assigns its records to epochs by their timestamps
        (:mod:`raytide.sources.event_time`), and the input's late records come through
        its readers, so its driver-fed late input closes at once."""
        from raytide.sources.event_time import event_time_readers  # pyarrow.compute: only for a source read in replicas

        readers = event_time_readers(source, name, self.plan.vertex(name).event_time, readers)
        clock = self.clocks.pop(name, None)
        if clock is not None and clock.spec.late_output is not None:
            super().close(late_input(name))
        super().hand_over(name, readers, timeout)

    def clock_stream(self, name: str, source: Any) -> None:
        """Stream input ``name`` is fed from ``source``: with event time (the input's or the
        source's, checked here, before the stream starts), its batches go through a clock in
        each input replica (:mod:`raytide.sources.clocked_stream`), and the input's late
        records come through them, so its driver-fed late input closes at once."""
        from raytide.sources.event_time import source_event_time  # pyarrow.compute: only for a stream

        found = source_event_time(source, name, self.plan.vertex(name).event_time)
        if found is None:
            return
        clock = self.clocks.pop(name, None)
        if clock is not None and clock.spec.late_output is not None:
            super().close(late_input(name))
        spec, label = found
        self.streams[name] = ClockedStream(spec, label, clock is not None and clock.spec.late_output is not None)
        with self.locks[name]:
            self.epochs[name] = None

    def push_batch(self, name: str, refs: list, epoch: Any) -> tuple[dict[int, int], list]:
        """Batch ``epoch`` of a stream input: as :meth:`InputFeeds.push_batch`, or through the replicas' clocks."""
        stream = self.streams.get(name)
        if stream is None:
            return super().push_batch(name, refs, epoch)
        self.next_batch[name] = epoch + 1
        return self.push_shares(name, stream.shares(refs, epoch, len(self.replicas[name]), self.now()), epoch + 1)

    def taken(self, name: str, answers: list) -> None:
        """A batch's answers (:class:`~raytide.sources.clocked_stream.Heard`): the replicas'
        watermarks and records, by which the stream's next shares release its idle replicas."""
        stream = self.streams.get(name)
        if stream is not None:
            stream.taken(answers, self.now())

    def continue_stream(self, name: str) -> int:
        """Where a stream input goes on (:meth:`InputFeeds.continue_stream`; with event time,
        :meth:`InputFeeds.continue_clocked`)."""
        if name not in self.streams:
            return super().continue_stream(name)
        self.next_batch[name] = self.continue_clocked(name)
        return self.next_batch[name]

    def late_stats(self, replicas: list[dict[str, dict[str, Any]]] = ()) -> dict[str, dict[str, Any]]:  # type: ignore[assignment]
        """``job.stats()["late"]``: per event-time input, its late records (see :class:`~raytide.windows.event_time.LateCount`):
        the driver's clocks', and those the replicas' readers counted (``replicas``: each replica's, per input)."""
        counts = {name: LateCount(c.late.records, Counter(c.late.by_epoch), c.late.max_lateness_s) for name, c in self.clocks.items()}
        for per_input in replicas:
            for name, late in per_input.items():
                count = counts.setdefault(name, LateCount())
                count.records += late["records"]
                count.by_epoch.update(late["by_epoch"])
                count.max_lateness_s = max(count.max_lateness_s, late["max_lateness_s"])
        return {name: count.as_dict() for name, count in counts.items()}

    def _refuse_source(self, name: str, what: str) -> None:
        if name in self.clocks:
            raise ArgumentError(f"event-time input {name!r} is fed by job.push, an iterable of record lists or a text, "
                                f"Arrow, Ray Data or stream source, not by {what} (docs/windows.md, 'Sources with event time')")

    def _apply(self, name: str, assigned: Assigned, before: int | None) -> None:
        """Do what the clock decided: the sends, the late records (at ``before``, the input's
        epoch when they came), and the input's move (or close), with its late input's."""
        for epoch, records in assigned.sends:
            super().push(name, records, epoch)
        late = late_input(name) if self.clocks[name].spec.late_output is not None else None
        if late is not None and assigned.late:
            super().push(late, [one.record for one in assigned.late], before)
        if assigned.epoch is None:
            super().close(name)
        elif assigned.epoch != self.epochs[name]:
            super().advance(name, assigned.epoch)
        if late is not None and assigned.epoch is None:
            super().close(late)
        elif late is not None and self.epochs[late] != assigned.epoch:
            super().advance(late, assigned.epoch)

    def event_time(self, name: str) -> EventTime | None:
        """Input ``name``'s event-time spec (None: an ordinary input)."""
        clock = self.clocks.get(name)
        return clock.spec if clock is not None else None


def _stamps(name: str, spec: EventTime, rows: list) -> list[float]:
    """Every record's timestamp in seconds, or a RecordError naming the first record without a good one."""
    stamps = []
    for position, row in enumerate(rows):
        try:
            stamps.append(spec.stamp(row))
        except Exception as error:  # a timestamp function's own error too
            raise RecordError(f"input {name!r}: record {position} of the push ({row!r:.80}) "
                              f"{timestamp_problem(spec, error)}; nothing of this push was sent") from error
    return stamps


def _check_pickles(name: str, rows: list) -> None:
    """Raise, naming the record, if the push does not pickle: before the clock sends any of it."""
    try:
        pack(rows)
    except Exception as error:
        raise unpicklable(rows, error, f"input {name!r}", 0, "; nothing of this push was sent") from error
