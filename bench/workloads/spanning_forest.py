"""Connected components under insertions and deletions by a *replicated spanning forest*: pure NumPy.

A prototype, not part of raytide's graph layer: measured against it by ``python -m bench
forest`` and kept here until it is wired in (what is left: docs/collections.md).

Every replica owns a part of the edges (:class:`OwnedEdges`: copies per edge, present
while above zero) and holds the same :class:`Forest`: a spanning forest ``F`` of the
whole graph (at most ``n - 1`` edges) and the components it implies. A node's label is
the smallest node id of its component, whichever forest spans it. An epoch takes at
most two exchanges, whatever the depth of what changed:

1. Each replica applies its updates (:func:`apply_updates`) and announces
   (:func:`announce`) its deleted edges that are forest edges, and its inserted edges
   reduced to a spanning forest over the trees of ``F`` (few, and none of a tree's inner
   edges). Every replica gets every announcement.
2. From the same announcements every replica computes the same ``F''`` (:func:`split_join`):
   ``F`` less the deleted edges, plus the inserted edges that join different trees. If no
   forest edge was deleted, ``F''`` spans the graph: the epoch ends. Otherwise each
   replica scans its own present edges for ones whose ends are in different trees of
   ``F''`` (only a split tree's parts can be joined so) and announces them, reduced to a
   spanning forest over those trees (:func:`candidates`).
3. Every replica adds the same candidates the same way (:func:`reconnected`): the new ``F``.

Every choice is deterministic: :func:`spanning_forest` is a function of its arrays, which
are sorted before it sees them, so replicas that get the same announcements (in any order)
pick the same forest. The price is memory and work of ``O(n)`` per replica (the forest and
a label per node; a split recomputes the components of the forest), traded for rounds.

Nodes are held by index into :attr:`Forest.ids` (sorted node ids); edges by index pairs
``a < b``, packed into one int64 key (:func:`pack`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raytide.core.keyindex import concat

EMPTY = np.empty(0, dtype=np.int64)
#: An edge ``(a, b)`` of node indices, ``a < b``, is the key ``a << SHIFT | b``.
SHIFT = 32


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort and a comparison: ``np.unique``'s hashing is far slower
    on int64 keys here)."""
    values = np.sort(values)
    return values[np.concatenate([[True], values[1:] != values[:-1]])] if len(values) else values


def pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The keys of the edges ``{a, b}`` (node indices, in either order)."""
    return (np.minimum(a, b) << SHIFT) | np.maximum(a, b)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``, ``a < b``, of packed edge keys."""
    return keys >> SHIFT, keys & ((1 << SHIFT) - 1)


def roots(parent: np.ndarray) -> np.ndarray:
    """Every node's root under ``parent`` (pointer jumping, only the nodes not there yet; a
    forest's depth halves each step, so more than 64 steps means a cycle: refused)."""
    grand = parent[parent]
    moving = np.flatnonzero(grand != parent)
    grand = grand[moving]
    for _ in range(64):
        if not len(moving):
            return parent
        parent[moving] = grand
        above = parent[grand]
        still = above != grand
        moving, grand = moving[still], above[still]
    raise ValueError(f"the parent links of {len(moving)} nodes form a cycle, not a forest (first: {moving[:3].tolist()})")


def spanning_forest(count: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chosen, root)``: a spanning forest of the graph of ``count`` nodes and edges ``(a[i], b[i])``,
    as a mask of the edges, and every node's component as its smallest node.

    Each round every root with an edge to another tree hooks to the smallest such root
    (the tie broken by the smaller edge position) through that edge, then the roots are
    found again by pointer jumping. A root hooks only to a smaller one, so the hooks form
    a forest over the trees and each chosen edge joins two trees: the chosen edges are a
    spanning forest, and each tree's root is its smallest node. The result depends only on
    the arrays (their order included), never on timing or on anything else held.
    """
    parent = np.arange(count, dtype=np.int64)
    chosen = np.zeros(len(a), dtype=bool)
    edge = np.arange(len(a), dtype=np.int64)
    none = np.iinfo(np.int64).max
    while len(edge):
        ra, rb = parent[a], parent[b]
        crossing = ra != rb
        edge, a, b, ra, rb = edge[crossing], a[crossing], b[crossing], ra[crossing], rb[crossing]
        if not len(edge):
            break
        high, low = np.maximum(ra, rb), np.minimum(ra, rb)
        best = np.full(count, none, dtype=np.int64)
        np.minimum.at(best, high, low * len(chosen) + edge)
        hooked = np.flatnonzero(best != none)
        parent[hooked] = best[hooked] // len(chosen)
        chosen[best[hooked] % len(chosen)] = True
        parent = roots(parent)
    return chosen, parent


def joined(root: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(chosen, root)``: the edges ``(a, b)`` that join different components of ``root`` (a
    spanning forest of them over the components), and the components once joined.

    Only the components the edges touch are renumbered densely for :func:`spanning_forest`,
    so the work is the edges' plus one pass over the nodes."""
    chosen, touched, top = joining(root, a, b)
    if not len(touched):
        return chosen, root
    renamed = np.arange(len(root), dtype=np.int64)
    renamed[touched] = touched[top]
    return chosen, renamed[root]


