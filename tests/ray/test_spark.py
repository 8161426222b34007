"""Spark <-> Ray object store through RayDP, on a real local Ray and a real Spark on it."""

from __future__ import annotations

import datetime as dt
import warnings

import pyarrow as pa
import pytest

from raytide.errors import SparkIntegrationError
from raytide.integrations.records import records_to_table, table_to_records
from raytide.integrations.spark import (
    FETCH_TASK_CPUS,
    JAVA_OPTIONS_KEYS,
    JDK17_JAVA_OPTIONS,
    TASK_CPUS,
    ExecutorPlan,
    SparkSource,
    from_spark,
    plan_executors,
    spark_configs,
    start_spark,
    tables_to_spark,
    to_spark,
)
from raytide.physical.pickled import pack_records

GIB = 2**30


# --------------------------------------------------------------------------- helpers


def identity_vertex(ray, refs_by_epoch, *, schema_from_input=False):
    """What a map vertex does to each block: Arrow -> records -> Arrow, into the object store."""
    out = {}
    for epoch, blocks in refs_by_epoch:
        out[epoch] = []
        for block in blocks:
            table = ray.get(block)
            schema = table.schema if schema_from_input else None
            rows = table_to_records(table)
            out[epoch].append(ray.put(records_to_table(rows, vertex="identity", epoch=epoch, schema=schema)))
    return out


def sorted_rows(frame, key=0):
    return sorted((tuple(row) for row in frame.collect()), key=lambda row: row[key])


def all_rows(ray, blocks):
    return [row for table in ray.get(blocks) for row in table_to_records(table)]


# --------------------------------------------------------------------------- sizing and flags (pure)


def test_plan_for_two_cpus_is_one_small_executor():
    plan = plan_executors({"CPU": 2.0, "memory": 16 * GIB})
    assert plan == ExecutorPlan(num_executors=1, executor_cores=1, executor_memory="1g")


def test_plan_gives_spark_half_of_a_big_cluster():
    assert plan_executors({"CPU": 16.0, "memory": 64 * GIB}) == ExecutorPlan(4, 2, "2g")
    assert plan_executors({"CPU": 2.0, "memory": 2 * GIB}).executor_memory == "512m"
    assert plan_executors({"CPU": 4.0}, num_executors=1, executor_cores=2, executor_memory="3g") == ExecutorPlan(
        1, 2, "3g"
    )


def test_plan_refuses_what_the_cluster_cannot_host():
    with pytest.raises(SparkIntegrationError, match="at least one Ray CPU"):
        plan_executors({"CPU": 0.5})
    with pytest.raises(SparkIntegrationError, match="need 4 Ray CPUs; the cluster has 2"):
        plan_executors({"CPU": 2.0}, num_executors=2, executor_cores=2)
    with pytest.warns(RuntimeWarning, match="less than one is left"):
        plan_executors({"CPU": 2.0}, num_executors=2)


def test_spark_configs_put_the_java_flags_first_and_keep_the_users():
    configs = spark_configs({"spark.executor.extraJavaOptions": "-Dmine=1", "spark.ui.enabled": "false"})
    flags = " ".join(JDK17_JAVA_OPTIONS)
    assert configs["spark.executor.extraJavaOptions"] == f"{flags} -Dmine=1"
    assert configs["spark.driver.extraJavaOptions"] == flags
    assert configs["spark.ray.raydp_app_master.extraJavaOptions"] == flags
    assert configs["spark.ui.enabled"] == "false"
    assert configs[FETCH_TASK_CPUS] == str(TASK_CPUS)
    assert spark_configs({FETCH_TASK_CPUS: "1"})[FETCH_TASK_CPUS] == "1"


# --------------------------------------------------------------------------- the session


@pytest.mark.ray
@pytest.mark.spark
def test_start_spark_sets_the_flags_and_adopts_the_running_session(spark):
    conf = spark.sparkContext.getConf()
    for key in JAVA_OPTIONS_KEYS:
        assert all(flag in conf.get(key) for flag in JDK17_JAVA_OPTIONS), key
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert start_spark("another-name") is spark
    assert not [w for w in caught if "add-opens" in str(w.message)]
    assert spark.sparkContext.master.startswith("ray://")


