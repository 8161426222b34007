"""The dataflow's outputs into Spark: :func:`to_spark`, :func:`output_tables`, :func:`tables_to_spark`.

A sink's output, ``{epoch: [ObjectRef to pyarrow.Table]}`` (:func:`output_tables`
converts a job's packed records into such tables inside Ray tasks), becomes a Spark
DataFrame whose executors read the tables from Ray's object store through RayDP; no
record passes through the driver. Records <-> Arrow conversion lives in the pure module
:mod:`raytide.integrations.records`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import ray

from raytide.actors.wire import unpack_records
from raytide.errors import SparkIntegrationError
from raytide.integrations import records
from raytide.integrations.spark.session import (
    TASK_CPUS,
    master_actor_name,
    require_spark,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession

#: Name of the column :func:`tables_to_spark` adds when it converts several epochs.
EPOCH_COLUMN = "epoch"


class OutputJob(Protocol):
    """What :func:`to_spark` needs from a job handle."""

    def output_parts(self, name: str) -> dict[int, list]:
        """An output's packed record lists per completed epoch (object refs or inline blobs)."""


@ray.remote(num_cpus=TASK_CPUS)
def _records_to_table(blob: bytes, output: str, epoch: int) -> pa.Table:
    return records.records_to_table(unpack_records(blob), vertex=output, epoch=epoch)


def output_tables(job: OutputJob, output_name: str) -> dict[int, list[ray.ObjectRef]]:
    """Object refs of Arrow tables of a job's output per completed epoch, converted by Ray tasks.

    Tuple records become columns ``_1, _2, ...``, dict records named columns (see
    :func:`raytide.integrations.records.records_to_table`); no record passes through
    the driver unless it was small enough to travel inline.
    """
    return {
        epoch: [_records_to_table.remote(part, output_name, epoch) for part in parts]
        for epoch, parts in job.output_parts(output_name).items()
    }


@ray.remote(num_cpus=TASK_CPUS)
def _block_info_task(table: pa.Table) -> tuple[pa.Schema, int]:
    return table.schema, table.num_rows


@ray.remote(num_cpus=TASK_CPUS)
def _ipc_task(table: pa.Table, schema: pa.Schema, epoch_column: str | None, epoch: int) -> bytes:
    block = records.conform(table, schema)
    if epoch_column is not None:
        block = records.with_constant_column(block, epoch_column, epoch)
    return _ipc_bytes(block)


def _ipc_bytes(table: pa.Table) -> bytes:
    """Arrow IPC stream bytes: the block format RayDP's JVM reader takes directly."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def tables_to_spark(
    refs_by_epoch: Mapping[int, Sequence[ray.ObjectRef]],
    spark: SparkSession | None = None,
    epoch: int | None = None,
    epoch_column: str = EPOCH_COLUMN,
) -> DataFrame:
    """Build a Spark DataFrame from Arrow tables in Ray's object store.

    The blocks' schemas are unified (:func:`records.unify_schemas`: missing or
    null-typed columns become nullable, numbers are promoted), each block is
    cast to that schema and written as Arrow IPC bytes by a Ray task, and the
    Spark executors read those objects directly through RayDP (no pandas, no
    driver round trip). The DataFrame's schema is the unified Arrow schema in
    Spark types. The IPC objects stay in Ray's object store, held by RayDP's
    master actor, as long as the Spark session lives.

    Args:
        refs_by_epoch: ``{epoch: [ObjectRef to pyarrow.Table, ...]}``.
        spark: The RayDP session; default :func:`~raytide.integrations.spark.session.active_spark`.
        epoch: Convert only this epoch (no epoch column), or None for all
            epochs, in which case a non-null ``bigint`` column
            ``epoch_column`` holds each row's epoch.
        epoch_column: Name of that column.

    Returns:
        The DataFrame (empty, with whatever schema is known, if there are no
        rows).

    Raises:
        SparkIntegrationError: no Spark on Ray, incompatible block schemas,
            or the blocks already have a column named ``epoch_column``.
    """
    spark = spark or require_spark()
    selected = _select(refs_by_epoch, epoch)
    pairs = [(e, ref) for e, refs in selected.items() for ref in refs]
    infos = ray.get([_block_info_task.remote(ref) for _, ref in pairs])
    schema = records.unify_schemas(info[0] for info in infos)
    label = epoch_column if epoch is None else None
    if label is not None:
        schema = _with_epoch_field(schema, label)
    stripped = _without(schema, label)
    blocks = [
        _ipc_task.remote(ref, stripped, label, e) for (e, ref), (_, rows) in zip(pairs, infos) if rows > 0
    ]
    return _dataframe(spark, schema, blocks)


def _select(refs_by_epoch: Mapping[int, Sequence[ray.ObjectRef]], epoch: int | None) -> dict[int, list[ray.ObjectRef]]:
    if epoch is None:
        return {e: list(refs) for e, refs in sorted(refs_by_epoch.items())}
    return {epoch: list(refs_by_epoch.get(epoch, []))}


def _with_epoch_field(schema: pa.Schema, name: str) -> pa.Schema:
    if name in schema.names:
        raise SparkIntegrationError(
            f"the output already has a column {name!r}; pass another epoch_column or a single epoch"
        )
    return schema.append(pa.field(name, pa.int64(), nullable=False))


def _without(schema: pa.Schema, name: str | None) -> pa.Schema:
    if name is None:
        return schema
    return schema.remove(schema.get_field_index(name))


def _dataframe(spark: SparkSession, schema: pa.Schema, blocks: list[ray.ObjectRef]) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    if not blocks:
        return spark.createDataFrame([], from_arrow_schema(schema))
    from raydp.spark import ray_dataset_to_spark_dataframe

    # RayDP fetches the first block to the driver to see its format: give it
    # an empty one (a few hundred bytes) rather than real rows.
    blocks = [ray.put(_ipc_bytes(schema.empty_table())), *blocks]
    _keep_alive(spark, blocks)
    return ray_dataset_to_spark_dataframe(spark, schema, blocks)


def _keep_alive(spark: SparkSession, blocks: list[ray.ObjectRef]) -> None:
    """Hand the blocks to RayDP's master actor so that they outlive this call.

    Spark reads them lazily, whenever the DataFrame is computed; RayDP's own
    Ray -> Spark path keeps its blocks the same way.
    """
    master = ray.get_actor(master_actor_name(spark))
    ray.get(master.add_objects.remote(uuid.uuid4().hex, blocks))


def to_spark(
    job: OutputJob,
    output_name: str,
    epoch: int | None = None,
    spark: SparkSession | None = None,
    epoch_column: str = EPOCH_COLUMN,
) -> DataFrame:
    """A job's output as a Spark DataFrame: :func:`tables_to_spark` of :func:`output_tables`.

    Args:
        job: The running (or finished) job.
        output_name: The sink's name.
        epoch: One epoch (no epoch column), or None for all with an epoch column.
        spark: The RayDP session; default :func:`~raytide.integrations.spark.session.active_spark`.
        epoch_column: Name of the epoch column when several epochs are converted.

    Returns:
        The DataFrame.
    """
    return tables_to_spark(output_tables(job, output_name), spark=spark, epoch=epoch, epoch_column=epoch_column)
