"""Routing a batch from one sender replica to the replicas of the consuming vertex.

* pipeline: replica ``i`` to replica ``i`` (round robin per batch when widths differ);
* exchange: each record's key goes to a key group (a stable hash modulo K, default 128),
  then through a routing table from key groups to replicas; the table can be swapped
  at a control marker, which is how rescaling moves keys;
* broadcast: the whole batch to every replica.

Routers return ``(replica, sub_batch)`` pairs, one per destination with records: one
message per destination and batch, never one per record.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, cast

import numpy as np

from raytide.core.batches import batch_length, to_format, to_records
from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, key_groups_of

Routed = list[tuple[int, Any]]

#: Keys whose replica is remembered per router, so repeated keys skip the hash (the cache
#: stops growing once it holds this many, after the batch that crosses the mark).
ROUTE_CACHE_SIZE = 200_000


class PipelineRouter:
    """Replica ``i`` to replica ``i``; round robin over the consumers when the widths differ."""

    def __init__(self, sender: int, sender_width: int, receiver_width: int) -> None:
        self._same = sender_width == receiver_width
        self._sender, self._width, self._next = sender, receiver_width, sender % receiver_width

    def route(self, batch: Any) -> Routed:
        if self._same:
            return [(self._sender, batch)]
        target, self._next = self._next, (self._next + 1) % self._width
        return [(target, batch)]


class BroadcastRouter:
    """Every consumer replica receives the whole batch."""

    def __init__(self, receiver_width: int) -> None:
        self._width = receiver_width

    def route(self, batch: Any) -> Routed:
        return [(r, batch) for r in range(self._width)]


def column_key_groups(keys: np.ndarray, key_groups: int = DEFAULT_KEY_GROUPS) -> np.ndarray:
    """Key groups of a column of integer keys, vectorised (splitmix64 finaliser, then modulo).

    This is the key-group function of exchanges keyed by a column name, for columnar
    and record batches alike, so a key lands in the same group whichever form it came in.
    """
    if keys.dtype.kind not in "iu":
        raise TypeError(f"a column key must hold integers to be exchanged vectorised, got dtype {keys.dtype}")
    z = keys.astype(np.uint64)  # two arrays, updated in place: less memory to fault in and to stream
    z += np.uint64(0x9E3779B97F4A7C15)
    shifted = z >> np.uint64(30)
    z ^= shifted
    z *= np.uint64(0xBF58476D1CE4E5B9)
    np.right_shift(z, np.uint64(27), out=shifted)
    z ^= shifted
    z *= np.uint64(0x94D049BB133111EB)
    np.right_shift(z, np.uint64(31), out=shifted)
    z ^= shifted
    if key_groups & (key_groups - 1) == 0:  # a power of two: the same groups as the modulo, without a division
        z &= np.uint64(key_groups - 1)
    else:
        z %= np.uint64(key_groups)
    return z.astype(np.intp)


def _group(records: list, owners: list[int]) -> Routed:
    """``(replica, records)`` for each replica in ``owners``, records in their batch order."""
    parts: dict[int, list] = {owner: [] for owner in set(owners)}
    appenders = {owner: part.append for owner, part in parts.items()}
    for record, owner in zip(records, owners):
        appenders[owner](record)
    return list(parts.items())


class ExchangeRouter:
    """Records partitioned by key, through key groups and a swappable routing table.

    ``key`` is a function of a record, or the name of an integer column: then columnar
    batches (dicts of arrays, Arrow tables) are partitioned with NumPy, without a
    per-record Python call, and dict records by the same vectorised hash.
    """

    def __init__(self, key: Callable[[Any], Hashable] | str, receiver_width: int,
                 key_groups: int = DEFAULT_KEY_GROUPS, table: KeyGroupAssignment | None = None) -> None:
        self._key = key
        self._groups = key_groups
        self._set_table(table or KeyGroupAssignment.contiguous(receiver_width, key_groups))

    def swap_table(self, table: KeyGroupAssignment) -> None:
        """Route by ``table`` from now on (called at a control marker)."""
        if table.key_groups != self._groups:
            raise ValueError(f"routing table has {table.key_groups} key groups, the channel {self._groups}")
        self._set_table(table)

    def _set_table(self, table: KeyGroupAssignment) -> None:
        self.table = table
        # key group -> replica, for vectorised routing; 8 or 16 bits make the stable argsort a radix sort
        self._owners = np.asarray(table.owners, dtype=np.min_scalar_type(max(table.parallelism - 1, 0)))
        self._cache: dict[Hashable, int] = {}  # key -> replica under this table

    def route(self, batch: Any) -> Routed:
        if isinstance(self._key, str):
            return self._route_column(batch, self._key)
        records = to_records(batch)
        keys = list(map(self._key, records))
        owners = list(map(self._cache.get, keys))  # keys seen before: no Python call per record
        if None in owners:
            self._look_up_new(keys, owners)
        # _look_up_new filled in every None, so all owners are replicas now (no per-record check)
        return _group(records, cast(list[int], owners))

    def _look_up_new(self, keys: list, owners: list[int | None]) -> None:
        """Fill in the owners of keys the cache does not know (hashed together), and remember them."""
        positions = [index for index, owner in enumerate(owners) if owner is None]
        new = [keys[index] for index in positions]
        replicas = list(map(self.table.owners.__getitem__, key_groups_of(new, self._groups)))
        for index, replica in zip(positions, replicas):
            owners[index] = replica
        if len(self._cache) < ROUTE_CACHE_SIZE:
            self._cache.update(zip(new, replicas))

    def _route_column(self, batch: Any, column: str) -> Routed:
        if isinstance(batch, list):
            owners = self._owners[column_key_groups(np.asarray([r[column] for r in batch]), self._groups)]
            return _group(batch, owners.tolist())
        columns = to_format(batch, "numpy")
        owners = self._owners[column_key_groups(columns[column], self._groups)]
        order = np.argsort(owners, kind="stable")
        bounds = np.cumsum(np.bincount(owners, minlength=self.table.parallelism))
        starts = np.concatenate(([0], bounds[:-1]))
        sorted_columns = {name: values[order] for name, values in columns.items()}
        return [
            (replica, {name: values[start:end] for name, values in sorted_columns.items()})
            for replica, (start, end) in enumerate(zip(starts.tolist(), bounds.tolist()))
            if end > start
        ]


Router = PipelineRouter | BroadcastRouter | ExchangeRouter


def non_empty(routed: Routed) -> Routed:
    """Drop destinations whose batch is empty."""
    return [(r, b) for r, b in routed if batch_length(b)]
