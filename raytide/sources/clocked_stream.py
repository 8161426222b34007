"""Streams with event time (``from_spark_stream(..., event_time=)``): a clock in each input
replica over its shares of the stream's batches, and the batch count kept where snapshots see it.

A stream (:mod:`raytide.sources.stream`) hands batches whose producer replays what it was not
told is held. Without event time, batch ``b`` is epoch ``b``. With it, a batch's records go to
the epochs of their timestamps, so a batch may leave records waiting for epochs its watermark
has not reached, and the input's epoch says nothing of how many batches it took. Message flow
for batch ``b`` into an input of ``n`` replicas (the feed is :mod:`raytide.driver.streams`)::

    producer ──(b, parts)──▶ feed ──push_stream(Share(parts i with (b + i) mod n == r, upto=b+1))──▶ replica r
                                       (every replica gets a call, an empty share too)
                             replica r: reads its parts, judges them as one batch with its clock:
                               late → counted (to the late output too) at its epoch before,
                               of its epoch → sent, of later epochs → held in the clock,
                               its epoch → the first its watermark has not closed;
                               its command count := b + 1
                             feed ◀── every call answered
                             feed ──snapshot_now──▶ coordinator ... commit: every replica at count b + 1
    producer ◀──held(b)──── feed

The rules, which make it exactly once across the failure of any part (the driver included):

* **One call per input replica per batch** (a :class:`Share`), so a snapshot never cuts a
  batch in a replica: each replica's state is before or after its whole share.
* **Acknowledged when held, whatever epochs its records fall in.** The snapshot the feed
  takes after the batch holds every record of it: sent downstream (in the state and logged
  channels of the snapshot's cut), counted late, or held in the replica's clock, which is
  the replica's source position (:class:`StreamClock` in its ``started`` readers), so in the
  snapshot, atomically with the rest of its state. A batch's end closes no epoch: epochs
  close by the watermark alone (the largest timestamp a replica read minus ``max_delay``).
* **The batch count is in the snapshot.** A clocked replica's command count (the number
  every snapshot's summary keeps per input replica, and the driver's call log counts) is the
  id of the next batch it takes: each share counts as the ids it moves past, the stream's end
  as one more. A snapshot is at a batch boundary when every replica of the input has the same
  count and none is closed (:func:`boundary_batch`); a restored job resumes the producer
  there. The input's epochs are event time and tell nothing of batches.
* **Deterministic.** What a replica decides depends on its restored clock and its share
  only (an idle replica's release comes in its share): no wall clock, and shares dealt by
  batch id (part ``i`` of batch ``b`` to replica ``(b + i) mod n``), not by the driver's
  history, so a new driver deals a replayed batch as the old one did (a producer replays a
  batch with the same parts: Spark does). So an output epoch computed again after any
  failure is the one computed before, as ``output_commit="epoch"`` needs (but for idleness,
  below, across a driver restart).

**Idleness** (``EventTime(idle_timeout=)``, Flink's ``withIdleness``). A replica's watermark
moves only with the records it reads, so one given no records (the empty partitions of a
skewed query) would hold the input's frontier back for good. The driver, which sees every
replica's answer, keeps the rule of :mod:`raytide.windows.idleness` over them
(:class:`ClockedStream`): each share's answer (:class:`Heard`) gives the replica's watermark
and its number of records, and a replica that had no records for ``idle_timeout`` seconds
(the driver's clock) gets, in its next share, the input's combined watermark to release to
(``Share.release``; its clock moves there, :meth:`~raytide.windows.source_clock.SourceClock.release`):
it holds the others back no more, and its records older than that are late. The release is
what the driver knew after the batch before (a batch's answers come after its shares are
dealt), so windows close one batch behind an idle replica. The release is part of the call,
so a replica's recovery replays it as it was; only a new driver decides anew (its clock starts
with every replica active), which is why a driver restart with idleness at play can judge a
replayed batch's records differently: ``output_commit="snapshot"`` (or ``idle_timeout=None``)
keeps what a lost driver showed equal to what the new one computes.

>>> spec = EventTime("t", granularity=10, max_delay=5)
>>> clock = StreamClock(spec, "stream")
>>> clock.take([[{"t": 3}, {"t": 51}, {"t": 12}]])
[(0, [{'t': 3}]), (1, [{'t': 12}]), (4, [])]
>>> clock.take([[{"t": 4}]]), clock.late.records
([], 1)
>>> clock.close()
[(5, [{'t': 51}])]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raytide.windows.event_time import EventTime, LateCount
from raytide.windows.idleness import Idleness
from raytide.windows.source_clock import ClockState, SourceClock


class Heard(NamedTuple):
    """An input replica's answer to a share: its ``watermark`` after it (seconds; ``-inf``:
    none yet) and how many ``records`` the share had (none: the replica may be idle)."""

    replica: int
    watermark: float
    records: int


class StreamClock:
    """One input replica's clock over its shares of a stream (see the module docstring): a
    replica's source reader in all but reading, so that its position (the clock's state) is
    in every snapshot and its late count in ``job.stats()["late"]``."""

    def __init__(self, spec: EventTime, source: str, late_out: bool = False, state: ClockState | None = None) -> None:
        self.source, self.late_out = source, late_out
        self.clock = SourceClock.restored(spec, state if state is not None else ClockState())
        self.records = 0  # in the last share

    @property
    def late(self) -> LateCount:
        """The late records so far."""
        return self.clock.late

    def position(self) -> ClockState:
        """The clock as plain data (the replica's position in a snapshot)."""
        return self.clock.state()

    def take(self, batches: Sequence[Any], release: float | None = None) -> list[tuple[int, Any]]:
        """A share's batches judged as one batch, after a release to watermark ``release`` if
        the replica is idle: ``(epoch, batch)`` items, epochs never decreasing
        (:func:`~raytide.sources.event_time.judge`)."""
        from raytide.sources.event_time import judge  # pyarrow and NumPy: a replica's host starts without them

        before = self.clock.judged
        items = judge(self.clock, list(batches), self.source, self.late_out, release)
        self.records = self.clock.judged - before
        return items

    def heard(self, replica: int) -> Heard:
        """What replica ``replica`` answers after a share (:class:`ClockedStream` keeps it)."""
        return Heard(replica, self.clock.watermark, self.records)

    def close(self) -> list[tuple[int, Any]]:
        """The stream ended: every held piece, in epoch order."""
        return self.clock.close()


@dataclass(frozen=True)
class Share:
    """One input replica's call for a clocked stream's batch: its ``refs`` (object refs or
    remote batches), and ``upto``, its command count once it has taken the call (the next
    batch id); ``end``: the stream ended (no refs): flush the clock and close the input."""

    spec: EventTime
    source: str
    late_out: bool
    refs: tuple[Any, ...]
    upto: int
    end: bool = False
    #: The replica is idle: the watermark (seconds) to release its clock to first (None: not idle).
    release: float | None = None

    def clock(self, state: ClockState | None) -> StreamClock:
        """The replica's clock: as ``state`` (restored) or new."""
        return StreamClock(self.spec, self.source, self.late_out, state)


@dataclass
class ClockedStream:
    """The driver's side: how input ``source`` (a label for messages) is clocked, its shares,
    and its replicas' idleness (``replicas``: the rule of :mod:`raytide.windows.idleness`, each
    replica a partition, active when a share of it had records)."""

    spec: EventTime
    source: str
    late_out: bool
    replicas: Idleness = field(init=False)

    def __post_init__(self) -> None:
        self.replicas = Idleness(self.spec.idle_timeout)

    def shares(self, refs: Iterable[Any], batch_id: int, width: int, now: float = 0.0) -> list[Share]:
        """Batch ``batch_id``'s share for each of ``width`` replicas: part ``i`` to replica
        ``(batch_id + i) mod width``; an idle replica's (at ``now``, the driver's clock) with
        the input's combined watermark to release to, if above its own."""
        dealt: list[list[Any]] = [[] for _ in range(width)]
        for index, ref in enumerate(refs):
            dealt[(batch_id + index) % width].append(ref)
        for replica in range(width):
            self.replicas.heard(replica, now, active=False)  # a replica's idleness counts from its first batch
        target = self.replicas.combined(now)
        return [Share(self.spec, f"{self.source} batch {batch_id} replica {replica}", self.late_out, tuple(mine),
                      batch_id + 1, release=target if self._released(replica, target, now) else None)
                for replica, mine in enumerate(dealt)]

    def taken(self, answers: Iterable[Heard | None], now: float) -> None:
        """The replicas' answers to a batch's shares, at ``now`` (None: a replica that died)."""
        for heard in answers:
            if heard is not None:
                mark = heard.watermark if heard.watermark > -math.inf else None
                self.replicas.heard(heard.replica, now, mark, active=heard.records > 0)

    def _released(self, replica: int, target: float, now: float) -> bool:
        return self.replicas.idle(replica, now) and target > self.replicas.marks.get(replica, -math.inf)

    def ends(self, upto: int, width: int) -> list[Share]:
        """The stream's end for each of ``width`` replicas, counted up to ``upto``."""
        return [Share(self.spec, f"{self.source} end replica {replica}", self.late_out, (), upto, end=True)
                for replica in range(width)]


def boundary_batch(counts: Sequence[int], epochs: Sequence[int | None]) -> int | None:
    """The batch a snapshot is at the boundary before, for a clocked stream input whose
    replicas had command ``counts`` and were at ``epochs`` (None: closed): their common count,
    or None if the counts differ (the snapshot cut a batch between replicas) or a replica is
    closed (the stream ended: it takes no more batches)."""
    if len(set(counts)) != 1 or None in epochs:
        return None
    return counts[0]