# --------------------------------------------------------------------------- Spark -> records -> Spark


ROUND_TRIP_SCHEMA = (
    "id bigint, f double, s string, b boolean, ts timestamp, n bigint, l array<bigint>, ll array<array<string>>"
)


def round_trip_rows(count):
    start = dt.datetime(2024, 2, 29, 23, 59, 58)
    rows = [(count, None, None, None, None, None, None, None)]  # every column null but the key
    for i in range(count):
        rows.append(
            (
                i,
                i / 3 if i % 4 else None,
                f"s{i}-é" if i % 5 else None,
                i % 2 == 0 if i % 3 else None,
                start + dt.timedelta(seconds=i, microseconds=i) if i % 6 else None,
                None if i % 7 == 0 else -(10**12) * i,
                [i, None, i + 1] if i % 8 else None,
                [["a", None], []] if i % 2 else [],
            )
        )
    return rows


@pytest.mark.ray
@pytest.mark.spark
@pytest.mark.parametrize("schema_from_input", [False, True], ids=["inferred", "explicit"])
def test_round_trip_keeps_every_supported_type(ray_session, spark, schema_from_input):
    original = spark.createDataFrame(round_trip_rows(120), ROUND_TRIP_SCHEMA).repartition(3)

    epochs = list(from_spark(original).epochs())
    assert [epoch for epoch, _ in epochs] == [0]
    assert all(isinstance(table, pa.Table) for table in ray_session.get(epochs[0][1]))
    outputs = identity_vertex(ray_session, epochs, schema_from_input=schema_from_input)
    back = tables_to_spark(outputs, spark, epoch=0)

    assert back.schema == original.schema
    assert sorted_rows(back) == sorted_rows(original)


@pytest.mark.ray
@pytest.mark.spark
def test_explicit_schema_keeps_narrow_spark_types(ray_session, spark):
    rows = [(1, 0.5, 2, True), (2, None, None, None)]
    original = spark.createDataFrame(rows, "i int, f float, h smallint, b boolean")
    outputs = identity_vertex(ray_session, from_spark(original).epochs(), schema_from_input=True)
    back = tables_to_spark(outputs, spark, epoch=0)
    assert back.schema == original.schema
    assert sorted_rows(back) == sorted_rows(original)


@pytest.mark.ray
@pytest.mark.spark
def test_many_partitions_give_one_block_each(ray_session, spark):
    frame = spark.range(0, 3700, numPartitions=37)
    [(epoch, blocks)] = list(from_spark(frame).epochs())
    assert epoch == 0 and len(blocks) == 37
    assert sorted(row["id"] for row in all_rows(ray_session, blocks)) == list(range(3700))


@pytest.mark.ray
@pytest.mark.spark
def test_empty_dataframes(ray_session, spark):
    # A DataFrame without rows still has a schema: its blocks are empty tables that carry it, and
    # the way back keeps it ("empty, with whatever schema is known", tables_to_spark's docstring).
    empty = spark.createDataFrame([], "a bigint, s string")
    [(epoch, blocks)] = list(from_spark(empty).epochs())
    tables = ray_session.get(blocks)
    assert epoch == 0 and tables and all(table.num_rows == 0 and table.column_names == ["a", "s"] for table in tables)
    back = tables_to_spark({0: blocks}, spark, epoch=0)
    assert back.count() == 0 and back.columns == ["a", "s"]

    assert list(from_spark(spark.range(0)).epochs()) == [(0, [])]
    assert list(from_spark(empty.selectExpr("a as day"), epoch_column="day").epochs()) == []

    nothing = {3: [ray_session.put(records_to_table([], vertex="sink", epoch=3))]}
    assert tables_to_spark(nothing, spark, epoch=3).count() == 0
    assert tables_to_spark({}, spark).columns == ["epoch"]


# --------------------------------------------------------------------------- epochs


