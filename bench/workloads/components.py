"""Connected components by label propagation inside a raytide loop, vectorised: the components benchmark's job.

Read ``examples/connected_components.py`` first: it is the same algorithm written to be
read. This one is written to be fast (``bench/bench_components.py`` times it against a
hand-written Ray loop and PySpark). How it runs (Naiad's per-iteration rounds, all data
columnar -- dicts of NumPy arrays, see :mod:`bench.workloads.columnar`):

* the input ``edges`` takes batches ``{"src": ..., "dst": ...}``; a fused
  ``map_batches`` adds the reverse of every edge (:func:`both_directions`);
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
  the benchmark. (One output rather than two: a second output would leave the loop
  through an egress and a sink of its own, with its own progress every iteration.)
* the feedback is fused into the vertex's actor (a chain can branch), so proposals go
  from one replica straight to the owner of their node, and those for the replica's
  own nodes never leave its process.

State persists across epochs, so epoch ``e``'s edges start from the labels of epoch
``e - 1``. Epochs must then be fed one after another (epoch ``e + 1`` after the output
of epoch ``e`` is complete): ``(e, 5)`` and ``(e + 1, 0)`` are incomparable timestamps,
so the frontier alone does not order them, and the vertex raises if it is asked to
handle an earlier epoch after a later one rather than give a wrong answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import raytide as rt
from bench.workloads.columnar import (
    EMPTY,
    INF,
    Adjacency,
    MinCombiner,
    NodeIndex,
    concat,
    covering,
    is_dense,
    narrow,
)
from raytide.errors import ProgressError


@dataclass
class Inbox:
    """The messages of one timestamp, and the wall-clock arrival of the first and the last."""

    edges: list
    proposals: list
    first: float
    last: float


@dataclass
class Round:
    """What one notification produces: proposals to send, label changes to report, counts of its work."""

    keys: list[np.ndarray] = field(default_factory=list)  # proposal targets ...
    values: list[np.ndarray] = field(default_factory=list)  # ... and the labels proposed to them
    nodes: list[np.ndarray] = field(default_factory=list)  # nodes whose label changed ...
    labels: list[np.ndarray] = field(default_factory=list)  # ... and their new labels
    edges_in: int = 0
    proposals_in: int = 0
    changed: int = 0  # labels lowered (new nodes not counted)

    def propose(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Offer ``values[k]`` to node ``keys[k]`` in the next iteration."""
        self.keys.append(keys)
        self.values.append(values)

    def report(self, nodes: np.ndarray, labels: np.ndarray) -> None:
        """Nodes ``nodes`` now have ``labels``."""
        self.nodes.append(nodes)
        self.labels.append(labels)


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
        self.inbox: dict[rt.Timestamp, Inbox] = {}
        self.phase: tuple | None = None  # (epoch, outer counters) of the latest notification

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        inbox = self.inbox.get(time)
        now = time_now()
        if inbox is None:
            inbox = self.inbox[time] = Inbox([], [], now, now)
            self.notify_at(time)
        (inbox.edges if edge == 0 else inbox.proposals).append(message)
        inbox.last = now

    def on_notify(self, time: rt.Timestamp) -> None:
        """One iteration: new edges, then proposals, lower the labels they beat, send the useful proposals."""
        started = time_now()
        self._enter_phase(time)
        inbox = self.inbox.pop(time)
        step = Round()
        best = self._add_edges(inbox.edges, step) if inbox.edges else None  # smallest label offered per slot
        if inbox.proposals:
            best = self._take_proposals(inbox.proposals, best, step)
        if best is not None:
            self._lower_labels(best, step)
        keys, values = self.useful(concat(step.keys), concat(step.values))
        computed = time_now()
        if len(keys):
            keys, values = narrow(keys, values)
            self.send_by(0, {"node": keys, "label": values}, time)
        work = {"epoch": time.epoch, "counters": time.counters, "replica": self.replica, "edges_in": step.edges_in,
                "proposals_in": step.proposals_in, "changed": step.changed, "proposals_out": len(keys),
                "received": (inbox.first, inbox.last), "started": started, "seconds": time_now() - started,
                "compute_seconds": computed - started}  # the rest of "seconds" is handing the proposals over
        changes = [("labels", concat(step.nodes), concat(step.labels), time.counters)] if step.nodes else []
        self.send_by(1, changes + [("work", work)], time)

    def _enter_phase(self, time: rt.Timestamp) -> None:
        """Refuse an earlier epoch (or outer round) after a later one: the labels already hold the later one."""
        phase = (time.epoch, time.counters[:-1])
        if self.phase is not None and phase < self.phase:
            raise ProgressError(
                f"vertex {self.name!r} replica {self.replica}: label propagation got {time} after working on "
                f"epoch/outer round {self.phase}: feed the epochs one after another (wait for an epoch's "
                "output before pushing the next)")
        self.phase = phase

    def _add_edges(self, messages: list, step: Round) -> np.ndarray:
        """Iteration 0: index new nodes (labelled with their own id), add the edges; returns the best offer per slot."""
        src, dst = column(messages, "src"), column(messages, "dst")
        step.edges_in = len(src)
        known = len(self.index)  # slots below this belong to nodes seen before
        new = self.index.add(src)
        if len(new):
            self.labels = np.concatenate([self.labels, new])
            self._lower_floor(new, new)
            step.report(new, new)
        slots = self.index.slots(src)
        # The edge src -> dst offers dst's *id* to src here, with no message: it is a node
        # of src's component, and it is dst's label if dst is new. Only a known dst may
        # have a smaller label; its owner sends that over the reverse edge dst -> src,
        # as this replica sends the label of every known src over its new edges.
        best = self.adjacency.add(slots, dst, len(self.index))
        old = np.flatnonzero(slots < known)
        step.propose(dst[old], self.labels[slots[old]])
        return best

    def _take_proposals(self, messages: list, best: np.ndarray | None, step: Round) -> np.ndarray:
        """Fold the proposals into the best offer per slot (a new array if there is none yet)."""
        nodes = column(messages, "node")
        values = column(messages, "label").astype(np.int64)  # ufunc.at is fast without casting
        step.proposals_in = len(nodes)
        if best is None:
            best = np.full(len(self.labels), INF, dtype=np.int64)
        np.minimum.at(best, self.index.slots(nodes), values)
        return best

    def _lower_labels(self, best: np.ndarray, step: Round) -> None:
        """Take every offer below its slot's label; the lowered nodes propose their label to their neighbours."""
        lowered = np.flatnonzero(best < self.labels)
        step.changed = len(lowered)
        if not len(lowered):
            return
        new_labels = best[lowered]
        self.labels[lowered] = new_labels
        lowered_ids = self.index.ids[lowered]
        self._lower_floor(lowered_ids, new_labels)
        step.report(lowered_ids, new_labels)
        step.propose(*self.adjacency.spread(lowered, new_labels))

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
        if not (self.index.dense and is_dense(lo, hi, len(self.index) + len(keys))):
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
        if self.index.dense and len(ids):
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


