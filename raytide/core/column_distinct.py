"""``distinct`` of a collection whose updates are column batches of integer fields: the pure core.

The record-by-record ``distinct`` (:class:`~raytide.differential.Reduction`) takes a Python
call per update and a trace of dicts; this one keeps the distinct rows held and their copies
as NumPy arrays, the rows sorted (a structured array, compared field by field), and takes an
epoch's changes at once: summed per row (``np.unique``), their rows looked up by
``searchsorted``, and a row taken back where its copies fall to zero, added where they rise
from it. It runs at top level, once per epoch, when the epoch is complete (epochs complete
in order, so no time is kept per row), and a row whose copies reach zero leaves, so the
state follows the collection, not its history.

>>> import numpy as np
>>> rows = DistinctRows(("a", "b"))
>>> out = rows.apply({"a": np.array([1, 1, 2]), "b": np.array([5, 5, 6]), "diff": np.array([1, 1, 1])})
>>> {name: values.tolist() for name, values in out.items()}
{'a': [1, 2], 'b': [5, 6], 'diff': [1, 1]}
>>> out = rows.apply({"a": np.array([1]), "b": np.array([5]), "diff": np.array([-1])})  # one copy of two left
>>> out is None, rows.held
(True, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from raytide.core.arrangement import Rows
from raytide.core.step import keys_moving
from raytide.differential import DIFF
from raytide.errors import RecordError

__all__ = ["DistinctRows"]


class DistinctRows:
    """The distinct rows of fields ``names`` held, sorted, and their copies; see the module."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.dtype = np.dtype([(name, np.int64) for name in self.names])
        self.sorted = np.zeros(0, dtype=self.dtype)
        self.copies = np.zeros(0, dtype=np.int64)

    @property
    def held(self) -> int:
        """How many distinct rows are held."""
        return len(self.sorted)

    def _packed(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """The columns as one structured array of rows (fields of integers, refused otherwise)."""
        packed = np.zeros(len(columns[DIFF]), dtype=self.dtype)
        for name in self.names:
            values = np.asarray(columns[name])
            if values.dtype.kind not in "iub":
                raise RecordError(f"column {name!r} holds {values.dtype} values (first: {values[:3].tolist()}): "
                                  "distinct by columns takes integer columns")
            packed[name] = values
        return packed

    def apply(self, changes: Mapping[str, np.ndarray]) -> Rows | None:
        """An epoch's changes (columns ``names`` and ``diff``) applied: the output's changes, each
        row taken back (``-1``) whose copies fell to zero and added (``+1``) that came (None: none).

        Raises:
            RecordError: A row would have fewer than zero copies.
        """
        rows, inverse = np.unique(self._packed(changes), return_inverse=True)
        diffs = np.zeros(len(rows), dtype=np.int64)
        np.add.at(diffs, inverse.reshape(-1), np.asarray(changes[DIFF], dtype=np.int64))
        at = np.searchsorted(self.sorted, rows)
        found = at < len(self.sorted)
        found[found] = self.sorted[at[found]] == rows[found]
        old = np.zeros(len(rows), dtype=np.int64)
        old[found] = self.copies[at[found]]
        new = old + diffs
        if (new < 0).any():
            bad = int(np.flatnonzero(new < 0)[0])
            raise RecordError(f"row {rows[bad].tolist()!r} would have {new[bad]} copies (more removed than added)")
        self.copies[at[found]] = new[found]
        fresh = ~found & (new > 0)
        self._insert(at[fresh], rows[fresh], new[fresh])
        gone, come = (old > 0) & (new == 0), (old == 0) & (new > 0)
        if not gone.any() and not come.any():
            return None
        out = np.concatenate([rows[gone], rows[come]])
        return {**{name: out[name] for name in self.names},
                DIFF: np.concatenate([-np.ones(int(gone.sum()), dtype=np.int64), np.ones(int(come.sum()), dtype=np.int64)])}

    def _insert(self, at: np.ndarray, rows: np.ndarray, copies: np.ndarray) -> None:
        """New rows in their sorted places (``at``: where ``searchsorted`` found them), rows left
        with no copies dropped."""
        self.sorted, self.copies = np.insert(self.sorted, at, rows), np.insert(self.copies, at, copies)
        if (self.copies == 0).any():
            live = self.copies > 0
            self.sorted, self.copies = self.sorted[live], self.copies[live]

    def rows(self, keep: Callable[[np.ndarray], np.ndarray] | None = None) -> Rows:
        """The rows held and their copies as columns (only those ``keep`` selects, given the first column)."""
        chosen = slice(None) if keep is None else keep(self.sorted[self.names[0]])
        return {**{name: self.sorted[name][chosen] for name in self.names}, "copies": self.copies[chosen]}

    def take(self, moving: Callable[[Hashable], bool]) -> Rows:
        """Remove and return the rows whose first field (the exchange key) ``moving`` selects."""
        going = keys_moving(self.sorted[self.names[0]], moving)
        taken = self.rows(lambda _: going)
        self.sorted, self.copies = self.sorted[~going], self.copies[~going]
        return taken

    def put(self, held: Mapping[str, np.ndarray]) -> None:
        """Rows another replica held (none of them held here), as :meth:`rows` gives them."""
        rows = self._packed({**held, DIFF: held["copies"]})
        order = np.argsort(np.concatenate([self.sorted, rows]), kind="stable")
        self.sorted = np.concatenate([self.sorted, rows])[order]
        self.copies = np.concatenate([self.copies, np.asarray(held["copies"], dtype=np.int64)])[order]
