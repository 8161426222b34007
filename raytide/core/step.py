"""What a columnar step function sees (:class:`Step`), and the checks on what it gets and gives.

The step of a :class:`~raytide.core.columnar.KeyedColumns` vertex runs once per replica
and timestamp. Everything it reads is NumPy: the updates of the time folded to one row
per key, the state columns (one row per key this replica holds, indexed by slot), the
arrangements. Bad input fails with a ``TypeError`` / ``ValueError`` that says what was
wrong; the runtime wraps it in :class:`~raytide.errors.UserCodeError` naming the vertex,
the replica and the timestamp.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from raytide.core.arrangement import Arrangement, Rows
from raytide.core.batches import is_arrow, to_format
from raytide.core.keyindex import KeyIndex
from raytide.progress.timestamps import Timestamp


class Step:
    """One (replica, timestamp) of a columnar vertex.

    Attributes:
        time: the timestamp.
        iteration: the round of the loop, from 0 at each epoch's first (0 outside a loop).
        keys, slots: the keys of this time's updates (distinct and sorted when the vertex
            has combiners) and their slots in :attr:`state`.
        values: the updates' value columns, row for row with ``keys``.
        state: the state columns, one row per key held (``state[c][slots]`` are the updated
            keys' rows); change values in place, never lengths or dtypes.
        added: per arranged input port, ``(slots, rows)`` of the rows it got at this time.
        quiet: in a gated loop (``iterate_columns``), whether no replica sent any row to this
            round (only :meth:`again` kept the loop going): every row of the rounds before
            has been taken, everywhere. A barrier: a step holding work back until messages
            of one kind have died out waits for it, asking ``again()`` meanwhile.
    """

    def __init__(self, time: Timestamp, keys: np.ndarray, slots: np.ndarray, values: Rows,
                 state: dict[str, np.ndarray], index: KeyIndex, arrangements: Mapping[int, Arrangement],
                 added: Mapping[int, tuple[np.ndarray, Rows]], iteration: int = 0, quiet: bool = False) -> None:
        self.time, self.keys, self.slots, self.values, self.state = time, keys, slots, values, state
        self.added, self._index, self._arrangements = added, index, arrangements
        self.iteration, self.quiet = iteration, quiet
        self.wants_again = False

    @property
    def ids(self) -> np.ndarray:
        """The key of every slot this replica holds (``ids[slot]``)."""
        return self._index.ids

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The slots of ``keys`` in :attr:`state`, -1 for keys this replica does not hold."""
        return self._index.lookup(np.asarray(keys))

    def arrangement(self, port: int = 0) -> Arrangement:
        """The rows arranged from input ``port`` so far (this time's included)."""
        return self._arrangements[port]

    def again(self) -> None:
        """Run the step at the next iteration too, even if no update arrives for this replica then."""
        if not self.time.counters:
            raise ValueError("again() asks for the next iteration, but the vertex is not inside a loop")
        self.wants_again = True


def columns_of(message: Any, what: str) -> Rows:
    """A batch as a dict of 1-D NumPy columns (Arrow tables and lists of dict records converted)."""
    batch = to_format(message, "numpy") if is_arrow(message) or isinstance(message, list) else message
    if not isinstance(batch, dict):
        raise TypeError(f"{what} got a {type(message).__name__}; a columnar vertex takes batches of named "
                        "columns (a dict of arrays, an Arrow table or a list of dict records)")
    columns = {name: np.asarray(values) for name, values in batch.items()}
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{what} got columns of unequal lengths {lengths}")
    return columns


def integer_keys(rows: Mapping[str, np.ndarray], column: str, what: str) -> np.ndarray:
    """Column ``column`` of ``rows``, which must exist and hold integers."""
    if column not in rows:
        raise ValueError(f"{what}: no key column {column!r} (columns: {sorted(rows)})")
    keys = rows[column]
    if keys.dtype.kind not in "iu":
        sample = keys[:3].tolist()
        raise TypeError(f"{what}: key column {column!r} holds {keys.dtype} values (first: {sample}); keys must be "
                        "integers (map other keys to integer ids first)")
    return keys


def checked_outputs(result: Any, outputs: int, first_port: int = 0, what: str = "the step") -> list[Rows | None]:
    """``what``'s result as one checked batch (or None) per output port, from ``first_port``."""
    parts = [result] if outputs == 1 else result
    if outputs > 1 and (not isinstance(result, tuple) or len(result) != outputs):
        raise TypeError(f"{what} returned a {type(result).__name__}; with {outputs} outputs it must return a "
                        f"tuple of {outputs} batches (dicts of columns, or None)")
    return [None if part is None else _checked_batch(part, port, what) for port, part in enumerate(parts, first_port)]


def _checked_batch(batch: Any, port: int, what: str) -> Rows:
    if not isinstance(batch, dict):
        raise TypeError(f"{what} returned a {type(batch).__name__} for output {port}; "
                        "it must be a dict of NumPy columns or None")
    columns = {name: np.asarray(values) for name, values in batch.items()}
    shapes = {name: values.shape for name, values in columns.items()}
    if any(len(shape) != 1 for shape in shapes.values()) or len({shape for shape in shapes.values()}) > 1:
        raise ValueError(f"{what} returned columns of unequal lengths (or not 1-D) for output {port}: {shapes}")
    return columns


def keys_moving(keys: np.ndarray, moving: Callable[[Hashable], bool]) -> np.ndarray:
    """A mask of the keys ``moving`` selects; it is asked once per distinct key."""
    if not len(keys):
        return np.zeros(0, dtype=bool)
    distinct, inverse = np.unique(keys, return_inverse=True)
    return np.fromiter(map(moving, distinct.tolist()), dtype=bool, count=len(distinct))[inverse]
