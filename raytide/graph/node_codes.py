"""Node ids as the spanning forest's codes: ids in ``[0, 2**31)`` are their own codes; any
other int64 ids are coded by their rank among every id seen (a dictionary encoding).

The forest packs an edge's two ends into one int64 key (:func:`~raytide.graph.sorted_pairs.pack`),
so its node codes must be below ``2**31``. A graph's ids usually are: then nothing is coded
and nothing is searched. The first id outside that range switches to ranks (``names``, the
sorted ids seen): a new id later shifts the codes above it, and the state is recoded by the
map :attr:`Recoding.shift` (monotone, so every sorted index of codes stays sorted). That costs
a pass over the state in an epoch that brings new ids, paid only by graphs whose ids need it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from raytide.graph.sorted_pairs import distinct, member

#: Ids below this are their own codes (two fit in an int64 edge key).
LIMIT = 2**31

#: Old codes to new ones: a monotone map, applied to every code the state holds.
Shift = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class NodeCodes:
    """The coding in force: ``names`` None while every id seen is its own code, else the sorted
    ids seen, each coded by its index."""

    names: np.ndarray | None = None

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The node ids of ``codes``."""
        return codes if self.names is None else self.names[codes]

    def encode(self, ids: np.ndarray, known: Callable[[], np.ndarray]) -> tuple[NodeCodes, np.ndarray, Shift | None]:
        """``(codes, coded ids, shift)``: the coding that holds ``ids`` as well as every id seen
        before, ``ids`` coded by it, and the map of the state's codes to it (None: unchanged).
        ``known()`` gives the codes the state holds (asked only when the coding switches to ranks)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.names is None:
            if not len(ids) or (int(ids.min()) >= 0 and int(ids.max()) < LIMIT):
                return self, ids, None
            names = distinct(np.concatenate([known(), ids]))
            return NodeCodes(names), np.searchsorted(names, ids), ranks_in(names)
        fresh = ids[~member(ids, self.names)]
        if not len(fresh):
            return self, np.searchsorted(self.names, ids), None
        names = distinct(np.concatenate([self.names, fresh]))
        return NodeCodes(names), np.searchsorted(names, ids), composed(ranks_in(names), self.names)


def ranks_in(names: np.ndarray) -> Shift:
    """Ids (the codes of the identity coding) to their ranks in ``names``."""
    return lambda codes: np.searchsorted(names, codes)


def composed(shift: Shift, names: np.ndarray) -> Shift:
    """Codes of the coding ``names`` to ``shift`` of their ids."""
    return lambda codes: shift(names[codes])
