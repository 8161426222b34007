"""Plain Python iterables as inputs, and :func:`as_source`, which makes a source of any input.

``rt.run(flow, inputs={"x": [[1, 2], [3]]})`` feeds input ``x`` records ``1, 2`` at epoch
0 and ``3`` at epoch 1: an iterable of per-epoch record lists (or any batches), read on the
driver, one epoch at a time. Its position is the number of epochs taken. A collection (a
list, a tuple, anything whose ``iter()`` gives a fresh iterator) can resume from any
position; a one-shot iterator (a generator) can go forward but never back, since what it
gave is gone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

from raytide.errors import GraphError, SourceError
from raytide.sources.base import DriverSource, Reader, Source


def as_source(obj: object, input_name: str) -> Source:
    """The source that feeds input ``input_name`` from ``obj``.

    Args:
        obj: a :class:`~raytide.sources.base.Source`, or an iterable of per-epoch record
            lists (epoch 0, 1, ...), which becomes an :class:`IterableSource`.
        input_name: the input, for error messages.

    Returns:
        ``obj`` itself if it is a source, else an :class:`IterableSource` of it.

    Raises:
        GraphError: ``obj`` is neither (a string, a mapping and a non-iterable are not
            per-epoch record lists).
    """
    if isinstance(obj, Source):
        return obj
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes, Mapping)):
        return IterableSource(obj, input_name)
    raise GraphError(
        f"input {input_name!r}: cannot read a {type(obj).__name__}; give a raytide Source (a TextFileSource, "
        "from_spark(...), from_dataset(...)) or an iterable of per-epoch record lists"
    )


class IterableSource(DriverSource):
    """An iterable of per-epoch record lists, read on the driver; item ``k`` is epoch ``k``."""

    def __init__(self, epochs: Iterable[Any], input_name: str) -> None:
        """Wrap ``epochs``; nothing is taken from it yet.

        Args:
            epochs: the records of epoch 0, 1, ... (lists, or any batches).
            input_name: the input it feeds, for error messages.
        """
        self.input_name = input_name
        self._epochs = epochs
        self._one_shot = iter(epochs) is epochs
        self._taken = 0  # items taken from a one-shot iterator so far

    def reader(self) -> IterableReader:
        """The one reader."""
        return IterableReader(self)

    def epochs_known(self) -> int | None:
        """The number of items of a sized collection (a list of per-epoch record lists); None for an iterator."""
        return None if self._one_shot or not isinstance(self._epochs, Sized) else len(self._epochs)

    def check_resumable(self, epoch: int) -> None:
        """Raise unless the records can be read again from ``epoch`` on.

        Raises:
            SourceError: a one-shot iterator has already given epoch ``epoch``.
        """
        if self._one_shot and epoch < self._taken:
            kind = type(self._epochs).__name__
            raise SourceError(
                f"input {self.input_name!r} cannot be rewound to epoch {epoch}: it reads a one-shot {kind}, "
                f"which has already given epochs 0 to {self._taken - 1}; give a list to make it rewindable"
            )

    def epochs_from(self, epoch: int) -> Iterator[Any]:
        """The records of ``epoch`` and every later epoch (see :meth:`check_resumable`)."""
        self.check_resumable(epoch)
        if not self._one_shot:
            yield from itertools.islice(self._epochs, epoch, None)
            return
        for records in self._epochs:
            self._taken += 1
            if self._taken > epoch:
                yield records


class IterableReader(Reader[int]):
    """The reader of an :class:`IterableSource`; its position is the number of epochs taken."""

    def __init__(self, source: IterableSource) -> None:
        self.source = source

    def start(self) -> int:
        return 0

    def read_from(self, position: int) -> Iterator[tuple[int, Any, int]]:
        for epoch, records in enumerate(self.source.epochs_from(position), start=position):
            yield epoch, records, epoch + 1

    def check_position(self, position: int) -> None:
        """A one-shot iterator resumes only from where it is or later (see :meth:`IterableSource.check_resumable`)."""
        if position < 0:
            raise SourceError(f"input {self.source.input_name!r}: no epoch count {position}")
        self.source.check_resumable(position)
