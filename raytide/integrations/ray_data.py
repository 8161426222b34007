"""Ray Datasets as dataflow inputs: blocks read by the input replicas straight from the object store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import pyarrow as pa
import ray

from raytide.sources.arrow import epochs_in_column, rows_of_epoch


@dataclass(frozen=True)
class RayDatasetSource:
    """The rows of a ``ray.data.Dataset``; each block is read by one input replica.

    Args:
        dataset: the dataset (materialised once into Arrow blocks in the object store;
            no rows pass through the driver).
        epoch_column: take each row's epoch from this integer column (default: all epoch 0).
    """

    dataset: Any
    epoch_column: Optional[str] = None

    def readers(self, parallelism: int) -> list[RayBlockReader]:
        refs = self.dataset.to_arrow_refs()
        return [RayBlockReader(refs[r::parallelism], self.epoch_column) for r in range(parallelism)]


def from_dataset(dataset: Any, epoch_column: Optional[str] = None) -> RayDatasetSource:
    """A dataflow input reading ``dataset`` in parallel (``inputs={"rows": from_dataset(ds)}``)."""
    return RayDatasetSource(dataset, epoch_column)


@dataclass(frozen=True)
class RayBlockReader:
    """Some blocks of a dataset, as ``(epoch, Arrow table)`` pairs with epochs in order."""

    refs: list
    epoch_column: Optional[str]

    def __iter__(self) -> Iterator[tuple[int, pa.Table]]:
        if self.epoch_column is None:
            for ref in self.refs:
                yield 0, ray.get(ref)
            return
        per_epoch: dict[int, list[int]] = {}
        for index, ref in enumerate(self.refs):
            for epoch in epochs_in_column(ray.get(ref), self.epoch_column):
                per_epoch.setdefault(epoch, []).append(index)
        for epoch in sorted(per_epoch):
            for index in per_epoch[epoch]:
                yield epoch, rows_of_epoch(ray.get(self.refs[index]), self.epoch_column, epoch)
