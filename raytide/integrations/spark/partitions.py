"""A DataFrame's Arrow partitions cached in Spark's executors, read from there: by the input
replicas themselves (a stream), or by Ray tasks into Ray's object store (``from_spark``); and
read again, in place, when the executor that cached them died.

RayDP's conversion runs a Spark job that caches each partition's Arrow data in the executors
(:func:`cache_partitions`), then a Ray task per partition copies it into Ray's object store.
Those tasks need Ray workers, and Ray keeps idle workers only up to the CPU count
(ray-project/ray#36766): on a small cluster whose workers are taken by the job's hosts, a
conversion starts a worker process, 0.4-0.8 s on two CPUs, and a stream pays it every
micro-batch. A stream does not need the copy: its micro-batch stays cached in Spark until a
committed snapshot holds it, so each input replica reads its partitions from the executors
directly, with the JVM call RayDP's fetch task makes (:class:`SparkPartition`), and a
recovery that deals them again reads them again. A batch read with
:func:`~raytide.integrations.spark.source.from_spark` keeps the object-store copy
(:func:`read_blocks`, the same read in a Ray task): that source releases a DataFrame's cache
when it moves on to the next one, before any snapshot could hold the epoch, so a replay must
find the data in Ray.

**An executor's death, recovered in place** (RayDP 1.6). A Spark executor is a Ray actor
named ``raydp-executor-<id>`` after the Spark id it first had; Ray restarts it under that
name when its process dies, and it joins Spark under a *new* Spark id, its cache empty. Two
things follow, and both are handled here:

* A read of a partition the dead executor cached reaches the restarted actor (the same
  name): while it restarts, the call fails (``ActorUnavailableError``), and until its Spark
  environment is up, it fails inside the JVM (a ``NullPointerException``). The read waits
  and calls again, within :data:`READ_TIMEOUT`, as long as the executor is restarted (its
  actor dead or restarting, or answering under another Spark id than the one the partition
  was cached under; any other failure fails the read at once). Once up, the executor finds
  the block missing and has RayDP's driver agent compute the DataFrame's cached RDD again
  from its lineage (``requestRecacheRDD``), then hands the partition over: the same rows,
  since the plan is the same (a micro-batch's offsets are fixed in Spark's checkpoint).
* Spark places the partitions of a DataFrame cached later under the new Spark id, for which
  no actor is named: :func:`cache_partitions` names each partition's actor through RayDP's
  map of restarted executors (new Spark id -> the id its actor is named by, the app master's
  ``getRestartedExecutors``, the map RayDP's own conversion uses to find the executors).

A read is all or nothing: a partition's rows reach the caller only once the whole partition
was handed over, so a read that was tried again gives nothing twice. An executor whose actor
is gone for good (RayDP 1.6.5 sets no limit on its restarts; a node lost with it, or Spark
stopped) fails the read with an error naming the partition and the executor, and so does one
that does not serve the partition within :data:`READ_TIMEOUT`.

The calls to an executor are never replayed by Ray (RayDP creates its actors with unlimited
task retries and 2 threads): a call replayed onto the restarted executor before it started
would wait there for its start, and two such would keep it from ever starting (its app master
starts it through a third call); seen with two partitions read at once. So each try first
probes the executor's Spark environment with a call that fails at once while it is not up.
What is left: an executor that dies between a try's probe and its read, and is back before the
read reaches it, takes that read before it starts; two such reads at once on one executor keep it
from starting, and they fail after :data:`READ_TIMEOUT` (the job then fails naming the partition).
Without the probe, SIGKILLing the executor between caching and reading hung both kill tests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray

from raytide.errors import SparkIntegrationError
from raytide.integrations.spark.session import FETCH_TASK_CPUS, failure_reason, get_results, is_on_ray
from raytide.integrations.spark.types import check_schema
from raytide.sources.base import RemoteBatch

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark import SparkContext
    from pyspark.sql import DataFrame

#: Seconds a read of one cached partition may take, waiting for a restarted executor included.
READ_TIMEOUT = 300.0
#: Seconds between two calls to an executor that is being restarted.
RETRY_PAUSE = 0.5
#: Seconds an executor's actor has to answer a probe (is its Spark environment up, what is its Spark id);
#: a probe sent while Ray restarts it is answered once it is back.
ASK_TIMEOUT = 10.0
#: How RayDP names an executor's actor: this and the Spark id it was started with.
EXECUTOR_PREFIX = "raydp-executor-"
#: RayDP's config for the memory of its Spark -> Ray fetch tasks (with :data:`FETCH_TASK_CPUS`).
FETCH_TASK_MEMORY = "spark.ray.raydp_recoverable_fetch.task.resource.memory"


class _ExecutorRestarting(Exception):
    """A partition's executor is being restarted (or was, since the partition was cached): call it again."""


