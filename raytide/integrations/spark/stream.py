"""Spark Structured Streaming into the dataflow: :func:`from_spark_stream`, micro-batch ``n`` as epoch ``n`` (or event time).

RayDP cannot convert a streaming DataFrame, but inside ``foreachBatch`` each micro-batch is
a bounded DataFrame: Spark computes it and caches its Arrow partitions in the executors, and
the input replicas read them from there (:mod:`~raytide.integrations.spark.partitions`): no
row passes through the driver or Ray's object store. The query runs on the Spark session the
DataFrame belongs to, which must run on Ray.

Exactly once, with Spark's own checkpoint (``offsets/n`` written before batch ``n`` runs,
``commits/n`` after ``foreachBatch`` returns; a restarted query runs an uncommitted batch
again with the same id and data): the callback returns only once a committed raytide
snapshot holds the batch (:mod:`raytide.sources.stream`), so Spark commits nothing raytide
could lose; a batch id below the restored snapshot's boundary is one raytide holds already,
and returns at once. A batch raytide has not taken when the job stops makes the callback
raise, so Spark does not commit it and hands it to the next run.

Sources Spark can replay (files, rate, Kafka) give exactly once; a socket source cannot be
replayed, and is refused.

With ``event_time=``, a micro-batch's records go to the epochs of their timestamps through a
clock in each input replica (:mod:`raytide.sources.clocked_stream`): a batch is still
acknowledged once a committed snapshot holds it, its records held for later epochs included.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs

from raytide.errors import SparkIntegrationError
from raytide.integrations.spark.partitions import cache_partitions, check_frame, release_partitions
from raytide.integrations.spark.session import failure_reason, is_on_ray
from raytide.sources.base import BlockRefs
from raytide.sources.event_time import EventTime, check_schema
from raytide.sources.stream import StreamReader, StreamSource

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

#: The file raytide keeps in a query's checkpoint location: which stream it belongs to.
OWNER_FILE = "raytide-stream.json"
#: How often the reader checks on the query while it waits for a micro-batch.
QUERY_POLL = 0.2
#: How many micro-batches' timings a source keeps.
TIMINGS_KEPT = 1000
#: Spark's checkpoint entries that show a location was used by a query.
_CHECKPOINT_ENTRIES = ("offsets", "commits", "metadata")


@dataclass
class _Batch:
    """A micro-batch handed to the job, and what its callback waits for."""

    batch_id: int
    partitions: list
    held: threading.Event = field(default_factory=threading.Event)


class SparkStreamSource(StreamSource):
    """A Spark Structured Streaming query as a dataflow input: build it with :func:`from_spark_stream`."""

    def __init__(self, frame: DataFrame, checkpoint_location: str, processing_time: str, query_name: str | None,
                 hold_timeout: float) -> None:
        _check_streaming(frame)
        if not isinstance(checkpoint_location, str) or not checkpoint_location:
            raise SparkIntegrationError(f"checkpoint_location must name a directory (Spark's checkpoint of the query, "
                                        f"kept across runs), not {checkpoint_location!r}")
        check_frame(frame, "the streaming DataFrame")
        self.frame, self.checkpoint_location = frame, _as_uri(checkpoint_location)
        self.processing_time, self.query_name, self.hold_timeout = processing_time, query_name, hold_timeout
        self.schema = frame._jdf.schema().json()
        #: The records' event time (``from_spark_stream(..., event_time=)``; None: micro-batch ``n`` is epoch ``n``).
        self.event_time: Any = None
        #: The running query (None until the job starts it): ``source.query.stop()`` ends the
        #: stream (the job's input closes once the batch in hand is held).
        self.query: StreamingQuery | None = None
        #: Per micro-batch handed to the job, the last :data:`TIMINGS_KEPT`:
        #: ``(batch id, seconds converting it to Arrow, seconds until a snapshot held it)``.
        self.timings: collections.deque[tuple[int, float, float]] = collections.deque(maxlen=TIMINGS_KEPT)

    @property
    def label(self) -> str:
        """How messages name the query."""
        return f"query {self.query_name!r}" if self.query_name else f"the query checkpointed at {self.checkpoint_location!r}"

    def event_time_schema(self) -> tuple[str, pa.Schema]:
        """How messages name the query, and its rows' schema in Arrow's types (``event_time=``'s column is checked against it)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        return self.label, to_arrow_schema(self.frame.schema)

    def reader(self) -> SparkStreamReader:
        """The one reader, on the driver."""
        return SparkStreamReader(self)

    def claim_checkpoint(self, resume_at: int) -> None:
        """Check the checkpoint location for a job that takes batches from ``resume_at`` on
        (0: a fresh job), and mark it as this stream's.

        Raises:
            SparkIntegrationError: the location holds another query's checkpoint (one not
                fed to raytide, or one of another schema); a fresh job finds batches Spark
                committed (a snapshot of an earlier run holds them: restore it); a restored
                job finds no record of the batches its snapshot holds (the query would start
                over, and its first batches would be taken for those).
        """
        filesystem, root = pyarrow.fs.FileSystem.from_uri(self.checkpoint_location)
        owner_path = f"{root}/{OWNER_FILE}"
        entries = {info.base_name for info in filesystem.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True))}
        if OWNER_FILE in entries:
            with filesystem.open_input_stream(owner_path) as stream:
                owner = json.loads(stream.read())
            if owner.get("schema") != self.schema:
                raise SparkIntegrationError(f"{self.label}: the checkpoint location belongs to a stream of another "
                                            f"schema ({owner.get('schema')}); give this query a location of its own")
        elif entries & set(_CHECKPOINT_ENTRIES):
            raise SparkIntegrationError(f"{self.label}: the checkpoint location holds the checkpoint of a query that "
                                        f"did not feed raytide ({sorted(entries)}); give this query a location of its own")
        if not resume_at and _batch_ids(filesystem, f"{root}/commits"):
            raise SparkIntegrationError(f"{self.label}: the checkpoint location has micro-batches of an earlier run, "
                                        f"which this job, started afresh, does not hold; restore the job from that "
                                        f"run's snapshots (restore='latest'), or give the query a new location")
        if resume_at and max(_batch_ids(filesystem, f"{root}/offsets"), default=-1) < resume_at - 1:
            raise SparkIntegrationError(f"{self.label}: the job resumes from a snapshot that holds micro-batches "
                                        f"0-{resume_at - 1}, but the checkpoint location has no record of them: the "
                                        f"query would start over and its first batches would be taken for those "
                                        f"(point it at the location the earlier run used)")
        filesystem.create_dir(root, recursive=True)
        with filesystem.open_output_stream(owner_path) as stream:
            stream.write(json.dumps({"schema": self.schema}).encode())


