"""The dataflow's outputs into Spark: :func:`to_spark`, :func:`output_tables`, :func:`tables_to_spark`.

A sink's output, ``{epoch: [ObjectRef to pyarrow.Table]}`` (:func:`output_tables`
converts a job's packed records into such tables inside Ray tasks), becomes a Spark
DataFrame whose executors read the tables from Ray's object store through RayDP; no
record passes through the driver. Records <-> Arrow conversion lives in the pure module
:mod:`raytide.integrations.records`; which Spark type a column gets is described in
``docs/spark-types.md``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import ray

from raytide.errors import SparkIntegrationError
from raytide.integrations import records
from raytide.integrations.spark.session import (
    TASK_CPUS,
    get_results,
    master_actor_name,
    require_spark,
)
from raytide.integrations.spark.types import check_schema, widen_decimals
from raytide.physical.pickled import Packed
from raytide.physical.wire import unpack_records

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Name of the column :func:`tables_to_spark` adds when it converts several epochs.
EPOCH_COLUMN = "epoch"


class OutputJob(Protocol):
    """What :func:`to_spark` needs from a job handle."""

    def output_parts(self, name: str) -> dict[int, list]:
        """An output's packed record lists per completed epoch (object refs or inline blobs)."""


@ray.remote(num_cpus=TASK_CPUS)
def _records_to_table(blob: Packed, output: str, epoch: int, schema: pa.Schema | None) -> pa.Table:
    return records.records_to_table(unpack_records(blob), vertex=output, epoch=epoch, schema=schema)


