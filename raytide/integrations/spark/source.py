"""Spark DataFrames into the dataflow: :func:`from_spark` and :class:`SparkSource`.

A DataFrame (epochs from a column, or epoch 0) or a sequence / generator of DataFrames
(one epoch each) becomes a :class:`SparkSource`, a source read on the driver (the
conversion needs the driver's Spark session): its reader yields, lazily and in
increasing epoch order, ``(epoch, BlockRefs(refs))`` of Arrow tables that RayDP's
conversion put in Ray's object store (:func:`dataframe_to_blocks`); the input replicas
fetch them from there, so no row passes through the driver. Its position is the next
epoch to read; resuming from it converts again what is needed, and a generator of
DataFrames, which cannot give a DataFrame twice, cannot be rewound.

The Arrow helpers run inside the Ray tasks here live in the pure module
:mod:`raytide.integrations.records`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray

from raytide.errors import SourceError, SparkEpochColumnError, SparkIntegrationError
from raytide.integrations import records
from raytide.integrations.spark.partitions import cache_partitions, check_frame, read_blocks
from raytide.integrations.spark.partitions import check_convertible as check_convertible  # its old path, kept
from raytide.integrations.spark.session import TASK_CPUS, get_results
from raytide.sources.base import BlockRefs, DriverSource, Reader
from raytide.sources.epoch_column import EpochColumn

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame
    from typing_extensions import TypeIs

#: Spark's integer types, the ones an epoch column may have.
_INTEGRAL_SPARK_TYPES = ("tinyint", "smallint", "int", "bigint")

#: How error messages name a single DataFrame.
_SINGLE = "the DataFrame"


@ray.remote(num_cpus=TASK_CPUS)
def _epoch_summary_task(table: pa.Table, column: str) -> dict[str, Any]:
    return records.epoch_summary(table, column)


@ray.remote(num_cpus=TASK_CPUS)
def _split_task(table: pa.Table, column: str, epochs: list[int]) -> Any:
    pieces = records.split_by_epoch(table, column, epochs)
    return pieces[0] if len(pieces) == 1 else tuple(pieces)


def _epoch_column(column: str) -> EpochColumn:
    return EpochColumn(column, "Spark DataFrame", SparkEpochColumnError)


class SparkSource(DriverSource):
    """A dataflow input that reads Spark DataFrames, one epoch at a time, on the driver.

    Its one reader (:class:`SparkReader`) yields what :meth:`epochs` yields:
    ``(epoch, blocks)`` in increasing epoch order, ``blocks`` being object
    refs, each to a ``pyarrow.Table`` in Ray's object store. The tables are
    produced by RayDP's conversion (the one behind ``ray.data.from_spark``)
    and are never collected on the driver. An epoch may have zero blocks or
    empty tables. Build it with :func:`from_spark`.

    Epochs come from:

    * a sequence or generator of DataFrames: DataFrame ``k`` is epoch ``k``
      and is pulled from the generator and converted only when epoch ``k`` is
      asked for;
    * one DataFrame and ``epoch_column``: the DataFrame is converted once,
      then each block is split by the column's values inside Ray; only epochs
      that have rows are yielded; the column stays in the tables;
    * one DataFrame alone: epoch 0.

    Column types are checked before anything is converted: a type that cannot
    cross (a calendar or year-month interval, see ``docs/spark-types.md``) is
    refused with an error naming the column and its type, by the constructor
    for one DataFrame or a sequence, before its epoch for a generator's. A
    map column reaches vertices as a ``dict``.

    RayDP keeps a DataFrame's Arrow data cached in Spark so that lost blocks
    can be rebuilt; the source releases that cache when it moves on to the
    next DataFrame, when the iteration ends and on :meth:`close`.
    """

    def __init__(self, frames: DataFrame | Iterable[DataFrame], epoch_column: str | None = None) -> None:
        """Wrap DataFrames; nothing is converted yet.

        Args:
            frames: One DataFrame, or a sequence / iterator of DataFrames.
            epoch_column: Column holding each row's epoch (one DataFrame only).

        Raises:
            SparkIntegrationError: ``epoch_column`` is given with several
                DataFrames, is missing, or is not an integer column (then an
                :class:`~raytide.errors.EpochColumnError` too), or a column of
                a DataFrame (one, or any of a sequence) has a type that cannot
                cross.
        """
        self._single = _is_dataframe(frames)
        for what, frame in _known_frames(frames):
            check_frame(frame, what)
        if epoch_column is not None:
            if not _is_dataframe(frames):
                raise SparkIntegrationError(
                    "epoch_column needs a single DataFrame; a sequence of DataFrames has one epoch each"
                )
            column = _epoch_column(epoch_column)
            column.check_present(frames.columns)
            spark_type = frames.schema[epoch_column].dataType.simpleString()
            column.check_type(spark_type, spark_type in _INTEGRAL_SPARK_TYPES)
        self._frames = frames
        self._epoch_column = epoch_column
        self._replayable = self._single or isinstance(frames, Sequence)
        self._started = False
        self._pinned: list[DataFrame] = []

    @property
    def epoch_column(self) -> str | None:
        """The column epochs are read from, if any."""
        return self._epoch_column

    def reader(self) -> SparkReader:
        """The one reader, on the driver."""
        return SparkReader(self)

    def epochs(self, start: int = 0) -> Iterator[tuple[int, list[ray.ObjectRef]]]:
        """Yield ``(epoch, blocks)`` lazily, in increasing epoch order, from ``start`` on.

        Args:
            start: First epoch wanted; earlier ones are skipped (DataFrames of
                a sequence before it are not converted). A reader resumes
                from its position this way.

        Returns:
            An iterator of ``(epoch, [ObjectRef to pyarrow.Table, ...])``.

        Raises:
            SparkIntegrationError: a generator of DataFrames is iterated a
                second time, an item is not a DataFrame, or the epoch column
                holds nulls or negative values (then an
                :class:`~raytide.errors.EpochColumnError` too).
        """
        self.check_rewindable()
        self._started = True
        if self._epoch_column is not None:
            return self._column_epochs(self._epoch_column, start)
        frames = self._frames
        return self._frame_epochs([frames] if _is_dataframe(frames) else frames, start)

    def check_rewindable(self) -> None:
        """Raise if the DataFrames cannot be read (again): a generator that was read already.

        Raises:
            SparkIntegrationError: the source reads a generator that was read.
        """
        if self._started and not self._replayable:
            raise SparkIntegrationError(
                "a generator of DataFrames can be consumed only once: it cannot be rewound to read it again "
                "(give a list of DataFrames to make the input rewindable)"
            )

    def close(self) -> None:
        """Release the Spark-side caches RayDP keeps for the converted DataFrames."""
        from raydp.spark import release_spark_recoverable

        while self._pinned:
            with _quiet_raydp():
                release_spark_recoverable(self._pinned.pop())

    def __enter__(self) -> SparkSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _frame_epochs(self, frames: Iterable[Any], start: int) -> Iterator[tuple[int, list[ray.ObjectRef]]]:
        try:
            for epoch, frame in enumerate(frames):
                if epoch < start:
                    continue
                if not _is_dataframe(frame):
                    kind = type(frame).__name__
                    raise SparkIntegrationError(f"epoch {epoch}: expected a Spark DataFrame, got {kind}")
                self.close()
                yield epoch, self._convert(frame, _epoch_label(epoch))
        finally:
            self.close()

    def _column_epochs(self, column: str, start: int) -> Iterator[tuple[int, list[ray.ObjectRef]]]:
        frame = self._frames
        assert _is_dataframe(frame), "an epoch column comes with a single DataFrame (checked in __init__)"
        try:
            by_epoch = self._split(self._convert(frame, _SINGLE), column)
            for epoch in sorted(by_epoch):
                blocks = by_epoch.pop(epoch)
                if epoch >= start:
                    yield epoch, blocks
        finally:
            self.close()

    def _convert(self, frame: DataFrame, what: str) -> list[ray.ObjectRef]:
        self._pinned.append(frame)
        return dataframe_to_blocks(frame, what=what)

    def _split(self, blocks: list[ray.ObjectRef], column: str) -> dict[int, list[ray.ObjectRef]]:
        tasks = [_epoch_summary_task.remote(block, column) for block in blocks]
        summaries = get_results(tasks, f"reading the epoch column {column!r}")
        negatives = [s["negative"] for s in summaries if s["negative"] is not None]
        _epoch_column(column).check_values(sum(s["nulls"] for s in summaries), min(negatives, default=None))
        by_epoch: dict[int, list[ray.ObjectRef]] = {}
        for block, summary in zip(blocks, summaries):
            present = list(summary["counts"])
            for epoch, piece in zip(present, _pieces(block, column, present)):
                by_epoch.setdefault(epoch, []).append(piece)
        return by_epoch


class SparkReader(Reader[int]):
    """The one reader of a :class:`SparkSource`: ``(epoch, BlockRefs)``; its position is the next epoch to read.

    Resuming from a position converts the DataFrames again from that epoch on (for
    epochs from a column, the whole DataFrame); a generator of DataFrames that was
    read once cannot be read again.
    """

    def __init__(self, source: SparkSource) -> None:
        self.source = source

    def start(self) -> int:
        return 0

    def check_position(self, position: int) -> None:
        if position < 0:
            raise SourceError(f"a Spark reader's position is the next epoch to read; {position} is not an epoch")
        self.source.check_rewindable()

    def read_from(self, position: int) -> Iterator[tuple[int, BlockRefs, int]]:
        for epoch, blocks in self.source.epochs(start=position):
            yield epoch, BlockRefs(tuple(blocks)), epoch + 1


def _pieces(block: ray.ObjectRef, column: str, present: list[int]) -> list[ray.ObjectRef]:
    if len(present) <= 1:
        return [block] * len(present)
    # ray's stub types .remote() as one ObjectRef; with num_returns > 1 it returns a list of them
    return list(_split_task.options(num_returns=len(present)).remote(block, column, present))  # type: ignore[call-overload]


def _epoch_label(epoch: int) -> str:
    return f"the DataFrame of epoch {epoch}"


def _known_frames(frames: DataFrame | Iterable[DataFrame]) -> list[tuple[str, DataFrame]]:
    """The DataFrames known before reading, with their labels: the one, or a sequence's (not a generator's)."""
    if _is_dataframe(frames):
        return [(_SINGLE, frames)]
    if isinstance(frames, Sequence):
        return [(_epoch_label(epoch), frame) for epoch, frame in enumerate(frames) if _is_dataframe(frame)]
    return []


def _is_dataframe(value: object) -> TypeIs[DataFrame]:
    from pyspark.sql import DataFrame

    return isinstance(value, DataFrame)


def dataframe_to_blocks(frame: DataFrame, *, what: str = _SINGLE) -> list[ray.ObjectRef]:
    """Convert one DataFrame to Arrow tables in Ray's object store, through RayDP.

    This is RayDP's conversion, the one ``ray.data.from_spark`` calls
    (``raydp.spark.from_spark_recoverable``): Spark executors cache Arrow
    batches, Ray tasks fetch them from the executor actors; the rows never
    reach the driver. One block per Spark partition. raytide's fetch tasks
    also survive an executor's death: a partition whose executor died is read
    again from the restarted executor, which computes it again
    (:mod:`~raytide.integrations.spark.partitions`). The Arrow data stays
    cached in Spark until ``raydp.spark.release_spark_recoverable(frame)``
    (which :class:`SparkSource` calls for you).

    Column types are checked first, from the schema: a column that cannot
    cross (``docs/spark-types.md``) is refused before any Spark job runs.

    Args:
        frame: A DataFrame of a Spark session that runs on Ray.
        what: What the DataFrame is, for error messages.

    Returns:
        ObjectRefs to ``pyarrow.Table`` blocks (possibly none, or empty ones).

    Raises:
        SparkIntegrationError: the DataFrame's session is not on Ray, a
            column's type cannot cross (the message names the column and the
            type), or the conversion failed in Spark's JVM: the message says
            why first, the original error is the ``__cause__``. A block that
            cannot be read raises where it is fetched, naming the partition.
    """
    from raydp.spark.dataset import _recoverable_rdd_ids

    cached = cache_partitions(frame, what)
    _recoverable_rdd_ids[frame] = cached.rdd_id  # what release_spark_recoverable(frame) releases, as after RayDP's own
    return read_blocks(frame, cached, what)


@contextlib.contextmanager
def _quiet_raydp() -> Iterator[None]:
    """Silence PySpark's deprecation warning for ``DataFrame.sql_ctx``, which RayDP uses."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*sql_ctx.*")
        yield


def from_spark(frames: DataFrame | Iterable[DataFrame], epoch_column: str | None = None) -> SparkSource:
    """Make a dataflow input from Spark: see :class:`SparkSource`.

    Args:
        frames: One DataFrame (epoch 0, or epochs from ``epoch_column``) or a
            sequence / generator of DataFrames (one epoch each, consumed
            lazily).
        epoch_column: Integer column with each row's epoch (one DataFrame
            only); values must be non-negative.

    Returns:
        The source; nothing is converted until it is read.

    Raises:
        SparkIntegrationError: see :class:`SparkSource`.
    """
    return SparkSource(frames, epoch_column=epoch_column)
