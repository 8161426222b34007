"""A DataFrame's Arrow partitions cached in Spark's executors, read by the input replicas themselves.

RayDP's conversion (:func:`~raytide.integrations.spark.source.dataframe_to_blocks`) runs a
Spark job that caches each partition's Arrow data in the executors, then a Ray task per
partition copies it into Ray's object store. Those tasks need Ray workers, and Ray keeps
idle workers only up to the CPU count (ray-project/ray#36766): on a small cluster whose
workers are taken by the job's hosts, a conversion starts a worker process, 0.4-0.8 s on
two CPUs, and a stream pays it every micro-batch. A stream does not need the copy: its
micro-batch stays cached in Spark until a committed snapshot holds it, so each input
replica reads its partitions from the executors directly, with the JVM call RayDP's fetch
task makes (:class:`SparkPartition`), and a recovery that deals them again reads them again.

A batch read with :func:`~raytide.integrations.spark.source.from_spark` keeps RayDP's
object-store blocks: that source releases a DataFrame's cache when it moves on to the next
one, before any snapshot could hold the epoch, so a replay must find the data in Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray

from raytide.errors import SparkIntegrationError
from raytide.integrations.spark.session import failure_reason
from raytide.integrations.spark.source import check_convertible
from raytide.sources.base import RemoteBatch

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame

#: Seconds an input replica waits for an executor to hand over one cached partition.
READ_TIMEOUT = 300.0


@dataclass(frozen=True)
class SparkPartition(RemoteBatch):
    """One cached Arrow partition of a DataFrame, read where it is dealt (see the module docstring)."""

    executor: str  #: the name of the executor actor that caches it
    rdd_id: int
    partition: int
    schema_json: str
    driver_agent_url: str
    what: str  #: what the DataFrame is, for errors ("micro-batch 3 of query 'words'")

    def read(self) -> pa.Table:
        """The partition as an Arrow table (its schema's metadata dropped, as RayDP's fetch does)."""
        from raydp.spark.dataset import _enable_load_code_from_local

        _enable_load_code_from_local()  # this worker may call the executor's Java methods
        where = f"{self.what}: partition {self.partition} from Spark executor {self.executor!r}"
        try:
            executor = ray.get_actor(self.executor)
            call: Any = executor.getRDDPartition.remote(self.rdd_id, self.partition, self.schema_json, self.driver_agent_url)
            data = ray.get(call, timeout=READ_TIMEOUT)
        except ray.exceptions.GetTimeoutError as error:
            raise SparkIntegrationError(f"{where} was not handed over within {READ_TIMEOUT:.0f} s") from error
        except (ValueError, ray.exceptions.RayError) as error:  # ValueError: no actor of that name
            raise SparkIntegrationError(f"reading {where} failed: {failure_reason(error)}") from error
        return pa.ipc.open_stream(pa.BufferReader(data)).read_all().replace_schema_metadata()


@dataclass(frozen=True)
class CachedFrame:
    """A DataFrame computed and cached as Arrow in Spark's executors, until :func:`release_partitions`."""

    rdd_id: int
    partitions: tuple[SparkPartition, ...]


def cache_partitions(frame: DataFrame, what: str) -> CachedFrame:
    """Run ``frame`` in Spark and keep its Arrow partitions cached in the executors (RayDP's
    recoverable conversion, without its fetch tasks); a column type that cannot cross is
    refused first, before any Spark job runs.

    Raises:
        SparkIntegrationError: the session is not on Ray, a column's type cannot cross, or
            the Spark job failed (naming ``what``; the original error is the ``__cause__``).
    """
    check_convertible(frame, what)
    from py4j.protocol import Py4JJavaError
    from pyspark import StorageLevel

    context = frame.sparkSession.sparkContext
    try:
        info = _writer(frame).prepareRecoverableRDD(frame._jdf, context._getJavaStorageLevel(StorageLevel.MEMORY_AND_DISK))
    except Py4JJavaError as error:
        raise SparkIntegrationError(f"converting {what} to Arrow failed: {failure_reason(error)}") from error
    locations, rdd_id = info.locations(), info.rddId()
    return CachedFrame(rdd_id, tuple(
        SparkPartition(f"raydp-executor-{locations[index]}", rdd_id, index, info.schemaJson(), info.driverAgentUrl(), what)
        for index in range(info.numPartitions())))


def release_partitions(frame: DataFrame, cached: CachedFrame) -> None:
    """Let Spark drop ``cached``: nothing will read its partitions again."""
    _writer(frame).releaseRecoverableRDD(cached.rdd_id)


def _writer(frame: DataFrame) -> Any:
    """RayDP's JVM entry point for Arrow conversions, of ``frame``'s session."""
    jvm = frame.sparkSession.sparkContext._jvm
    assert jvm is not None, "a running Spark session has a JVM"
    return jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
