"""Records <-> Arrow conversion (pure: no Ray, no Spark)."""

from __future__ import annotations

import datetime as dt
import decimal
import string
from collections import namedtuple

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.errors import SparkIntegrationError
from raytide.integrations.records import (
    SCALAR_COLUMN,
    conform,
    epoch_summary,
    epochs_that_disagree,
    records_to_table,
    spark_compatible_type,
    split_by_epoch,
    table_to_records,
    unify_schemas,
    unsupported_type,
    with_constant_column,
)

UTC = dt.timezone.utc


def to_table(records, schema=None):
    return records_to_table(records, vertex="v", epoch=3, schema=schema)


# --------------------------------------------------------------------------- shapes


def test_tuples_become_numbered_columns():
    table = to_table([(1, "a", True), (2, "b", False)])
    assert table.column_names == ["_1", "_2", "_3"]
    assert table.schema.types == [pa.int64(), pa.string(), pa.bool_()]
    assert table_to_records(table) == [{"_1": 1, "_2": "a", "_3": True}, {"_1": 2, "_2": "b", "_3": False}]


def test_namedtuples_are_tuples():
    point = namedtuple("point", "x y")
    assert to_table([point(1, 2)]).column_names == ["_1", "_2"]


def test_dicts_become_named_columns_in_first_seen_order():
    table = to_table([{"b": 1, "a": "x"}, {"a": "y", "c": 2.5}])
    assert table.column_names == ["b", "a", "c"]
    assert table_to_records(table) == [{"b": 1, "a": "x", "c": None}, {"b": None, "a": "y", "c": 2.5}]


def test_scalars_become_one_value_column():
    table = to_table([1, 2, None])
    assert table.column_names == [SCALAR_COLUMN]
    assert table_to_records(table) == [{"value": 1}, {"value": 2}, {"value": None}]


def test_lists_as_records_are_scalars():
    table = to_table([[1, 2], [3]])
    assert table.column_names == [SCALAR_COLUMN]
    assert table.schema.field(SCALAR_COLUMN).type == pa.list_(pa.int64())


def test_table_to_records_gives_aware_timestamps_and_nested_lists():
    stamp = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    table = pa.table(
        {
            "ts": pa.array([stamp, None], pa.timestamp("us", tz="UTC")),
            "nested": pa.array([[[1], [2, 3]], None], pa.list_(pa.list_(pa.int64()))),
        }
    )
    rows = table_to_records(table)
    assert rows[0]["ts"] == stamp and rows[0]["ts"].tzinfo is not None
    assert rows == [{"ts": stamp, "nested": [[1], [2, 3]]}, {"ts": None, "nested": None}]


def test_supported_types_are_inferred():
    stamp = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    table = to_table(
        [
            {
                "i": 1,
                "f": 1.5,
                "s": "x",
                "b": True,
                "ts": stamp,
                "naive": dt.datetime(2024, 1, 2),
                "n": None,
                "l": [[1, None], []],
                "d": dt.date(2024, 1, 2),
                "dec": decimal.Decimal("1.25"),
                "bytes": b"\x00",
                "struct": {"k": 1},
            }
        ]
    )
    types = dict(zip(table.column_names, table.schema.types))
    assert types["i"] == pa.int64() and types["f"] == pa.float64() and types["s"] == pa.string()
    assert types["b"] == pa.bool_() and types["n"] == pa.null()
    assert types["ts"] == pa.timestamp("us", tz="UTC") and types["naive"] == pa.timestamp("us")
    assert types["l"] == pa.list_(pa.list_(pa.int64()))
    assert types["d"] == pa.date32() and pa.types.is_decimal(types["dec"]) and types["bytes"] == pa.binary()
    assert types["struct"] == pa.struct([("k", pa.int64())])


def test_ints_and_floats_mix_into_floats():
    assert to_table([1, 2.5]).schema.types == [pa.float64()]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("records", "column", "detail"),
    [
        ([object()], "value", "object"),
        ([(1, "a"), ("b", "c")], "_1", "mix the types int, str"),
        ([{"k": 1}, {"k": "one"}], "k", "mix the types int, str"),
        ([True, 1], "value", "mix the types bool, int"),
        ([2**64], "value", "int"),
        ([dt.time(1, 2)], "value", "time"),
        ([[1, "a"]], "value", "list"),
    ],
)
def test_unsupported_values_name_vertex_epoch_and_column(records, column, detail):
    with pytest.raises(SparkIntegrationError) as error:
        records_to_table(records, vertex="parse", epoch=7)
    message = str(error.value)
    assert "vertex 'parse'" in message and "epoch 7" in message
    assert f"column {column!r}" in message
    assert detail in message


