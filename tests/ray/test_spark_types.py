"""Spark column types through a raytide job and back (docs/spark-types.md), on a real Spark on Ray.

One job reads one small DataFrame with a column of each supported type through an identity
vertex; its output goes back to Spark with the input's schema and with inferred types, and
each type's test compares its column with the input's. Unsupported types are
refused from the schema, before Spark runs a job; errors of Ray tasks say what went wrong
in their first line.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from functools import cached_property
from typing import Any, NamedTuple

import pytest
import ray
from py4j.protocol import Py4JJavaError
from pyspark.sql import Row
from pyspark.sql.types import StructField, StructType, YearMonthIntervalType

import raytide as rt
from raytide.errors import SparkIntegrationError
from raytide.integrations.spark import from_spark, start_spark, to_spark
from raytide.physical.pickled import pack_records

pytestmark = [pytest.mark.ray, pytest.mark.spark]


class Case(NamedTuple):
    """A Spark type: a SQL value of it, and the type ``to_spark`` infers back without a schema (None: it needs one)."""

    value: str
    inferred: str | None


#: Every supported Spark type (docs/spark-types.md), by its simple string.
SUPPORTED: dict[str, Case] = {
    "tinyint": Case("cast(-7 as tinyint)", "bigint"),
    "smallint": Case("cast(300 as smallint)", "bigint"),
    "int": Case("70000", "bigint"),
    "bigint": Case("-5000000000", "bigint"),
    "float": Case("cast(1.5 as float)", "double"),
    "double": Case("cast(-2.25 as double)", "double"),
    "decimal(10,2)": Case("cast(-12.34 as decimal(10,2))", "decimal(38,2)"),
    "decimal(38,10)": Case("cast('12345.0123456789' as decimal(38,10))", "decimal(38,10)"),
    "string": Case("'é ☃'", "string"),
    "binary": Case("cast('ab' as binary)", "binary"),
    "boolean": Case("true", "boolean"),
    "date": Case("date'2024-02-29'", "date"),
    "timestamp": Case("timestamp'2024-02-29 23:59:58.000123'", "timestamp"),
    "timestamp_ntz": Case("timestamp_ntz'2024-02-29 23:59:58.000123'", "timestamp_ntz"),
    "interval day to second": Case("interval '1 02:03:04.000005' day to second", "interval day to second"),
    "void": Case("null", "void"),
    "array<int>": Case("array(1, null, 3)", "array<bigint>"),
    "array<array<string>>": Case("array(array('a', null), array())", "array<array<string>>"),
    "struct<a:int,b:string>": Case("named_struct('a', 1, 'b', 'x')", "struct<a:bigint,b:string>"),
    "array<struct<t:timestamp_ntz>>": Case(
        "array(named_struct('t', timestamp_ntz'2024-01-02 03:04:05'))", "array<struct<t:timestamp_ntz>>"
    ),
    "map<string,int>": Case("map('a', 1, 'b', null)", "struct<a:bigint,b:void>"),  # b is null in every record
    "map<int,array<string>>": Case("map(1, array('x'), 2, array())", None),  # dicts with int keys
    "struct<m:map<string,decimal(38,10)>>": Case(
        "named_struct('m', map('k', cast(1 as decimal(38,10))))", "struct<m:struct<k:decimal(38,10)>>"
    ),
}
NAMES = list(SUPPORTED)
INFERABLE = [name for name, case in SUPPORTED.items() if case.inferred is not None]


def frame_of(spark, *values: str):
    """Three rows: ``id``, then a column ``c0, c1, ...`` per value, null in row 1."""
    columns = [f"if(id = 1, null, {value}) as c{i}" for i, value in enumerate(values)]
    return spark.range(0, 3, numPartitions=2).selectExpr("id", *columns)


def round_trip_flow() -> rt.Dataflow:
    """The records as they are (output ``y``), and without the columns only a schema takes back (``inferable``)."""
    flow = rt.Dataflow("round-trip")
    records = flow.input("x").map(lambda record: record)
    records.output("y")
    hidden = {f"c{NAMES.index(name)}" for name in NAMES if name not in INFERABLE}
    records.map(lambda record: {key: value for key, value in record.items() if key not in hidden}).output("inferable")
    return flow


class PackedOutputs:
    """A job's output as sink replicas leave it: packed record lists per epoch."""

    def __init__(self, records_by_epoch: dict[int, list]) -> None:
        self.parts = {epoch: [pack_records(records)] for epoch, records in records_by_epoch.items()}

    def output_parts(self, name: str) -> dict[int, list]:
        return self.parts


def rows(frame) -> list[Row]:
    return sorted(frame.collect(), key=lambda row: row["id"])


