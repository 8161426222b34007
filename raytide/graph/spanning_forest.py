"""Connected components under insertions and deletions by a *replicated spanning forest*: pure NumPy.

A prototype, not part of raytide's graph layer: measured against it by ``python -m bench
forest`` and kept here until it is wired in (what is left: docs/collections.md).

Every replica owns a part of the edges (:class:`OwnedEdges`: copies per edge, present
while above zero, and an adjacency index of those present) and holds the same
:class:`Forest`: a spanning forest ``F`` of the whole graph (at most ``n - 1`` edges),
rooted, with an index of each node's children, and the components it implies. A node's
label is the smallest node id of its component, and every tree is rooted at its smallest
node. An epoch takes at most two exchanges, whatever the depth of what changed:

1. Each replica applies its updates (:func:`apply_updates`) and announces
   (:func:`announce`) its deleted edges that are forest edges, and its inserted edges
   reduced to a spanning forest over the trees of ``F`` (few, and none of a tree's inner
   edges; a bulk whole, for the breadth-first forest it rebuilds). Every replica gets every
   announcement.
2. From the same announcements every replica computes the same ``F''`` (:func:`split_join`).
   If no forest edge was deleted, ``F''`` is ``F`` plus the inserted edges that join
   different trees, the new forest: the epoch ends. Otherwise ``F''`` is ``F`` less the
   deleted edges, and each replica looks, among its own present edges at the nodes cut off
   and those it inserted, for enough whose ends are in different parts of ``F''`` and
   announces them, reduced to a spanning forest over the parts (:func:`candidates`).
3. Every replica adds the same candidates and announced insertions the same way
   (:func:`reconnected`): the new ``F``.

The work of an epoch follows what changed, not ``n``: a deleted forest edge ``(u, up[u])``
cuts off exactly ``u``'s subtree, found by walking the children index down from every cut
at once (:func:`cut`); only the edges at those nodes are searched for replacements, a
part's top first (``u``: an edge there to the part above its cut settles it, and the part,
hung by it, keeps its shape); a tree hung elsewhere is rerooted along one path; only the nodes whose component changed are
relabelled. (The part above a cut keeps its root, the smallest node, so nothing of it is
visited.) Its cost is the cut-off subtrees' sizes, so the forest's depth: a bulk of edges
builds breadth-first trees over all its edges (:func:`rebuilt`; mean depth 7.2 on ``bench
collections``' random graph of 200k nodes and 600k edges, against 22 for the hooking's trees);
parts cut off hang back from the shallowest nodes they have edges to (a depth per node kept,
:func:`with_depths`), so churn deepens it slowly (12.0 after 20 epochs of 1%, 15.1 after 60).

Every choice is deterministic: :func:`spanning_forest` is a function of its arrays, which
are sorted before it sees them, so replicas that get the same announcements (in any order)
pick the same forest. The price is memory of ``O(n)`` per replica (the forest, its
children index and a label per node), traded for rounds.

Nodes are held by index into :attr:`Forest.ids` (sorted node ids); edges by index pairs
``a < b``, packed into one int64 key (:func:`pack`); indexes by ordered pairs (:func:`pair`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from raytide.core.keyindex import EMPTY, concat
from raytide.graph.child_lists import Children, subtrees
from raytide.graph.hooking import depths, joining, spanning_forest
from raytide.graph.owned_edges import OwnedEdges as OwnedEdges
from raytide.graph.owned_edges import apply_updates as apply_updates
from raytide.graph.owned_edges import id_keys as id_keys
from raytide.graph.sorted_pairs import SHIFT, distinct, member, offsets, pack, pair, runs, unpack

#: Edges added at once above one per this many nodes rebuild the forest (:func:`rebuilt`).
BULK = 4


@dataclass
class Forest:
    """The replicated part: node ids; the spanning forest, rooted (``up``: each node's parent,
    a tree's root its own; the forest's edges are ``(x, up[x])``); each node's component as
    its smallest node index (``root``; ``ids[root]`` is the label); and the nodes with a
    self-loop present (``loops``, sorted indices: they have an edge, none in the forest); and
    the children index (``kids``: each node's children); and each node's depth (``depth``: how
    far down its tree; a tree hung again this epoch is hung by edges to shallow nodes first).
    A tree's root is its smallest node, so ``root`` is also each node's tree root (but from
    :func:`split_join` to :func:`reconnected` a part cut off is rooted at its top: :func:`cut`)."""

    ids: np.ndarray
    up: np.ndarray
    root: np.ndarray
    loops: np.ndarray
    kids: Children
    depth: np.ndarray

    @classmethod
    def empty(cls) -> Forest:
        return cls(EMPTY, EMPTY, EMPTY, EMPTY, Children.of(EMPTY), EMPTY)

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


def as_indices(ids: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index pairs in ``ids`` (sorted, holding every end) of edges given as id keys (the ids
    themselves when ``ids`` are ``0 .. n-1``, a graph's usual ids: no search)."""
    low, high = unpack(keys)
    if counted(ids):
        return low, high
    return np.searchsorted(ids, low), np.searchsorted(ids, high)


def indexed(ids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(at, held)``: the index in the sorted node ids ``ids`` of each of the ids ``wanted`` (0 where
    not held), and a mask of those held; no search when ``ids`` are ``0 .. n-1``."""
    if counted(ids):
        held = (wanted >= 0) & (wanted < len(ids))
    else:
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        held = ids[at] == wanted
        wanted = at
    return np.where(held, wanted, 0), held


def counted(ids: np.ndarray) -> bool:
    """Whether the sorted distinct node ids ``ids`` are ``0 .. n-1``: each id is then its own index."""
    return not len(ids) or (ids[0] == 0 and ids[-1] == len(ids) - 1)


def announce(forest: Forest, inserted: np.ndarray, deleted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round 1 at one replica: ``(deleted, inserted)`` to send to every replica, id keys. Of its
    deleted edges, the forest's; of its inserted edges, a spanning forest of them over the
    trees of the forest (a node not in it yet its own tree): those joining trees, few. A bulk
    (more than one edge per :data:`BULK` nodes) is sent whole: the forest it rebuilds is then
    breadth-first over all its edges (:func:`rebuilt`), not over a hooking's deeper trees.
    Self-loops that came or went are sent too: they tell which nodes have an edge."""
    if len(deleted):
        loop = is_loop(deleted)
        deleted = concat([deleted[loop], deleted[~loop][forest.holds(*as_indices(forest.ids, deleted[~loop]))]])
    if not len(inserted):
        return deleted, EMPTY
    wider = extended(forest, concat(list(unpack(inserted))))
    if is_bulk(len(inserted), len(wider.up)):  # sent whole: the forest rebuilt from all of it is shallow
        return deleted, inserted
    chosen = joining(wider.root, *as_indices(wider.ids, inserted))[0]
    return deleted, inserted[chosen | is_loop(inserted)]


def is_bulk(edges: int, nodes: int) -> bool:
    """Whether ``edges`` added at once to a forest of ``nodes`` are a bulk, which rebuilds it
    (more than one edge per :data:`BULK` nodes, as a first epoch)."""
    return edges * BULK > nodes


def is_loop(keys: np.ndarray) -> np.ndarray:
    """A mask of the self-loops among edge keys."""
    low, high = unpack(keys)
    return low == high


def extended(forest: Forest, ids: np.ndarray) -> Forest:
    """The forest with the node ids ``ids`` it lacks added, each its own tree; indices renumbered
    (the order of ids kept, so a tree's smallest index stays its smallest)."""
    fresh = ids[ids >= len(forest.ids)] if counted(forest.ids) else ids[~member(ids, forest.ids)]
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
    depth = np.zeros(len(wider), dtype=np.int64)
    depth[old] = forest.depth
    kept = not len(old) or old[-1] == len(old) - 1  # indices kept (ids 0 .. n-1 as before): the index too
    return Forest(wider, up, root, old[forest.loops], forest.kids.widened(len(up)) if kept else Children.of(up), depth)


def split_join(forest: Forest, deleted: np.ndarray, inserted: np.ndarray) -> tuple[Forest, bool, np.ndarray, np.ndarray]:
    """Round 2, the same at every replica: ``(F'', split, moved, tops)`` from every replica's
    announcements (id keys, in any order). ``split`` if a forest edge was deleted: then ``F''``
    is the forest less the deleted edges, each of its parts a piece of one tree of before (what
    :func:`candidates` relies on), ``moved`` the nodes cut off, ``tops`` the nodes cut from
    their parents (a part's top each), and the inserted edges wait for :func:`reconnected`.
    Otherwise ``F''`` is the forest plus the inserted edges joining different trees, the new
    forest, ``moved`` the nodes whose component changed, and no ``tops``."""
    inserted = distinct(inserted)
    forest = extended(forest, concat(list(unpack(inserted))))
    deleted, inserted = (pack(*as_indices(forest.ids, keys)) for keys in (deleted, inserted))
    gone, came = deleted[is_loop(deleted)], inserted[is_loop(inserted)]
    if len(gone) or len(came):
        loops = distinct(concat([forest.loops, unpack(came)[0]]))
        forest = replace(forest, loops=loops[~member(loops, distinct(unpack(gone)[0]))])
    a, b = unpack(deleted[~is_loop(deleted)])
    if len(a):
        tops = distinct(np.where(forest.up[a] == b, a, b))
        forest, cut_off = cut(forest, tops)
        return forest, True, cut_off, tops
    forest, hung = with_edges(forest, inserted[~is_loop(inserted)])
    return forest, False, hung, EMPTY


def cut(forest: Forest, children: np.ndarray) -> tuple[Forest, np.ndarray]:
    """The forest without the edges from ``children`` to their parents, and the nodes cut off: each
    child's subtree, found down the children index from every child at once (a cut below
    another starts a part of its own). Each part's label is its smallest node, but it stays
    rooted at its top (where it was cut) until :func:`reconnected`: most parts hang back by
    their top, so they are not rerooted twice. The part left above a cut keeps its root, the
    smallest node, and its label: none of it is visited."""
    children = distinct(children)
    up, kids = forest.up.copy(), forest.kids.copy()
    kids.relink(pair(up[children], children), EMPTY)
    up[children] = children
    nodes, top = subtrees(kids, children)
    smallest = np.full(len(children), len(up), dtype=np.int64)
    np.minimum.at(smallest, top, nodes)
    root = forest.root.copy()
    root[nodes] = smallest[top]
    return replace(forest, up=up, root=root, kids=kids), nodes


def rerooted(up: np.ndarray, kids: Children, node: np.ndarray, new: np.ndarray) -> None:
    """Each ``node``'s tree rerooted at it (the path from it to its root reversed) and hung from
    ``new`` (``new = node`` only reroots): ``up`` and the children index changed so in place,
    the index for the nodes whose parent changed only. The paths must be apart."""
    moved, was = [], []
    for _ in range(len(up) + 1):
        if not len(node):
            break
        above = up[node]
        moved.append(node)
        was.append(above)
        up[node] = new
        going = above != node
        node, new = above[going], node[going]
    else:
        raise ValueError(f"the parent links of {len(node)} nodes form a cycle, not a forest")
    child, old = concat(moved), concat(was)
    now = up[child]
    kids.relink(pair(old, child)[(old != child) & (old != now)], pair(now, child)[(now != child) & (old != now)])


def with_edges(forest: Forest, keys: np.ndarray, known: np.ndarray = EMPTY) -> tuple[Forest, np.ndarray]:
    """The forest with those of the edges ``keys`` (index keys, sorted) that join its trees added,
    and the nodes whose component changed: each joined tree hangs from the one with the
    smallest root, which stays the root and is the label of all; only the hung trees' nodes
    are relabelled (see :func:`members` for ``known``; a tree of ``known`` rooted elsewhere
    than at its smallest node, a part cut off, is rerooted there). A bulk of edges (more than
    one per :data:`BULK` nodes, as the first epoch's) rebuilds the forest instead (:func:`rebuilt`)."""
    if is_bulk(len(keys), len(forest.up)):
        return rebuilt(forest, keys)
    keys = keys[shallow(forest, *unpack(keys), known)]  # sorted keys: ties by key
    chosen, touched, top = joining(forest.root, *unpack(keys))
    if not len(touched) and not len(known):
        return forest, EMPTY
    up, kids, root, nodes = forest.up.copy(), forest.kids.copy(), forest.root.copy(), EMPTY
    if len(touched):
        a, b = unpack(keys[chosen])
        hung = np.flatnonzero(top != np.arange(len(touched)))
        nodes, under = members(forest, touched[hung], known)
        root[nodes] = touched[top[hung]][under]
        linked(up, kids, (a, np.searchsorted(touched, forest.root[a])), (b, np.searchsorted(touched, forest.root[b])), top)
    label = distinct(root[known])
    misplaced = label[up[label] != label]  # parts cut off left at the top of their tree, rooted at their cut
    rerooted(up, kids, misplaced, misplaced)
    return with_depths(replace(forest, up=up, root=root, kids=kids), concat([known, nodes])), nodes


def shallow(forest: Forest, a: np.ndarray, b: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """The edges ``(a, b)`` in order of the depth of their end that was not ``moved`` (``a``'s if
    neither was), ties in their order (a stable order): edges taken in this order hang a tree
    from shallow nodes first, so the forest stays shallow. Depths are sorted by radix while
    they fit 16 bits (a pass, not a comparison sort)."""
    mask = np.zeros(len(forest.up), dtype=bool)
    mask[moved] = True
    depth = np.where(mask[a], forest.depth[b], forest.depth[a])
    narrow = depth.astype(np.int16) if len(depth) and int(depth.max()) < 2**15 else depth
    return np.argsort(narrow, kind="stable")


def with_depths(forest: Forest, nodes: np.ndarray) -> Forest:
    """The forest with the depths of ``nodes`` found again (whole subtrees: every child of one is
    among them) by :func:`~raytide.graph.hooking.depths`; the others' depths did not change."""
    if not len(nodes):
        return forest
    depth = forest.depth.copy()
    found, deeper = depths(forest.up, forest.depth, nodes)
    depth[found] = deeper
    return replace(forest, depth=depth)


def members(forest: Forest, tops: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, top)``: every node of the trees rooted at ``tops`` (sorted), and the index in
    ``tops`` of its root. The nodes of a tree whose root is among the nodes ``known`` are taken
    from them (the caller vouches that they hold all of such a tree: the nodes whose component
    changed this epoch do); the others are found down the children index."""
    if not len(known):
        return subtrees(forest.kids, tops)
    mask = np.zeros(len(forest.up), dtype=bool)
    mask[known] = True
    inside = mask[tops]
    walked, under = subtrees(forest.kids, tops[~inside])
    index = np.full(len(forest.up), -1, dtype=np.int64)  # a top's index in ``tops``, by node (no search)
    index[tops[inside]] = np.flatnonzero(inside)
    at = index[forest.root[known]]
    hit = at >= 0
    return concat([walked, known[hit]]), concat([np.flatnonzero(~inside)[under], at[hit]])


def rebuilt(forest: Forest, keys: np.ndarray) -> tuple[Forest, np.ndarray]:
    """The forest rebuilt from its edges and the edges ``keys`` (index keys) as breadth-first trees,
    each from its smallest node, and every node (all moved): for a bulk of edges, a shallow
    forest, so that later cuts cut off small subtrees (their size is the forest's depth)."""
    count = len(forest.up)
    child = np.flatnonzero(forest.up != np.arange(count))
    low, high = unpack(keys)
    a, b = concat([low, child]), concat([high, forest.up[child]])
    root = spanning_forest(count, a, b)[1]
    order = np.argsort(concat([a, b]), kind="stable")
    far = concat([b, a])[order]
    start = offsets(concat([a, b]) << SHIFT, count)
    up, depth = np.arange(count, dtype=np.int64), np.zeros(count, dtype=np.int64)
    seen = root == up
    front = np.flatnonzero(seen)
    while len(front):  # a level of every tree at once; each node's parent its first neighbour seen
        at, owner = runs(start[front], start[front + 1] - start[front])
        near, nearby = front[owner], far[at]
        fresh = ~seen[nearby]
        front, first = np.unique(nearby[fresh], return_index=True)
        up[front] = near[fresh][first]
        depth[front] = depth[up[front]] + 1
        seen[front] = True
    return Forest(forest.ids, up, root, forest.loops, Children.of(up), depth), np.arange(count)


def linked(up: np.ndarray, kids: Children, ends_a: tuple[np.ndarray, np.ndarray],
           ends_b: tuple[np.ndarray, np.ndarray], top: np.ndarray) -> None:
    """The edges ``(a, b)`` added to the forest ``up`` and its children index ``kids`` (changed in
    place): ``ends_a`` is ``(a, tree of a)``, ``ends_b`` the same of ``b``, trees as indices
    into ``top`` (``top[t]`` the tree at the top of ``t``'s joined tree); the edges a spanning
    forest over the trees. Each joined tree hangs from its top, level by level; a tree hung by
    its node ``x`` is rerooted at ``x`` first, then ``x``'s parent is the other end."""
    (a, ta), (b, tb) = ends_a, ends_b
    placed = top == np.arange(len(top))  # trees hung already, or at the top of their joined tree
    child, parent = [], []
    while len(a):
        on_a, on_b = placed[ta], placed[tb]
        now = on_a != on_b
        hung = np.where(on_a[now], tb[now], ta[now])
        if not now.any() or len(distinct(hung)) < len(hung):
            raise ValueError(f"{len(a)} edges to link close a cycle: they are not a forest over the trees")
        child.append(np.where(on_a[now], b[now], a[now]))
        parent.append(np.where(on_a[now], a[now], b[now]))
        placed[hung] = True
        a, b, ta, tb = a[~now], b[~now], ta[~now], tb[~now]
    rerooted(up, kids, concat(child), concat(parent))


def candidates(forest: Forest, owned: OwnedEdges, moved: np.ndarray, tops: np.ndarray, inserted: np.ndarray) -> np.ndarray:
    """Round 2 at one replica, after a split: enough of its present edges whose ends are in
    different parts of ``F''`` to join them as all of them would, reduced to a spanning forest
    over the parts (id keys, to send to every replica). Only two kinds can cross: edges at a
    node cut off (``moved``, by :func:`split_join`), found in the adjacency, and the edges it
    ``inserted`` this epoch (all taken); any other was inside a tree and is.

    Each part is searched down from its top (``tops``: where it was cut), a level at a time,
    until it is settled: an edge of before found from it to a node not cut off (so to the part
    left above the cuts of its own tree); its nodes below are not searched. Leaving out an edge
    of before between two parts of a tree is safe: a settled end is joined to the part above;
    the other end is too, or is not settled and its own search (down to its last level) finds
    the edge. Most parts settle at their top: hung by it, they keep their shape (rerooted at
    their top again), so the forest's depth does not drift."""
    cut_off = np.zeros(len(forest.ids), dtype=bool)
    cut_off[moved] = True
    a, b, searched = searched_down(forest, owned, tops, cut_off, inserted)
    new_a, new_b = as_indices(forest.ids, inserted)
    new = ~(searched[new_a] | searched[new_b])  # an inserted edge at a searched node is found there
    a, b = concat([a, new_a[new]]), concat([b, new_b[new]])
    once = ~searched[b] | (a < b)  # an edge found from both ends: once, from the smaller
    a, b = a[once], b[once]
    crossing = np.flatnonzero(forest.root[a] != forest.root[b])
    crossing = crossing[shallow(forest, a[crossing], b[crossing], moved)]
    chosen = joining(forest.root, a[crossing], b[crossing])[0]
    return pack(forest.ids[a[crossing[chosen]]], forest.ids[b[crossing[chosen]]])


def searched_down(forest: Forest, owned: OwnedEdges, tops: np.ndarray, cut_off: np.ndarray,
                  inserted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, searched)``: the present edges of ``owned`` at the nodes of the parts cut off
    (``a`` the end searched), each part searched a level at a time down from its top (in
    ``tops``) until one is settled (:func:`candidates`), and a mask of the nodes searched."""
    settled = np.zeros(len(forest.ids), dtype=bool)  # parts, by their roots
    searched = np.zeros(len(forest.ids), dtype=bool)
    found_a, found_b, front = [], [], tops
    for _ in range(len(forest.ids) + 1):
        if not len(front):
            break
        a, b = incident(forest.ids, owned, front)
        searched[front] = True
        settled[forest.root[a[~cut_off[b] & ~member(pack(forest.ids[a], forest.ids[b]), inserted)]]] = True
        found_a.append(a)
        found_b.append(b)
        child = forest.kids.of_parents(front)[0]
        front = child[~settled[forest.root[child]]]
    return concat(found_a), concat(found_b), searched


def incident(ids: np.ndarray, owned: OwnedEdges, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``: the present edges of ``owned`` at ``nodes`` (indices into ``ids``), ``a`` the end
    among them, read at their runs of the adjacency's tiers."""
    found = []
    for index, copies in owned.tiers():
        at, _ = index.at(ids[nodes])
        found.append(index.keys[at[copies[at] > 0]])
    return as_indices(ids, concat(found))


def reconnected(forest: Forest, found: np.ndarray, inserted: np.ndarray, moved: np.ndarray) -> tuple[Forest, np.ndarray]:
    """Round 3, the same at every replica: ``F''`` with every replica's candidates and every
    announced inserted edge (id keys, in any order) that join its trees added: the new forest,
    and the nodes whose component changed (``moved``, :func:`split_join`'s, are those cut off:
    their parts are not walked again)."""
    return with_edges(forest, pack(*as_indices(forest.ids, distinct(concat([found, inserted])))), moved)


def relabelled(before: Forest, after: Forest, moved: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, labels)``: the nodes among ``moved`` (indices into ``after``, which may hold more nodes)
    whose label differs from ``before``'s, new nodes included, and their labels now."""
    mask = np.zeros(len(after.ids), dtype=bool)
    mask[moved] = True
    if len(after.ids) > len(before.ids):  # new nodes, each its own tree's top or hung (a pass only when some came)
        mask |= ~member(after.ids, before.ids)
    node = np.flatnonzero(mask)
    ids, label = after.ids[node], after.ids[after.root[node]]
    if not len(before.ids):
        return ids, label
    at, held = indexed(before.ids, ids)
    changed = ~held | (before.ids[before.root[at]] != label)
    return ids[changed], label[changed]


def run_epoch(forests: list[Forest], owned: list[OwnedEdges], updates: list[tuple[np.ndarray, np.ndarray]]
              ) -> tuple[list[Forest], list[OwnedEdges], int, tuple[np.ndarray, np.ndarray]]:
    """One epoch of every replica, the exchanges done in place (a reference of the rounds, for
    tests and benchmarks): ``(forests, owned, exchanges, changes)``, ``updates[r]`` replica
    ``r``'s ``(id keys, diffs)``. Exchanges: 1 if no forest edge was deleted anywhere, else 2;
    ``changes`` the ``(ids, labels)`` of the nodes whose label changed (:func:`relabelled`),
    as every replica finds them."""
    applied = [apply_updates(mine, keys, diff) for mine, (keys, diff) in zip(owned, updates, strict=True)]
    owned = [mine for mine, _, _ in applied]
    sent = [announce(forest, inserted, deleted) for forest, (_, inserted, deleted) in zip(forests, applied, strict=True)]
    middle = [split_join(forest, concat([d for d, _ in arrived(sent, r)]), concat([i for _, i in arrived(sent, r)]))
              for r, forest in enumerate(forests)]
    if not middle[0][1]:
        return [forest for forest, _, _, _ in middle], owned, 1, relabelled(forests[0], middle[0][0], middle[0][2])
    found = [candidates(forest, mine, moved, tops, inserted)
             for (forest, _, moved, tops), mine, (_, inserted, _) in zip(middle, owned, applied, strict=True)]
    final = [reconnected(forest, concat(arrived(found, r)), concat([i for _, i in arrived(sent, r)]), moved)
             for r, (forest, _, moved, _) in enumerate(middle)]
    changes = relabelled(forests[0], final[0][0], concat([middle[0][2], final[0][1]]))
    return [forest for forest, _ in final], owned, 2, changes


def arrived(sent: list, replica: int) -> list:
    """What every replica sent, in the order ``replica`` gets it in (its own first: an order of its own)."""
    return sent[replica:] + sent[:replica]
