"""Spark DataFrames in and out of the dataflow, through RayDP and Ray's object store.

Spark runs *on* Ray (RayDP): its executors are Ray actors, so a DataFrame
becomes Arrow tables in Ray's object store without passing through the driver,
and Arrow tables in the object store become a DataFrame that Spark executors
read directly. This module is the bridge the dataflow runtime plugs into:

* :func:`start_spark` / :func:`stop_spark` start and stop Spark on Ray with
  defaults sized for the cluster and with the JVM flags Java 17 needs
  (:data:`JDK17_JAVA_OPTIONS`), so users never write them.
* :func:`from_spark` turns a DataFrame (epochs from a column, or epoch 0) or a
  sequence / generator of DataFrames (one epoch each) into a
  :class:`SparkSource`, whose :meth:`SparkSource.epochs` yields
  ``(epoch, [ObjectRef to pyarrow.Table, ...])`` lazily.
* :func:`tables_to_spark` and :func:`to_spark` turn ``{epoch: [ObjectRef to
  pyarrow.Table]}`` (a sink's output) back into a DataFrame.

Records <-> Arrow conversion and the Arrow helpers run inside the Ray tasks
here live in the pure module :mod:`raytide.integrations.records`.

Resources: every Ray task of a conversion reserves a fraction of a CPU
(:data:`TASK_CPUS` for this module's tasks and, through
:func:`spark_configs`, for RayDP's fetch tasks). With RayDP's default of zero,
each block's task starts its own Python worker at once, and on a small machine
that storm of worker start-ups made conversions 5-8x slower (37 blocks: 14 s
instead of 1.7 s on 2 CPUs). The price: conversions wait while no CPU is free.
RayDP's conversion needs one anyway (Ray Data runs a 1-CPU metadata task per
block), so leave at least one CPU to them; the defaults of :func:`start_spark`
give Spark half of the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import ray

from raytide.actors.wire import unpack_records
from raytide.errors import SparkIntegrationError
from raytide.integrations import records

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

#: JVM flags for Java 17+: open the JDK internals that Spark (Arrow, Kryo,
#: off-heap buffers) and Ray's Java runtime (FST serialisation in RayDP's app
#: master, in the Spark driver and in the executors, all of which are Ray Java
#: workers) reach by reflection. Found on Java 17: without them RayDP's app
#: master actor dies on ``java.lang`` (``String.value``) at the first
#: conversion, and the driver on ``java.math`` then ``java.text`` (Spark itself
#: already adds its own list, which lacks those two). The list is the one
#: RayDP's examples document for JDK 17, plus ``java.lang.reflect`` from
#: Spark's ``JavaModuleOptions``; ``-XX:+IgnoreUnrecognizedVMOptions`` keeps
#: older JVMs that do not know ``--add-opens`` starting.
JDK17_JAVA_OPTIONS: tuple[str, ...] = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.math",
            "java.text",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
)

#: RayDP's config for the JVM options of its app master (the py4j gateway
#: process and the ``RayAppMaster`` Java actor), see
#: ``raydp/spark/ray_cluster_master.py`` (``RAYDP_APPMASTER_EXTRA_JAVA_OPTIONS``).
APP_MASTER_JAVA_OPTIONS = "spark.ray.raydp_app_master.extraJavaOptions"

#: Every Spark/RayDP config that receives :data:`JDK17_JAVA_OPTIONS`.
JAVA_OPTIONS_KEYS: tuple[str, ...] = (
    APP_MASTER_JAVA_OPTIONS,
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)

#: CPUs reserved by each Ray task of a conversion (see the module docstring).
TASK_CPUS = 0.5

#: RayDP's config for the CPUs of its Spark -> Ray fetch tasks (default 0 in RayDP).
FETCH_TASK_CPUS = "spark.ray.raydp_recoverable_fetch.task.resource.CPU"

#: Name of the column :func:`tables_to_spark` adds when it converts several epochs.
EPOCH_COLUMN = "epoch"

_MASTER_SUFFIX = "_SPARK_MASTER"  # RayDP names its master actor app_name + this
_INTEGRAL_SPARK_TYPES = ("tinyint", "smallint", "int", "bigint")


# --------------------------------------------------------------------------- starting Spark


@dataclass(frozen=True)
class ExecutorPlan:
    """How many Spark executors to start on Ray, and how big.

    Attributes:
        num_executors: Executor actors.
        executor_cores: Cores (and Ray CPUs) per executor.
        executor_memory: JVM heap per executor, in Spark's notation ("1g").
    """

    num_executors: int
    executor_cores: int
    executor_memory: str


def plan_executors(
    resources: Mapping[str, float],
    num_executors: int | None = None,
    executor_cores: int | None = None,
    executor_memory: str | None = None,
) -> ExecutorPlan:
    """Size Spark for a Ray cluster, filling in what the caller left out.

    Spark gets about half of the cluster's CPUs (at least one), the rest is
    left to the dataflow: executors of 1 core below 4 CPUs for Spark, of 2
    cores above; 1 GiB of heap per core, at most a quarter of Ray's memory
    resource per executor, at least 512 MiB. A 2-CPU machine gets one
    executor with one core and "1g".

    Args:
        resources: ``ray.cluster_resources()``.
        num_executors: Fixed number of executors, or None.
        executor_cores: Fixed cores per executor, or None.
        executor_memory: Fixed heap per executor ("2g", "512m"), or None.

    Returns:
        The plan.

    Raises:
        SparkIntegrationError: the cluster cannot host the executors asked for.
    """
    cpus = float(resources.get("CPU", 0))
    if cpus < 1:
        raise SparkIntegrationError(f"Spark on Ray needs at least one Ray CPU; the cluster has {cpus:g}")
    budget = max(1, int(cpus // 2))
    cores = executor_cores or (1 if budget < 4 else 2)
    count = num_executors or max(1, budget // cores)
    if count * cores > cpus:
        raise SparkIntegrationError(
            f"{count} executors x {cores} cores need {count * cores} Ray CPUs; the cluster has {cpus:g}"
        )
    if count * cores > cpus - 1:
        warnings.warn(
            f"Spark takes {count * cores} of the cluster's {cpus:g} CPUs: less than one is left for the "
            "dataflow and for Ray Data's conversion tasks, which may then wait forever",
            RuntimeWarning,
            stacklevel=2,
        )
    memory = executor_memory or _default_memory(resources.get("memory"), count, cores)
    return ExecutorPlan(num_executors=count, executor_cores=cores, executor_memory=memory)


def _default_memory(ray_memory: float | None, count: int, cores: int) -> str:
    wanted = cores * 1024
    if ray_memory:
        wanted = min(wanted, int(ray_memory / 4 / count / 2**20))
    return _spark_size(max(512, wanted))


def _spark_size(mebibytes: int) -> str:
    if mebibytes % 1024 == 0:
        return f"{mebibytes // 1024}g"
    return f"{mebibytes}m"


def spark_configs(configs: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's Spark configs with raytide's additions.

    :data:`JDK17_JAVA_OPTIONS` go first in each of :data:`JAVA_OPTIONS_KEYS`
    (options the caller already set there are kept after them), and RayDP's
    fetch tasks reserve :data:`TASK_CPUS` unless the caller set
    :data:`FETCH_TASK_CPUS`.

    Args:
        configs: Extra Spark / RayDP configs, or None.

    Returns:
        A new dict.
    """
    merged = dict(configs or {})
    merged.setdefault(FETCH_TASK_CPUS, str(TASK_CPUS))
    flags = " ".join(JDK17_JAVA_OPTIONS)
    for key in JAVA_OPTIONS_KEYS:
        own = merged.get(key, "").strip()
        merged[key] = f"{flags} {own}".strip()
    return merged