class Collected(NamedTuple):
    """A DataFrame's schema and rows (by id), collected once."""

    schema: StructType
    rows: list[Row]

    def column(self, name: str) -> list:
        """The values of the column of the type ``name``."""
        return [row[f"c{NAMES.index(name)}"] for row in self.rows]

    def field(self, name: str) -> StructField:
        return self.schema[f"c{NAMES.index(name)}"]


def collected(frame) -> Collected:
    return Collected(frame.schema, rows(frame))


class RoundTrip:
    """A finished job that read a DataFrame with a column of each supported type, and its output back in Spark.

    Each way back converts all columns at once (one conversion, not one per type) when a
    test first asks for it; a conversion that fails fails each test that asks for it.
    """

    def __init__(self, job: Any, original: Collected, records: list[dict]) -> None:
        self.job, self.original, self.records = job, original, records

    @cached_property
    def given(self) -> Collected:
        """The output with the input's schema."""
        return collected(to_spark(self.job, "y", epoch=0, schema=self.original.schema))

    @cached_property
    def inferred(self) -> Collected:
        """The output with the types inferred from the records, but for the columns that need a schema."""
        return collected(to_spark(self.job, "inferable", epoch=0))


@pytest.fixture(scope="module")
def round_trip(ray_session, _spark_on_ray) -> RoundTrip:
    """The job of the module, run once (the ``spark`` fixture gives the session start_spark adopts here)."""
    spark = start_spark("raytide-tests")
    original = frame_of(spark, *(case.value for case in SUPPORTED.values()))
    with rt.run(round_trip_flow(), inputs={"x": from_spark(original)}, parallelism=1) as job:
        job.wait(timeout=180)
        records = job.collect("y")[0]
    return RoundTrip(job, collected(original), sorted(records, key=lambda record: record["id"]))


def plain(value: Any) -> Any:
    """A collected value with structs as dicts, to compare a map with the struct inferred from its dicts."""
    if isinstance(value, Row):
        return {key: plain(item) for key, item in value.asDict().items()}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


@pytest.mark.parametrize("name", NAMES)
def test_a_supported_type_round_trips_with_the_input_schema(round_trip, spark, name):
    assert round_trip.original.field(name).dataType.simpleString() == name
    assert round_trip.given.field(name) == round_trip.original.field(name)
    assert round_trip.given.column(name) == round_trip.original.column(name)


@pytest.mark.parametrize("name", INFERABLE)
def test_a_supported_type_round_trips_with_an_inferred_schema(round_trip, spark, name):
    assert round_trip.inferred.field(name).dataType.simpleString() == SUPPORTED[name].inferred
    assert plain(round_trip.inferred.column(name)) == plain(round_trip.original.column(name))


def test_a_map_with_keys_other_than_strings_needs_a_schema(round_trip, spark):
    column = f"c{NAMES.index('map<int,array<string>>')}"
    with pytest.raises(SparkIntegrationError, match=f"^converting output 'y' to Spark failed: .*column {column!r}"):
        to_spark(round_trip.job, "y", epoch=0)


def test_map_columns_reach_vertices_as_dicts(round_trip):
    def values(name: str) -> list:
        return [record[f"c{NAMES.index(name)}"] for record in round_trip.records]

    assert values("map<string,int>") == [{"a": 1, "b": None}, None, {"a": 1, "b": None}]
    assert values("map<int,array<string>>")[0] == {1: ["x"], 2: []}
    assert values("struct<m:map<string,decimal(38,10)>>")[0] == {"m": {"k": Decimal(1)}}


def test_dicts_go_back_as_a_map_given_a_ddl_schema(ray_session, spark):
    outputs = PackedOutputs({0: [{"id": 0, "m": {"a": 1, "b": None}}, {"id": 1, "m": None}, {"id": 2, "m": {}}]})
    back = to_spark(outputs, "y", epoch=0, schema="id bigint, m map<string,int>")
    assert back.schema.simpleString() == "struct<id:bigint,m:map<string,int>>"
    assert [row["m"] for row in rows(back)] == [{"a": 1, "b": None}, None, {}]


# --------------------------------------------------------------------------- unsupported types


def no_jobs_in(spark, group: str) -> bool:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []


