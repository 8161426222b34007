"""Records <-> Arrow tables: the pure half of the Spark integration (no Ray, no Spark import).

The dataflow hands Python records to vertices and Spark moves Arrow tables, so
every block that crosses the boundary is converted here, in both directions:

* :func:`table_to_records` gives Ray Data's row convention: one ``dict`` per
  row, column name to Python value.
* :func:`records_to_table` accepts the three record shapes a vertex emits:
  tuples become columns ``_1, _2, ...`` (Spark's names for tuple fields),
  dicts become named columns, anything else is a scalar in one column
  ``value``. Column types are inferred by Arrow, or taken from an explicit
  schema.

Supported column types are the ones that survive Spark -> Arrow -> records ->
Arrow -> Spark: integers, floats, strings, booleans, timestamps, nulls and
(nested) lists, plus dates, decimals, bytes and structs (dict values), which
Spark represents too. Anything else (an arbitrary object, a column mixing int
and str, an unsigned or out-of-range integer, a time of day) raises
:class:`~raytide.errors.SparkIntegrationError` naming the vertex, the epoch and
the column.

The module also holds the Arrow-level helpers the Spark bridge runs inside Ray
tasks: schema unification, Spark-compatible type normalisation, conformance of
a block to a target schema and splitting a block by an epoch column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raytide.errors import SparkIntegrationError

#: Name of the single column that holds scalar records.
SCALAR_COLUMN = "value"

_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    OverflowError,
    TypeError,
    ValueError,
)

_TUPLE = "tuple"
_DICT = "dict"
_SCALAR = "scalar"


# --------------------------------------------------------------------------- records -> Arrow


def table_to_records(table: pa.Table) -> list[dict[str, Any]]:
    """Turn an Arrow table into rows, Ray Data's convention: one dict per row.

    Args:
        table: Any Arrow table.

    Returns:
        One ``{column name: Python value}`` dict per row, in table order.
        Timestamps with a time zone become aware ``datetime`` objects, lists
        become Python lists, maps ``dict`` objects and nulls ``None``.
    """
    return table.to_pylist(maps_as_pydicts="strict")


def records_to_table(
    records: Sequence[Any],
    *,
    vertex: str,
    epoch: int | None,
    schema: pa.Schema | None = None,
) -> pa.Table:
    """Turn the records a vertex produced into one Arrow table.

    Args:
        records: Tuples (columns ``_1, _2, ...``), dicts (named columns; a key
            missing from a record is null there) or scalars (one column
            ``value``). All records must have the same shape.
        vertex: Name of the vertex that produced the records (for errors).
        epoch: Epoch the records belong to, if known (for errors).
        schema: Optional target schema. Columns are then built with exactly
            these types; tuple fields map to the schema's fields by position
            and scalars need a one-field schema.

    Returns:
        The table. An empty ``records`` gives ``schema.empty_table()`` when a
        schema is given, else a table with no columns and no rows (which
        :func:`raytide.integrations.spark.tables_to_spark` skips).

    Raises:
        SparkIntegrationError: a record shape is inconsistent or a column
            holds values Arrow or Spark cannot represent; the message names
            the vertex, the epoch and the column.
    """
    where = _where(vertex, epoch)
    if len(records) == 0:
        return schema.empty_table() if schema is not None else pa.table({})
    shape = _shape_of(records, where)
    names, columns = _columns(records, shape, where, schema)
    types = _target_types(names, shape, where, schema)
    arrays = [_to_array(name, values, typ, where) for name, values, typ in zip(names, columns, types)]
    if schema is not None:
        _check_not_null(arrays, schema, where)
        return pa.Table.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, names=names)


def _check_not_null(arrays: Sequence[pa.Array], schema: pa.Schema, where: str) -> None:
    for array, field in zip(arrays, schema):
        if not field.nullable and array.null_count:
            raise SparkIntegrationError(
                f"{where}: column {field.name!r} is not nullable but has {array.null_count} null(s)"
            )


def _where(vertex: str, epoch: int | None) -> str:
    at = f"epoch {epoch}" if epoch is not None else "an unknown epoch"
    return f"vertex {vertex!r}, {at}"


def _shape_of(records: Sequence[Any], where: str) -> str:
    """The common shape of all records: tuple, dict or scalar."""
    first = _kind(records[0])
    for index, record in enumerate(records):
        kind = _kind(record)
        if kind != first:
            raise SparkIntegrationError(
                f"{where}: record {index} is a {kind} but record 0 is a {first}; "
                "all records of one output must have the same shape"
            )
    return first


def _kind(record: Any) -> str:
    if isinstance(record, tuple):
        return _TUPLE
    if isinstance(record, Mapping):
        return _DICT
    return _SCALAR


def _columns(
    records: Sequence[Any], shape: str, where: str, schema: pa.Schema | None
) -> tuple[list[str], list[list[Any]]]:
    """Column names and per-column value lists for records of one shape."""
    if shape == _TUPLE:
        return _tuple_columns(records, where, schema)
    if shape == _DICT:
        return _dict_columns(records, where, schema)
    name = schema.names[0] if schema is not None and len(schema) == 1 else SCALAR_COLUMN
    return [name], [list(records)]


def _tuple_columns(
    records: Sequence[tuple[Any, ...]], where: str, schema: pa.Schema | None
) -> tuple[list[str], list[list[Any]]]:
    width = len(records[0])
    for index, record in enumerate(records):
        if len(record) != width:
            raise SparkIntegrationError(
                f"{where}: record {index} has {len(record)} fields but record 0 has {width}"
            )
    names = list(schema.names) if schema is not None else [f"_{i + 1}" for i in range(width)]
    if len(names) != width:
        raise SparkIntegrationError(f"{where}: records have {width} fields but the schema has {len(names)}")
    columns = [list(column) for column in zip(*records)] if width else []
    return names, columns


def _dict_columns(
    records: Sequence[Mapping[str, Any]], where: str, schema: pa.Schema | None
) -> tuple[list[str], list[list[Any]]]:
    keys: dict[str, None] = {}
    for record in records:
        keys.update(dict.fromkeys(record))
    for key in keys:
        if not isinstance(key, str):
            raise SparkIntegrationError(f"{where}: column names must be str, got {key!r}")
    if schema is not None:
        extra = [key for key in keys if key not in schema.names]
        if extra:
            raise SparkIntegrationError(f"{where}: column {extra[0]!r} is not in the schema {schema.names}")
        names = list(schema.names)
    else:
        names = list(keys)
    return names, [[record.get(name) for record in records] for name in names]


def _target_types(
    names: list[str], shape: str, where: str, schema: pa.Schema | None
) -> list[pa.DataType | None]:
    if schema is None:
        return [None] * len(names)
    if shape == _SCALAR and len(schema) != 1:
        raise SparkIntegrationError(f"{where}: scalar records need a one-column schema, got {schema.names}")
    return [schema.field(name).type for name in names]


def _to_array(name: str, values: list[Any], typ: pa.DataType | None, where: str) -> pa.Array:
    """One column as an Arrow array, with an error that says what went wrong where."""
    try:
        array = pa.array(values, type=typ, from_pandas=False)
    except _CONVERSION_ERRORS as exc:
        raise SparkIntegrationError(f"{where}: column {name!r}: {_describe(values)} ({exc})") from exc
    problem = unsupported_type(array.type)
    if problem is not None:
        raise SparkIntegrationError(f"{where}: column {name!r}: {problem} is not supported by Spark")
    return array


def _describe(values: Iterable[Any]) -> str:
    kinds = sorted({type(value).__name__ for value in values if value is not None})
    if len(kinds) > 1:
        return "values mix the types " + ", ".join(kinds)
    if kinds:
        return f"values of type {kinds[0]} cannot be converted"
    return "values cannot be converted"


# --------------------------------------------------------------------------- type rules


def unsupported_type(typ: pa.DataType) -> str | None:
    """Say why an Arrow type cannot cross to Spark, or ``None`` if it can.

    Args:
        typ: An Arrow data type, possibly nested.

    Returns:
        A short description of the offending (possibly inner) type, or None.
    """
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return unsupported_type(typ.value_type)
    if pa.types.is_map(typ):
        return unsupported_type(typ.key_type) or unsupported_type(typ.item_type)
    if pa.types.is_struct(typ):
        for index in range(typ.num_fields):
            problem = unsupported_type(typ.field(index).type)
            if problem is not None:
                return problem
        return None
    if _is_plain_supported(typ):
        return None
    return f"Arrow type {typ}"


def _is_plain_supported(typ: pa.DataType) -> bool:
    checks = (
        pa.types.is_null,
        pa.types.is_boolean,
        pa.types.is_signed_integer,
        pa.types.is_float32,
        pa.types.is_float64,
        pa.types.is_string,
        pa.types.is_large_string,
        pa.types.is_binary,
        pa.types.is_large_binary,
        pa.types.is_timestamp,
        pa.types.is_date,
        pa.types.is_decimal128,
        pa.types.is_duration,
    )
    return any(check(typ) for check in checks)


def spark_compatible_type(typ: pa.DataType) -> pa.DataType:
    """The Arrow type Spark's Arrow reader accepts for ``typ`` (same values).

    Spark reads timestamps only in microseconds and has no large (64-bit
    offset) variants or 64-bit dates, so those are mapped to their plain
    counterparts; everything else is returned unchanged.

    Args:
        typ: A supported Arrow type (see :func:`unsupported_type`).

    Returns:
        The normalised type.
    """
    if pa.types.is_timestamp(typ):
        return pa.timestamp("us", tz=typ.tz)
    if pa.types.is_duration(typ):
        return pa.duration("us")
    if pa.types.is_large_string(typ):
        return pa.string()
    if pa.types.is_large_binary(typ):
        return pa.binary()
    if pa.types.is_date64(typ):
        return pa.date32()
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return pa.list_(spark_compatible_type(typ.value_type))
    if pa.types.is_map(typ):
        key, item = typ.key_field, typ.item_field
        return pa.map_(
            key.with_type(spark_compatible_type(key.type)), item.with_type(spark_compatible_type(item.type))
        )
    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        return pa.struct([f.with_type(spark_compatible_type(f.type)) for f in fields])
    return typ


def unify_schemas(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """One Spark-compatible schema that every given block can be cast to.

    Schemas with no fields (the tables of empty record lists) are ignored.
    Columns are ordered by first appearance; a column missing from some
    blocks, or null-typed in some, becomes nullable; numeric types are
    promoted (``int32`` + ``int64`` -> ``int64``, ``int64`` + ``double`` ->
    ``double``). Schema metadata is dropped.

    Args:
        schemas: Block schemas.

    Returns:
        The unified schema (empty if every input was empty).

    Raises:
        SparkIntegrationError: two blocks disagree on a column's type in a way
            no promotion resolves (for example int and string).
    """
    present = [_spark_schema(schema) for schema in schemas if len(schema) > 0]
    if not present:
        return pa.schema([])
    try:
        unified = pa.unify_schemas(present, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SparkIntegrationError(f"output blocks have incompatible schemas: {exc}") from exc
    return pa.schema([_nullable_if_partial(field, present) for field in unified])


def epochs_that_disagree(schemas: Sequence[pa.Schema], epochs: Sequence[int]) -> str | None:
    """Which epochs' blocks (``schemas[i]`` is of epoch ``epochs[i]``) cannot be unified, and
    on which column: the earliest epoch whose schema does not unify with an earlier one's,
    said as ``"epochs 0 and 3 disagree on column '_2' (int64 vs string)"``; None if all unify."""
    seen: list[tuple[int, pa.Schema]] = []
    for epoch, schema in sorted(zip(epochs, schemas), key=lambda pair: pair[0]):
        if len(schema) == 0 or any(schema.equals(other) for _, other in seen):
            continue
        for before, other in seen:
            clash = next((name for name in schema.names if name in other.names
                          and not _unifies(other.field(name), schema.field(name))), None)
            if clash is not None:
                return (f"epochs {before} and {epoch} disagree on column {clash!r} "
                        f"({other.field(clash).type} vs {schema.field(clash).type})")
        seen.append((epoch, schema))
    return None


def _unifies(a: pa.Field, b: pa.Field) -> bool:
    try:
        unify_schemas([pa.schema([a]), pa.schema([b])])
    except SparkIntegrationError:
        return False
    return True


def _spark_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_type(spark_compatible_type(field.type)) for field in schema])


def _nullable_if_partial(field: pa.Field, schemas: Sequence[pa.Schema]) -> pa.Field:
    everywhere = all(field.name in schema.names for schema in schemas)
    nullable = field.nullable or not everywhere or pa.types.is_null(field.type)
    return field.with_nullable(nullable)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a block to ``schema``: reorder columns, add missing ones as nulls.

    Args:
        table: A block whose columns are a subset of ``schema``'s.
        schema: The target (usually from :func:`unify_schemas`).

    Returns:
        ``table`` itself when it already has the schema, else a new table.
    """
    if table.schema.remove_metadata().equals(schema):
        return table
    columns = [_conform_column(table, field) for field in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _conform_column(table: pa.Table, field: pa.Field) -> pa.ChunkedArray | pa.Array:
    if field.name not in table.column_names:
        return pa.nulls(table.num_rows, type=field.type)
    return table.column(field.name).cast(field.type)


def with_constant_column(table: pa.Table, name: str, value: int) -> pa.Table:
    """Append a non-null ``int64`` column holding ``value`` in every row.

    Args:
        table: Any table.
        name: Name of the new column.
        value: The constant (an epoch).

    Returns:
        A new table with the column appended last.
    """
    column = pa.array([value] * table.num_rows, type=pa.int64())
    return table.append_column(pa.field(name, pa.int64(), nullable=False), column)


# --------------------------------------------------------------------------- epochs from a column


def epoch_summary(table: pa.Table, column: str) -> dict[str, Any]:
    """Row count per epoch value of a block, and what is wrong with the column.

    Args:
        table: A block with an integer column ``column``.
        column: The epoch column.

    Returns:
        ``{"counts": {epoch: rows}, "nulls": int, "negative": int | None}``;
        ``negative`` is one negative value found, if any. Epochs are sorted.
    """
    values = table.column(column)
    nulls = values.null_count
    counts = pc.value_counts(values.drop_null()) if len(values) > nulls else None
    by_epoch = {}
    if counts is not None:
        for item in counts.to_pylist():
            by_epoch[int(item["values"])] = int(item["counts"])
    negative = next((epoch for epoch in sorted(by_epoch) if epoch < 0), None)
    return {"counts": dict(sorted(by_epoch.items())), "nulls": nulls, "negative": negative}


def split_by_epoch(table: pa.Table, column: str, epochs: Sequence[int]) -> list[pa.Table]:
    """Split a block into one table per epoch, in the order of ``epochs``.

    Args:
        table: A block whose ``column`` values are all in ``epochs``.
        column: The epoch column.
        epochs: The epochs present in the block, in the order wanted.

    Returns:
        ``[rows with epoch e for e in epochs]``: the block itself when it
        holds one epoch only (no copy), else slices of one sorted copy.
    """
    if len(epochs) == 1:
        return [table]
    ordered = table.take(pc.sort_indices(table, sort_keys=[(column, "ascending")]))
    counts = {int(item["values"]): int(item["counts"]) for item in pc.value_counts(ordered.column(column)).to_pylist()}
    offsets, start = {}, 0
    for epoch in sorted(counts):
        offsets[epoch] = start
        start += counts[epoch]
    return [ordered.slice(offsets[epoch], counts[epoch]) if epoch in counts else table.slice(0, 0) for epoch in epochs]