@dataclass(frozen=True)
class SparkPartition(RemoteBatch):
    """One cached Arrow partition of a DataFrame, read where it is dealt (see the module docstring)."""

    executor: str  #: the name of the executor actor that caches it
    spark_id: str  #: the Spark id of that executor when it cached the partition
    rdd_id: int
    partition: int
    schema_json: str
    driver_agent_url: str
    what: str  #: what the DataFrame is, for errors ("micro-batch 3 of query 'words'")

    @property
    def where(self) -> str:
        """How errors name the partition."""
        return f"{self.what}: partition {self.partition} from Spark executor {self.executor!r}"

    def read(self) -> pa.Table:
        """The partition as an Arrow table (its schema's metadata dropped, as RayDP's fetch does),
        waiting for its executor if it is being restarted (the module docstring).

        Raises:
            SparkIntegrationError: the executor failed the read, its actor is gone for good, or
                the partition was not handed over within :data:`READ_TIMEOUT` (naming it).
        """
        deadline = time.monotonic() + READ_TIMEOUT
        while True:
            try:
                data = self._fetch(deadline)
            except _ExecutorRestarting as restarting:
                if time.monotonic() + RETRY_PAUSE >= deadline:
                    raise SparkIntegrationError(f"{self.where} was not handed over within {READ_TIMEOUT:.0f} s: "
                                                f"the executor was restarted and did not serve it ({restarting})"
                                                ) from restarting.__cause__
                time.sleep(RETRY_PAUSE)
                continue
            return pa.ipc.open_stream(pa.BufferReader(data)).read_all().replace_schema_metadata()

    def _fetch(self, deadline: float) -> bytes:
        """One try: the executor's Spark environment probed, then the partition's Arrow bytes asked for.

        Raises:
            _ExecutorRestarting: the executor is being restarted, or was since the partition was cached.
            SparkIntegrationError: any other failure, the actor gone for good, or the deadline passed.
        """
        try:
            executor = ray.get_actor(self.executor)
        except ValueError as error:  # no live or restarting actor of that name
            raise SparkIntegrationError(f"reading {self.where} failed: the executor's actor is gone for good: "
                                        f"{failure_reason(error)}") from error
        try:  # fails at once where the Spark environment is not up; getRDDPartition would wait, holding a thread
            _call(executor, "getBlockLocations", (self.rdd_id, 0), min(ASK_TIMEOUT, max(deadline - time.monotonic(), 0.0)))
        except ray.exceptions.RayError as error:
            raise _ExecutorRestarting(f"not up: {failure_reason(error)}") from error
        arguments = (self.rdd_id, self.partition, self.schema_json, self.driver_agent_url)
        try:
            return _call(executor, "getRDDPartition", arguments, max(deadline - time.monotonic(), 0.0))
        except ray.exceptions.GetTimeoutError as error:
            raise SparkIntegrationError(f"{self.where} was not handed over within {READ_TIMEOUT:.0f} s") from error
        except ray.exceptions.RayActorError as error:  # its process died: Ray restarts the actor under its name
            raise _ExecutorRestarting(f"its actor: {failure_reason(error)}") from error
        except ray.exceptions.RayError as error:
            now = _spark_id(executor)
            if now != self.spark_id:
                raise _ExecutorRestarting(f"now Spark executor {now}: {failure_reason(error)}") from error
            raise SparkIntegrationError(f"reading {self.where} failed: {failure_reason(error)}") from error


def _spark_id(executor: Any) -> str:
    """The Spark id ``executor`` (an executor actor) has now; ``"restarting"`` if it cannot say."""
    try:
        return str(_call(executor, "executorId", (), ASK_TIMEOUT))
    except ray.exceptions.RayError:
        return "restarting"


def _call(executor: Any, method: str, arguments: tuple, timeout: float) -> Any:
    """``executor.method(*arguments)``, a Java method of an executor actor, waited for ``timeout`` seconds.

    Never replayed by Ray onto a restarted executor (RayDP makes its actors replay calls): one that reached
    it before it started would wait there for its start, holding one of its 2 threads, and two of them
    would keep it from ever starting (RayDP's app master starts it through a third call)."""
    with _java_calls():
        call = getattr(executor, method).options(max_task_retries=0).remote(*arguments)
    return ray.get(call, timeout=timeout)


@contextlib.contextmanager
def _java_calls() -> Iterator[None]:
    """Let this process submit calls to the executors' Java methods: Ray's cross-language calls need its flag
    ``load_code_from_local``, which also keeps a driver from exporting its remote functions (a worker asked to run
    one then waits for it forever), so it is set only while a call is submitted (RayDP's fetch task sets it for good)."""
    from ray._private.worker import global_worker

    before = global_worker.load_code_from_local
    global_worker.set_load_code_from_local(True)
    try:
        yield
    finally:
        global_worker.set_load_code_from_local(before)


@dataclass(frozen=True)
class CachedFrame:
    """A DataFrame computed and cached as Arrow in Spark's executors, until :func:`release_partitions`."""

    rdd_id: int
    partitions: tuple[SparkPartition, ...]


