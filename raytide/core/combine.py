"""Folding the rows of equal integer keys column by column with NumPy ufuncs (combiners).

A combiner runs twice: before an exchange, on what a replica sends, so that one row per
key leaves it; and after, on what the replicas sent, so that the receiver sees one row
per key. Both fold partial results in whatever order and grouping they arrive, so a
combiner must be associative and commutative. That is checked when the dataflow is
built, against :data:`ASSOCIATIVE` (a ufunc outside it, ``np.subtract`` say, or a Python
function, is refused with the reason): a property of a function cannot be tested on data.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from raytide.core.keyindex import TABLE_ROWS_FACTOR, is_dense, stable_order
from raytide.errors import GraphError

#: The binary ufuncs that are associative and commutative, so that partial results fold in any order.
ASSOCIATIVE: frozenset[np.ufunc] = frozenset({
    np.add, np.multiply, np.minimum, np.maximum, np.fmin, np.fmax, np.logical_and, np.logical_or,
    np.logical_xor, np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.gcd, np.lcm,
})


def check_combiners(ufuncs: Mapping[str, object], where: str) -> None:
    """Refuse a combiner that is not an associative, commutative NumPy ufunc (see :data:`ASSOCIATIVE`).

    Raises:
        GraphError: naming ``where`` (the vertex), the column and the function.
    """
    for column, ufunc in ufuncs.items():
        if not isinstance(ufunc, np.ufunc) or ufunc not in ASSOCIATIVE:
            name = getattr(ufunc, "__name__", repr(ufunc))
            raise GraphError(
                f"{where}: the combiner of column {column!r} is {name}, which is not one of the associative "
                f"and commutative NumPy ufuncs ({', '.join(sorted(u.__name__ for u in ASSOCIATIVE))}); partial "
                "results are folded before and after the exchange in any order, so another function would "
                "give results that depend on how the rows were batched and routed")


def _identity(ufunc: np.ufunc, dtype: np.dtype) -> object | None:
    """The value ``x`` with ``ufunc(x, y) == y`` for every ``y`` of ``dtype``, or None if there is none."""
    if ufunc in (np.minimum, np.fmin):
        return np.iinfo(dtype).max if dtype.kind in "iu" else (np.inf if dtype.kind == "f" else None)
    if ufunc in (np.maximum, np.fmax):
        return np.iinfo(dtype).min if dtype.kind in "iu" else (-np.inf if dtype.kind == "f" else None)
    if ufunc is np.bitwise_and and dtype.kind in "iu":
        return ~dtype.type(0)
    return ufunc.identity


def combine_by_key(keys: np.ndarray, columns: Mapping[str, np.ndarray],
                   ufuncs: Mapping[str, np.ufunc]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One row per distinct key, each column folded with its ufunc: ``(keys sorted, columns)``.

    Rows already one per key in increasing key order (a step that combined them itself)
    are returned as they are: one comparison per row. Other dense keys (see
    :func:`~raytide.core.keyindex.is_dense`) that are not too few for their range (see
    :data:`~raytide.core.keyindex.TABLE_ROWS_FACTOR`) scatter into arrays as long as the key range with
    ``ufunc.at``, which needs no sort; the rest are sorted and folded with
    ``ufunc.reduceat``. All give the same rows.
    """
    if len(keys) < 2 or bool((keys[1:] > keys[:-1]).all()):
        return keys, {name: np.asarray(columns[name]) for name in ufuncs}
    lo, hi = int(keys.min()), int(keys.max())
    dtypes = {name: np.asarray(columns[name]).dtype for name in ufuncs}
    table = is_dense(lo, hi, len(keys)) and hi < TABLE_ROWS_FACTOR * len(keys)
    if table and all(_identity(ufuncs[n], dtypes[n]) is not None for n in ufuncs):
        return _combine_dense(keys, columns, ufuncs, hi)
    order = stable_order(keys)
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], {name: ufuncs[name].reduceat(np.asarray(columns[name])[order], starts)
                             for name in ufuncs}


def _combine_dense(keys: np.ndarray, columns: Mapping[str, np.ndarray], ufuncs: Mapping[str, np.ufunc],
                   hi: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    present = np.zeros(hi + 1, dtype=bool)
    present[keys] = True
    distinct = np.flatnonzero(present).astype(keys.dtype, copy=False)
    out = {}
    for name, ufunc in ufuncs.items():
        values = np.asarray(columns[name])
        if ufunc is np.add and values.dtype == np.float64:  # a sum of floats: bincount, several times faster than add.at
            out[name] = np.bincount(keys, weights=values, minlength=hi + 1)[distinct]
            continue
        folded = np.full(hi + 1, _identity(ufunc, values.dtype), dtype=values.dtype)
        ufunc.at(folded, keys, values)
        out[name] = folded[distinct]
    return distinct, out