def _batch_ids(filesystem: pyarrow.fs.FileSystem, directory: str) -> list[int]:
    """The micro-batch ids Spark logged in ``directory`` (``offsets`` or ``commits``): files named by the id."""
    selector = pyarrow.fs.FileSelector(directory, allow_not_found=True)
    return [int(info.base_name) for info in filesystem.get_file_info(selector) if info.base_name.isdigit()]


def planned_batches(logged: list[int], handed: int | None) -> int | None:
    """How many micro-batches Spark has planned, from the ids of its offset log (``logged``) and the
    last batch handed to the job (``handed``); None if neither has any.

    >>> planned_batches([0, 1, 2, 3], 2), planned_batches([], 4), planned_batches([], None)
    (4, 5, None)
    """
    last = max([*logged, *([] if handed is None else [handed])], default=None)
    return None if last is None else last + 1


class SparkStreamReader(StreamReader):
    """Runs the query while it is iterated: ``(batch id, BlockRefs)`` per micro-batch from the
    position on (earlier ids are acknowledged at once: the job holds them)."""

    def __init__(self, source: SparkStreamSource) -> None:
        self.source = source
        self.batches: queue.Queue[_Batch | None] = queue.Queue()  # None: the query has terminated
        self.waiting: dict[int, _Batch] = {}
        self.stopping = threading.Event()
        self.query: StreamingQuery | None = None
        self.first = 0
        self.last_id: int | None = None  # the last micro-batch handed to the job
        self.failure: SparkIntegrationError | None = None  # raised in the callback: says which batch
        self.callback = "not called yet"  # what the foreachBatch callback is doing, for describe()

    def read_from(self, position: int) -> Iterator[tuple[int, Any, int]]:
        self.first = position
        self.source.claim_checkpoint(position)
        self.query = self.source.query = self._start()
        threading.Thread(target=self._wake_at_end, args=(self.query,), name="raytide-query-end", daemon=True).start()
        try:
            while True:
                try:
                    batch = self.batches.get(timeout=QUERY_POLL)
                except queue.Empty:
                    batch = None
                if batch is None:
                    self._check_query()
                    if not self.query.isActive and self.batches.empty():
                        return
                    continue
                yield batch.batch_id, BlockRefs(tuple(batch.partitions)), batch.batch_id + 1
        finally:
            self.stop()

    def _wake_at_end(self, query: StreamingQuery) -> None:
        """Wake the reader once the query has terminated (stopped, or failed), rather than at
        its next check: Spark put every batch it handed over before that."""
        try:
            query.awaitTermination()
        except Exception:  # a failed query: the reader's check says why
            pass
        self.batches.put(None)

    def held(self, epoch: int) -> None:
        batch = self.waiting.pop(epoch, None)
        if batch is not None:
            batch.held.set()

    def describe(self) -> str:
        try:
            status = "not started" if self.query is None else self.query.status.get("message")
        except Exception as error:  # a message must not fail itself (the JVM may be gone)
            status = f"unknown ({failure_reason(error)})"
        return f"the query is {status!r}; its foreachBatch callback: {self.callback}"

    def available(self) -> int | None:
        """The micro-batches Spark has planned: those whose offsets its checkpoint logs (``offsets/n``, written
        before batch ``n`` runs; a restored query's earlier batches too); None before the first."""
        filesystem, root = pyarrow.fs.FileSystem.from_uri(self.source.checkpoint_location)
        return planned_batches(_batch_ids(filesystem, f"{root}/offsets"), self.last_id)

    def stop(self) -> None:
        self.stopping.set()
        if self.query is not None and self.query.isActive:
            self.query.stop()  # waits for a callback in progress, which now gives up its batch

    def _start(self) -> StreamingQuery:
        source = self.source
        writer = (source.frame.writeStream.foreachBatch(self._on_batch)
                  .option("checkpointLocation", source.checkpoint_location)
                  .trigger(processingTime=source.processing_time))
        if source.query_name:
            writer = writer.queryName(source.query_name)
        try:
            return writer.start()
        except Exception as error:
            raise SparkIntegrationError(f"{source.label} did not start: {failure_reason(error)}") from error

    def _check_query(self) -> None:
        assert self.query is not None
        if self.failure is not None:
            raise SparkIntegrationError(f"{self.source.label} failed: {self.failure}") from self.failure
        error = self.query.exception()
        if error is not None and not self.stopping.is_set():
            at = "its first micro-batch" if self.last_id is None else f"micro-batch {self.last_id + 1}"
            raise SparkIntegrationError(f"{self.source.label} failed at {at} (or later): {failure_reason(error)}")

    def _on_batch(self, frame: DataFrame, batch_id: int) -> None:
        """Spark's ``foreachBatch`` callback, on a thread of Spark's: hand the batch to the job
        and return once a committed snapshot holds it (Spark then commits it)."""
        if batch_id < self.first:
            return  # the restored job holds it: Spark may commit it again
        if self.stopping.is_set():
            raise SparkIntegrationError(f"{self.source.label}: the job is stopping; micro-batch {batch_id} is left "
                                        f"to the next run")
        arrived = time.perf_counter()
        self.callback = f"converting micro-batch {batch_id} to Arrow in the executors"
        try:
            cached = cache_partitions(frame, f"micro-batch {batch_id} of {self.source.label}")
        except SparkIntegrationError as error:  # Spark would pass on only "raised by the Python Proxy"
            self.failure = error
            raise
        batch = _Batch(batch_id, list(cached.partitions))
        self.waiting[batch_id] = batch
        self.last_id = batch_id
        handed = time.perf_counter()
        self.callback = f"micro-batch {batch_id} handed to the job, waiting until a snapshot holds it"
        self.batches.put(batch)
        try:
            while not batch.held.wait(QUERY_POLL):
                if self.stopping.is_set():
                    raise SparkIntegrationError(f"{self.source.label}: the job stopped before a snapshot held "
                                                f"micro-batch {batch_id}; it is left to the next run")
            self.source.timings.append((batch_id, handed - arrived, time.perf_counter() - handed))
            self.callback = f"returned micro-batch {batch_id} to Spark (held)"
        finally:
            release_partitions(frame, cached)


