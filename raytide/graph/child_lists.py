"""A forest's children index as a list per node, patched where links change: the replicated
spanning forest's (``raytide.graph.spanning_forest``) way down from a cut, with no pass over
the nodes an epoch (a sorted index of all the links would be copied, or recounted, at each change).

A link is a pair key ``pair(parent, child)`` (:func:`~raytide.graph.sorted_pairs.pair`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raytide.core.keyindex import concat
from raytide.graph.sorted_pairs import LOW, SHIFT, distinct, member

#: No node: the end of a list, or a node without children.
NONE = -1


@dataclass(frozen=True)
class Children:
    """Each node's children, a list in increasing order: ``first[p]`` is ``p``'s first child,
    ``after[x]`` the child after ``x`` of ``x``'s parent (:data:`NONE` ends a list). Every
    replica changing the same links gets the same lists (each list rebuilt in order), so
    the index holds no trace of the order in which links came. Changed in place
    (:meth:`relink`): a caller that keeps the index of before takes a :meth:`copy` first."""

    first: np.ndarray
    after: np.ndarray

    @classmethod
    def of(cls, up: np.ndarray) -> Children:
        """The children index of the parent links ``up`` (a root its own parent)."""
        child = np.flatnonzero(up != np.arange(len(up)))
        index = cls(np.full(len(up), NONE, dtype=np.int64), np.full(len(up), NONE, dtype=np.int64))
        index.laid(np.sort((up[child] << SHIFT) | child))  # no list to read or take from: laid at once
        return index

    def copy(self) -> Children:
        return Children(self.first.copy(), self.after.copy())

    def widened(self, count: int) -> Children:
        """The index over ``count`` nodes, the new ones without a parent or children."""
        extra = np.full(count - len(self.first), NONE, dtype=np.int64)
        return Children(concat([self.first, extra]), concat([self.after, extra]))

    def of_parents(self, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(child, owner)``: the children of ``parents``, and for each the index in ``parents``
        of its own; read down the lists, a step for each, as long as the longest list."""
        nodes: list[np.ndarray] = []
        owners: list[np.ndarray] = []
        node, owner = self.first[parents], np.arange(len(parents))
        for _ in range(len(self.first) + 1):
            held = node != NONE
            node, owner = node[held], owner[held]
            if not len(node):
                return concat(nodes), concat(owners)
            nodes.append(node)
            owners.append(owner)
            node = self.after[node]
        raise ValueError(f"the children lists of {len(parents)} nodes hold a cycle: they are not a forest's")

    def relink(self, gone: np.ndarray, came: np.ndarray) -> None:
        """In place: the links ``gone`` (each held) taken out and ``came`` (none held) put in, pair
        keys; only the lists of the parents they touch are rebuilt."""
        if not len(gone) and not len(came):
            return
        parents = distinct(concat([gone >> SHIFT, came >> SHIFT]))
        child, owner = self.of_parents(parents)
        held = (parents[owner] << SHIFT) | child
        links = distinct(concat([held[~member(held, distinct(gone))], came]))
        self.first[parents] = NONE
        self.after[gone & LOW] = NONE
        self.laid(links)

    def laid(self, links: np.ndarray) -> None:
        """In place: the lists of the parents of ``links`` (sorted pair keys, all of each one's
        children) laid out in their order."""
        if not len(links):
            return
        parent, child = links >> SHIFT, links & LOW
        last = np.append(parent[1:] != parent[:-1], True)  # the last child of its parent
        head = np.insert(last[:-1], 0, True)
        self.first[parent[head]] = child[head]
        self.after[child] = np.where(last, NONE, np.roll(child, -1))


def subtrees(kids: Children, tops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(nodes, top)``: every node of the subtrees under ``tops`` (roots in the children index
    ``kids``), ``tops`` first, and the index in ``tops`` of the one each is under.

    The lists are walked as the binary tree they are (a node's first child, and the sibling after
    it), from every top at once: a step takes one child or sibling further along every path, so
    the walk takes as many steps as the longest path counted so, not a step per sibling at every
    level (:meth:`Children.of_parents`, level by level, waits at each level for its longest list)."""
    nodes, top = [tops], [np.arange(len(tops))]
    node, owner, count = kids.first[tops], top[0], len(tops)
    while True:
        held = node != NONE
        node, owner = node[held], owner[held]
        if not len(node):
            return concat(nodes), concat(top)
        nodes.append(node)
        top.append(owner)
        count += len(node)
        if count > len(kids.first):  # a node reached twice
            raise ValueError(f"the children index of {len(kids.first)} nodes holds a cycle: it is not a forest's")
        node, owner = np.concatenate([kids.first[node], kids.after[node]]), np.concatenate([owner, owner])