@pytest.mark.ray
@pytest.mark.spark
def test_epochs_from_a_column(ray_session, spark):
    # partition 0 holds epoch 0 only (its block is passed on as is), partition 1 epochs 2 and 5 (split)
    frame = spark.range(0, 300, numPartitions=3).selectExpr(
        "id", "cast(case when id < 100 then 0 when id < 120 then 2 else 5 end as int) as day"
    )
    epochs = list(from_spark(frame, epoch_column="day").epochs())
    assert [epoch for epoch, _ in epochs] == [0, 2, 5]
    for epoch, blocks in epochs:
        rows = all_rows(ray_session, blocks)
        assert {row["day"] for row in rows} == {epoch}
        assert len(rows) == frame.filter(f"day = {epoch}").count()
    ids = sorted(row["id"] for _, blocks in epochs for row in all_rows(ray_session, blocks))
    assert ids == list(range(300))

    assert [epoch for epoch, _ in from_spark(frame, epoch_column="day").epochs(start=1)] == [2, 5]


@pytest.mark.ray
@pytest.mark.spark
@pytest.mark.parametrize(
    ("expression", "message"),
    [("id - 5", "epoch column 'day' has the negative value -5"), ("if(id = 7, null, 1)", "'day' has 1 null")],
)
def test_bad_epoch_values_name_the_column(spark, expression, message):
    frame = spark.range(0, 20, numPartitions=2).selectExpr("id", f"{expression} as day")
    with pytest.raises(SparkIntegrationError, match=message):
        list(from_spark(frame, epoch_column="day").epochs())


@pytest.mark.ray
@pytest.mark.spark
def test_bad_epoch_columns_are_refused_at_once(spark):
    frame = spark.range(3).selectExpr("id", "cast(id as string) as day")
    with pytest.raises(SparkIntegrationError, match="epoch column 'day' has type string"):
        from_spark(frame, epoch_column="day")
    with pytest.raises(SparkIntegrationError, match="epoch column 'week' is not a column"):
        from_spark(frame, epoch_column="week")
    with pytest.raises(SparkIntegrationError, match="single DataFrame"):
        from_spark([frame], epoch_column="id")


@pytest.mark.ray
@pytest.mark.spark
def test_a_generator_of_dataframes_is_consumed_lazily(ray_session, spark):
    pulled = []

    def frames():
        for k in range(3):
            pulled.append(k)
            yield spark.range(100 * k, 100 * k + 10 + k)

    source = from_spark(frames())
    assert isinstance(source, SparkSource) and pulled == []
    epochs = source.epochs()
    assert pulled == []

    epoch, blocks = next(epochs)
    assert (epoch, pulled) == (0, [0])
    assert sorted(row["id"] for row in all_rows(ray_session, blocks)) == list(range(10))
    epoch, blocks = next(epochs)
    assert (epoch, pulled) == (1, [0, 1])
    assert sorted(row["id"] for row in all_rows(ray_session, blocks)) == list(range(100, 111))
    assert [epoch for epoch, _ in epochs] == [2] and pulled == [0, 1, 2]

    with pytest.raises(SparkIntegrationError, match="consumed only once"):
        source.epochs()


@pytest.mark.ray
@pytest.mark.spark
def test_a_list_of_dataframes_replays_from_an_epoch(ray_session, spark):
    source = from_spark([spark.range(1), spark.range(2), spark.range(3)])
    assert [(e, len(all_rows(ray_session, b))) for e, b in source.epochs(start=1)] == [(1, 2), (2, 3)]
    assert [e for e, _ in source.epochs()] == [0, 1, 2]
    with pytest.raises(SparkIntegrationError, match="epoch 1: expected a Spark DataFrame, got str"):
        list(from_spark([spark.range(1), "not a frame"]).epochs())


# --------------------------------------------------------------------------- Ray -> Spark


class SinkOutputs:
    """Stand-in for a job handle: holds what sink replicas wrote, per epoch, packed as the wire packs them."""

    def __init__(self, name, records_by_epoch):
        self.name = name
        self.parts = {epoch: [pack_records(part) for part in parts] for epoch, parts in records_by_epoch.items()}

    def output_parts(self, name):
        assert name == self.name
        return self.parts


