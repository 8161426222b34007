"""Messages on the wire are batches: Python lists, NumPy arrays or Arrow tables, or lazy batches.

Per-record operators see a list of records (Arrow rows become dicts of column name to
value, and maps within them dicts too: Ray Data's convention); vectorised operators
(``map_batches``) see the batch in the format they ask for, converted only when it is
not already in that format. A lazy batch (:class:`~raytide.core.split_text.SplitText`,
the words of a text) becomes its list of records when asked for them.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from raytide.core.split_text import SplitText

if TYPE_CHECKING:
    import pyarrow as pa

BatchFormat = Literal["default", "numpy", "pyarrow", "list"]


def is_arrow(batch: Any) -> bool:
    """Whether ``batch`` is an Arrow table or record batch.

    pyarrow is imported only where Arrow data exists (it adds about 80 ms to every
    actor's start-up): an Arrow batch cannot exist before its module was imported.
    """
    arrow = sys.modules.get("pyarrow")
    return arrow is not None and isinstance(batch, (arrow.Table, arrow.RecordBatch))


def batch_length(batch: Any) -> int:
    """Number of records in a batch of any supported kind."""
    if is_arrow(batch):
        return batch.num_rows
    if isinstance(batch, dict):
        return len(next(iter(batch.values()))) if batch else 0
    return len(batch)  # a list, an array or a lazy batch


def to_records(batch: Any) -> list:
    """The batch as a list of records; Arrow rows and column dicts become dicts per row."""
    if isinstance(batch, list):
        return batch
    if isinstance(batch, SplitText):
        return batch.records()
    if is_arrow(batch):
        return batch.to_pylist(maps_as_pydicts="strict")
    if isinstance(batch, dict):
        columns = list(batch)
        return [dict(zip(columns, row)) for row in zip(*(batch[c] for c in columns))]
    if isinstance(batch, np.ndarray):
        return batch.tolist()
    return list(batch)


#: What a batch may be, for error messages.
BATCH_KINDS = "a list of records, a NumPy array, a dict of equal-length column arrays or an Arrow table"


def not_a_batch(value: Any) -> str | None:
    """Why ``value`` is not a batch (a short description of what it is), or None if it is one.

    A string is a sequence, but as a batch its characters would become records: it is
    refused, like None, tuples, generators and pandas frames (whose ``list()`` gives
    the column names).
    """
    if isinstance(value, (list, np.ndarray, SplitText)) or is_arrow(value):
        return None
    if isinstance(value, dict):
        if not all(hasattr(column, "__len__") and not isinstance(column, (str, bytes)) for column in value.values()):
            return "a dict whose values are not all columns (arrays or lists)"
        lengths = sorted({len(column) for column in value.values()})
        return f"a dict of columns of different lengths {lengths}" if len(lengths) > 1 else None
    return "None" if value is None else f"a {type(value).__module__}.{type(value).__qualname__}"


def checked_batch(value: Any, what: str) -> Any:
    """``value`` if it is a batch; else a TypeError saying what ``what`` gave and what a batch is."""
    wrong = not_a_batch(value)
    if wrong is not None:
        raise TypeError(f"{what} returned {wrong}; a batch is {BATCH_KINDS}")
    return value


def eager(batch: Any) -> Any:
    """A lazy batch as its list of records; any other batch as it is."""
    return batch.records() if isinstance(batch, SplitText) else batch


def to_format(batch: Any, batch_format: BatchFormat) -> Any:
    """Convert a batch to what a vectorised operator asked for.

    ``"default"`` leaves columnar batches as they are and turns lists into NumPy
    arrays (lists of dicts into a dict of column arrays); ``"numpy"`` always gives an
    array or a dict of arrays; ``"pyarrow"`` an Arrow table; ``"list"`` records.
    """
    batch = eager(batch)
    if batch_format == "list":
        return to_records(batch)
    if batch_format == "pyarrow":
        return _to_arrow(batch)
    if batch_format == "numpy" or isinstance(batch, list):
        return _to_numpy(batch)
    return batch


def _to_arrow(batch: Any) -> pa.Table:
    import pyarrow as pa

    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, dict):
        return pa.table(batch)
    records = to_records(batch)
    if records and isinstance(records[0], dict):
        return pa.Table.from_pylist(records)
    return pa.table({"value": records})


def _to_numpy(batch: Any) -> Any:
    if isinstance(batch, np.ndarray):
        return batch
    if is_arrow(batch):
        return {name: column.to_numpy(zero_copy_only=False) for name, column in zip(batch.column_names, batch.columns)}
    if isinstance(batch, dict):
        return {k: np.asarray(v) for k, v in batch.items()}
    if batch and isinstance(batch[0], dict):
        columns = list(batch[0])
        return {c: np.asarray([r[c] for r in batch]) for c in columns}
    return np.asarray(batch)


def concat_batches(batches: list[Any], batch_format: BatchFormat) -> Any:
    """``batches`` as one batch in ``batch_format`` (``"list"``, ``"numpy"`` or ``"pyarrow"``).

    NumPy arrays are concatenated along their first axis, dicts of arrays column by column
    (all with the same columns), Arrow tables with ``pa.concat_tables``; no batches give the
    format's empty batch.

    Raises:
        ValueError: the batches do not make one batch of that format (arrays and dicts
            mixed, different columns or shapes), saying what they were.
    """
    if batch_format == "list":
        return [record for batch in batches for record in to_records(batch)]
    converted = [to_format(batch, batch_format) for batch in batches] or [to_format([], batch_format)]
    if len(converted) == 1:
        return converted[0]
    try:
        if batch_format == "pyarrow":
            import pyarrow as pa

            return pa.concat_tables(converted)
        if all(isinstance(c, np.ndarray) for c in converted):
            return np.concatenate(converted)
        if all(isinstance(c, dict) and c.keys() == converted[0].keys() for c in converted):
            return {name: np.concatenate([c[name] for c in converted]) for name in converted[0]}
        raise ValueError("arrays and dicts of columns mixed, or dicts with different columns")
    except ValueError as error:  # pyarrow's ArrowInvalid is a ValueError too
        kinds = sorted({_describe(c) for c in converted})
        raise ValueError(f"{len(batches)} batches do not make one {batch_format!r} batch ({'; '.join(kinds)}): "
                         f"{error}") from error


def _describe(batch: Any) -> str:
    if isinstance(batch, np.ndarray):
        return f"{batch.dtype} array with rows of shape {batch.shape[1:]}"
    if isinstance(batch, dict):
        return f"columns {sorted(batch)}"
    return f"table of {getattr(batch, 'schema', '?')}".replace("\n", ", ")


def split_batch(batch: Any, size: int) -> list[Any]:
    """Cut a batch into consecutive pieces of at most ``size`` records (no copy for Arrow)."""
    batch = eager(batch)
    n = batch_length(batch)
    if n <= size:
        return [batch] if n else []
    if is_arrow(batch):
        return [batch.slice(i, size) for i in range(0, n, size)]
    if isinstance(batch, dict):
        return [{k: v[i : i + size] for k, v in batch.items()} for i in range(0, n, size)]
    return [batch[i : i + size] for i in range(0, n, size)]
