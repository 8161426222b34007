"""The tests' class-data archive of the Spark driver JVM (tests/jvm_archive.py) is made with a class
path that RayDP's driver's starts with: a JVM uses a dynamic archive only then, and says nothing
when it does not (the archive's options keep the JVM quiet), so a RayDP that built its driver's
class path otherwise would silently cost every Spark start of the suite its archive."""

from __future__ import annotations

import types

from raydp.spark.ray_cluster import SparkCluster

from tests import jvm_archive


def test_the_archive_class_path_is_the_one_raydp_gives_its_driver():
    cluster = types.SimpleNamespace(_configs={}, _num_executors=1, _executor_cores=1, _executor_memory="1g")
    SparkCluster._prepare_spark_configs(cluster)
    assert cluster._configs["spark.driver.extraClassPath"] == jvm_archive.raydp_driver_class_path()


def test_the_driver_options_use_the_archive_and_silence_the_jvm_about_it(tmp_path):
    options = jvm_archive.driver_options(tmp_path).split()
    assert f"-XX:SharedArchiveFile={tmp_path / jvm_archive.ARCHIVE_NAME}" in options
    assert "-Xlog:cds=off,cds+dynamic=off" in options
