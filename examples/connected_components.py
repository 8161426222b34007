"""Connected components by label propagation inside a raytide loop, vectorised with NumPy.

    python examples/connected_components.py --edges edges.txt --out labels.txt [--parallelism 2]
    ray job submit --working-dir . -- python examples/connected_components.py --edges edges.txt --out labels.txt

The edge file has one ``u v`` pair of integers per line (direction is ignored); the
output has one ``node label`` line per node that appears in an edge, sorted by node, and
the label is the smallest node id of the node's component.

How it runs (Naiad's per-iteration rounds, all data columnar -- dicts of NumPy arrays):

* the input ``edges`` takes batches ``{"src": ..., "dst": ...}``; a fused
  ``map_batches`` adds the reverse of every edge;
* inside the loop one vertex, :class:`LabelPropagation`, owns the nodes: its input 0
  (the edges, at iteration 0) is exchanged by the integer column ``"src"`` and its
  input 1 (label proposals, from the feedback) by ``"node"``, so the replica owning a
  node gets both its out-edges and every proposal for it;
* iteration 0 (``on_notify((epoch, 0))``): give new nodes their own id as label, add
  the new edges to the adjacency (CSR), and let every new edge ``src -> dst`` offer
  ``dst``'s id to ``src`` right there -- both directions of an edge arrive together, so
  that is the proposal ``dst``'s owner would have sent if ``dst`` is new; only nodes
  seen in earlier epochs send their label over their new edges. On a fresh graph the
  first round needs no message at all;
* iteration ``i`` (``on_notify((epoch, i))``): take the minimum proposal per node
  (``np.minimum.at``), lower the labels that it beats and send proposals only from
  those *changed* nodes to their neighbours, at ``i`` (the feedback makes it ``i + 1``);
* before proposals leave a replica they are combined per target (minimum), and those
  that cannot lower anything are dropped: to a node owned here whose label is already
  as small, or to a remote node this replica already sent a label as small (one dense
  ``floor`` array per replica holds both). Ids that fit travel as int32;
* every change also leaves the loop, to :class:`EpochLabels` in the same actor, which
  folds an epoch's changes and sends them on output ``labels`` once the loop has
  drained: a chunk ``("labels", nodes, labels, counters)`` with two arrays per replica,
  so the output is columnar too (the driver takes the minimum per node, the latest label);
* no useful proposal means no message: the next iteration's timestamp is never used,
  the loop drains and the frontier passes the epoch -- that is the termination test,
  no counting round is needed;
* on the same output, one small ``("work", {...})`` record per notification (proposals
  in, labels changed, proposals out, wall-clock times) shows the work per iteration to
  the tests and the benchmark. (One output rather than two: a second output would leave
  the loop through an egress and a sink of its own, with its own progress every iteration.)
* the feedback is fused into the vertex's actor (a chain can branch), so proposals go
  from one replica straight to the owner of their node, and those for the replica's
  own nodes never leave its process.

State persists across epochs, so the same vertex computes components *incrementally*
(``examples/incremental_components.py``): epoch ``e``'s edges start from the labels of
epoch ``e - 1``. Epochs must then be fed one after another (epoch ``e + 1`` after the
output of epoch ``e`` is complete): ``(e, 5)`` and ``(e + 1, 0)`` are incomparable
timestamps, so the frontier alone does not order them, and the vertex raises if it is
asked to handle an earlier epoch after a later one rather than give a wrong answer.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import ray

import raytide as rt

INF = np.iinfo(np.int64).max
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMPTY = np.empty(0, dtype=np.int64)
#: Merge the adjacency's CSR segments (one per epoch) once there are more than this many.
MAX_SEGMENTS = 8


def narrow(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays as int32 if all their values fit (half the bytes to serialise and route), else unchanged."""
    if all(not len(a) or (int(a.min()) >= -(1 << 31) and int(a.max()) < (1 << 31)) for a in arrays):
        return tuple(a.astype(np.int32, copy=False) for a in arrays)
    return arrays


