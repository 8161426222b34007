"""A replica's own edges for the replicated spanning forest (``raytide.graph.spanning_forest``):
copies per edge, present while above zero, and an adjacency of those held, read at a few
nodes without a pass over them all and changed where they are, an epoch's new edges in a
small tier of their own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raytide.core.keyindex import EMPTY, concat
from raytide.graph.sorted_pairs import LOW, SHIFT, Runs, pack, pair, unpack

#: A replica drops its edges with no copy left once they are one in this many of those it holds.
TOMBSTONES = 8
#: A replica merges the edges new since its last merge once they are one in this many of the others.
MERGE = 16


@dataclass
class OwnedEdges:
    """A replica's own edges as an adjacency, so that the edges at a few nodes are found without a
    pass over them all: ``pair(u, v)`` and ``pair(v, u)`` of each edge (ids; a self-loop once),
    with their runs, and the edge's copies at both (present while above zero; changed in place
    by :func:`apply_updates`). Two tiers: what was held at the last merge (``adj``,
    ``copies``), and the edges new since (``recent``, ``recent_copies``), merged into the first
    once they are one in :data:`MERGE` of it, so that an epoch's new edges move only the small
    tier. An edge left with no copy (``dead`` of them) stays until such edges are one in
    :data:`TOMBSTONES` of what is held: then a merge drops them, so what is held follows the graph."""

    adj: Runs
    copies: np.ndarray
    recent: Runs
    recent_copies: np.ndarray
    dead: int = 0

    @classmethod
    def empty(cls) -> OwnedEdges:
        return cls(Runs.of(EMPTY), EMPTY, Runs.of(EMPTY), EMPTY)

    def tiers(self) -> tuple[tuple[Runs, np.ndarray], tuple[Runs, np.ndarray]]:
        """The two tiers, each its index and copies, the merged one first."""
        return (self.adj, self.copies), (self.recent, self.recent_copies)

    def present(self) -> np.ndarray:
        """The keys of the edges present (:func:`pack`'s, of ids)."""
        keys = [index.keys[(copies > 0) & (index.keys >> SHIFT <= (index.keys & LOW))] for index, copies in self.tiers()]
        return concat(keys)

    def settled(self) -> OwnedEdges:
        """Merged into one tier (its edges with no copy dropped) when due, else itself."""
        held = len(self.copies) + len(self.recent_copies)
        if len(self.recent_copies) * MERGE <= len(self.copies) and self.dead * TOMBSTONES <= held:
            return self
        if len(self.copies):
            at = np.searchsorted(self.adj.keys, self.recent.keys)
            keys, copies = np.insert(self.adj.keys, at, self.recent.keys), np.insert(self.copies, at, self.recent_copies)
        else:  # a first epoch: all its edges new
            keys, copies = self.recent.keys, self.recent_copies
        return OwnedEdges(Runs.of(keys[copies != 0]), copies[copies != 0], Runs.of(EMPTY), EMPTY)


def id_keys(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The keys of the undirected edges ``{src, dst}`` of node ids, which must be in ``[0, 2**31)``."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if len(src) and (min(int(src.min()), int(dst.min())) < 0 or max(int(src.max()), int(dst.max())) >= 2**31):
        bad = src[(src < 0) | (src >= 2**31)].tolist()[:1] + dst[(dst < 0) | (dst >= 2**31)].tolist()[:1]
        raise ValueError(f"node ids must be integers in [0, 2**31) for the replicated spanning forest, got {bad[0]}")
    return pack(src, dst)


def apply_updates(owned: OwnedEdges, keys: np.ndarray,
                  diff: np.ndarray) -> tuple[OwnedEdges, np.ndarray, np.ndarray]:
    """``(owned, inserted, deleted)``: the edges' copies changed by ``diff`` (summed per key), and
    the keys whose presence flipped on and off. Both ends of every edge are found in the merged
    tier (:meth:`~raytide.graph.sorted_pairs.Runs.find`), those it lacks in the small one, and
    known ones' copies changed in place (``owned``'s too); only new ones move what is held:
    inserted into the small tier, in order, which is merged once due."""
    keys, at = np.unique(keys, return_inverse=True)
    change = np.bincount(at, weights=diff, minlength=len(keys)).astype(np.int64)
    ends, edge = both_ways(keys)
    spot, hit = owned.adj.find(ends)
    rest = np.flatnonzero(~hit)
    recent_spot, recent_hit = owned.recent.find(ends[rest])
    before = np.zeros(len(keys), dtype=np.int64)
    before[edge[hit]] = owned.copies[spot[hit]]
    known = rest[recent_hit]
    before[edge[known]] = owned.recent_copies[recent_spot[recent_hit]]
    now = before + change
    dead = owned.dead + changed_copies(owned.copies, spot[hit], before[edge[hit]], now[edge[hit]])
    dead += changed_copies(owned.recent_copies, recent_spot[recent_hit], before[edge[known]], now[edge[known]])
    fresh = ~recent_hit & (change[edge[rest]] != 0)
    order = np.argsort(ends[rest[fresh]])  # inserted in order: several may go to one spot
    new, at = rest[fresh][order], recent_spot[fresh][order]
    recent = Runs.sparse(np.insert(owned.recent.keys, at, ends[new]))
    copies = np.insert(owned.recent_copies, at, now[edge[new]])
    owned = OwnedEdges(owned.adj, owned.copies, recent, copies, dead)
    return owned.settled(), keys[(before <= 0) & (now > 0)], keys[(before > 0) & (now <= 0)]


def changed_copies(copies: np.ndarray, spot: np.ndarray, before: np.ndarray, now: np.ndarray) -> int:
    """In place: ``copies`` at ``spot`` set to ``now`` (they were ``before``); how many more of them
    are left with no copy than were (edges with none, to count towards a merge)."""
    copies[spot] = now
    return int(np.count_nonzero(now == 0) - np.count_nonzero(before == 0))


def both_ways(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ends, edge)``: the edges ``keys`` as ordered pairs each way (a self-loop once), and for each
    pair the index of its edge in ``keys``."""
    low, high = unpack(keys)
    other = np.flatnonzero(low != high)
    return concat([keys, pair(high[other], low[other])]), concat([np.arange(len(keys)), other])
