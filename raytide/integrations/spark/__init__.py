"""Spark DataFrames in and out of the dataflow, through RayDP and Ray's object store.

Spark runs *on* Ray (RayDP): its executors are Ray actors, so a DataFrame becomes Arrow
tables in Ray's object store without passing through the driver, and Arrow tables in the
object store become a DataFrame that Spark executors read directly. Four modules:

* :mod:`~raytide.integrations.spark.session`: :func:`start_spark` / :func:`stop_spark`
  start and stop Spark on Ray, sized for the cluster and with the JVM flags Java 17
  needs (:data:`JDK17_JAVA_OPTIONS`), so users never write them.
* :mod:`~raytide.integrations.spark.source`: :func:`from_spark` turns a DataFrame (epochs
  from a column, or epoch 0) or a sequence / generator of DataFrames (one epoch each)
  into a :class:`SparkSource`, a source read on the driver whose reader yields object
  refs of Arrow tables per epoch, lazily.
* :mod:`~raytide.integrations.spark.stream`: :func:`from_spark_stream` turns a Spark
  Structured Streaming query into a stream source, micro-batch ``n`` as epoch ``n``,
  acknowledged to Spark once a committed snapshot holds it (exactly once end to end).
* :mod:`~raytide.integrations.spark.sink`: :func:`to_spark` and :func:`tables_to_spark`
  turn ``{epoch: [ObjectRef to pyarrow.Table]}`` (a sink's output) back into a DataFrame.

Everything is re-exported here: ``from raytide.integrations.spark import from_spark``.
"""

from raytide.integrations.spark.session import (
    APP_MASTER_JAVA_OPTIONS,
    FETCH_TASK_CPUS,
    JAVA_OPTIONS_KEYS,
    JDK17_JAVA_OPTIONS,
    TASK_CPUS,
    ExecutorPlan,
    active_spark,
    plan_executors,
    spark_configs,
    start_spark,
    stop_spark,
)
from raytide.integrations.spark.sink import (
    EPOCH_COLUMN,
    OutputJob,
    output_tables,
    tables_to_spark,
    to_spark,
)
from raytide.integrations.spark.source import (
    SparkReader,
    SparkSource,
    dataframe_to_blocks,
    from_spark,
)
from raytide.integrations.spark.stream import SparkStreamReader, SparkStreamSource, from_spark_stream

__all__ = [
    "APP_MASTER_JAVA_OPTIONS",
    "EPOCH_COLUMN",
    "FETCH_TASK_CPUS",
    "JAVA_OPTIONS_KEYS",
    "JDK17_JAVA_OPTIONS",
    "TASK_CPUS",
    "ExecutorPlan",
    "OutputJob",
    "SparkReader",
    "SparkSource",
    "SparkStreamReader",
    "SparkStreamSource",
    "active_spark",
    "dataframe_to_blocks",
    "from_spark",
    "from_spark_stream",
    "output_tables",
    "plan_executors",
    "spark_configs",
    "start_spark",
    "stop_spark",
    "tables_to_spark",
    "to_spark",
]