@pytest.mark.parametrize(("value", "path", "name"), [
    ("make_interval(1, 2, 0, 3, 4, 5, 6.5)", "c0", "interval"),
    ("named_struct('x', 1, 'i', make_interval(0, 0, 0, 1))", "c0.i", "interval"),
    ("array(make_interval(0, 0, 0, 1))", "c0.element", "interval"),
    ("map('k', make_interval(0, 0, 0, 1))", "c0.value", "interval"),
    ("interval '1-2' year to month", "c0", "interval year to month"),
    ("array(interval '3' month)", "c0.element", "interval month"),
])
def test_an_unsupported_type_is_refused_by_from_spark_before_spark_runs_a_job(spark, value, path, name):
    frame = frame_of(spark, value)
    spark.sparkContext.setJobGroup("unsupported-types", "from_spark must not run a job")
    try:
        with pytest.raises(SparkIntegrationError) as error:
            from_spark(frame)
        assert no_jobs_in(spark, "unsupported-types")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert str(error.value).startswith(f"the DataFrame cannot cross between Spark and the dataflow: column {path!r} "
                                       f"has Spark type {name} (")


def test_a_generator_s_dataframe_is_refused_before_its_epoch_is_converted(spark):
    frames = iter([spark.range(2), frame_of(spark, "make_interval(0, 0, 0, 1)")])
    epochs = from_spark(frames).epochs()
    assert next(epochs)[0] == 0
    with pytest.raises(SparkIntegrationError, match="the DataFrame of epoch 1 cannot cross .* column 'c0'"):
        next(epochs)
    with pytest.raises(SparkIntegrationError, match="the DataFrame of epoch 1 cannot cross .* column 's'"):
        from_spark([spark.range(2), spark.range(1).selectExpr("make_interval(0, 0, 0, 1) as s")])


class UnreadOutputs:
    """A job whose output must not be read: the schema is refused first."""

    def output_parts(self, name: str) -> dict[int, list]:
        raise AssertionError(f"output {name!r} was read before the schema was checked")


@pytest.mark.parametrize(("schema", "message"), [
    ("id bigint, c interval", "column 'c' has Spark type interval"),
    ("id bigint, s struct<c: char(3)>", "column 's.c' has Spark type char(3)"),
    (StructType([StructField("y", YearMonthIntervalType())]), "column 'y' has Spark type interval year to month"),
])
def test_to_spark_refuses_a_schema_with_an_unsupported_type_before_reading_the_output(spark, schema, message):
    with pytest.raises(SparkIntegrationError, match=f"the schema given to to_spark cannot cross .*{re.escape(message)}"):
        to_spark(UnreadOutputs(), "y", epoch=0, schema=schema)


# --------------------------------------------------------------------------- errors of Ray tasks and of Spark


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def test_a_record_conversion_error_in_a_ray_task_says_what_went_wrong_first(ray_session, spark):
    mixed = PackedOutputs({0: [{"x": 1}, {"x": "one"}]})
    with pytest.raises(SparkIntegrationError) as error:
        to_spark(mixed, "y", epoch=0)
    assert type(error.value) is SparkIntegrationError
    assert first_line(error.value).startswith(
        "converting output 'y' to Spark failed: vertex 'y', epoch 0: column 'x': values mix the types int, str"
    )
    assert isinstance(error.value.__cause__, ray.exceptions.RayTaskError)


def test_records_that_do_not_fit_the_given_schema_are_named(ray_session, spark):
    late = PackedOutputs({0: [{"t": dt.datetime(2024, 1, 1)}, {"t": "yesterday"}]})
    with pytest.raises(SparkIntegrationError, match="^converting output 'y' to Spark failed: vertex 'y', epoch 0: "
                                                    "column 't'"):
        to_spark(late, "y", epoch=0, schema="t timestamp")


def test_a_failing_spark_computation_says_why_first(spark):
    frame = spark.range(0, 3, numPartitions=1).selectExpr("if(id = 2, raise_error('bad row 2'), id) as id")
    with pytest.raises(SparkIntegrationError) as error:
        list(from_spark(frame).epochs())
    assert first_line(error.value).startswith("converting the DataFrame of epoch 0 to Arrow failed: ")
    assert "bad row 2" in first_line(error.value)
    assert isinstance(error.value.__cause__, Py4JJavaError)


def test_to_spark_of_an_output_whose_epochs_disagree_names_the_output_and_the_epochs(spark):
    """(Before: "output blocks have incompatible schemas: Unable to merge: Field _2 has
    incompatible types", naming neither the output nor the epochs.)"""
    flow = rt.Dataflow("mixed")
    flow.input("x").output("out")
    with rt.run(flow, inputs={"x": [[(1, 2)], [(1, 3)], [(1, "a")]]}, parallelism=1) as job:
        job.wait(timeout=60)
        with pytest.raises(SparkIntegrationError, match=r"converting output 'out' to Spark: epochs 0 and 2 disagree "
                                                        r"on column '_2' \(int64 vs string\)"):
            to_spark(job, "out")
