"""A join and a linear sum of collections whose updates are column batches: the pure cores.

The record-by-record cores (:class:`~raytide.differential.Join`, :class:`~raytide.differential.Sums`)
take a Python call per update; these take an epoch's updates as NumPy columns (record
columns and ``diff``) and keep their state columnar, so an epoch costs a handful of NumPy
calls over its changes whatever their number. Both run at top level, once per epoch, when
the epoch is complete: epochs complete in order, so everything held is of earlier epochs
and a time need not be kept per row.

**Join.** A collection's rows arranged by a key column are read by every join of it by that
column (:class:`ArrangedJoins`: differential dataflow's shared arrangement, one copy however
many joins), and each join keeps its other side. Every side is a netted arrangement
(:class:`~raytide.core.arrangement.Arrangement` with a diff column) of its rows by the slot of
their key, one :class:`~raytide.core.keyindex.KeyIndex` for all of them. An epoch's changes
``dA`` of the arrangement and ``dR`` of a join's own side make the join's change
``dR x A + dA x (R + dR)``: the own side's changes meet the arrangement as it was, then the
arrangement's changes meet the own side as it is now. So every pair of updates is met
exactly once, with the product of their diffs (differential dataflow's delta join). A match
is every row of the other side with the key (:meth:`Arrangement.expand`), so multiplicities
multiply. Nothing is consolidated on the way (a sort per epoch): a row and its retraction
not netted yet in the arrangement (they net as its segments merge) give output rows that
cancel, and the output is the same collection.

>>> import numpy as np
>>> spec = JoinSpec(left=("k", "a"), right=("k", "b"), left_key="k", right_key="k")
>>> joins = ArrangedJoins(("k", "a"), "k", [spec])
>>> (out,) = joins.run({"k": np.array([1, 1]), "a": np.array([10, 11]), "diff": np.array([1, 2])},
...                    [{"k": np.array([1, 2]), "b": np.array([7, 8]), "diff": np.array([1, 1])}])
>>> {name: values.tolist() for name, values in out.items()}
{'k': [1, 1], 'a': [10, 11], 'b': [7, 7], 'diff': [1, 2]}

**Sum.** Per key its records' copies and the total of their values (:class:`ColumnSums`),
as arrays indexed by slot: an epoch's changes folded per key where they are sent from
(:func:`folded_sums`, a combiner: the sum is linear), the folds added, and the output's
changes ``(key, old total)`` taken back and ``(key, new total)`` added for the keys whose
total changed, as :class:`~raytide.differential.Sums` does record by record.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from raytide.core.arrangement import Arrangement, Rows
from raytide.core.combine import combine_by_key
from raytide.core.keyindex import KeyIndex, concat
from raytide.core.step import keys_moving
from raytide.differential import DIFF
from raytide.errors import RecordError

__all__ = ["ArrangedJoins", "ColumnSums", "JoinSpec", "folded_sums", "joined_names"]


def joined_names(left: Sequence[str], right: Sequence[str], right_key: str) -> tuple[str, ...]:
    """The columns of a column join's output: the left's, then the right's but its key.

    Raises:
        ValueError: A right column has the name of a left one (or of ``diff``).
    """
    rest = tuple(name for name in right if name != right_key)
    clash = sorted(set(rest) & {*left, DIFF})
    if clash:
        raise ValueError(f"columns {clash} are on both sides of the join (left {tuple(left)}, right {tuple(right)}): "
                         "rename one side's columns")
    return (*left, *rest)


@dataclass(frozen=True)
class JoinSpec:
    """One join by key columns: its left's and right's columns and keys, and which side is the
    arrangement it reads (``arranged_left``; the other side is the join's own)."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    left_key: str
    right_key: str
    arranged_left: bool = True

    @property
    def output_names(self) -> tuple[str, ...]:
        return joined_names(self.left, self.right, self.right_key)

    @property
    def own(self) -> tuple[tuple[str, ...], str]:
        """The columns and the key of the join's own side (the one not arranged)."""
        return (self.right, self.right_key) if self.arranged_left else (self.left, self.left_key)

    def pairs(self, arranged: Rows, own: Rows, keys: np.ndarray, diffs: np.ndarray) -> Rows:
        """Output rows of matched rows of both sides (row by row), with their ``keys`` and ``diffs``."""
        left, right = (arranged, own) if self.arranged_left else (own, arranged)
        out = {name: keys if name == self.left_key else left[name] for name in self.left}
        out.update((name, right[name]) for name in self.right if name != self.right_key)
        out[DIFF] = diffs
        return out


class ArrangedJoins:
    """One collection's rows arranged by a key column, read by every join of ``specs``, each
    of which keeps its other side (0: the arrangement, ``1 + j``: join ``j``'s own side), all
    netted arrangements of one :class:`~raytide.core.keyindex.KeyIndex`; see the module."""

    def __init__(self, names: Sequence[str], key: str, specs: Sequence[JoinSpec]) -> None:
        self.names, self.key, self.specs = tuple(names), key, tuple(specs)
        for spec in self.specs:
            arranged = (spec.left, spec.left_key) if spec.arranged_left else (spec.right, spec.right_key)
            if arranged != (self.names, key):
                raise ValueError(f"join {spec} does not read the arrangement of {self.names} by {key!r}")
        #: Per side, its columns and key.
        self.sides = ((self.names, key), *(spec.own for spec in self.specs))
        self.index = KeyIndex()
        self.held_sides = [_netted(names, side_key) for names, side_key in self.sides]

    def run(self, changes: Rows | None, own: Sequence[Rows | None]) -> list[Rows | None]:
        """An epoch's changes of the arranged collection and of each join's own side (None:
        none): each join's output changes (None if none).

        Each join's own changes meet the arrangement as it was, then the arrangement's changes
        meet each join's own side as it is now. Neither the changes nor the matches are
        consolidated first (the arrangements net what they add): updates that cancel give output
        rows that cancel, which is cheaper than a sort, and the same collection."""
        parts: list[list[Rows]] = [[] for _ in self.specs]
        for reader, rows in enumerate(own):
            if rows is not None and len(rows[DIFF]):
                mine = {name: np.asarray(values) for name, values in rows.items()}
                parts[reader].append(self._meet(1 + reader, 0, mine))
                self._add(1 + reader, mine)
        if changes is not None and len(changes[DIFF]):
            mine = {name: np.asarray(values) for name, values in changes.items()}
            for reader in range(len(self.specs)):
                parts[reader].append(self._meet(0, 1 + reader, mine))
            self._add(0, mine)
        return [self._joined(spec, [part for part in made if len(part[DIFF])]) for spec, made in zip(self.specs, parts)]

    def _joined(self, spec: JoinSpec, parts: list[Rows]) -> Rows | None:
        return {name: concat([part[name] for part in parts]) for name in (*spec.output_names, DIFF)} if parts else None

    def _meet(self, side: int, other: int, changes: Rows) -> Rows:
        """``changes`` of ``side`` joined with side ``other`` as it is now (one of them side 0)."""
        slots = self.index.lookup(changes[self.sides[side][1]])
        present = np.flatnonzero(slots >= 0)
        which, matched = self.held_sides[other].expand(slots[present], net=False)
        mine = {name: values[present[which]] for name, values in changes.items()}
        arranged, own = (mine, matched) if side == 0 else (matched, mine)
        return self.specs[max(side, other) - 1].pairs(arranged, own, mine[self.sides[side][1]],
                                                      mine[DIFF] * matched[DIFF])

    def _add(self, side: int, changes: Rows) -> None:
        keys = changes[self.sides[side][1]]
        self.index.add(keys)
        self.held_sides[side].add(self.index.slots(keys), changes, len(self.index))

    @property
    def held(self) -> int:
        """The rows every side holds."""
        return sum(arrangement.held for arrangement in self.held_sides)

    @property
    def shared(self) -> int:
        """The rows the arrangement (side 0) holds."""
        return self.held_sides[0].held

    @property
    def cancelled(self) -> int:
        """The rows netting merged or cancelled so far."""
        return sum(arrangement.cancelled for arrangement in self.held_sides)

    def rows(self, side: int) -> Rows:
        """Side ``side``'s rows, netted, with its key column."""
        slots, columns = self.held_sides[side].rows()
        return {self.sides[side][1]: self.index.ids[slots], **columns}

    def take(self, moving: Callable[[Hashable], bool]) -> tuple[Rows, ...]:
        """Remove and return every side's rows of the keys ``moving`` selects."""
        rows = [self.rows(side) for side in range(len(self.sides))]
        going = [keys_moving(side_rows[key], moving) for side_rows, (_, key) in zip(rows, self.sides)]
        taken = tuple({name: values[mask] for name, values in side_rows.items()} for side_rows, mask in zip(rows, going))
        kept = [{name: values[~mask] for name, values in side_rows.items()} for side_rows, mask in zip(rows, going)]
        self.index = KeyIndex()
        self.held_sides = [_netted(names, key) for names, key in self.sides]
        self.put(kept)
        return taken

    def put(self, taken: Sequence[Rows]) -> None:
        """Add rows another instance's :meth:`take` returned (or a snapshot's)."""
        for side, rows in enumerate(taken):
            if len(rows[DIFF]):
                self._add(side, rows)


def _netted(names: Sequence[str], key: str) -> Arrangement:
    """A netted arrangement of a side's columns but its key (the key is the slot)."""
    return Arrangement((*(name for name in names if name != key), DIFF), diff=DIFF)


def folded_sums(rows: Rows, key: str, value: str | None) -> Rows:
    """Changes ``rows`` (columns ``key``, ``value``, ``diff``) folded per key: ``copies``, the
    diffs' sum, and ``total``, of ``value * diff`` (a count, ``value`` None: the copies again).
    A sum is linear, so such folds of any parts of an epoch's changes add up to the fold of the
    whole: the sender folds what it sends (a combiner), and :meth:`ColumnSums.apply` adds the
    folds it gets.

    Raises:
        RecordError: The values are not numbers.
    """
    diffs = np.asarray(rows[DIFF], dtype=np.int64)
    values = np.asarray(rows[value]) if value is not None else diffs
    if values.dtype.kind not in "iufb":
        raise RecordError(f"column {value!r} holds {values.dtype} values (first: {values[:3].tolist()}): "
                          "a sum takes numbers")
    weighted = diffs if value is None else values.astype(np.int64 if values.dtype.kind == "b" else values.dtype) * diffs
    keys, folded = combine_by_key(np.asarray(rows[key]), {"copies": diffs, "total": weighted},
                                  {"copies": np.add, "total": np.add})
    return {key: keys, **folded}


class ColumnSums:
    """Per key (a slot of ``index``), its records' copies and their values' total; see the module.
    A count (``value`` None) is the sum of a one per copy: its records ``(key, n)`` in columns
    ``key`` and ``count``."""

    def __init__(self, key: str, value: str | None) -> None:
        self.key, self.value = key, value
        #: The column of the output records' totals.
        self.out = "total" if value is not None else "count"
        self.index = KeyIndex()
        self.copies = np.zeros(0, dtype=np.int64)
        self.totals = np.zeros(0, dtype=np.int64)

    @property
    def held(self) -> int:
        """How many keys have records."""
        return int(np.count_nonzero(self.copies))

    def apply(self, partials: Rows) -> Rows | None:
        """An epoch's changes, folded per key by :func:`folded_sums` (columns ``key``, ``copies``,
        ``total``; several folds of one key are added), added: the output's changes, ``(key,
        total)`` records in columns ``key`` and ``total`` (None if none).

        Raises:
            RecordError: A key would have fewer than zero records.
        """
        keys, change = combine_by_key(np.asarray(partials[self.key]), partials, {"copies": np.add, "total": np.add})
        copies, totals = change["copies"], change["total"]
        if not len(keys):
            return None
        self.index.add(keys)
        slots = self.index.slots(keys)
        self._grow(len(self.index), totals.dtype)
        old_copies, old_totals = self.copies[slots], self.totals[slots]
        new_copies = old_copies + copies
        if (new_copies < 0).any():
            bad = int(np.flatnonzero(new_copies < 0)[0])
            raise RecordError(f"key {keys[bad].item()!r} would have {new_copies[bad]} records (more removed than added)")
        new_totals = np.where(new_copies > 0, old_totals + totals, 0)
        moved = old_totals != new_totals
        gone = (old_copies > 0) & ((new_copies == 0) | moved)
        come = (new_copies > 0) & ((old_copies == 0) | moved)
        self.copies[slots], self.totals[slots] = new_copies, new_totals
        if not gone.any() and not come.any():
            return None
        return {self.key: concat([keys[gone], keys[come]]), self.out: concat([old_totals[gone], new_totals[come]]),
                DIFF: np.concatenate([np.full(int(gone.sum()), -1, dtype=np.int64), np.ones(int(come.sum()), dtype=np.int64)])}

    def _grow(self, size: int, dtype: np.dtype) -> None:
        """Room for ``size`` slots, the totals of a dtype that holds ``dtype`` too (integers, then floats)."""
        wider = np.result_type(self.totals.dtype, dtype)
        if wider != self.totals.dtype:
            self.totals = self.totals.astype(wider)
        if size > len(self.copies):
            grown = max(size, 2 * len(self.copies))
            self.copies = np.concatenate([self.copies, np.zeros(grown - len(self.copies), dtype=np.int64)])
            self.totals = np.concatenate([self.totals, np.zeros(grown - len(self.totals), dtype=self.totals.dtype)])

    def rows(self, keep: Callable[[np.ndarray], np.ndarray] | None = None) -> Rows:
        """The keys with records, their copies and totals (only those ``keep`` selects)."""
        live = np.flatnonzero(self.copies[: len(self.index)] > 0)
        keys = self.index.ids[live]
        chosen = slice(None) if keep is None else keep(keys)
        return {self.key: keys[chosen], "copies": self.copies[live][chosen], "total": self.totals[live][chosen]}

    def put(self, held: Mapping[str, np.ndarray]) -> None:
        """Keys another replica held (none of them held here), as :meth:`rows` gives them."""
        keys = held[self.key]
        if not len(keys):
            return
        self.index.add(keys)
        slots = self.index.slots(keys)
        self._grow(len(self.index), held["total"].dtype)
        self.copies[slots], self.totals[slots] = held["copies"], held["total"]

    def take(self, moving: Callable[[Hashable], bool]) -> Rows:
        """Remove and return the keys ``moving`` selects."""
        taken = self.rows(lambda keys: keys_moving(keys, moving))
        slots = self.index.slots(taken[self.key])
        self.copies[slots] = 0
        self.totals[slots] = 0
        return taken
