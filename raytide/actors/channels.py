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

from typing import Any, Callable, Hashable, Optional

from raytide.actors.batches import batch_length, to_records
from raytide.autoscale.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, key_group

Routed = list[tuple[int, Any]]

#: Keys whose replica is remembered per router, so repeated keys skip the hash.
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


class ExchangeRouter:
    """Records partitioned by key, through key groups and a swappable routing table."""

    def __init__(self, key: Callable[[Any], Hashable], receiver_width: int, key_groups: int = DEFAULT_KEY_GROUPS,
                 table: Optional[KeyGroupAssignment] = None) -> None:
        self._key = key
        self._groups = key_groups
        self.table = table or KeyGroupAssignment.contiguous(receiver_width, key_groups)
        self._cache: dict[Hashable, int] = {}

    def swap_table(self, table: KeyGroupAssignment) -> None:
        """Route by ``table`` from now on (called at a control marker)."""
        if table.key_groups != self._groups:
            raise ValueError(f"routing table has {table.key_groups} key groups, the channel {self._groups}")
        self.table = table
        self._cache = {}

    def replica_of(self, key: Hashable) -> int:
        """The replica owning ``key`` under the current table."""
        replica = self._cache.get(key)
        if replica is None:
            replica = self.table.owners[key_group(key, self._groups)]
            if len(self._cache) < ROUTE_CACHE_SIZE:
                self._cache[key] = replica
        return replica

    def route(self, batch: Any) -> Routed:
        parts: dict[int, list] = {}
        key, replica_of = self._key, self.replica_of
        for record in to_records(batch):
            parts.setdefault(replica_of(key(record)), []).append(record)
        return list(parts.items())


Router = PipelineRouter | BroadcastRouter | ExchangeRouter


def non_empty(routed: Routed) -> Routed:
    """Drop destinations whose batch is empty."""
    return [(r, b) for r, b in routed if batch_length(b)]
