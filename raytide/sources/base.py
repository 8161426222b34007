"""The input-source protocol: what an input reads, where it is read, and how far it has read.

A :class:`Source` deals an input out to :class:`Reader` objects. Where they run is the
source's :attr:`Source.placement`:

* ``Placement.REPLICAS`` (the default): ``readers(p)`` gives one reader per input replica;
  each is pickled to its replica and read there, paced by backpressure. Text files, Arrow
  datasets and Ray Datasets are read this way, never through the driver.
* ``Placement.DRIVER``: one reader runs on a thread of the driver, and the driver pushes
  what it yields into the input replicas. Spark is read this way (converting a DataFrame
  needs the driver's Spark session), and so is a plain Python iterable of per-epoch record
  lists (``rt.run(flow, inputs={"x": [[1, 2], [3]]})``), which lives in the driver's memory.
  A :class:`DriverSource` has one reader, whatever the parallelism.

A reader yields ``(epoch, batch)`` pairs with epochs that never decrease. A driver-side
reader's batch is either records (a list, or any batch :mod:`raytide.core.batches` takes)
or :class:`BlockRefs`, object refs of batches (or :class:`RemoteBatch` handles) that the
replicas fetch themselves.

Positions, for snapshots and recovery: ``reader.position()`` is a small picklable value
meaning "everything up to the last item yielded has been read", and ``reader.seek(position)``
makes the next iteration resume right after that item, with no record twice and none lost.
A position belongs to one reader: the one with the same index among ``readers(p)`` of the
same source (or an equal one: the same files, dataset or DataFrames), with the same ``p``.
The runtime does not interpret positions; each source documents what its own mean. The
batches after a resume may be cut differently from a straight read; the records and their
epochs are the same.

A one-shot input (a generator) cannot be rewound: seeking before what it has already given
raises :class:`~raytide.errors.SourceError`, which says so.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from raytide.errors import SourceError

#: Where a reader has got to; opaque to the runtime, picklable, compared only for equality.
Position = Hashable
P = TypeVar("P", bound=Position)


class Placement(enum.Enum):
    """Where a source's readers run."""

    REPLICAS = "replicas"
    DRIVER = "driver"


@dataclass(frozen=True)
class BlockRefs:
    """Object refs of batches (Arrow tables, record lists) that a driver-side reader yields.

    The driver deals the refs out to the input replicas, which fetch the batches from the
    object store themselves: the data never passes through the driver. A ref may also be a
    :class:`RemoteBatch`, which the replica reads from where it is kept.
    """

    refs: tuple[Any, ...]


class RemoteBatch(ABC):
    """A batch kept outside Ray's object store (a Spark executor's cache), read by the input
    replica it is dealt to: :meth:`read` runs there, not on the driver.

    A recovery may deal the same handle again to a new replica, so :meth:`read` must give
    the same batch every time until the source releases it (a stream releases a batch
    once a committed snapshot holds it, when nothing will read it again).
    """

    @abstractmethod
    def read(self) -> Any:
        """The batch (an Arrow table, a record list); raises an error that says what could not be read."""


class Reader(ABC, Generic[P]):
    """One reader's share of a source: ``(epoch, batch)`` pairs, from the start or from a position.

    A subclass says where it starts (:meth:`start`) and reads from any of its positions
    (:meth:`read_from`); this class keeps :meth:`position` up to date as items are taken,
    so that a position means the same for every reader. Iterating again starts again from
    the start, or from the position given to :meth:`seek`.
    """

    _resume: P | None = None  # where the next iteration starts; None: the start
    _last: P | None = None  # after the last item taken; None: nothing taken or sought

    @abstractmethod
    def start(self) -> P:
        """The position before the first item: resuming from it reads everything."""

    @abstractmethod
    def read_from(self, position: P) -> Iterator[tuple[int, Any, P]]:
        """The items after ``position``, each as ``(epoch, batch, the position just after it)``."""

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        at = self.start() if self._resume is None else self._resume
        self._last = at
        for epoch, batch, after in self.read_from(at):
            self._last = after
            yield epoch, batch

    def position(self) -> P:
        """Everything up to the last item taken has been read (the start if nothing was)."""
        return self.start() if self._last is None else self._last

    def seek(self, position: P) -> None:
        """Make the next iteration resume right after the item ``position`` was taken at.

        Raises:
            SourceError: ``position`` is not one of this kind of reader's, or the reader
                cannot resume from it (see :meth:`check_position`).
        """
        kind = type(self.start())
        if not isinstance(position, kind):
            name = type(self).__name__
            raise SourceError(f"{name} cannot resume from {position!r}: its positions are {kind.__name__}s")
        self.check_position(position)
        self._resume = self._last = position

    def check_position(self, position: P) -> None:
        """Raise :class:`~raytide.errors.SourceError` unless this reader can resume from ``position``.

        The default accepts any position of the right kind.
        """


class Source(ABC):
    """Where an input's records come from: one reader per input replica, or one on the driver."""

    #: Where the readers run (see the module docstring).
    placement: ClassVar[Placement] = Placement.REPLICAS

    @abstractmethod
    def readers(self, parallelism: int) -> list[Reader[Any]]:
        """One reader per input replica (``parallelism`` of them), each with its share of the input."""

    def epochs_known(self) -> int | None:
        """How many epochs (0 to n - 1) this source gives, if its size says so without reading its
        records (the total of ``job.wait()``'s progress bar); None, the default: not known."""
        return None


class DriverSource(Source):
    """A source read by one reader on the driver, which pushes what it yields into the replicas."""

    placement: ClassVar[Placement] = Placement.DRIVER

    @abstractmethod
    def reader(self) -> Reader[Any]:
        """The one reader."""

    def readers(self, parallelism: int) -> list[Reader[Any]]:
        """``[self.reader()]``: the driver deals the items out to all ``parallelism`` replicas itself."""
        return [self.reader()]


def reader_positions(readers: dict[str, Reader[Any]]) -> dict[str, Any]:
    """Where each of a replica's readers is, by input (those done reading too: an event-time
    reader's position holds its late count). A replica's core asks it of its readers dict,
    not of the replica: a closure over the replica would make a cycle (replica -> core ->
    closure -> replica), and a replica left in a cycle by a rescale or a recovery (a host
    takes a new role) keeps every actor handle in it until Python's rare full collection."""
    return {vertex: reader.position() for vertex, reader in readers.items()}


def late_counts(readers: dict[str, Reader[Any]]) -> dict[str, dict[str, Any]]:
    """Per input, the late count of a replica's event-time reader (its ``late``, a
    ``LateCount``: :mod:`raytide.sources.event_time`), for ``job.stats()["late"]``; copied
    while the reader may add to it (this runs on the replica's ``inspect`` thread)."""
    return {vertex: {"records": late.records, "by_epoch": dict(late.by_epoch), "max_lateness_s": late.max_lateness_s}
            for vertex, reader in list(readers.items()) if (late := getattr(reader, "late", None)) is not None}