def _check_streaming(frame: Any) -> None:
    from pyspark.sql import DataFrame

    if not isinstance(frame, DataFrame):
        raise SparkIntegrationError(f"from_spark_stream takes a streaming DataFrame (spark.readStream...), "
                                    f"not {type(frame).__name__}")
    if not frame.isStreaming:
        raise SparkIntegrationError("from_spark_stream takes a streaming DataFrame (spark.readStream...); for a "
                                    "DataFrame read in batch, use from_spark")
    if not is_on_ray(frame.sparkSession):
        raise SparkIntegrationError("the DataFrame belongs to a Spark session that does not run on Ray (RayDP)")
    if "socket" in _source_names(frame):
        raise SparkIntegrationError("a socket source cannot replay a micro-batch after a failure, so it cannot "
                                    "feed a job exactly once; read files, a rate source or Kafka instead")


def _source_names(frame: DataFrame) -> set[str]:
    """The names of the streaming sources the DataFrame reads (a streaming relation's leaf
    prints as its source's short name: ``socket``, ``rate``, ``FileSource[...]``)."""
    leaves = frame._jdf.queryExecution().logical().collectLeaves()
    return {leaves.apply(index).toString() for index in range(leaves.size())}


def _as_uri(location: str) -> str:
    """A local path as a ``file://`` URI; a URI as it is."""
    return location if "://" in location else f"file://{os.path.abspath(location)}"