def covering(array: np.ndarray, high: int, fill: int) -> np.ndarray:
    """``array`` if it has an index ``high``, else a copy grown to it (at least doubled), new cells ``fill``."""
    if high < len(array):
        return array
    grown = np.full(max(high + 1, 2 * len(array)), fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def _dense(lo: int, hi: int, count: int) -> bool:
    """Whether ids in ``[lo, hi]`` are dense enough to index a lookup table directly."""
    return lo >= 0 and hi < 8 * count + (1 << 20)


class NodeIndex:
    """Global node ids to local slots ``0 .. n-1`` (batch after batch), vectorised.

    Dense ids (non-negative, not much larger than their number) go through a lookup
    table; any other ids through a sorted array and ``searchsorted``.
    """

    def __init__(self) -> None:
        self.ids = EMPTY
        self._table: Optional[np.ndarray] = np.empty(0, dtype=np.int64)  # id -> slot, -1 if absent
        self._keys, self._slots = EMPTY, EMPTY  # sparse mode: sorted ids and their slots

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dense(self) -> bool:
        """Whether the ids seen so far index a lookup table (else a sorted array)."""
        return self._table is not None

    def add(self, ids: np.ndarray) -> np.ndarray:
        """Give the ids not indexed yet the next slots (in id order); returns those new ids, distinct and sorted."""
        if not len(ids):
            return EMPTY
        if self._table is not None and _dense(int(ids.min()), int(ids.max()), len(self.ids) + len(ids)):
            new = self._add_dense(ids)
        else:
            self._to_sparse()
            new = self._add_sparse(ids)
        self.ids = np.concatenate([self.ids, new])
        return new

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """The slots of ``ids`` (all of which must have been added)."""
        if self._table is not None:
            return self._table[ids]
        return self._slots[np.searchsorted(self._keys, ids)]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The slots of ``ids``, -1 for ids never added."""
        if not len(ids):
            return EMPTY
        if self._table is not None:
            table = self._table
            if int(ids.min()) >= 0 and int(ids.max()) < len(table):
                return table[ids]
            out = np.full(len(ids), -1, dtype=np.int64)
            inside = (ids >= 0) & (ids < len(table))
            out[inside] = table[ids[inside]]
            return out
        if not len(self._keys):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._keys, ids), len(self._keys) - 1)
        return np.where(self._keys[pos] == ids, self._slots[pos], -1)

    def _add_dense(self, ids: np.ndarray) -> np.ndarray:
        table = self._table
        assert table is not None
        table = self._table = covering(table, int(ids.max()), -1)
        fresh = np.zeros(len(table), dtype=bool)  # a mark per id: little memory, no sort
        fresh[ids] = True
        np.logical_and(fresh, table < 0, out=fresh)
        new = np.flatnonzero(fresh)
        table[new] = len(self.ids) + np.arange(len(new))
        return new

    def _to_sparse(self) -> None:
        if self._table is not None:
            self._table = None
            order = np.argsort(self.ids, kind="stable")
            self._keys, self._slots = self.ids[order], order

    def _add_sparse(self, ids: np.ndarray) -> np.ndarray:
        distinct = np.unique(ids)
        if len(self._keys):
            pos = np.minimum(np.searchsorted(self._keys, distinct), len(self._keys) - 1)
            distinct = distinct[self._keys[pos] != distinct]
        keys = np.concatenate([self._keys, distinct])
        slots = np.concatenate([self._slots, len(self.ids) + np.arange(len(distinct))])
        order = np.argsort(keys, kind="stable")
        self._keys, self._slots = keys[order], slots[order]
        return distinct


def group_by_first(firsts: np.ndarray, seconds: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort pairs by their first element (slots in ``[0, groups)``); returns ``(offsets, seconds)``.

    CSR: the seconds of group ``g`` are ``seconds[offsets[g]:offsets[g + 1]]``. When both
    fit into 63 bits together, the pairs are packed into one int64 and sorted with
    ``np.sort`` (SIMD, several times faster than ``argsort``).
    """
    counts = np.bincount(firsts, minlength=groups)
    offsets = np.zeros(groups + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not len(seconds):
        return offsets, EMPTY
    lo, hi = int(seconds.min()), int(seconds.max())
    shift = max(hi.bit_length(), 1)
    if lo >= 0 and shift + max(groups.bit_length(), 1) <= 63:
        packed = firsts.astype(np.int64)  # one array, packed and unpacked in place
        packed <<= shift
        packed |= seconds
        packed.sort()
        packed &= (1 << shift) - 1
        return offsets, packed
    return offsets, seconds[np.argsort(firsts, kind="stable")]


class Adjacency:
    """Out-edges of local slots as CSR segments, one per batch of edges (merged when many)."""

    def __init__(self) -> None:
        self.segments: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, slots: np.ndarray, targets: np.ndarray, nodes: int) -> np.ndarray:
        """Add the edges ``slots[k] -> targets[k]``; ``nodes`` is the number of local slots.

        Returns the smallest new target of every slot (INF for slots without new edges).
        """
        smallest = np.full(nodes, INF, dtype=np.int64)
        if len(slots):
            offsets, grouped = group_by_first(slots, targets, nodes)
            grouped, = narrow(grouped)  # half the memory to keep and to gather from, when ids fit
            self.segments.append((offsets, grouped))
            some = np.flatnonzero(np.diff(offsets))
            smallest[some] = np.minimum.reduceat(grouped, offsets[some])
        if len(self.segments) > MAX_SEGMENTS:
            sources = [np.repeat(np.arange(len(o) - 1), np.diff(o)) for o, _ in self.segments]
            targets_all = [t for _, t in self.segments]
            self.segments = [group_by_first(np.concatenate(sources), np.concatenate(targets_all), nodes)]
        return smallest

    def spread(self, slots: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``values[k]`` along every out-edge of ``slots[k]`` (slots distinct): ``(targets, values)``, vectorised."""
        targets, spread = [], []
        for offsets, segment in self.segments:
            inside = np.flatnonzero(slots < len(offsets) - 1)
            starts = offsets[slots[inside]]
            lengths = offsets[slots[inside] + 1] - starts
            some = np.flatnonzero(lengths)
            if not len(some):
                continue
            inside, starts, lengths = inside[some], starts[some], lengths[some]
            # positions into the segment: runs starts[k] .. starts[k] + lengths[k] - 1, by one
            # cumulative sum over steps of 1 with a jump at the start of every run
            ends = np.cumsum(lengths)
            steps = np.ones(int(ends[-1]), dtype=np.int64)
            steps[0] = starts[0]
            steps[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1]) + 1
            targets.append(segment[np.cumsum(steps, out=steps)])
            spread.append(np.repeat(values[inside], lengths))
        return _cat(targets), _cat(spread)


class MinCombiner:
    """The minimum value per key of ``(keys, values)`` arrays, with a reusable dense scratch array."""

    def __init__(self) -> None:
        self.scratch = np.empty(0, dtype=np.int64)

    def combine(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(distinct keys, minimum value of each)``; the keys come out sorted."""
        if not len(keys):
            return EMPTY, EMPTY
        lo, hi = int(keys.min()), int(keys.max())
        if not _dense(lo, hi, len(keys)):
            distinct, inverse = np.unique(keys, return_inverse=True)
            best = np.full(len(distinct), INF, dtype=np.int64)
            np.minimum.at(best, inverse, values)
            return distinct, best
        self.cover(hi)
        scratch = self.scratch
        np.minimum.at(scratch, keys, values)
        if 4 * len(keys) >= hi - lo:  # many keys for their range: scan the range
            touched = lo + np.flatnonzero(scratch[lo : hi + 1] < INF)
        else:  # few keys in a wide range: find them without scanning
            touched = np.unique(keys)
        best = scratch[touched]
        scratch[touched] = INF  # clean for the next call
        return touched, best

    def cover(self, high: int) -> None:
        """Grow the scratch array (all INF between calls) to index keys up to ``high``."""
        self.scratch = covering(self.scratch, high, INF)


@dataclass
class _Inbox:
    edges: list
    proposals: list
    first: float  # wall-clock arrival of the first and the last message
    last: float


class LabelPropagation(rt.Vertex):
    """Owns a partition of the nodes: their labels and out-edges; see the module docstring.

    Inputs: 0 edges ``{"src", "dst"}`` (exchanged by ``src``), 1 proposals
    ``{"node", "label"}`` (exchanged by ``node``). Outputs: 0 proposals for the next
    iteration, 1 reports: label changes as ``("labels", nodes, labels, loop counters)``
    chunks and one ``("work", {...})`` record per notification.
    """

    def __init__(self) -> None:
        self.index = NodeIndex()
        self.labels = EMPTY
        self.adjacency = Adjacency()
        self.combiner = MinCombiner()
        # Dense ids only: per node id, the smallest label the node is known to get -- its own
        # label if it is owned here, else the smallest label sent to it (INF: none).
        self.floor = np.empty(0, dtype=np.int64)
        self.inbox: dict[rt.Timestamp, _Inbox] = {}
        self.phase: Optional[tuple] = None  # (epoch, outer counters) of the latest notification

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        inbox = self.inbox.get(time)
        now = time_now()
        if inbox is None:
            inbox = self.inbox[time] = _Inbox([], [], now, now)
            self.notify_at(time)
        (inbox.edges if edge == 0 else inbox.proposals).append(message)
        inbox.last = now

    def on_notify(self, time: rt.Timestamp) -> None:
        started = time_now()
        phase = (time.epoch, time.counters[:-1])
        if self.phase is not None and phase < self.phase:
            raise RuntimeError(
                f"label propagation got {time} after working on epoch/outer round {self.phase}: feed the "
                "epochs one after another (wait for an epoch's output before pushing the next)")
        self.phase = phase
        inbox = self.inbox.pop(time)
        out_keys, out_values = [], []
        changed_nodes, changed_labels = [], []
        edges_in = proposals_in = changed = 0
        best: Optional[np.ndarray] = None  # the smallest label offered to each local slot
        if inbox.edges:
            src = _column(inbox.edges, "src")
            dst = _column(inbox.edges, "dst")
            edges_in = len(src)
            known = len(self.index)  # slots below this belong to nodes seen before
            new = self.index.add(src)
            if len(new):
                self.labels = np.concatenate([self.labels, new])
                self._lower_floor(new, new)
                changed_nodes.append(new)
                changed_labels.append(new)
            slots = self.index.slots(src)
            # The edge src -> dst offers dst's *id* to src here, with no message: it is a node
            # of src's component, and it is dst's label if dst is new. Only a known dst may
            # have a smaller label; its owner sends that over the reverse edge dst -> src,
            # as this replica sends the label of every known src over its new edges.
            best = self.adjacency.add(slots, dst, len(self.index))
            old = np.flatnonzero(slots < known)
            out_keys.append(dst[old])
            out_values.append(self.labels[slots[old]])
        if inbox.proposals:
            nodes = _column(inbox.proposals, "node")
            values = _column(inbox.proposals, "label").astype(np.int64)  # ufunc.at is fast without casting
            proposals_in = len(nodes)
            if best is None:
                best = np.full(len(self.labels), INF, dtype=np.int64)
            np.minimum.at(best, self.index.slots(nodes), values)
        if best is not None:
            lowered = np.flatnonzero(best < self.labels)
            changed = len(lowered)
            if changed:
                new_labels = best[lowered]
                self.labels[lowered] = new_labels
                lowered_ids = self.index.ids[lowered]
                self._lower_floor(lowered_ids, new_labels)
                changed_nodes.append(lowered_ids)
                changed_labels.append(new_labels)
                targets, proposed = self.adjacency.spread(lowered, new_labels)
                out_keys.append(targets)
                out_values.append(proposed)
        keys, values = self.useful(_cat(out_keys), _cat(out_values))
        computed = time_now()
        if len(keys):
            keys, values = narrow(keys, values)
            self.send_by(0, {"node": keys, "label": values}, time)
        report: list[tuple] = [("labels", _cat(changed_nodes), _cat(changed_labels), time.counters)] if changed_nodes else []
        report.append(("work", {
            "epoch": time.epoch, "counters": time.counters, "replica": self.replica, "edges_in": edges_in,
            "proposals_in": proposals_in, "changed": changed, "proposals_out": len(keys),
            "received": (inbox.first, inbox.last), "started": started, "seconds": time_now() - started,
            "compute_seconds": computed - started,  # the rest of "seconds" is handing the proposals over
        }))
        self.send_by(1, report, time)

    def useful(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The smallest proposal per target node, without those that cannot lower a label.

        Returns ``(targets sorted, labels)``. A proposal is useless if its target is known
        to get a label at most as small: a node owned here whose label is already that
        small, or one this replica already sent a label that small (labels never rise).
        Dropping them never changes the result nor the iteration at which a label changes.
        With dense ids this is one scatter-min into a scratch array and one comparison
        with :attr:`floor` over the targets' id range; other ids take the general path.
        """
        if not len(keys):
            return EMPTY, EMPTY
        lo, hi = int(keys.min()), int(keys.max())
        if not (self.index.dense and _dense(lo, hi, len(self.index) + len(keys))):
            return self._useful_sparse(*self.combiner.combine(keys, values))
        self._cover(hi)
        scratch = self.combiner.scratch
        np.minimum.at(scratch, keys, values)
        window = scratch[lo : hi + 1]
        targets = lo + np.flatnonzero(window < self.floor[lo : hi + 1])
        best = scratch[targets]
        window.fill(INF)  # clean for the next call
        self.floor[targets] = best
        return targets, best

    def _useful_sparse(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`useful` for ids too sparse for a table: ``keys`` distinct; filters the local targets only."""
        slots = self.index.lookup(keys)
        local = slots >= 0
        keep = np.ones(len(keys), dtype=bool)
        keep[local] = values[local] < self.labels[slots[local]]
        return keys[keep], values[keep]

    def _cover(self, high: int) -> None:
        """Grow :attr:`floor` and the combiner's scratch array to index ids up to ``high``."""
        self.floor = covering(self.floor, high, INF)
        self.combiner.cover(high)

    def _lower_floor(self, ids: np.ndarray, labels: np.ndarray) -> None:
        """Local nodes ``ids`` (distinct) now have ``labels``: the floor follows while ids are dense."""
        if self.index.dense and len(ids):  # ids are distinct
            self._cover(int(ids.max()))
            self.floor[ids] = np.minimum(self.floor[ids], labels)

    def snapshot(self) -> Any:
        return {"ids": self.index.ids, "labels": self.labels, "adjacency": self.adjacency.segments,
                "floor": self.floor, "inbox": self.inbox, "phase": self.phase}

    def restore(self, state: Any) -> None:
        self.index = NodeIndex()
        self.index.add(state["ids"])
        self.labels = state["labels"]
        self.adjacency = Adjacency()
        self.adjacency.segments = state["adjacency"]
        self.floor, self.inbox, self.phase = state["floor"], state["inbox"], state["phase"]


class EpochLabels(rt.Vertex):
    """After the loop: folds an epoch's label changes and sends them once the epoch is done there.

    The loop reports every change at the iteration that made it; folding them here, in
    the same actor (a pipeline edge), keeps them off the wire until the loop has drained:
    one chunk per replica and epoch, the latest (smallest) label of every node that
    changed, followed by the epoch's work records.
    """

    def __init__(self) -> None:
        self.reports: dict[rt.Timestamp, list] = {}

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        if time not in self.reports:
            self.reports[time] = []
            self.notify_at(time)
        self.reports[time].extend(message)

    def on_notify(self, time: rt.Timestamp) -> None:
        chunks, work = split_reports(self.reports.pop(time))
        nodes, labels = latest_labels(chunks)
        folded: list[tuple] = [("labels", nodes, labels, time.counters)] if len(nodes) else []
        self.send_by(0, folded + [("work", w) for w in work], time)

    def snapshot(self) -> Any:
        return self.reports

    def restore(self, state: Any) -> None:
        self.reports = state


def time_now() -> float:
    """Wall-clock seconds (comparable across the processes of one machine)."""
    return time.time()


def _column(messages: list, name: str) -> np.ndarray:
    """Column ``name`` of columnar messages, concatenated (ids keep their int32 when they travelled so)."""
    columns = [np.asarray(m[name]) for m in messages]
    return columns[0] if len(columns) == 1 else np.concatenate(columns)


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    if not arrays:
        return EMPTY
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def both_directions(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every undirected edge ``{u, v}`` as the two directed edges ``u -> v`` and ``v -> u``."""
    src, dst = np.asarray(batch["src"]), np.asarray(batch["dst"])
    return {"src": np.concatenate([src, dst]), "dst": np.concatenate([dst, src])}


def propagation_loop(loop: rt.dataflow.Loop, directed_edges: rt.Stream, name: str = "label-propagation") -> rt.Stream:
    """Place the label-propagation loop body in ``loop``; returns its reports (inside the loop).

    ``directed_edges`` is a stream of ``{"src", "dst"}`` batches already inside ``loop``
    that holds both directions of every edge at the same timestamp (see
    :func:`both_directions`): iteration 0 relies on it.
    """
    back = loop.feedback(name=f"{name}.proposals")
    proposals, reports = loop.flow.vertex(
        LabelPropagation, [directed_edges, back.stream], outputs=2, exchange=["src", "node"], name=name)
    back.connect(proposals)
    return reports


def build_flow(parallelism: int = 2, name: str = "connected-components") -> rt.Dataflow:
    """The dataflow: input ``edges`` (``{"src", "dst"}`` batches), output ``labels`` (see :func:`split_reports`)."""
    flow = rt.Dataflow(name, parallelism=parallelism)
    edges = flow.input("edges").map_batches(both_directions, name="both-directions")
    loop = flow.loop("propagate")
    loop.leave(propagation_loop(loop, loop.enter(edges))).unary(EpochLabels, name="epoch-labels").output("labels")
    return flow


def split_reports(records: Sequence[tuple]) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[dict]]:
    """The records of output ``labels``: ``(label-change chunks (nodes, labels), work records)``."""
    chunks = [(r[1], r[2]) for r in records if r[0] == "labels"]
    return chunks, [r[1] for r in records if r[0] == "work"]


def latest_labels(chunks: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Fold label-change chunks into the current labels: ``(nodes sorted, labels)``.

    Labels only decrease, so a node's current label is the minimum of its changes.
    """
    if not chunks:
        return EMPTY, EMPTY
    nodes = np.concatenate([np.asarray(n, dtype=np.int64) for n, _ in chunks])
    labels = np.concatenate([np.asarray(lab, dtype=np.int64) for _, lab in chunks])
    return MinCombiner().combine(nodes, labels)


@dataclass
class Components:
    """The result of a run: labels per node plus what each notification did."""

    nodes: np.ndarray
    labels: np.ndarray
    work: list[dict]

    def as_dict(self) -> dict[int, int]:
        return dict(zip(self.nodes.tolist(), self.labels.tolist()))

    def iterations(self) -> list[dict[str, float]]:
        """Per iteration: proposals received, labels changed, and when it ended (see :func:`per_iteration`)."""
        return per_iteration(self.work)


def per_iteration(work: Sequence[dict]) -> list[dict[str, float]]:
    """Sum the work records of all replicas per loop counter; ``end`` is the last replica's finish time."""
    rounds: dict[tuple, dict[str, float]] = {}
    for w in work:
        r = rounds.setdefault(tuple(w["counters"]), {"proposals_in": 0, "changed": 0, "proposals_out": 0, "edges_in": 0,
                                                     "start": math.inf, "end": 0.0, "busy": 0.0})
        for k in ("proposals_in", "changed", "proposals_out", "edges_in"):
            r[k] += w[k]
        r["start"] = min(r["start"], w["started"])
        r["end"] = max(r["end"], w["started"] + w["seconds"])
        r["busy"] = max(r["busy"], w["seconds"])
    return [{"counters": k, **v} for k, v in sorted(rounds.items())]


def start_job(parallelism: int = 2, batch_size: int = 1 << 18, name: Optional[str] = None,
              pretouch_mb: int = 0) -> rt.Job:
    """Start the dataflow's actors (kept apart so that benchmarks can leave start-up out).

    ``pretouch_mb`` is :func:`raytide.run`'s: memory each actor maps while it starts, so
    that the first iteration, which builds the adjacency, does not fault it in.
    """
    return rt.run(build_flow(parallelism), parallelism=parallelism, batch_size=batch_size, name=name,
                  pretouch_mb=pretouch_mb)


def solve(job: rt.Job, edges: np.ndarray, timeout: float = 600.0) -> Components:
    """Push ``edges`` (``(E, 2)`` integers) into a fresh job as epoch 0, close it, wait, fold the labels."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if len(edges):
        src, dst = narrow(edges[:, 0], edges[:, 1])
        job.push("edges", {"src": np.ascontiguousarray(src), "dst": np.ascontiguousarray(dst)})
    job.close("edges")
    job.wait(timeout=timeout)
    chunks, work = split_reports(job.collect("labels").get(0, []))
    nodes, labels = latest_labels(chunks)
    return Components(nodes, labels, work)


def component_labels(edges: np.ndarray, parallelism: int = 2, timeout: float = 600.0) -> Components:
    """Connected components of the undirected graph ``edges``; starts and tears down one job."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    batch = max(1, math.ceil(len(edges) / parallelism))  # one pushed batch per input replica
    with start_job(parallelism, batch_size=batch) as job:
        return solve(job, edges, timeout)


def components(edges: np.ndarray, parallelism: int = 2, timeout: float = 600.0) -> dict[int, int]:
    """``{node: smallest node id of its component}`` for every node that appears in ``edges``."""
    return component_labels(edges, parallelism, timeout).as_dict()


# -- command line ---------------------------------------------------------------------------


def read_edge_file(path: str) -> np.ndarray:
    """``u v`` integer pairs, one per line, as an ``(E, 2)`` int64 array (Arrow's CSV reader; NumPy for odd spacing)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if os.path.getsize(path) == 0:
        return np.empty((0, 2), dtype=np.int64)
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=["u", "v"]),
            parse_options=pacsv.ParseOptions(delimiter=" "),
            convert_options=pacsv.ConvertOptions(column_types={"u": pa.int64(), "v": pa.int64()}))
        return np.stack([table["u"].to_numpy(), table["v"].to_numpy()], axis=1)
    except (pa.ArrowInvalid, ValueError):  # tabs, repeated spaces, comments: the slower, lenient reader
        return np.loadtxt(path, dtype=np.int64, ndmin=2, comments="#").reshape(-1, 2)


def write_labels(path: str, nodes: np.ndarray, labels: np.ndarray) -> None:
    """One ``node label`` line per node, written by Arrow (no Python loop per line)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = pa.table({"node": pa.array(nodes, pa.int64()), "label": pa.array(labels, pa.int64())})
    pacsv.write_csv(table, path, write_options=pacsv.WriteOptions(include_header=False, delimiter=" ",
                                                                   quoting_style="none"))


def connect_ray() -> bool:
    """Join the cluster named by ``RAY_ADDRESS`` (as under ``ray job submit``), else start a local Ray.

    Under ``ray job submit --working-dir .`` the workers find ``examples`` in the working
    directory. Returns True if this call started Ray (then the caller shuts it down).
    """
    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address="auto", log_to_driver=False)
    else:  # workers import ``examples`` from this checkout whatever the current directory
        path = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
        ray.init(address="local", log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Connected components of an edge list with raytide.")
    parser.add_argument("--edges", required=True, help="input file: one 'u v' pair of integers per line")
    parser.add_argument("--out", required=True, help="output file: one 'node label' line per node")
    parser.add_argument("--parallelism", type=int, default=2, help="replicas of the propagation vertex (default 2)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the job")
    args = parser.parse_args(argv)
    edges = read_edge_file(args.edges)
    started_ray = connect_ray()
    try:
        started = time.perf_counter()
        result = component_labels(edges, parallelism=args.parallelism, timeout=args.timeout)
        elapsed = time.perf_counter() - started
    finally:
        if started_ray:
            ray.shutdown()
    write_labels(args.out, result.nodes, result.labels)
    rounds = result.iterations()
    print(f"{len(edges)} edges, {len(result.nodes)} nodes, {len(np.unique(result.labels))} components, "
          f"{len(rounds)} iterations, {elapsed:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