def output_tables(
    job: OutputJob, output_name: str, schema: pa.Schema | None = None
) -> dict[int, list[ray.ObjectRef]]:
    """Object refs of Arrow tables of a job's output per completed epoch, converted by Ray tasks.

    Tuple records become columns ``_1, _2, ...``, dict records named columns (see
    :func:`raytide.integrations.records.records_to_table`); no record passes through
    the driver unless it was small enough to travel inline.

    Args:
        job: The job.
        output_name: The sink's name.
        schema: Build every table with exactly this Arrow schema, or None to infer
            the types from the values.
    """
    return {
        epoch: [_records_to_table.remote(part, output_name, epoch, schema) for part in parts]
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
    Spark types (a timestamp without time zone becomes ``timestamp_ntz``, see
    ``docs/spark-types.md``). The IPC objects stay in Ray's object store, held
    by RayDP's master actor, as long as the Spark session lives.

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
            the blocks already have a column named ``epoch_column``, or a
            block could not be computed (the message says why first, Ray's
            error is the ``__cause__``).
    """
    target = _Target(spark or require_spark(), epoch, epoch_column, "converting tables to Spark")
    return _convert(target, refs_by_epoch)


class _Target:
    """The DataFrame to build: in which session, of which epochs, with which column types."""

    def __init__(
        self,
        spark: SparkSession,
        epoch: int | None,
        epoch_column: str,
        doing: str,
        given: StructType | None = None,
        widen_decimals: bool = False,
    ) -> None:
        """Describe a conversion.

        Args:
            spark: The RayDP session.
            epoch: One epoch, or None for all (with an epoch column).
            epoch_column: The epoch column's name.
            doing: What the conversion is, for error messages.
            given: The records' Spark schema, or None to infer it from the blocks.
            widen_decimals: Give inferred decimals precision 38
                (:func:`~raytide.integrations.spark.types.widen_decimals`): for
                tables built from records, whose decimal precision is Arrow's
                guess from the values at hand.
        """
        from pyspark.sql.pandas.types import to_arrow_schema

        self.spark, self.epoch, self.doing, self.given = spark, epoch, doing, given
        self.label = epoch_column if epoch is None else None
        self.given_arrow = to_arrow_schema(given) if given is not None else None
        self.widen_decimals = widen_decimals

    def arrow_schema(self, blocks: list[pa.Schema], epochs: list[int]) -> pa.Schema:
        """The records' Arrow schema (no epoch column): the given one, or the blocks' unified
        (``blocks[i]`` is of epoch ``epochs[i]``: a clash names the epochs that disagree)."""
        if self.given_arrow is not None:
            return self.given_arrow
        try:
            unified = records.unify_schemas(blocks)
        except SparkIntegrationError as error:
            clash = records.epochs_that_disagree(blocks, epochs)
            raise SparkIntegrationError(f"{self.doing}: {clash or error}; records of one output must have one type "
                                        f"in every epoch (or pass schema=)") from error
        return widen_decimals(unified) if self.widen_decimals else unified

    def spark_schema(self, arrow: pa.Schema) -> StructType:
        """The DataFrame's schema: the given one, or ``arrow``'s in Spark types; then the epoch column."""
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.sql.types import LongType, StructField, StructType

        columns = self.given if self.given is not None else from_arrow_schema(arrow, prefer_timestamp_ntz=True)
        if self.label is None:
            return columns
        if self.label in columns.names:
            raise SparkIntegrationError(
                f"the output already has a column {self.label!r}; pass another epoch_column or a single epoch"
            )
        return StructType([*columns.fields, StructField(self.label, LongType(), nullable=False)])


def _convert(target: _Target, refs_by_epoch: Mapping[int, Sequence[ray.ObjectRef]]) -> DataFrame:
    """Build ``target``'s DataFrame from the blocks (see :func:`tables_to_spark`)."""
    selected = _select(refs_by_epoch, target.epoch)
    pairs = [(e, ref) for e, refs in selected.items() for ref in refs]
    infos = get_results([_block_info_task.remote(ref) for _, ref in pairs], target.doing)
    schema = target.arrow_schema([info[0] for info in infos], [e for e, _ in pairs])
    columns = target.spark_schema(schema)
    blocks = [
        _ipc_task.remote(ref, schema, target.label, e) for (e, ref), (_, rows) in zip(pairs, infos) if rows > 0
    ]
    return _dataframe(target.spark, columns, blocks)


def _select(refs_by_epoch: Mapping[int, Sequence[ray.ObjectRef]], epoch: int | None) -> dict[int, list[ray.ObjectRef]]:
    if epoch is None:
        return {e: list(refs) for e, refs in sorted(refs_by_epoch.items())}
    return {epoch: list(refs_by_epoch.get(epoch, []))}


def _dataframe(spark: SparkSession, schema: StructType, blocks: list[ray.ObjectRef]) -> DataFrame:
    """A DataFrame of ``schema`` whose executors read the IPC ``blocks``.

    RayDP's public ``ray_dataset_to_spark_dataframe`` derives the Spark schema
    from the Arrow one itself, turning ``timestamp_ntz`` into ``timestamp`` and
    losing what Arrow does not say (a map's or an array's ``containsNull``, a
    day-time interval's fields); ``_convert_by_rdd``, the private function it
    ends with, takes the schema to use.
    """
    if not blocks:
        return spark.createDataFrame([], schema)
    from raydp.spark.dataset import _convert_by_rdd, get_locations

    _keep_alive(spark, blocks)
    return _convert_by_rdd(spark, blocks, get_locations(blocks), schema)


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
    schema: StructType | str | None = None,
) -> DataFrame:
    """A job's output as a Spark DataFrame: :func:`tables_to_spark` of :func:`output_tables`.

    Without ``schema``, column types are inferred from the records as Arrow
    infers them (``int`` gives ``bigint``, ``float`` ``double``, a ``dict`` a
    struct, a naive ``datetime`` ``timestamp_ntz``), except that decimals get
    Spark's largest precision, 38, and the scale their values have: Arrow
    alone guesses the precision from the values at hand and would turn a
    ``decimal(38,10)`` column into ``decimal(15,10)``. With ``schema``, given
    as ``spark.createDataFrame`` takes it (a ``StructType``, for example the
    input's ``df.schema``, or a DDL string such as ``"id bigint, m
    map<string,int>"``), the records are built with exactly those types and the
    DataFrame has exactly that schema: the way to get narrow types (``int``,
    ``float``, ``decimal(10,2)``) and maps (from ``dict`` values) back. See
    ``docs/spark-types.md``.

    Args:
        job: The running (or finished) job.
        output_name: The sink's name.
        epoch: One epoch (no epoch column), or None for all with an epoch column.
        spark: The RayDP session; default :func:`~raytide.integrations.spark.session.active_spark`.
        epoch_column: Name of the epoch column when several epochs are converted.
        schema: The records' Spark schema (without the epoch column), or None
            to infer it.

    Returns:
        The DataFrame.

    Raises:
        SparkIntegrationError: no Spark on Ray; ``schema`` has a type that
            cannot cross (named before any record is converted); records do not
            fit the schema, or hold values Spark cannot represent (the message
            names the vertex, the epoch and the column first, Ray's error is the
            ``__cause__``); or see :func:`tables_to_spark`.
    """
    spark = spark or require_spark()
    given = _given_schema(spark, schema) if schema is not None else None
    doing = f"converting output {output_name!r} to Spark"
    target = _Target(spark, epoch, epoch_column, doing, given, widen_decimals=True)
    return _convert(target, output_tables(job, output_name, schema=target.given_arrow))


def _given_schema(spark: SparkSession, schema: StructType | str) -> StructType:
    """``schema`` as a StructType, once checked; a DDL string is parsed by Spark's JVM.

    The JVM, unlike PySpark, parses every Spark type (a calendar ``interval``
    too), so the check can name the column.
    """
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        text = schema.json()
    else:
        jvm = spark.sparkContext._jvm
        assert jvm is not None, "a started SparkContext always has its driver JVM"
        text = jvm.org.apache.spark.sql.types.StructType.fromDDL(schema).json()
    check_schema(text, "the schema given to to_spark")
    return schema if isinstance(schema, StructType) else StructType.fromJson(json.loads(text))
