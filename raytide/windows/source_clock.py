"""One reader's event-time clock, pure: the clock of an event-time input's replica that reads
its share of a source itself (a text, Arrow or Ray Data source with ``event_time=``).

A reader is one producer (a *partition*, as a ``job.push(..., partition=p)`` caller is): its
watermark is the largest timestamp it read minus ``max_delay``, it never goes back, and the
reader's input replica is at the first epoch the watermark has not closed
(``floor(watermark / granularity)``). The input's frontier is the least of its replicas'
epochs, so the input's watermark is the least of its readers', as for pushed partitions.
Each batch the reader reads is judged as a whole against the epoch before it, exactly as
:class:`~raytide.windows.event_time.EventClock` judges a push: its records of earlier epochs
are late, those of the current epoch go at once, those of later epochs are held (in the
reader, so in its position, so in every snapshot) until the watermark reaches them.

The clock works on *pieces*: a batch cut by epoch, each piece ``(epoch, piece, records,
earliest timestamp)`` with the piece itself opaque (a list of records, an Arrow table).
Nothing here reads a wall clock, so what a reader yields is a function of what it read, and a
reader resumed from a position yields what the reader that recorded it would have.

**Idleness** is decided outside, where every producer of the input is seen (for a stream, by
the driver, :class:`~raytide.sources.clocked_stream.ClockedStream`, with the rule of
:mod:`raytide.windows.idleness`), and comes in as a watermark: :meth:`SourceClock.release`
raises the clock's watermark to the others' (moving its epoch there, releasing what it held
for the epochs it passes), so the idle replica stops holding the input back; records of the
epochs it passed that come later are late, as Flink's ``withIdleness`` has it.

>>> idle = SourceClock(EventTime("t", granularity=10))
>>> idle.take([(2, "x", 1, 25.0)], highest=25.0).epoch, idle.release(47.0), idle.epoch
(2, [], 4)
>>> idle.take([(3, "y", 1, 31.0)], highest=31.0).late
[(4, 'y')]

>>> clock = SourceClock(EventTime("t", granularity=10, max_delay=5))
>>> clock.take([(0, "a", 1, 3.0), (1, "b", 1, 12.0), (5, "c", 1, 51.0)], highest=51.0)
Taken(sends=[(0, 'a'), (1, 'b')], late=[], epoch=4)
>>> clock.take([(0, "d", 1, 4.0)], highest=4.0).late
[(4, 'd')]
>>> clock.close()
[(5, 'c')]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from raytide.windows.event_time import EventTime, LateCount, released

#: A batch's records of one epoch: ``(epoch, piece, number of records, earliest timestamp)``.
EpochPiece = tuple[int, Any, int, float]


@dataclass(frozen=True)
class ClockState:
    """A :class:`SourceClock` as plain data, for a reader's position (so for snapshots).

    Attributes:
        epoch: the reader's epoch (the first one its watermark has not closed).
        watermark: the largest timestamp read minus ``max_delay`` (``-inf``: nothing read yet).
        held: ``(epoch, pieces)`` read but not sent yet, in epoch order.
        late: ``(records, ((epoch, records), ...), max_lateness_s)``, the late records so far.
    """

    epoch: int = 0
    watermark: float = -math.inf
    held: tuple[tuple[int, tuple[Any, ...]], ...] = ()
    late: tuple[int, tuple[tuple[int, int], ...], float] = (0, (), 0.0)


@dataclass
class Taken:
    """What one batch does: ``sends`` (``(epoch, piece)``, epochs increasing, the first at
    least the epoch before), ``late`` (``(epoch, piece)``: the late pieces, at the epoch the
    reader was at when they came) and the reader's ``epoch`` afterwards."""

    sends: list[tuple[int, Any]]
    late: list[tuple[int, Any]]
    epoch: int


@dataclass
class SourceClock:
    """A reader's watermark, epoch, held pieces and late count (see the module docstring)."""

    spec: EventTime
    epoch: int = 0
    watermark: float = -math.inf
    held: dict[int, list[Any]] = field(default_factory=dict)
    late: LateCount = field(default_factory=LateCount)
    #: How many records it has judged since it was made or restored (not in its state).
    judged: int = 0

    @classmethod
    def restored(cls, spec: EventTime, state: ClockState) -> SourceClock:
        """The clock ``state`` was taken of."""
        records, by_epoch, lateness = state.late
        late = LateCount(records, Counter(dict(by_epoch)), lateness)
        return cls(spec, state.epoch, state.watermark, {epoch: list(pieces) for epoch, pieces in state.held}, late)

    def state(self) -> ClockState:
        """The clock as plain data (copied: the clock goes on changing)."""
        late = (self.late.records, tuple(sorted(self.late.by_epoch.items())), self.late.max_lateness_s)
        return ClockState(self.epoch, self.watermark, tuple((e, tuple(self.held[e])) for e in sorted(self.held)), late)

    def take(self, pieces: Sequence[EpochPiece], highest: float) -> Taken:
        """One batch, cut into ``pieces``, whose largest timestamp is ``highest``."""
        current = self.epoch
        sends, late = [], []
        for epoch, piece, records, earliest in pieces:
            self.judged += records
            if epoch < current:
                late.append((current, piece))
                self.late.records += records
                self.late.by_epoch[epoch] += records
                self.late.max_lateness_s = max(self.late.max_lateness_s, self.watermark - earliest)
            elif epoch == current:
                sends.append((epoch, piece))
            else:
                self.held.setdefault(epoch, []).append(piece)
        if pieces:
            self.watermark = max(self.watermark, highest - self.spec.max_delay)
        if self.watermark > -math.inf:
            self.epoch = max(current, self.spec.epoch_of(self.watermark))
        return Taken(sends + _pieces(released(self.held, self.epoch)), late, self.epoch)

    def release(self, watermark: float) -> list[tuple[int, Any]]:
        """The producer is idle and the input's others are at ``watermark`` (seconds): the
        clock's watermark rises to it (it never goes back) and its epoch follows; returns the
        held pieces of the epochs up to the new one, in epoch order, to send before anything else."""
        self.watermark = max(self.watermark, watermark)
        if self.watermark > -math.inf:
            self.epoch = max(self.epoch, self.spec.epoch_of(self.watermark))
        return _pieces(released(self.held, self.epoch))

    def close(self) -> list[tuple[int, Any]]:
        """The reader has read everything: every held piece, in epoch order."""
        return _pieces(released(self.held, None))


def _pieces(epochs: list[tuple[int, list[Any]]]) -> list[tuple[int, Any]]:
    """``(epoch, pieces)`` flattened to ``(epoch, piece)``, in order."""
    return [(epoch, piece) for epoch, pieces in epochs for piece in pieces]
