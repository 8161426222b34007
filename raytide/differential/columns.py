"""Updates as columns: a batch of NumPy columns, one per field of the records, and a ``diff`` column.

A collection's updates travel as lists of ``(record, diff)`` pairs, or, pushed or made by
a vectorised operator, as a column batch ``{"src": [...], "dst": [...], "diff": [...]}``:
row ``k`` is the update ``((src[k], dst[k]), diff[k])`` (a record of one column is its
value alone). Record-by-record operators read such a batch as pairs
(:func:`update_records`); vectorised ones read either form as columns
(:func:`update_columns`), so a graph of a million edges pushed as arrays is never turned
into a million tuples on its way to a columnar loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from raytide.differential.updates import Change
from raytide.errors import RecordError

__all__ = ["DIFF", "checked_update_columns", "is_update_columns", "update_columns", "update_records"]

#: The column of a column batch of updates that holds each row's diff.
DIFF = "diff"


def is_update_columns(batch: Any) -> bool:
    """Whether ``batch`` is a column batch of updates (a dict of columns with a ``diff`` column)."""
    return isinstance(batch, dict) and DIFF in batch


def checked_update_columns(batch: dict, what: str) -> dict[str, np.ndarray]:
    """``batch`` as NumPy columns, checked: at least one record column, equal lengths, integer diffs.

    Raises:
        RecordError: The diff column does not hold integers, no record column, or columns
            of unequal lengths.
    """
    columns = {name: np.asarray(values) for name, values in batch.items()}
    if len(columns) < 2:
        raise RecordError(f"{what}: a column batch of updates needs record columns beside {DIFF!r}, got {sorted(columns)}")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise RecordError(f"{what}: update columns of unequal lengths {lengths}")
    diffs = columns[DIFF]
    if diffs.dtype.kind not in "iu":
        raise RecordError(f"{what}: column {DIFF!r} holds {diffs.dtype} values (first: {diffs[:3].tolist()}); "
                        "a diff is an integer (+1 adds a copy, -1 removes one)")
    return columns


def update_records(batch: Any) -> list[Change]:
    """The updates of a batch as ``(record, diff)`` pairs (a list of pairs is returned as it is)."""
    if not is_update_columns(batch):
        return batch if isinstance(batch, list) else list(batch)
    fields = [np.asarray(values).tolist() for name, values in batch.items() if name != DIFF]
    records = fields[0] if len(fields) == 1 else list(zip(*fields))
    return list(zip(records, np.asarray(batch[DIFF]).tolist()))


def update_columns(batch: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The updates of a batch as columns ``names`` (the records' fields, in order) and ``diff``.

    A column batch's record columns are taken in their order, whatever they are called; a
    list of pairs is converted (each record a tuple of ``len(names)`` fields, or a single
    value when ``names`` has one).

    Raises:
        RecordError: The records do not have ``len(names)`` fields.
    """
    if is_update_columns(batch):
        fields = [values for name, values in batch.items() if name != DIFF]
        if len(fields) != len(names):
            raise RecordError(f"updates of {len(fields)} record columns {[n for n in batch if n != DIFF]} "
                             f"read as {len(names)} columns {list(names)}")
        return {**dict(zip(names, map(np.asarray, fields))), DIFF: np.asarray(batch[DIFF])}
    updates = update_records(batch)
    if not updates:
        return {**{name: np.empty(0, dtype=np.int64) for name in names}, DIFF: np.empty(0, dtype=np.int64)}
    diffs = np.fromiter((diff for _, diff in updates), dtype=np.int64, count=len(updates))
    if len(names) == 1:
        return {names[0]: np.asarray([record for record, _ in updates]), DIFF: diffs}
    records = [record for record, _ in updates]
    wrong = next((record for record in records if not isinstance(record, tuple) or len(record) != len(names)), None)
    if wrong is not None:
        raise RecordError(f"records such as {wrong!r} read as {len(names)} columns {list(names)}: each record must be "
                         f"a tuple of {len(names)} fields")
    return {**{name: np.asarray(field) for name, field in zip(names, zip(*records))}, DIFF: diffs}  # a dtype per field
