"""Streams whose producer replays what was not acknowledged: one epoch per batch, acknowledged once a snapshot holds it.

A :class:`StreamSource` is a driver-side source (:mod:`raytide.sources.base`) for a producer
that keeps its own log of what it handed out and hands again, after a restart, every batch
it was not told is safe (Spark Structured Streaming's micro-batches, a Kafka consumer that
commits its offsets). Each batch is one epoch, with ids that only grow (gaps are allowed).
The job and the reader agree on three things:

* **One call per input replica per batch.** The driver gives each input replica its share
  of batch ``e`` and moves it to epoch ``e + 1`` in a single call, so a snapshot cuts the
  input only between batches: a snapshot in which every replica of the input is at epoch
  ``E`` holds exactly the batches before ``E`` (it is *at a batch boundary*).
* **Acknowledged when held.** Once a committed snapshot holds batch ``e`` (and so every
  output it leads to, exactly once), the job calls :meth:`StreamReader.held`; only then
  may the producer record the batch as done. The job takes that snapshot itself, right
  after the input replicas have taken the batch, so a stream job's snapshots are at batch
  boundaries (``Recovery.interval`` does not apply to it).
* **Resumed by batch id.** A job restored from a snapshot at boundary ``E`` seeks the
  reader to ``E`` (:meth:`~raytide.sources.base.Reader.seek`): the producer's replays of
  batches before ``E`` are acknowledged at once and not fed again; batch ``E`` and those
  after it are new to the job.

So a batch the producer replays after a crash of the driver is either held by the restored
snapshot (skipped) or not (fed): never lost, never counted twice. :func:`boundary_epoch`
tells, from the epochs the input's replicas were at, whether a snapshot is at a boundary.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable

from raytide.errors import SourceError
from raytide.sources.base import DriverSource, Reader


class StreamReader(Reader[int]):
    """The one reader of a :class:`StreamSource`: ``(batch id, batch)``; its position is the
    next batch id the job takes (batches before it are held already)."""

    def start(self) -> int:
        return 0

    def check_position(self, position: int) -> None:
        if position < 0:
            raise SourceError(f"a stream reader's position is the next batch id to take; {position} is not one")

    @abstractmethod
    def held(self, epoch: int) -> None:
        """A committed snapshot holds batch ``epoch`` (and every batch before it): the
        producer may record it as done."""

    def describe(self) -> str:
        """What the producer is doing, for a stalled job's message ("" if nothing to say)."""
        return ""

    def available(self) -> int | None:
        """How many batches (ids 0 to n - 1) the producer has made or planned so far, if it says
        (the total of ``job.wait()``'s progress bar; it grows as the stream goes on); None: unknown."""
        return None

    @abstractmethod
    def stop(self) -> None:
        """The job is stopping: stop the producer, acknowledging nothing more; a batch
        not held yet is handed again to the next run."""


class StreamSource(DriverSource):
    """A driver-side source of an unbounded stream of batches that its producer replays
    until they are acknowledged (see the module docstring)."""

    #: Longest a batch may take from its arrival to being held by a committed snapshot.
    hold_timeout: float = 600.0

    @abstractmethod
    def reader(self) -> StreamReader:
        """The one reader."""


def boundary_epoch(epochs: Iterable[int | None]) -> int | None:
    """The batch boundary a snapshot is at for a stream input whose replicas were at
    ``epochs`` (None: closed): their common epoch, or None if they differ (the snapshot cut
    the input between the calls of one batch). A closed input is at no boundary either:
    it takes no more batches."""
    distinct = set(epochs)
    if len(distinct) != 1:
        return None
    return distinct.pop()