def cache_partitions(frame: DataFrame, what: str) -> CachedFrame:
    """Run ``frame`` in Spark and keep its Arrow partitions cached in the executors (RayDP's
    recoverable conversion, without its fetch tasks), each partition's executor actor named
    through RayDP's map of restarted executors; a column type that cannot cross is refused
    first, before any Spark job runs.

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
        locations = [str(location) for location in info.locations()]
        names = actor_names(context, locations)
    except Py4JJavaError as error:
        raise SparkIntegrationError(f"converting {what} to Arrow failed: {failure_reason(error)}") from error
    rdd_id = info.rddId()
    return CachedFrame(rdd_id, tuple(
        SparkPartition(name, spark_id, rdd_id, index, info.schemaJson(), info.driverAgentUrl(), what)
        for index, (name, spark_id) in enumerate(zip(names, locations))))


#: Per Spark application, what each Spark executor id seen so far names: the id of its executor's actor.
#: It never changes (Spark never gives an id twice, and RayDP maps a restarted executor's new id before
#: the executor joins Spark), so RayDP's app master is asked only when an id not seen before appears.
_ACTOR_IDS: dict[str, dict[str, str]] = {}


def actor_names(context: SparkContext, spark_ids: list[str]) -> list[str]:
    """The names of the actors of the Spark executors ``spark_ids`` (:func:`restarted_executors`)."""
    known = _ACTOR_IDS.setdefault(str(context.applicationId), {})
    if not known.keys() >= set(spark_ids):
        restarted = restarted_executors(context)
        known.update({spark_id: restarted.get(spark_id, spark_id) for spark_id in spark_ids})
    return [f"{EXECUTOR_PREFIX}{known[spark_id]}" for spark_id in spark_ids]


def restarted_executors(context: SparkContext) -> dict[str, str]:
    """RayDP's map of restarted executors: the Spark id each restarted executor joined under ->
    the id its actor is named by (the one it first had); empty until an executor died."""
    jvm = context._jvm
    assert jvm is not None, "a running Spark session has a JVM"
    raydp = jvm.org.apache.spark.deploy.raydp
    master = jvm.io.ray.api.Ray.getActor(raydp.RayAppMaster.ACTOR_NAME()).get()
    return {str(new): str(first) for new, first in dict(raydp.RayAppMasterUtils.getRestartedExecutors(master)).items()}


def release_partitions(frame: DataFrame, cached: CachedFrame) -> None:
    """Let Spark drop ``cached``: nothing will read its partitions again."""
    _writer(frame).releaseRecoverableRDD(cached.rdd_id)


@ray.remote(max_retries=-1, num_returns=2)
def _read_partition(partition: SparkPartition) -> tuple[pa.Table, bool]:
    """One cached partition copied into Ray's object store, and a small flag beside it, by which the
    driver learns the read is done (or why it failed) without fetching the table (a lost copy is read
    again: Ray retries the task)."""
    return partition.read(), True


def read_blocks(frame: DataFrame, cached: CachedFrame, what: str) -> list[ray.ObjectRef]:
    """Object refs of ``cached``'s partitions as Arrow tables in Ray's object store, once each is
    there: each read by a Ray task (RayDP's fetch tasks, sized by its configs :data:`FETCH_TASK_CPUS`
    and :data:`FETCH_TASK_MEMORY`, but reading as :meth:`SparkPartition.read` does: in place across
    an executor's restart), so the caller may release the cache when this returns.

    Raises:
        SparkIntegrationError: a partition could not be read (``"converting {what} to Arrow failed: ..."``).
    """
    from raydp.utils import parse_memory_size

    conf = frame.sparkSession.sparkContext.getConf()
    options = {"num_cpus": float(conf.get(FETCH_TASK_CPUS, "0") or 0),
               "memory": float(parse_memory_size(conf.get(FETCH_TASK_MEMORY, "0") or "0"))}
    # ray's stub types .remote() as one ObjectRef; with num_returns=2 it returns two
    reads: list[Any] = [_read_partition.options(**options).remote(partition) for partition in cached.partitions]
    get_results([done for _, done in reads], f"converting {what} to Arrow")
    return [table for table, _ in reads]


def check_convertible(frame: DataFrame, what: str) -> None:
    """Refuse ``frame`` (``what``, for the message) before any Spark job runs if its session
    does not run on Ray or a column's type cannot cross (:func:`check_frame`).

    Raises:
        SparkIntegrationError: names ``what`` and the reason.
    """
    if not is_on_ray(frame.sparkSession):
        raise SparkIntegrationError(f"{what} belongs to a Spark session that does not run on Ray (RayDP)")
    check_frame(frame, what)


def check_frame(frame: DataFrame, what: str) -> None:
    """Refuse a DataFrame with a column whose type cannot cross into the dataflow; no Spark job runs.

    The schema is read in Spark's JSON form, which also describes the calendar
    intervals PySpark's ``frame.schema`` cannot parse.

    Args:
        frame: The DataFrame.
        what: What it is, for the message.

    Raises:
        SparkIntegrationError: naming each offending column and its Spark type
            (see :func:`~raytide.integrations.spark.types.check_schema`).
    """
    check_schema(frame._jdf.schema().json(), what)


def _writer(frame: DataFrame) -> Any:
    """RayDP's JVM entry point for Arrow conversions, of ``frame``'s session."""
    jvm = frame.sparkSession.sparkContext._jvm
    assert jvm is not None, "a running Spark session has a JVM"
    return jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