def from_spark_stream(streaming_df: DataFrame, checkpoint_location: str, *, processing_time: str = "1 second",
                      query_name: str | None = None, hold_timeout: float = 600.0, event_time: Any = None) -> SparkStreamSource:
    """Make a dataflow input from a Spark Structured Streaming DataFrame: micro-batch ``n`` is epoch ``n``,
    or, with event time, each record goes to the epoch of its timestamp.

    ``rt.run(flow, inputs={name: from_spark_stream(df, "/ckpt/q")}, recovery=rt.Recovery(store))``
    starts the query (on the session ``df`` belongs to, a Spark on Ray) when the job starts;
    the input stays open until the query stops or the job is stopped (``job.stop()`` stops
    the query and takes a savepoint at a batch boundary). Each micro-batch is acknowledged
    to Spark once a committed snapshot holds it, so every batch's output appears exactly
    once, across the failure of any actor, of Spark, or of the driver: a new driver calling
    ``rt.run(..., recovery=..., restore="latest")`` with the same checkpoint location goes on
    where the last one stopped. See ``docs/streaming.md``.

    Args:
        streaming_df: a streaming DataFrame (``spark.readStream...``) of a Spark on Ray.
        checkpoint_location: the query's checkpoint directory (a path or a URI pyarrow
            can write), kept across runs and used by this stream only.
        processing_time: the micro-batch trigger interval, as Spark takes it.
        query_name: the query's name in Spark's UI and in error messages.
        hold_timeout: seconds a batch may take from its arrival to being held by a
            committed snapshot before the job fails, naming the batch.
        event_time: the records' event time (a column of the DataFrame, a function of a row
            as a dict, or an ``rt.EventTime``; the input's ``flow.input(..., event_time=)``
            gives the granularity, ``max_delay`` and late output, as for the Arrow source):
            each input replica runs a clock over its shares of the micro-batches, a batch is
            acknowledged once a snapshot holds all its records (sent, late, or held in the
            clocks for epochs the watermark has not reached), and epochs close by the
            watermark alone (docs/streaming.md, "Event time").

    Raises:
        SparkIntegrationError: the DataFrame is not streaming, its session is not on Ray,
            it reads a socket, a column's type cannot cross (named, before data moves), or
            ``checkpoint_location`` is empty. Checked when the job starts the query: a
            location of another query, or one without the checkpoint a restored job needs.
        SourceError: ``event_time`` names a column the DataFrame does not have, or one of a
            type that is not a time (also checked when the job starts, for the input's own).
        ArgumentError: ``event_time`` is neither a column, a function nor an ``rt.EventTime``.
    """
    source = SparkStreamSource(streaming_df, checkpoint_location, processing_time, query_name, hold_timeout)
    if event_time is not None:
        source.event_time = event_time
        spec = event_time if isinstance(event_time, EventTime) else EventTime(event_time)
        check_schema(spec, source.event_time_schema()[1], source.label)
    return source
