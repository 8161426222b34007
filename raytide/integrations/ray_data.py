"""Ray Datasets as dataflow inputs: blocks read by the input replicas straight from the object store.

A reader's position is the number of pieces it has read: its blocks in order or, with an
epoch column, the rows of one epoch in one block, in epoch order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray

from raytide.errors import SourceError
from raytide.sources.base import Reader, Source
from raytide.sources.epoch_column import EpochColumn


@dataclass(frozen=True)
class RayDatasetSource(Source):
    """The rows of a ``ray.data.Dataset``; each block is read by one input replica.

    Args:
        dataset: the dataset (materialised once into Arrow blocks in the object store;
            no rows pass through the driver).
        epoch_column: take each row's epoch from this integer column (default: all epoch 0).
        event_time: or each row's epoch by its own time: the name of a timestamp, date or
            seconds column, a function of a row (a dict), or an ``rt.EventTime`` (docs/windows.md).
    """

    dataset: Any
    epoch_column: str | None = None
    event_time: Any = None

    def event_time_schema(self) -> tuple[str, pa.Schema | None]:
        """How errors name this source, and the schema of its rows (from the dataset's blocks' metadata)."""
        if self.event_time is not None and self.epoch_column is not None:
            raise SourceError("Ray Dataset: give epoch_column or event_time, not both")
        schema = self.dataset.schema()
        return "Ray Dataset", getattr(schema, "base_schema", schema)

    @functools.cached_property
    def blocks(self) -> list[ray.ObjectRef]:
        """Object refs of the dataset's Arrow blocks, made once: every reader, and every
        reader made again to resume, deals out the same blocks in the same order."""
        return self.dataset.to_arrow_refs()

    def epochs_known(self) -> int | None:
        """Without ``epoch_column`` or ``event_time``, one: every row is epoch 0; else None."""
        return 1 if self.epoch_column is None and self.event_time is None else None

    def readers(self, parallelism: int) -> list[Reader[int]]:
        """One reader per replica, each with every ``parallelism``-th block."""
        column = None if self.epoch_column is None else EpochColumn(self.epoch_column, "Ray Dataset")
        return [RayBlockReader(self.blocks[r::parallelism], column) for r in range(parallelism)]


def from_dataset(dataset: Any, epoch_column: str | None = None, event_time: Any = None) -> RayDatasetSource:
    """A dataflow input reading ``dataset`` in parallel (``inputs={"rows": from_dataset(ds)}``);
    ``event_time``: each row's epoch by its own time (see :class:`RayDatasetSource`)."""
    return RayDatasetSource(dataset, epoch_column, event_time)


@dataclass
class RayBlockReader(Reader[int]):
    """Some blocks of a dataset, as ``(epoch, Arrow table)`` pairs with epochs in order."""

    refs: list[ray.ObjectRef]
    epoch_column: EpochColumn | None

    def start(self) -> int:
        return 0

    def check_position(self, position: int) -> None:
        if position < 0:
            raise SourceError(f"Ray Dataset reader of {len(self.refs)} blocks: no piece count {position}")

    def read_from(self, position: int) -> Iterator[tuple[int, pa.Table, int]]:
        for number, (epoch, index) in enumerate(self._pieces()[position:], start=position):
            table = ray.get(self.refs[index])
            rows = table if self.epoch_column is None else self.epoch_column.rows_of(table, epoch)
            yield epoch, rows, number + 1

    def _pieces(self) -> list[tuple[int, int]]:
        """``(epoch, block index)`` in reading order."""
        if self.epoch_column is None:
            return [(0, index) for index in range(len(self.refs))]
        per_epoch: dict[int, list[int]] = {}
        for index, ref in enumerate(self.refs):
            for epoch in self.epoch_column.epochs(ray.get(ref)):
                per_epoch.setdefault(epoch, []).append(index)
        return [(epoch, index) for epoch in sorted(per_epoch) for index in per_epoch[epoch]]