def test_unknown_epoch_is_said():
    with pytest.raises(SparkIntegrationError, match="vertex 'v', an unknown epoch: column 'value'"):
        records_to_table([object()], vertex="v", epoch=None)


def test_unsigned_integers_are_refused_even_with_a_schema():
    with pytest.raises(SparkIntegrationError, match="column 'value'.*uint64"):
        to_table([1], schema=pa.schema([("value", pa.uint64())]))


def test_mixed_record_shapes_are_refused():
    with pytest.raises(SparkIntegrationError, match="record 1 is a dict but record 0 is a tuple"):
        to_table([(1,), {"a": 1}])


def test_ragged_tuples_are_refused():
    with pytest.raises(SparkIntegrationError, match="record 1 has 1 fields but record 0 has 2"):
        to_table([(1, 2), (3,)])


def test_non_string_keys_are_refused():
    with pytest.raises(SparkIntegrationError, match="column names must be str"):
        to_table([{1: "a"}])


# --------------------------------------------------------------------------- explicit schema and empties


def test_explicit_schema_keeps_narrow_types():
    schema = pa.schema([("a", pa.int32()), ("b", pa.float32())])
    table = to_table([(1, 0.5), (2, None)], schema=schema)
    assert table.schema == schema
    assert table_to_records(table) == [{"a": 1, "b": 0.5}, {"a": 2, "b": None}]


def test_explicit_schema_for_dicts_and_scalars():
    schema = pa.schema([("a", pa.int16()), ("b", pa.string())])
    assert to_table([{"b": "x"}], schema=schema).to_pylist() == [{"a": None, "b": "x"}]
    one = pa.schema([("n", pa.int8())])
    assert to_table([1, 2], schema=one).schema == one
    with pytest.raises(SparkIntegrationError, match="column 'c' is not in the schema"):
        to_table([{"c": 1}], schema=schema)
    with pytest.raises(SparkIntegrationError, match="one-column schema"):
        to_table([1], schema=schema)
    with pytest.raises(SparkIntegrationError, match="2 fields but the schema has 1"):
        to_table([(1, 2)], schema=one)


def test_value_that_does_not_fit_the_schema_names_the_column():
    with pytest.raises(SparkIntegrationError, match="column 'a'"):
        to_table([(300,)], schema=pa.schema([("a", pa.int8())]))


def test_nulls_in_a_non_nullable_column_are_refused():
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    with pytest.raises(SparkIntegrationError, match="column 'id' is not nullable but has 1 null"):
        to_table([(1,), (None,)], schema=schema)


def test_empty_records():
    assert to_table([]).num_columns == 0 and to_table([]).num_rows == 0
    schema = pa.schema([("a", pa.int64())])
    assert to_table([], schema=schema).schema == schema


# --------------------------------------------------------------------------- round trips


scalar_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(alphabet=string.printable, max_size=8),
    st.datetimes(
        min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
)
COLUMN_VALUES = {
    "int": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "float": st.floats(allow_nan=False),
    "str": st.text(max_size=5),
    "bool": st.booleans(),
    "ts": st.datetimes(timezones=st.just(UTC)),
    "list": st.lists(st.lists(st.integers(-5, 5) | st.none(), max_size=3) | st.none(), max_size=3),
}


def typed_column(rows: int) -> st.SearchStrategy[list]:
    """``rows`` values of one randomly chosen kind, any of them None."""
    return st.sampled_from(sorted(COLUMN_VALUES)).flatmap(
        lambda kind: st.lists(st.none() | COLUMN_VALUES[kind], min_size=rows, max_size=rows)
    )


# The shape is drawn first, so every width is equally likely (drawing columns and keeping
# those of equal lengths left most examples with one column).
tables_of_columns = st.tuples(st.integers(1, 4), st.integers(1, 20)).flatmap(
    lambda shape: st.lists(typed_column(shape[1]), min_size=shape[0], max_size=shape[0])
)


@settings(max_examples=200, deadline=None)
@given(tables_of_columns)
def test_tuple_records_round_trip(columns):
    records = list(zip(*columns))
    table = to_table(records)
    back = [tuple(row.values()) for row in table_to_records(table)]
    assert back == records
    assert all(unsupported_type(t) is None for t in table.schema.types)
    assert to_table(table_to_records(table)).equals(table)


