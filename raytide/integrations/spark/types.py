"""Spark column types at the border of the dataflow: what cannot cross, found from the schema alone.

Pure (no Ray, no Spark import), so the checks run before any Spark job or Ray task. They
read Spark's JSON form of a schema (``df._jdf.schema().json()``, ``StructType.json()``):
unlike PySpark's ``df.schema``, which fails on calendar intervals ("Unable to parse
datatype. interval"), it describes every column Spark can hold. The mapping of the types
that do cross is documented in ``docs/spark-types.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from raytide.errors import SparkIntegrationError

#: Spark's largest decimal precision: decimals inferred from records get it (see :func:`widen_decimals`).
MAX_DECIMAL_PRECISION = 38

_CALENDAR = "calendar interval"
_YEAR_MONTH = "year-month interval"
_FIXED_STRING = "fixed-length string"

#: Why each kind of unsupported type cannot cross, and what to do instead.
_REMEDIES = {
    _CALENDAR: "Spark cannot write calendar intervals to Arrow; cast the column to string, "
    "or compute a day-time interval (interval day to second) instead",
    _YEAR_MONTH: "pyarrow cannot read Arrow's year-month intervals; cast the column to string, "
    "or to its number of months",
    _FIXED_STRING: "Arrow has no fixed-length strings; use string",
}


def unsupported_columns(schema_json: str) -> list[tuple[str, str, str]]:
    """Every column, nested field, array element or map key / value whose Spark type cannot cross.

    Args:
        schema_json: A Spark schema (a ``struct``) in Spark's JSON form.

    Returns:
        ``(path, Spark type, kind)`` per offending leaf, in schema order: ``path`` is
        dotted (``s.i`` for field ``i`` of struct column ``s``; ``.element`` for an
        array's elements, ``.key`` / ``.value`` for a map's), ``kind`` a key of the
        remedies (calendar interval, year-month interval, fixed-length string).
    """
    return [(path, name, kind) for path, name in _leaves(json.loads(schema_json), "") if (kind := _kind(name))]


def check_schema(schema_json: str, what: str) -> None:
    """Raise unless every column of ``what`` can cross between Spark and the dataflow.

    Args:
        schema_json: A Spark schema in Spark's JSON form.
        what: What has this schema, for the message ("the DataFrame of epoch 2").

    Raises:
        SparkIntegrationError: naming each offending column (dotted path), its Spark
            type and what to do instead.
    """
    found = unsupported_columns(schema_json)
    if found:
        listed = "; ".join(f"column {path!r} has Spark type {name} ({_REMEDIES[kind]})" for path, name, kind in found)
        raise SparkIntegrationError(f"{what} cannot cross between Spark and the dataflow: {listed}")


def _leaves(typ: Any, path: str) -> Iterator[tuple[str, str]]:
    """``(dotted path, Spark type name)`` of every atomic type in a JSON Spark type."""
    if isinstance(typ, str):
        yield path, typ
        return
    kind = typ["type"]
    if kind == "struct":
        for field in typ["fields"]:
            yield from _leaves(field["type"], _join(path, field["name"]))
    elif kind == "array":
        yield from _leaves(typ["elementType"], _join(path, "element"))
    elif kind == "map":
        yield from _leaves(typ["keyType"], _join(path, "key"))
        yield from _leaves(typ["valueType"], _join(path, "value"))
    elif kind == "udt":  # a user-defined type crosses as its SQL type
        yield from _leaves(typ["sqlType"], path)
    else:
        yield path, kind


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(name: str) -> str | None:
    """The kind of unsupported type a JSON Spark type name is, or None if it crosses."""
    if name == "interval":
        return _CALENDAR
    if name.startswith("interval ") and name.split()[1] in ("year", "month"):
        return _YEAR_MONTH
    if name.startswith(("char(", "varchar(")):
        return _FIXED_STRING
    return None


def widen_decimals(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every (nested) ``decimal128(p, s)`` widened to ``decimal128(38, s)``.

    Arrow infers a decimal column's precision from the values at hand (``12345.0123456789``
    gives ``decimal(15, 10)``), so a ``decimal(38, 10)`` column that went through records
    would come back narrowed, and another epoch's larger values would no longer fit.
    Spark's own inference from Python decimals also gives precision 38. The scale, which
    the values carry, is kept, so every inferred value still fits.

    Args:
        schema: An Arrow schema.

    Returns:
        The widened schema (the same one if it has no decimals).
    """
    return pa.schema([field.with_type(_widened(field.type)) for field in schema])


def _widened(typ: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal128(typ):
        return pa.decimal128(MAX_DECIMAL_PRECISION, typ.scale)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return pa.list_(typ.value_field.with_type(_widened(typ.value_type)))
    if pa.types.is_map(typ):
        return pa.map_(typ.key_field.with_type(_widened(typ.key_type)), typ.item_field.with_type(_widened(typ.item_type)))
    if pa.types.is_struct(typ):
        return pa.struct([typ.field(i).with_type(_widened(typ.field(i).type)) for i in range(typ.num_fields)])
    return typ
