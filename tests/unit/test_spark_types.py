"""Which Spark types cannot cross into the dataflow, found from Spark's JSON schema alone (pure: no Spark, no Ray)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from raytide.errors import SparkIntegrationError
from raytide.integrations.spark.types import check_schema, unsupported_columns, widen_decimals


def field(name, typ, nullable=True):
    return {"name": name, "type": typ, "nullable": nullable, "metadata": {}}


def schema(*fields):
    """A schema in Spark's JSON form, as ``df._jdf.schema().json()`` gives it."""
    return json.dumps({"type": "struct", "fields": list(fields)})


def struct(*fields):
    return {"type": "struct", "fields": list(fields)}


def array(element):
    return {"type": "array", "elementType": element, "containsNull": True}


def map_of(key, value):
    return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": True}


#: Every type Spark's Arrow conversion carries, nested every way (as Spark 3.5 writes them in JSON).
SUPPORTED = schema(
    *(field(f"c{i}", name) for i, name in enumerate([
        "boolean", "byte", "short", "integer", "long", "float", "double", "decimal(38,10)", "string", "binary",
        "date", "timestamp", "timestamp_ntz", "void", "interval day to second", "interval hour", "interval minute to second",
    ])),
    field("a", array(struct(field("m", map_of("string", array("long")))))),
    field("v", {"type": "udt", "class": "org.apache.spark.ml.linalg.VectorUDT", "pyClass": "pyspark.ml.linalg.VectorUDT",
                "sqlType": struct(field("values", array("double")))}),
)


def test_every_type_spark_writes_to_arrow_passes():
    assert unsupported_columns(SUPPORTED) == []
    check_schema(SUPPORTED, "the DataFrame")


#: ``(column, its dotted path, its Spark type, a word of the remedy)`` per way a type can be out of reach.
UNSUPPORTED = [
    (field("c", "interval"), "c", "interval", "cast the column to string"),
    (field("s", struct(field("x", "integer"), field("i", "interval"))), "s.i", "interval", "calendar"),
    (field("a", array("interval")), "a.element", "interval", "calendar"),
    (field("m", map_of("interval", "long")), "m.key", "interval", "calendar"),
    (field("m", map_of("string", array(struct(field("i", "interval"))))), "m.value.element.i", "interval", "calendar"),
    (field("y", "interval year to month"), "y", "interval year to month", "year-month"),
    (field("y", "interval month"), "y", "interval month", "number of months"),
    (field("y", "interval year"), "y", "interval year", "year-month"),
    (field("f", "char(3)"), "f", "char(3)", "use string"),
    (field("f", "varchar(10)"), "f", "varchar(10)", "use string"),
    (field("u", {"type": "udt", "class": "X", "sqlType": struct(field("i", "interval"))}), "u.i", "interval", "calendar"),
]


@pytest.mark.parametrize(("column", "path", "name", "remedy"), UNSUPPORTED, ids=[f"{c[1]}: {c[2]}" for c in UNSUPPORTED])
def test_an_unsupported_type_is_named_with_its_dotted_path(column, path, name, remedy):
    text = schema(field("id", "long"), column)
    assert [(p, n) for p, n, _ in unsupported_columns(text)] == [(path, name)]
    with pytest.raises(SparkIntegrationError) as error:
        check_schema(text, "the DataFrame of epoch 2")
    message = str(error.value)
    assert message.startswith("the DataFrame of epoch 2 cannot cross between Spark and the dataflow: ")
    assert f"column {path!r} has Spark type {name} (" in message and remedy in message


def test_every_offending_column_is_named_in_schema_order():
    text = schema(field("b", "interval"), field("ok", "long"), field("a", struct(field("y", "interval year to month"))))
    assert [path for path, _, _ in unsupported_columns(text)] == ["b", "a.y"]
    with pytest.raises(SparkIntegrationError, match=r"column 'b' has Spark type interval .*; column 'a.y' has"):
        check_schema(text, "the DataFrame")


def test_decimals_widen_to_precision_38_keeping_their_scale_everywhere():
    narrow = pa.schema([
        pa.field("d", pa.decimal128(15, 10), nullable=False),
        pa.field("l", pa.list_(pa.decimal128(3, 1))),
        pa.field("s", pa.struct([pa.field("x", pa.decimal128(5, 0)), pa.field("n", pa.int64())])),
        pa.field("m", pa.map_(pa.string(), pa.decimal128(4, 4))),
        pa.field("t", pa.string()),
    ])
    assert widen_decimals(narrow) == pa.schema([
        pa.field("d", pa.decimal128(38, 10), nullable=False),
        pa.field("l", pa.list_(pa.decimal128(38, 1))),
        pa.field("s", pa.struct([pa.field("x", pa.decimal128(38, 0)), pa.field("n", pa.int64())])),
        pa.field("m", pa.map_(pa.string(), pa.decimal128(38, 4))),
        pa.field("t", pa.string()),
    ])
