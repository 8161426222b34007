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
  only: no wall clock, and shares dealt by batch id (part ``i`` of batch ``b`` to replica
  ``(b + i) mod n``), not by the driver's history, so a new driver deals a replayed batch as
  the old one did (a producer replays a batch with the same parts: Spark does). So an output
  epoch computed again after any failure is the one computed before, as
  ``output_commit="epoch"`` needs.

The cost: a replica's watermark moves only with the records it reads. A replica given no
records holds the input's frontier back until it is; dealing by batch id gives one-part
batches to every replica in turn. Idleness (a replica stopping to hold the watermark back)
would need a wall clock, which the rule above excludes.

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from raytide.windows.event_time import EventTime, LateCount
from raytide.windows.source_clock import ClockState, SourceClock


class StreamClock:
    """One input replica's clock over its shares of a stream (see the module docstring): a
    replica's source reader in all but reading, so that its position (the clock's state) is
    in every snapshot and its late count in ``job.stats()["late"]``."""

    def __init__(self, spec: EventTime, source: str, late_out: bool = False, state: ClockState | None = None) -> None:
        self.source, self.late_out = source, late_out
        self.clock = SourceClock.restored(spec, state if state is not None else ClockState())

    @property
    def late(self) -> LateCount:
        """The late records so far."""
        return self.clock.late

    def position(self) -> ClockState:
        """The clock as plain data (the replica's position in a snapshot)."""
        return self.clock.state()

    def take(self, batches: Sequence[Any]) -> list[tuple[int, Any]]:
        """A share's batches judged as one batch: ``(epoch, batch)`` items, epochs never
        decreasing (:func:`~raytide.sources.event_time.judge`)."""
        from raytide.sources.event_time import judge  # pyarrow and NumPy: a replica's host starts without them

        return judge(self.clock, list(batches), self.source, self.late_out)

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

    def clock(self, state: ClockState | None) -> StreamClock:
        """The replica's clock: as ``state`` (restored) or new."""
        return StreamClock(self.spec, self.source, self.late_out, state)


@dataclass(frozen=True)
class ClockedStream:
    """The driver's side: how input ``source`` (a label for messages) is clocked, and its shares."""

    spec: EventTime
    source: str
    late_out: bool

    def shares(self, refs: Iterable[Any], batch_id: int, width: int) -> list[Share]:
        """Batch ``batch_id``'s share for each of ``width`` replicas: part ``i`` to replica
        ``(batch_id + i) mod width``."""
        dealt: list[list[Any]] = [[] for _ in range(width)]
        for index, ref in enumerate(refs):
            dealt[(batch_id + index) % width].append(ref)
        return [Share(self.spec, f"{self.source} batch {batch_id} replica {replica}", self.late_out, tuple(mine),
                      batch_id + 1) for replica, mine in enumerate(dealt)]

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