def joining(root: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(chosen, touched, top)``: :func:`joined`'s edges, the components they touch (sorted) and
    each one's component once joined (``touched[top]``), with no pass over the nodes."""
    chosen = np.zeros(len(a), dtype=bool)
    ra, rb = root[a], root[b]
    crossing = np.flatnonzero(ra != rb)
    if not len(crossing):
        return chosen, EMPTY, EMPTY
    touched, dense = np.unique(concat([ra[crossing], rb[crossing]]), return_inverse=True)
    picked, top = spanning_forest(len(touched), dense[: len(crossing)], dense[len(crossing):])
    chosen[crossing[picked]] = True
    return chosen, touched, top


@dataclass
class Forest:
    """The replicated part: node ids; the spanning forest, rooted (``up``: each node's parent,
    a tree's root its own; the forest's edges are ``(x, up[x])``); each node's component as
    its smallest node index (``root``; ``ids[root]`` is the label); and the nodes with a
    self-loop present (``loops``, sorted indices: they have an edge, none in the forest)."""

    ids: np.ndarray
    up: np.ndarray
    root: np.ndarray
    loops: np.ndarray

    @classmethod
    def empty(cls) -> Forest:
        return cls(EMPTY, EMPTY, EMPTY, EMPTY)

    def labels(self) -> np.ndarray:
        """Every node's label: the smallest node id of its component."""
        return self.ids[self.root]

    def present(self) -> np.ndarray:
        """A mask of the nodes with an edge: those on a forest edge (the forest spans) or a self-loop."""
        mask = self.up != np.arange(len(self.up))
        mask[self.up[mask]] = True
        mask[self.loops] = True
        return mask

    def holds(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """A mask of the edges ``(a, b)`` (node indices) that are forest edges."""
        return (self.up[a] == b) | (self.up[b] == a)


@dataclass
class OwnedEdges:
    """A replica's own edges: keys of ``(min id, max id)`` packed (:func:`id_keys`), sorted, and
    their copies (an edge is present while it has more than zero)."""

    keys: np.ndarray
    copies: np.ndarray

    @classmethod
    def empty(cls) -> OwnedEdges:
        return cls(EMPTY, EMPTY)

    def present(self) -> np.ndarray:
        """The keys of the edges present."""
        return self.keys[self.copies > 0]


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
    the keys whose presence flipped on and off. Known keys are found by binary search and
    new ones inserted in place (those left with no copy dropped): no sort of what is held."""
    keys, at = np.unique(keys, return_inverse=True)
    change = np.bincount(at, weights=diff, minlength=len(keys)).astype(np.int64)
    spot = np.searchsorted(owned.keys, keys)
    known = spot < len(owned.keys)
    known[known] = owned.keys[spot[known]] == keys[known]
    before = np.zeros(len(keys), dtype=np.int64)
    before[known] = owned.copies[spot[known]]
    copies = owned.copies.copy()
    copies[spot[known]] += change[known]
    now = before + change
    gone = spot[known & (now == 0)]  # no copy left: dropped, so what is held follows the graph
    fresh = ~known & (change != 0)
    at = spot[fresh] - np.searchsorted(gone, spot[fresh])
    new = OwnedEdges(np.insert(np.delete(owned.keys, gone), at, keys[fresh]),
                     np.insert(np.delete(copies, gone), at, change[fresh]))
    return new, keys[(before <= 0) & (now > 0)], keys[(before > 0) & (now <= 0)]


def member(values: np.ndarray, sorted_few: np.ndarray) -> np.ndarray:
    """A mask of ``values`` found in the sorted array ``sorted_few`` (a binary search each)."""
    if not len(sorted_few):
        return np.zeros(len(values), dtype=bool)
    found = np.minimum(np.searchsorted(sorted_few, values), len(sorted_few) - 1)
    return sorted_few[found] == values


def as_indices(ids: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index pairs in ``ids`` (sorted, holding every end) of edges given as id keys (the ids
    themselves when ``ids`` are ``0 .. n-1``, a graph's usual ids: no search)."""
    low, high = unpack(keys)
    if len(ids) and ids[0] == 0 and ids[-1] == len(ids) - 1:
        return low, high
    return np.searchsorted(ids, low), np.searchsorted(ids, high)


def as_ids(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Edges given as index keys, as id keys."""
    a, b = unpack(keys)
    return pack(ids[a], ids[b])


def announce(forest: Forest, inserted: np.ndarray, deleted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round 1 at one replica: ``(deleted, inserted)`` to send to every replica, id keys. Of its
    deleted edges, the forest's; of its inserted edges, a spanning forest of them over the
    trees of the forest (a node not in it yet its own tree): those joining trees, few.
    Self-loops that came or went are sent too: they tell which nodes have an edge."""
    if len(deleted):
        loop = is_loop(deleted)
        deleted = concat([deleted[loop], deleted[~loop][forest.holds(*as_indices(forest.ids, deleted[~loop]))]])
    if not len(inserted):
        return deleted, EMPTY
    wider = extended(forest, concat(list(unpack(inserted))))
    chosen = joining(wider.root, *as_indices(wider.ids, inserted))[0]
    return deleted, inserted[chosen | is_loop(inserted)]


def is_loop(keys: np.ndarray) -> np.ndarray:
    """A mask of the self-loops among edge keys."""
    low, high = unpack(keys)
    return low == high


def extended(forest: Forest, ids: np.ndarray) -> Forest:
    """The forest with the node ids ``ids`` it lacks added, each its own tree; indices renumbered
    (the order of ids kept, so a tree's smallest index stays its smallest)."""
    fresh = ids[~member(ids, forest.ids)]
    if not len(fresh):
        return forest
    wider = distinct(concat([forest.ids, fresh]))
    if wider[0] == 0 and wider[-1] < 2 * len(wider) + 1024:  # ids mostly 0 .. n-1: all of them, as_indices searches none
        wider = np.arange(wider[-1] + 1, dtype=np.int64)
    old = np.searchsorted(wider, forest.ids)
    root = np.arange(len(wider), dtype=np.int64)
    root[old] = old[forest.root]
    up = np.arange(len(wider), dtype=np.int64)
    up[old] = old[forest.up]
    return Forest(wider, up, root, old[forest.loops])


def split_join(forest: Forest, deleted: np.ndarray, inserted: np.ndarray) -> tuple[Forest, bool]:
    """Round 2, the same at every replica: ``(F'', split)`` from every replica's announcements (id
    keys, in any order): the forest less the deleted edges, plus the inserted ones joining
    different trees; ``split`` if a forest edge was deleted (then :func:`candidates`)."""
    inserted = distinct(inserted)
    forest = extended(forest, concat(list(unpack(inserted))))
    deleted, inserted = (pack(*as_indices(forest.ids, keys)) for keys in (deleted, inserted))
    gone, came = deleted[is_loop(deleted)], inserted[is_loop(inserted)]
    if len(gone) or len(came):
        loops = distinct(concat([forest.loops, unpack(came)[0]]))
        forest = Forest(forest.ids, forest.up, forest.root, loops[~member(loops, distinct(unpack(gone)[0]))])
    a, b = unpack(deleted[~is_loop(deleted)])
    split = bool(len(a))
    if split:
        forest = cut(forest, np.where(forest.up[a] == b, a, b))
    return with_edges(forest, inserted[~is_loop(inserted)]), split


def cut(forest: Forest, children: np.ndarray) -> Forest:
    """The forest without the edges from ``children`` to their parents: each child the root of
    its part now; every node's component found again (pointer jumping up to the nearest
    root, then the smallest node of each part)."""
    up = forest.up.copy()
    up[children] = children
    top = roots(up.copy())
    smallest = np.full(len(up), len(up), dtype=np.int64)
    np.minimum.at(smallest, top, np.arange(len(up), dtype=np.int64))
    return Forest(forest.ids, up, smallest[top], forest.loops)


def with_edges(forest: Forest, keys: np.ndarray) -> Forest:
    """The forest with those of the edges ``keys`` (index keys, sorted) that join its trees added."""
    if not len(keys):
        return forest
    chosen, root = joined(forest.root, *unpack(keys))
    a, b = unpack(keys[chosen])
    return Forest(forest.ids, linked(forest, root, a, b), root, forest.loops)


def linked(forest: Forest, root: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``up`` with the edges ``(a, b)`` (a spanning forest over the components, which ``root``
    gives once joined) added: each joined tree hangs from the one with its smallest node,
    level by level; a tree hung by its node ``x`` is rerooted at ``x`` first (the path from
    ``x`` to its root reversed), then ``x``'s parent is the other end."""
    up, old = forest.up.copy(), forest.root
    placed = np.zeros(len(up), dtype=bool)  # components already hung (or the top of their joined tree)
    placed[old[a]] = root[a] == old[a]
    placed[old[b]] |= root[b] == old[b]
    child, parent = [], []
    while len(a):
        on_a, on_b = placed[old[a]], placed[old[b]]
        now = on_a != on_b
        child.append(np.where(on_a[now], b[now], a[now]))
        if not now.any() or len(distinct(old[child[-1]])) < len(child[-1]):
            raise ValueError(f"{len(a)} edges to link close a cycle: they are not a forest over the trees")
        parent.append(np.where(on_a[now], a[now], b[now]))
        placed[old[child[-1]]] = True
        a, b = a[~now], b[~now]
    node, new = concat(child), concat(parent)
    while len(node):  # the reversal of every hung tree's path at once: the paths are apart
        above = up[node]
        up[node] = new
        going = above != node
        node, new = above[going], node[going]
    return up


def candidates(forest: Forest, owned: OwnedEdges) -> np.ndarray:
    """Round 2 at one replica, after a split: its present edges whose ends are in different trees
    of ``F''``, reduced to a spanning forest over those trees (id keys, to send to every replica)."""
    present = owned.present()
    a, b = as_indices(forest.ids, present)
    crossing = forest.root[a] != forest.root[b]
    return present[crossing][joining(forest.root, a[crossing], b[crossing])[0]]


def reconnected(forest: Forest, found: np.ndarray) -> Forest:
    """Round 3, the same at every replica: ``F''`` with every replica's candidates (id keys, in any
    order) that join its trees added: the new forest."""
    return with_edges(forest, pack(*as_indices(forest.ids, distinct(found))))


def run_epoch(forests: list[Forest], owned: list[OwnedEdges],
              updates: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[Forest], list[OwnedEdges], int]:
    """One epoch of every replica, the exchanges done in place (a reference of the rounds, for
    tests and benchmarks): ``(forests, owned, exchanges)``, ``updates[r]`` replica ``r``'s
    ``(id keys, diffs)``. Exchanges: 1 if no forest edge was deleted anywhere, else 2."""
    applied = [apply_updates(mine, keys, diff) for mine, (keys, diff) in zip(owned, updates, strict=True)]
    owned = [mine for mine, _, _ in applied]
    sent = [announce(forest, inserted, deleted) for forest, (_, inserted, deleted) in zip(forests, applied, strict=True)]
    middle = [split_join(forest, concat([d for d, _ in arrived(sent, r)]), concat([i for _, i in arrived(sent, r)]))
              for r, forest in enumerate(forests)]
    if not middle[0][1]:
        return [forest for forest, _ in middle], owned, 1
    found = [candidates(forest, mine) for (forest, _), mine in zip(middle, owned, strict=True)]
    return [reconnected(forest, concat(arrived(found, r))) for r, (forest, _) in enumerate(middle)], owned, 2


def arrived(sent: list, replica: int) -> list:
    """What every replica sent, in the order ``replica`` gets it in (its own first: an order of its own)."""
    return sent[replica:] + sent[:replica]