def column(messages: list, name: str) -> np.ndarray:
    """Column ``name`` of columnar messages, concatenated (ids keep their int32 when they travelled so)."""
    return concat([np.asarray(m[name]) for m in messages])


def both_directions(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every undirected edge ``{u, v}`` as the two directed edges ``u -> v`` and ``v -> u``."""
    src, dst = np.asarray(batch["src"]), np.asarray(batch["dst"])
    return {"src": np.concatenate([src, dst]), "dst": np.concatenate([dst, src])}


def build_flow(parallelism: int = 2, name: str = "connected-components") -> rt.Dataflow:
    """The dataflow: input ``edges`` (``{"src", "dst"}`` batches), output ``labels`` (see :func:`split_reports`)."""
    flow = rt.Dataflow(name, parallelism=parallelism)
    edges = flow.input("edges").map_batches(both_directions, name="both-directions")
    loop = flow.loop("propagate")
    back = loop.feedback(name="label-propagation.proposals")
    proposals, reports = flow.vertex(LabelPropagation, [loop.enter(edges), back.stream], outputs=2,
                                     exchange=["src", "node"], name="label-propagation")
    back.connect(proposals)
    loop.leave(reports).unary(EpochLabels, name="epoch-labels").output("labels")
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
        """``{node: smallest node id of its component}``."""
        return dict(zip(self.nodes.tolist(), self.labels.tolist()))

    def iterations(self) -> list[dict[str, Any]]:
        """Per iteration: proposals received, labels changed, and when it ended (see :func:`per_iteration`)."""
        return per_iteration(self.work)


def per_iteration(work: Sequence[dict]) -> list[dict[str, Any]]:
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


def start_job(parallelism: int = 2, batch_size: int = 1 << 18, name: str | None = None,
              pretouch_mb: int = 0, recovery: rt.Recovery | None = None) -> rt.Job:
    """Start the dataflow's actors (kept apart so that benchmarks can leave start-up out).

    ``pretouch_mb`` is :func:`raytide.run`'s: memory each actor maps while it starts, so
    that the first iteration, which builds the adjacency, does not fault it in.
    ``recovery`` too (the vertices below save their whole state in a snapshot).
    """
    return rt.run(build_flow(parallelism), parallelism=parallelism, batch_size=batch_size, name=name,
                  pretouch_mb=pretouch_mb, recovery=recovery)


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
