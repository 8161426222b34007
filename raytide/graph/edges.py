"""Edge batches as the graph layer takes them: dicts of NumPy columns ``src``, ``dst`` (and ``weight``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from raytide.core.batches import to_format
from raytide.core.combine import combine_by_key
from raytide.core.step import Step

EMPTY = np.empty(0, dtype=np.int64)
#: A round of a graph loop runs on to its local fixpoint (what the replica's own nodes offer
#: each other taken within the round) while the labels that drop in a step are at most
#: 1/LOCAL_WAVE_SHARE of the nodes it holds. A wider wave (a first epoch's, where every
#: node drops many times) goes on as messages, a step a round: flooding it locally redid
#: more work than it saved hops (a first fixpoint took 1.2-1.7x as long).
LOCAL_WAVE_SHARE = 8


def narrow(dropped: np.ndarray, held: int) -> bool:
    """Whether a step whose labels ``dropped`` may go on to the next step within the round."""
    return len(dropped) * LOCAL_WAVE_SHARE <= held


def edge_columns(batch: Any) -> dict[str, np.ndarray]:
    """A batch of ``(u, v)`` or ``(u, v, weight)`` records (or an ``(n, 2|3)`` array) as columns."""
    array = to_format(batch, "numpy")
    if isinstance(array, dict):
        return array
    if array.ndim != 2 or array.shape[1] not in (2, 3):
        raise ValueError(f"edges must be (u, v) or (u, v, weight) records, got an array of shape {array.shape}")
    columns = {"src": array[:, 0].astype(np.int64), "dst": array[:, 1].astype(np.int64)}
    if array.shape[1] == 3:
        columns["weight"] = array[:, 2].astype(np.float64)
    return columns


def both_directions(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every undirected edge ``{u, v}`` as the directed edges ``u -> v`` and ``v -> u``."""
    src, dst = np.asarray(batch["src"]), np.asarray(batch["dst"])
    out = {"src": np.concatenate([src, dst]), "dst": np.concatenate([dst, src])}
    if "weight" in batch:
        out["weight"] = np.concatenate([batch["weight"], batch["weight"]])
    return out


def spread(s: Step, slots: np.ndarray, values: np.ndarray, weighted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``values[k]`` along every out-edge of ``slots[k]``: ``(targets, values)`` (plus the edge's weight)."""
    which, rows = s.arrangement().expand(slots)
    if not len(which):
        return EMPTY, values[:0]
    sent = values[which]
    return rows["dst"], sent + rows["weight"] if weighted else sent


def useful_offers(s: Step, column: str, targets: np.ndarray, offers: np.ndarray) -> dict[str, np.ndarray]:
    """The offers of a step whose state only ever drops (a label, a distance) that may still lower it.

    Folded to the smallest offer per target first (one row per target, sorted, so the
    send's own combine has nothing left to fold), then an offer to a node held here is
    dropped unless it is below the node's ``column``: it could not lower it. Offers to
    nodes held elsewhere all go.
    """
    keys, smallest = combine_by_key(targets, {column: offers}, {column: np.minimum})
    best = smallest[column]
    slots = s.lookup(keys)
    held = s.state[column]
    keep = slots < 0
    if len(held):
        keep |= best < held[slots]  # slot -1 (held elsewhere) reads the last row: kept anyway
    return {"node": keys[keep], column: best[keep]}


#: State column ``changed`` of :func:`mark_changed` and :func:`changed_rows`: the mark of the epoch
#: a node changed in and was not sent for yet (-1: none).
CHANGED = (np.int64, -1)
#: Of ``changed`` for a step whose new nodes are sent in their first epoch though nothing
#: changed them (a component's label starts at the node's own id): -2 until :func:`mark_new`.
NEVER_SENT = -2
CHANGED_OR_NEW = (np.int64, NEVER_SENT)


def epoch_mark(s: Step) -> int:
    """The loop counter at which the step's epoch started: the same at every replica, and a
    different one for every epoch through the loop (they go one after another)."""
    return s.time.counters[-1] - s.iteration


def mark_changed(s: Step, slots: np.ndarray) -> None:
    """The nodes at ``slots`` changed in this epoch: :func:`changed_rows` sends them when it is over."""
    s.state["changed"][slots] = epoch_mark(s)


def mark_new(s: Step, slots: np.ndarray) -> None:
    """Of the nodes at ``slots``, those never sent yet (state ``CHANGED_OR_NEW``) are sent when the
    epoch is over; the others only if they change. A node is new once: an epoch that adds
    edges between known nodes sends only the nodes whose value they change."""
    mark_changed(s, slots[s.state["changed"][slots] == NEVER_SENT])


def changed_rows(column: str) -> Callable[[Step], dict[str, np.ndarray]]:
    """A loop's ``finish``: the ``(node, column)`` rows of the nodes that changed in the epoch
    and were not sent yet, then marked sent. The mark is the epoch's, not a flag: a replica
    that took keys in a rescale after it finished an epoch (and started the next) runs this
    again for that epoch and sends just those keys, none of the next epoch's changes."""

    def finish(s: Step) -> dict[str, np.ndarray]:
        slots = np.flatnonzero(s.state["changed"] == epoch_mark(s))
        s.state["changed"][slots] = -1
        return {"node": s.ids[slots], column: s.state[column][slots]}

    return finish


def as_pairs(batch: dict[str, np.ndarray], column: str) -> np.ndarray:
    """``(node, value)`` rows of a column batch, as an ``(n, 2)`` array (records: ``[node, value]``)."""
    return np.stack([batch["node"], batch[column]], axis=1)