@pytest.mark.ray
@pytest.mark.spark
def test_to_spark_adds_an_epoch_column_for_several_epochs(ray_session, spark):
    job = SinkOutputs(
        "counts",
        {1: [[{"word": "b", "n": 2}, {"word": "c", "n": 3}], []], 0: [[{"word": "a", "n": 1}]]},
    )
    every = to_spark(job, "counts")
    assert every.columns == ["word", "n", "epoch"]
    assert every.schema["epoch"].nullable is False
    assert sorted_rows(every) == [("a", 1, 0), ("b", 2, 1), ("c", 3, 1)]

    one = to_spark(job, "counts", epoch=1, spark=spark)
    assert one.columns == ["word", "n"] and sorted_rows(one) == [("b", 2), ("c", 3)]


@pytest.mark.ray
@pytest.mark.spark
def test_tables_to_spark_unifies_block_schemas(ray_session, spark):
    put = ray_session.put
    refs = {
        0: [
            put(pa.table({"x": pa.array([1], pa.int32())})),
            put(pa.table({"y": ["u"], "x": pa.array([2], pa.int64())})),
        ],
    }
    frame = tables_to_spark(refs, spark, epoch=0)
    assert frame.schema.simpleString() == "struct<x:bigint,y:string>"
    assert sorted_rows(frame) == [(1, None), (2, "u")]

    with pytest.raises(SparkIntegrationError, match="already has a column 'epoch'"):
        tables_to_spark({0: [put(pa.table({"epoch": [1]}))]}, spark)
    renamed = tables_to_spark({0: [put(pa.table({"epoch": [1]}))]}, spark, epoch_column="t")
    assert sorted_rows(renamed) == [(1, 0)]


@pytest.mark.ray
@pytest.mark.spark
def test_unsupported_record_types_name_vertex_epoch_and_column(ray_session, spark):
    [(epoch, blocks)] = list(from_spark(spark.range(0, 4, numPartitions=1)).epochs())
    rows = [dict(row, payload=object()) for row in all_rows(ray_session, blocks)]
    with pytest.raises(SparkIntegrationError) as error:
        records_to_table(rows, vertex="enrich", epoch=epoch)
    assert "vertex 'enrich', epoch 0: column 'payload'" in str(error.value)


# --------------------------------------------------------------------------- cached partitions that cannot be read


@pytest.mark.ray
@pytest.mark.spark
def test_a_partition_that_cannot_be_read_fails_at_once_naming_it(ray_session, spark, monkeypatch):
    """A read is tried again only while its executor is being restarted (or was, since it cached
    the partition); any other failure is an error at once, naming the partition and the executor:
    a read the live executor fails (a schema it cannot parse), and one from an executor whose actor
    does not exist. Never a wait for the read's whole timeout."""
    import dataclasses
    import time

    from raytide.integrations.spark import partitions

    monkeypatch.setattr(partitions, "READ_TIMEOUT", 30.0)
    frame = spark.range(0, 100, numPartitions=2)
    cached = partitions.cache_partitions(frame, "the test's frame")
    try:
        assert cached.partitions[1].read().num_rows == 50
        started = time.monotonic()
        garbled = dataclasses.replace(cached.partitions[1], schema_json="{not a schema")
        with pytest.raises(SparkIntegrationError, match=r"reading the test's frame: partition 1 from Spark executor "
                                                        r"'raydp-executor-\d+' failed: CrossLanguageError"):
            garbled.read()
        gone = dataclasses.replace(cached.partitions[0], executor="raydp-executor-99")
        with pytest.raises(SparkIntegrationError, match="partition 0 from Spark executor 'raydp-executor-99' failed: "
                                                        "the executor's actor is gone for good"):
            gone.read()
        assert time.monotonic() - started < 20, "a read that cannot succeed waited as for a restarting executor"
    finally:
        partitions.release_partitions(frame, cached)