@settings(max_examples=100, deadline=None)
@given(st.lists(scalar_values, min_size=1, max_size=1))
def test_single_scalar_round_trip(values):
    assert [row["value"] for row in table_to_records(to_table(values))] == values


# --------------------------------------------------------------------------- schemas for Spark


def test_spark_compatible_type_normalises_units_and_large_types():
    assert spark_compatible_type(pa.timestamp("ns", tz="UTC")) == pa.timestamp("us", tz="UTC")
    assert spark_compatible_type(pa.large_list(pa.large_string())) == pa.list_(pa.string())
    assert spark_compatible_type(pa.struct([("a", pa.large_binary())])) == pa.struct([("a", pa.binary())])
    assert spark_compatible_type(pa.int32()) == pa.int32()


def test_unsupported_type_looks_inside_nesting():
    assert unsupported_type(pa.list_(pa.struct([("a", pa.list_(pa.int64()))]))) is None
    assert "uint8" in unsupported_type(pa.list_(pa.uint8()))
    assert "halffloat" in unsupported_type(pa.float16())


def test_unify_schemas_promotes_fills_and_skips_empty():
    a = pa.schema([pa.field("x", pa.int32(), nullable=False), ("n", pa.null())])
    b = pa.schema([pa.field("x", pa.int64(), nullable=False), ("n", pa.string()), ("y", pa.large_string())])
    unified = unify_schemas([pa.schema([]), a, b])
    assert unified == pa.schema(
        [pa.field("x", pa.int64(), nullable=False), ("n", pa.string()), pa.field("y", pa.string())]
    )
    assert unify_schemas([pa.schema([])]) == pa.schema([])


def test_unify_schemas_ignores_list_field_names():
    spark_like = pa.schema([("l", pa.list_(pa.field("element", pa.int64(), nullable=False)))])
    plain = pa.schema([("l", pa.list_(pa.int64()))])
    assert unify_schemas([spark_like, plain]) == plain


def test_unify_schemas_refuses_incompatible_types():
    with pytest.raises(SparkIntegrationError, match="incompatible"):
        unify_schemas([pa.schema([("x", pa.int64())]), pa.schema([("x", pa.string())])])


def test_conform_reorders_casts_and_fills():
    target = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    table = pa.table({"b": ["x"], "a": pa.array([1], pa.int32())})
    assert conform(table, target).to_pylist() == [{"a": 1, "b": "x", "c": None}]
    same = target.empty_table()
    assert conform(same, target) is same


def test_with_constant_column():
    table = with_constant_column(pa.table({"a": [1, 2]}), "epoch", 4)
    assert table.schema.field("epoch") == pa.field("epoch", pa.int64(), nullable=False)
    assert table.column("epoch").to_pylist() == [4, 4]


# --------------------------------------------------------------------------- epochs from a column


def test_epoch_summary_counts_and_problems():
    table = pa.table({"e": pa.array([3, 1, 3, None, -2], pa.int32())})
    assert epoch_summary(table, "e") == {"counts": {-2: 1, 1: 1, 3: 2}, "nulls": 1, "negative": -2}
    assert epoch_summary(pa.table({"e": pa.array([], pa.int64())}), "e") == {
        "counts": {},
        "nulls": 0,
        "negative": None,
    }


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=50))
def test_split_by_epoch_partitions_rows(epochs):
    table = pa.table({"e": epochs, "row": list(range(len(epochs)))})
    present = sorted(set(epochs))
    pieces = split_by_epoch(table, "e", present)
    assert len(pieces) == len(present)
    for epoch, piece in zip(present, pieces):
        assert set(piece.column("e").to_pylist()) == {epoch}
    rows = sorted(row for piece in pieces for row in piece.column("row").to_pylist())
    assert rows == list(range(len(epochs)))


def test_split_single_epoch_is_the_block_itself():
    table = pa.table({"e": [2, 2]})
    assert split_by_epoch(table, "e", [2])[0] is table


def test_the_epochs_whose_records_disagree_are_named_with_the_column_and_types():
    schemas = [pa.schema([("_1", pa.int64()), ("_2", pa.int64())]), pa.schema([]),
               pa.schema([("_1", pa.int64()), ("_2", pa.string())]), pa.schema([("_1", pa.int64()), ("_2", pa.int64())])]
    assert epochs_that_disagree(schemas, [0, 1, 3, 2]) == "epochs 0 and 3 disagree on column '_2' (int64 vs string)"
    assert epochs_that_disagree(schemas[:2], [0, 1]) is None
