"""A class-data archive (AppCDS) for the Spark driver JVMs the tests start, made once per test session.

Every Spark start loads thousands of classes from Spark's jars into a fresh JVM; a dynamic
class-data archive (``-XX:ArchiveClassesAtExit``, JDK 13+) holds them parsed and linked, and a
JVM started with ``-XX:SharedArchiveFile`` maps them instead of loading them again. The archive
is made here, by a local Spark whose driver has the class path RayDP gives its driver (RayDP's
jars, Spark's, Ray's: a JVM uses an archive only if the class path it was made with is a prefix
of its own), in a process of its own at a low CPU priority, while the first tests run. It is
written under another name and renamed once whole over a link to the JDK's own archive of its
classes, which a driver that starts before then uses, as it would without the option. A driver
whose class path differs (a plain local Spark) uses the JDK's archive too, quietly
(``-Xlog:cds=off`` keeps the JVM's warning off stderr, which the demo's and the notebooks'
tests keep free of noise).

Applied through ``SPARK_SUBMIT_OPTS``, which ``spark-submit`` adds to the driver JVM it starts,
so that every process of the run that starts Spark (the session's, the stream drivers, the
notebooks' kernels, the examples) inherits it from the environment. No Java agent may run in
the JVM that makes the archive (RayDP's ``-javaagent`` would need the diagnostic
``AllowArchivingWithJavaAgent`` both then and in every JVM using it, and that JVM prints a
warning at each start), so the archiving JVM starts without RayDP's agent; the drivers that use
the archive still run it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The variable ``spark-submit`` reads for extra options of the driver JVM.
SUBMIT_OPTIONS = "SPARK_SUBMIT_OPTS"

#: The archive's file name in the session's directory.
ARCHIVE_NAME = "spark-driver.jsa"


def driver_options(directory: Path) -> str:
    """The driver JVM options that use the archive in ``directory`` once it is there, quietly."""
    return f"-Xlog:cds=off,cds+dynamic=off -XX:SharedArchiveFile={directory / ARCHIVE_NAME}"


def raydp_driver_class_path() -> str:
    """The class path RayDP puts first on its Spark driver's (``spark.driver.extraClassPath``,
    built as ``raydp.spark.ray_cluster.SparkCluster._prepare_spark_configs`` builds it)."""
    import pyspark
    import ray
    import raydp

    raydp_jars = glob.glob(os.path.join(os.path.dirname(raydp.__file__), "jars", "*"))
    spark_home = os.environ.get("SPARK_HOME", os.path.dirname(pyspark.__file__))
    ray_jars = glob.glob(os.path.join(os.path.dirname(ray.__file__), "jars", "*"))
    return ":".join([os.path.abspath(jar) for jar in raydp_jars]
                    + [os.path.abspath(os.path.join(spark_home, "jars", "*"))]
                    + [os.path.abspath(jar) for jar in ray_jars])


def start(directory: Path) -> subprocess.Popen[bytes]:
    """Set ``SPARK_SUBMIT_OPTS`` in this process's environment to use the archive in ``directory``
    (inherited by every process started after this), and start the process that makes it.

    Returns:
        The archiving process (it exits on its own; :func:`stop` ends it if it has not).
    """
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if "JAVA_HOME" in os.environ \
        else shutil.which("java")
    jdk_archive = Path(os.path.realpath(java or "java")).parent.parent / "lib" / "server" / "classes.jsa"
    if jdk_archive.exists():
        (directory / ARCHIVE_NAME).symlink_to(jdk_archive)
    env = dict(os.environ)
    os.environ[SUBMIT_OPTIONS] = driver_options(directory)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.jvm_archive", str(directory)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.nice(10), cwd=Path(__file__).resolve().parent.parent,
    )


def stop(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """End the archiving process if it still runs (a short session), waiting at most ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()


def make(directory: Path, timeout_s: float = 600.0) -> None:
    """Start a local Spark whose driver JVM has RayDP's class path and dumps its classes when it
    exits, run a small query with a shuffle, stop it, wait for the JVM to exit (at most
    ``timeout_s``) and rename the archive into place (over the link to the JDK's)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    part = directory / (ARCHIVE_NAME + ".part")
    session = (
        SparkSession.builder.master("local[1]").appName("raytide-tests-jvm-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraClassPath", raydp_driver_class_path())
        .config("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={part}")
        .getOrCreate()
    )
    frame = session.range(1000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().orderBy("k").toPandas()
    session.stop()
    gateway = SparkContext._gateway
    assert gateway is not None, "a started SparkSession leaves its gateway"
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=timeout_s)
    if part.exists():
        part.replace(directory / ARCHIVE_NAME)


if __name__ == "__main__":
    make(Path(sys.argv[1]))
