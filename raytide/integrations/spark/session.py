"""Spark on Ray through RayDP: started sized for the cluster, with the JVM flags Java 17 needs.

Spark runs *on* Ray (RayDP): its executors are Ray actors, so a DataFrame becomes Arrow
tables in Ray's object store without passing through the driver (:mod:`.source`), and
Arrow tables in the object store become a DataFrame that Spark executors read directly
(:mod:`.sink`). This module starts, adopts and stops that Spark: :func:`start_spark` and
:func:`stop_spark`, with executors sized for the cluster (:func:`plan_executors`) and the
JVM flags Java 17 needs (:data:`JDK17_JAVA_OPTIONS`), so users never write them;
:func:`active_spark` finds a running one, started here or by ``raydp.init_spark``. It
also holds what both conversions share: :func:`get_results` and :func:`failure_reason`
turn a failed Ray task or Spark call into an error that says why in its first line.

Resources: every Ray task of a conversion reserves a fraction of a CPU (:data:`TASK_CPUS`
for raytide's own tasks and, through :func:`spark_configs`, for RayDP's fetch tasks).
With RayDP's default of zero, each block's task starts its own Python worker at once, and
on a small machine that storm of worker start-ups made conversions 5-8x slower (37
blocks: 14 s instead of 1.7 s on 2 CPUs). The price: conversions wait while no CPU is
free. RayDP's conversion needs one anyway (Ray Data runs a 1-CPU metadata task per
block), so leave at least one CPU to them; the defaults of :func:`start_spark` give Spark
half of the cluster.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from raytide.errors import RaytideError, SparkIntegrationError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

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

#: RayDP's config for the driver JVM's log4j2 configuration file (its default,
#: ``log4j2-default.properties``, is on no classpath: log4j2 then prints "ERROR
#: StatusConsoleListener Reconfiguration failed" and Spark its "Setting default log level").
LOG4J_CONFIG_KEY = "spark.log4j.config.file.name"

#: The environment variable RayDP reads for :data:`LOG4J_CONFIG_KEY` when the config is not set.
LOG4J_CONFIG_ENV = "SPARK_LOG4J_CONFIG_FILE_NAME"

#: raytide's log4j2 configuration for the driver JVM: warnings and errors on stderr, minus
#: the warnings that say nothing about the job (``NativeCodeLoader``); see the file.
LOG4J_CONFIG_FILE = Path(__file__).with_name("log4j2.properties")

_MASTER_SUFFIX = "_SPARK_MASTER"  # RayDP names its master actor app_name + this


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
    (options the caller already set there are kept after them), RayDP's
    fetch tasks reserve :data:`TASK_CPUS` unless the caller set
    :data:`FETCH_TASK_CPUS`, and the driver JVM logs with
    :data:`LOG4J_CONFIG_FILE` unless the caller chose a file (the config
    :data:`LOG4J_CONFIG_KEY`, or the environment variable
    :data:`LOG4J_CONFIG_ENV` that RayDP reads).

    Args:
        configs: Extra Spark / RayDP configs, or None.

    Returns:
        A new dict.
    """
    merged = dict(configs or {})
    merged.setdefault(FETCH_TASK_CPUS, str(TASK_CPUS))
    if LOG4J_CONFIG_ENV not in os.environ:
        merged.setdefault(LOG4J_CONFIG_KEY, str(LOG4J_CONFIG_FILE))
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
    the app master, driver and executor JVMs, logs the driver JVM's warnings
    and errors with :data:`LOG4J_CONFIG_FILE` (see :func:`spark_configs`),
    points executors' Python workers at this interpreter (``PYSPARK_PYTHON``)
    and binds the driver JVM to Ray's address of this node (``SPARK_LOCAL_IP``,
    the address RayDP gives ``spark.driver.host``; where the host name
    resolves to a loopback address, Spark would otherwise warn and pick an
    interface itself); both variables only if not set already. An
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
    os.environ.setdefault("SPARK_LOCAL_IP", ray.util.get_node_ip_address())
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
    if session is not None and is_on_ray(session):
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
    master = master_actor_name(session)
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


def is_on_ray(session: SparkSession) -> bool:
    """Whether ``session`` runs on Ray (through RayDP)."""
    return _master(session.sparkContext).startswith("ray://")


def master_actor_name(session: SparkSession) -> str:
    """The name of the Ray actor RayDP runs as the master of ``session``; it holds the blocks Spark reads."""
    app_name = session.sparkContext.appName
    assert app_name is not None, "a started SparkContext always has an app name"
    return app_name + _MASTER_SUFFIX


def _master(context: SparkContext) -> str:
    """The master URL of ``context``; PySpark types it optional, but a started context always has one."""
    master = context.master
    assert master is not None, "a started SparkContext always has a master URL"
    return master


def _refuse_foreign_session() -> None:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None and not _master(context).startswith("ray://"):
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
    jvm = session.sparkContext._jvm
    assert jvm is not None, "a started SparkContext always has its driver JVM"
    java = jvm.System.getProperty("java.specification.version")
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


def failure_reason(error: BaseException) -> str:
    """What went wrong, for the first line of a :class:`SparkIntegrationError` that wraps ``error``.

    Ray's task errors start with Ray's coloured ``ray::task()`` headline and a remote
    traceback, Py4J's with "An error occurred while calling ..."; neither says what
    went wrong first. This is the message of the error that started it all: the
    innermost cause of a Ray task error (a raytide error's message as it is, any other
    prefixed with its type), the Java exception of a Py4J error. Callers raise
    ``SparkIntegrationError(f"... failed: {failure_reason(error)}") from error``, so
    the full error stays available as ``__cause__``.

    Args:
        error: The exception caught.

    Returns:
        One line.
    """
    from py4j.protocol import Py4JJavaError

    while isinstance(error, ray.exceptions.RayTaskError) and isinstance(error.cause, BaseException):
        error = error.cause
    if isinstance(error, Py4JJavaError):
        text = str(error.java_exception.toString())
    elif isinstance(error, RaytideError):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def get_results(refs: list[ray.ObjectRef], doing: str) -> list[Any]:
    """``ray.get(refs)``, with a failed task's error as a :class:`SparkIntegrationError` that says why first.

    Args:
        refs: Object refs of Ray tasks run for a conversion.
        doing: What the conversion does ("converting output 'counts' to Spark"),
            for the message.

    Raises:
        SparkIntegrationError: ``"{doing} failed: {reason}"`` (see
            :func:`failure_reason`), with Ray's error as ``__cause__``.
    """
    try:
        return ray.get(refs)
    except ray.exceptions.RayError as error:
        raise SparkIntegrationError(f"{doing} failed: {failure_reason(error)}") from error


def require_spark() -> SparkSession:
    """The SparkSession RayDP runs in this process.

    Raises:
        SparkIntegrationError: Spark on Ray is not running.
    """
    session = active_spark()
    if session is None:
        raise SparkIntegrationError("Spark on Ray is not running; call start_spark() first")
    return session