def start_spark(
    app_name: str,
    num_executors: int | None = None,
    executor_cores: int | None = None,
    executor_memory: str | None = None,
    configs: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start Spark on Ray through ``raydp.init_spark``, or return the running one.

    Starts a local Ray (``ray.init()``) if none is connected. Sizes the
    executors with :func:`plan_executors`, adds :data:`JDK17_JAVA_OPTIONS` to
    the app master, driver and executor JVMs, and points executors' Python
    workers at this interpreter (``PYSPARK_PYTHON``, unless already set). An
    idle driver JVM left in this process by an earlier Spark session (a plain
    local one, or a stopped RayDP one) is ended first, so that the new driver
    gets RayDP's classpath and the flags.

    If Spark was already started through RayDP (by this function or by
    ``raydp.init_spark`` directly), that session is returned and the other
    arguments are ignored; a warning says so if it runs without the Java 17
    flags.

    Args:
        app_name: Spark application name (RayDP also names its master actor
            after it).
        num_executors: Executors; default from the cluster's CPUs.
        executor_cores: Cores per executor; default from the cluster.
        executor_memory: Heap per executor ("1g"); default from the cluster.
        configs: Extra Spark configs.

    Returns:
        The SparkSession.

    Raises:
        SparkIntegrationError: a Spark session that is not on Ray is active,
            or the cluster cannot host the executors.
    """
    existing = active_spark()
    if existing is not None:
        _warn_if_missing_flags(existing)
        return existing
    _refuse_foreign_session()
    _drop_idle_gateway()
    if not ray.is_initialized():
        ray.init()
    plan = plan_executors(ray.cluster_resources(), num_executors, executor_cores, executor_memory)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import raydp

    logger.info("starting Spark on Ray: %s", plan)
    return raydp.init_spark(
        app_name,
        plan.num_executors,
        plan.executor_cores,
        plan.executor_memory,
        configs=spark_configs(configs),
    )


def active_spark() -> SparkSession | None:
    """The SparkSession RayDP runs in this process, or None.

    Returns:
        The session started by ``raydp.init_spark`` (directly or through
        :func:`start_spark`), else an active session whose master is RayDP's,
        else None.
    """
    import raydp.context

    context = getattr(raydp.context, "_global_spark_context", None)
    session = getattr(context, "_spark_session", None)
    if session is not None:
        return session
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None and _is_raydp(session):
        return session
    return None


def stop_spark(timeout_s: float = 30.0) -> None:
    """Stop Spark on Ray (``raydp.stop_spark``) and wait until its master actor is gone.

    Waiting makes an immediate :func:`start_spark` with the same app name
    safe. Does nothing if Spark is not running; Ray keeps running.

    Args:
        timeout_s: How long to wait for RayDP's master actor to exit.
    """
    session = active_spark()
    if session is None:
        return
    master = session.sparkContext.appName + _MASTER_SUFFIX
    import raydp

    raydp.stop_spark()
    _wait_actor_gone(master, timeout_s)


def _wait_actor_gone(name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            return
        time.sleep(0.1)
    logger.warning("RayDP master actor %s still alive %.0f s after stop_spark", name, timeout_s)


def _is_raydp(session: SparkSession) -> bool:
    return session.sparkContext.master.startswith("ray://")


def _refuse_foreign_session() -> None:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None and not context.master.startswith("ray://"):
        raise SparkIntegrationError(
            f"a Spark session that does not run on Ray is active (master {context.master!r}); "
            "stop it before start_spark()"
        )


def _drop_idle_gateway(timeout_s: float = 30.0) -> None:
    """Make PySpark launch a fresh driver JVM for RayDP.

    PySpark starts its driver JVM once per process, with the classpath and
    JVM options of the first session, and keeps it after that session stops.
    A JVM left by a plain local Spark lacks RayDP's jars (its driver then
    cannot parse the ``ray://`` master URL) and the Java 17 flags, and one
    left by a stopped RayDP session has had its Ray runtime shut down. So
    when no SparkContext is active, the idle JVM is ended (it exits when its
    stdin closes) and forgotten; ``raydp.init_spark`` then launches a new one.
    This uses PySpark's private ``SparkContext._gateway``: there is no public
    way to relaunch the driver JVM.

    Args:
        timeout_s: How long to wait for the old JVM to exit.
    """
    from pyspark import SparkContext

    with SparkContext._lock:
        gateway = SparkContext._gateway
        if gateway is None or SparkContext._active_spark_context is not None:
            return
        gateway.shutdown()
        process = getattr(gateway, "proc", None)
        if process is not None:
            process.stdin.close()
            process.wait(timeout=timeout_s)
        SparkContext._gateway = None
        SparkContext._jvm = None


def _warn_if_missing_flags(session: SparkSession) -> None:
    java = session.sparkContext._jvm.System.getProperty("java.specification.version")
    if _java_major(java) < 17:
        return
    opened = session.sparkContext.getConf().get(APP_MASTER_JAVA_OPTIONS, "")
    if "java.base/java.lang=" not in opened:
        warnings.warn(
            f"Spark on Ray was started without the Java {java} --add-opens flags for RayDP's app master; "
            "conversions may crash its JVM. Start it with raytide.integrations.spark.start_spark(), or pass "
            "JDK17_JAVA_OPTIONS in the configs " + ", ".join(JAVA_OPTIONS_KEYS),
            RuntimeWarning,
            stacklevel=3,
        )


def _java_major(version: str | None) -> int:
    head = (version or "0").split(".")[0]
    return int(head) if head.isdigit() else 0


def _session() -> SparkSession:
    session = active_spark()
    if session is None:
        raise SparkIntegrationError("Spark on Ray is not running; call start_spark() first")
    return session


# --------------------------------------------------------------------------- Spark -> Ray


@ray.remote(num_cpus=TASK_CPUS)
def _epoch_summary_task(table: pa.Table, column: str) -> dict[str, Any]:
    return records.epoch_summary(table, column)


@ray.remote(num_cpus=TASK_CPUS)
def _split_task(table: pa.Table, column: str, epochs: list[int]) -> Any:
    pieces = records.split_by_epoch(table, column, epochs)
    return pieces[0] if len(pieces) == 1 else tuple(pieces)


class SparkSource:
    """A dataflow input that reads Spark DataFrames, one epoch at a time.

    The contract with the runtime is :meth:`epochs`: it lazily yields
    ``(epoch, blocks)`` in increasing epoch order, ``blocks`` being a list of
    ``ray.ObjectRef``, each to a ``pyarrow.Table`` in Ray's object store. The
    tables are produced by RayDP's conversion (the one behind
    ``ray.data.from_spark``) and are never collected on the driver. An epoch
    may have zero blocks or empty tables. Build it with :func:`from_spark`.

    Epochs come from:

    * a sequence or generator of DataFrames: DataFrame ``k`` is epoch ``k``
      and is pulled from the generator and converted only when epoch ``k`` is
      asked for;
    * one DataFrame and ``epoch_column``: the DataFrame is converted once,
      then each block is split by the column's values inside Ray; only epochs
      that have rows are yielded; the column stays in the tables;
    * one DataFrame alone: epoch 0.

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
                DataFrames, is missing, or is not an integer column.
        """
        self._single = _is_dataframe(frames)
        if epoch_column is not None and not self._single:
            raise SparkIntegrationError(
                "epoch_column needs a single DataFrame; a sequence of DataFrames has one epoch each"
            )
        if epoch_column is not None:
            _check_epoch_column(frames, epoch_column)
        self._frames = frames
        self._epoch_column = epoch_column
        self._replayable = self._single or isinstance(frames, Sequence)
        self._started = False
        self._pinned: list[DataFrame] = []

    @property
    def epoch_column(self) -> str | None:
        """The column epochs are read from, if any."""
        return self._epoch_column

    def epochs(self, start: int = 0) -> Iterator[tuple[int, list[ray.ObjectRef]]]:
        """Yield ``(epoch, blocks)`` lazily, in increasing epoch order, from ``start`` on.

        Args:
            start: First epoch wanted; earlier ones are skipped (DataFrames of
                a sequence before it are not converted). Useful to replay an
                input from a snapshot's offset.

        Returns:
            An iterator of ``(epoch, [ObjectRef to pyarrow.Table, ...])``.

        Raises:
            SparkIntegrationError: a generator of DataFrames is iterated a
                second time, an item is not a DataFrame, or the epoch column
                holds nulls or negative values.
        """
        if self._started and not self._replayable:
            raise SparkIntegrationError("a generator of DataFrames can be consumed only once")
        self._started = True
        if self._epoch_column is not None:
            return self._column_epochs(start)
        if self._single:
            return self._frame_epochs([self._frames], start)
        return self._frame_epochs(self._frames, start)

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
                yield epoch, self._convert(frame)
        finally:
            self.close()

    def _column_epochs(self, start: int) -> Iterator[tuple[int, list[ray.ObjectRef]]]:
        try:
            by_epoch = self._split(self._convert(self._frames))
            for epoch in sorted(by_epoch):
                blocks = by_epoch.pop(epoch)
                if epoch >= start:
                    yield epoch, blocks
        finally:
            self.close()

    def _convert(self, frame: DataFrame) -> list[ray.ObjectRef]:
        self._pinned.append(frame)
        return dataframe_to_blocks(frame)

    def _split(self, blocks: list[ray.ObjectRef]) -> dict[int, list[ray.ObjectRef]]:
        column = self._epoch_column
        summaries = ray.get([_epoch_summary_task.remote(block, column) for block in blocks])
        _check_summaries(summaries, column)
        by_epoch: dict[int, list[ray.ObjectRef]] = {}
        for block, summary in zip(blocks, summaries):
            present = list(summary["counts"])
            for epoch, piece in zip(present, _pieces(block, column, present)):
                by_epoch.setdefault(epoch, []).append(piece)
        return by_epoch


def _pieces(block: ray.ObjectRef, column: str, present: list[int]) -> list[ray.ObjectRef]:
    if len(present) <= 1:
        return [block] * len(present)
    return list(_split_task.options(num_returns=len(present)).remote(block, column, present))


def _check_summaries(summaries: Sequence[Mapping[str, Any]], column: str) -> None:
    nulls = sum(summary["nulls"] for summary in summaries)
    if nulls:
        raise SparkIntegrationError(
            f"epoch column {column!r} has {nulls} null value(s); epochs must be non-negative integers"
        )
    negative = next((s["negative"] for s in summaries if s["negative"] is not None), None)
    if negative is not None:
        raise SparkIntegrationError(
            f"epoch column {column!r} has the negative value {negative}; epochs must be non-negative integers"
        )


def _check_epoch_column(frame: DataFrame, column: str) -> None:
    names = frame.columns
    if column not in names:
        raise SparkIntegrationError(f"epoch column {column!r} is not a column of the DataFrame (columns: {names})")
    spark_type = frame.schema[column].dataType.simpleString()
    if spark_type not in _INTEGRAL_SPARK_TYPES:
        raise SparkIntegrationError(
            f"epoch column {column!r} has type {spark_type}; epochs must be non-negative integers "
            f"({', '.join(_INTEGRAL_SPARK_TYPES)})"
        )


def _is_dataframe(value: Any) -> bool:
    from pyspark.sql import DataFrame

    return isinstance(value, DataFrame)


def dataframe_to_blocks(frame: DataFrame) -> list[ray.ObjectRef]:
    """Convert one DataFrame to Arrow tables in Ray's object store, through RayDP.

    This is RayDP's conversion, the one ``ray.data.from_spark`` calls
    (``raydp.spark.from_spark_recoverable``): Spark executors write Arrow
    batches, Ray tasks fetch them from the executor actors; the rows never
    reach the driver. One block per Spark partition. RayDP keeps the Arrow
    data cached in Spark until ``raydp.spark.release_spark_recoverable(frame)``
    (which :class:`SparkSource` calls for you).

    Args:
        frame: A DataFrame of a Spark session that runs on Ray.

    Returns:
        ObjectRefs to ``pyarrow.Table`` blocks (possibly none, or empty ones).

    Raises:
        SparkIntegrationError: the DataFrame's session is not on Ray.
    """
    if not _is_raydp(frame.sparkSession):
        raise SparkIntegrationError("the DataFrame belongs to a Spark session that does not run on Ray (RayDP)")
    from raydp.spark import from_spark_recoverable

    with _quiet_raydp():
        dataset = from_spark_recoverable(frame)
    return dataset.to_arrow_refs()


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
        The source; nothing is converted until its ``epochs()`` is iterated.

    Raises:
        SparkIntegrationError: see :class:`SparkSource`.
    """
    return SparkSource(frames, epoch_column=epoch_column)


# --------------------------------------------------------------------------- Ray -> Spark


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
def _ipc_task(table: pa.Table, schema: pa.Schema, epoch_column: str | None, epoch: int | None) -> bytes:
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
        spark: The RayDP session; default :func:`active_spark`.
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
    spark = spark or _session()
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
    master = ray.get_actor(spark.sparkContext.appName + _MASTER_SUFFIX)
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
        spark: The RayDP session; default :func:`active_spark`.
        epoch_column: Name of the epoch column when several epochs are converted.

    Returns:
        The DataFrame.
    """
    return tables_to_spark(output_tables(job, output_name), spark=spark, epoch=epoch, epoch_column=epoch_column)
