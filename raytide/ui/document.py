"""The page's data (``/api/job``): a JSON document built from successive ``job.stats()`` samples.

One sample is a counter reading; rates need two. :func:`rates` turns two readings of a
vertex's summed counters into records per second (a counter that went down was reset, by a
recovery or a rescale that started new replicas, and counts from zero)::

    >>> rates({"v": {"records_in": 100, "records_out": 50}}, {"v": {"records_in": 300, "records_out": 90}}, 2.0)
    {'v': {'in_per_s': 100.0, 'out_per_s': 20.0}}
    >>> rates({"v": {"records_in": 500, "records_out": 0}}, {"v": {"records_in": 40, "records_out": 0}}, 2.0)
    {'v': {'in_per_s': 20.0, 'out_per_s': 0.0}}

:class:`JobBook` keeps what one reading does not hold: the frontier of each output over time,
the snapshots seen commit (the coordinator reports only its last), and the timeline of
snapshots, recoveries, rescales and autoscaler rounds; :meth:`JobBook.add` returns the document.

An open page asks for what changed since the document it holds (:func:`changes`): the frontier
samples and timeline entries made after it, and the graph only if it is not the one it drew
(``graph_key`` names a layout and the vertices' widths)::

    >>> document = {"at": 12.0, "graph_key": "g1", "graph": {"nodes": []}, "state": "running",
    ...             "frontier_history": [{"at": 11.0, "outputs": {}}, {"at": 12.0, "outputs": {}}],
    ...             "timeline": [{"kind": "snapshot", "at": 10.5, "seen_at": 11.0}]}
    >>> update = changes(document, since=11.0, graph_key="g1")
    >>> update["frontier_history"], update["timeline"], "graph" in update
    ([{'at': 12.0, 'outputs': {}}], [], False)
    >>> "graph" in changes(document, since=11.0, graph_key="g0"), len(changes(document, None, None)["timeline"])
    (True, 1)
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
from typing import Any

#: Samples of the frontier kept for the plot (at about one a second, two minutes).
HISTORY = 120
#: Timeline entries kept (the oldest go first).
TIMELINE = 200
#: A chain whose busiest replica is busy less than this share of the time is no bottleneck.
BOTTLENECK_SHARE = 0.2


def rates(previous: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]], seconds: float) -> dict[str, dict[str, float]]:
    """Records in and out per second of each vertex of ``current`` since ``previous`` (per
    vertex, its summed ``records_in`` and ``records_out``), ``seconds`` apart."""
    out = {}
    for name, now in current.items():
        before = previous.get(name, {})
        figures = {}
        for counter, key in (("records_in", "in_per_s"), ("records_out", "out_per_s")):
            value, old = now.get(counter, 0) or 0, before.get(counter, 0) or 0
            delta = value - old if value >= old else value  # went down: new replicas, counting from zero
            figures[key] = round(delta / seconds, 2) if seconds > 0 else 0.0
        out[name] = figures
    return out


def shares(previous: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]], seconds: float) -> dict[str, dict[str, float]]:
    """Per replica (``job/chain/replica``), the share of the last ``seconds`` it was busy handling
    events and blocked by backpressure (its ``busy_s`` and ``blocked_s`` readings)."""
    out = {}
    for name, now in current.items():
        before = previous.get(name, {})
        figures = {}
        for counter in ("busy", "blocked"):
            value, old = now.get(f"{counter}_s", 0.0) or 0.0, before.get(f"{counter}_s", 0.0) or 0.0
            delta = value - old if value >= old else value
            figures[counter] = min(1.0, delta / seconds) if seconds > 0 else 0.0
        out[name] = figures
    return out


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``; None if there are none.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 99), percentile([], 50)
    (2.0, 4.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _chain_of(replica: str) -> str:
    """``job/chain/replica`` -> ``chain``."""
    return replica.split("/")[-2] if replica.count("/") >= 2 else replica


def vertex_figures(graph: dict[str, Any], stats: dict[str, Any], rate: dict[str, dict[str, float]],
                   share: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Per vertex of ``graph``: its counters, rates, queued work, frontier and lag, its width now,
    each replica's busy and blocked shares (those of its chain's replicas), and whether it is
    the bottleneck (its chain's busiest replica is the busiest of the job's, and busy enough)."""
    per_chain: dict[str, list[tuple[str, dict[str, float]]]] = collections.defaultdict(list)
    for replica, figures in sorted(share.items()):
        per_chain[_chain_of(replica)].append((replica, figures))
    busiest = {chain: max(f["busy"] for _, f in replicas) for chain, replicas in per_chain.items()}
    worst = max(busiest, key=lambda chain: busiest[chain], default=None)
    out = {}
    for node in graph["nodes"]:
        name, chain = node["name"], node["chain"]
        counters = stats.get("vertices", {}).get(name, {})
        replicas = per_chain.get(chain, [])
        out[name] = {
            "records_in": counters.get("records_in"), "records_out": counters.get("records_out"),
            **rate.get(name, {"in_per_s": None, "out_per_s": None}),
            "queued": counters.get("queued"), "frontier": counters.get("frontier"), "frontier_lag": counters.get("frontier_lag"),
            "parallelism": stats.get("parallelism", {}).get(name, node["parallelism"]), "chain": chain,
            "replicas": [{"name": r, "busy": round(f["busy"], 3), "blocked": round(f["blocked"], 3)} for r, f in replicas],
            "busy": busiest.get(chain), "blocked": max((f["blocked"] for _, f in replicas), default=None),
            "bottleneck": chain == worst and busiest.get(chain, 0) >= BOTTLENECK_SHARE,
        }
    return out


def held_epoch(complete: dict[str, int | None]) -> int | None:
    """The last epoch complete at every output in a snapshot, given each output's (``last_complete``: -1
    none, None every epoch: the output finished); None if there is no output's to go by, or all finished.

    >>> held_epoch({"a": 41, "b": 40}), held_epoch({"a": -1}), held_epoch({"a": None, "b": 7}), held_epoch({})
    (40, -1, 7, None)
    """
    epochs = [epoch for epoch in complete.values() if epoch is not None]
    return min(epochs) if epochs else None


def _holding(epoch: int | None) -> str:
    """What a committed snapshot's label says of the epochs complete in it."""
    return "" if epoch is None else ", no epoch complete yet" if epoch < 0 else f", epochs to {epoch} complete"


def _snapshot_events(stats: Any, seen: set[Any], at: float) -> list[dict[str, Any]]:
    """The snapshots ``stats`` (the coordinator's figures) shows that ``seen`` has not: its last
    committed one, and each abandoned one with its reason."""
    if not isinstance(stats, dict) or "committed" not in stats:
        return []
    events = []
    last = stats.get("last_id")
    if last is not None and ("committed", last) not in seen:
        seen.add(("committed", last))
        epoch = held_epoch(stats.get("last_complete") or {})
        events.append({"at": at, "kind": "snapshot", "id": last, "committed": True, "epoch": epoch,
                       "duration_s": stats.get("last_duration_s"), "size_bytes": stats.get("last_size_bytes"),
                       "label": f"snapshot {last} committed" + _holding(epoch)})
    for number, reason in enumerate(stats.get("abandoned_reasons") or []):
        if ("abandoned", number) not in seen:
            seen.add(("abandoned", number))
            events.append({"at": at, "kind": "snapshot", "committed": False, "reason": str(reason),
                           "label": "snapshot abandoned"})
    return events


def _recovery_events(stats: dict[str, Any], seen: set[Any]) -> list[dict[str, Any]]:
    """Recoveries, rescales and autoscaler rounds with decisions that ``seen`` has not."""
    events = []
    for record in (stats.get("recoveries") or {}).get("recoveries", []):
        if ("recovery", record["incarnation"]) not in seen:
            seen.add(("recovery", record["incarnation"]))
            events.append({"at": record["finished_at"], "kind": "recovery", "pause_s": record["seconds"],
                           "reason": record["cause"], "snapshot": record["snapshot_id"], "replaced": record["replaced"],
                           "label": f"recovery from snapshot {record['snapshot_id']}"})
    rounds: list[dict[str, Any]] = stats["autoscaler"] if isinstance(stats.get("autoscaler"), list) else []
    decided = {(entry.get("rescale") or {}).get("finished_at"): "autoscaler: " + "; ".join(
        f"{d['vertex']}: {d['reason']}" for d in entry.get("decisions", [])) for entry in rounds}
    for record in stats.get("rescales") or []:
        if ("rescale", record["finished_at"]) not in seen:
            seen.add(("rescale", record["finished_at"]))
            change = ", ".join(f"{v} {record['before'].get(v)}→{n}" for v, n in sorted(record["after"].items()))
            events.append({"at": record["finished_at"], "kind": "rescale", "pause_s": record["pause_s"],
                           "seconds": record["seconds"], "label": f"rescale {change}",
                           "reason": decided.get(record["finished_at"], "job.rescale()")})
    return events + _autoscaler_events(rounds, seen)


def _autoscaler_events(rounds: list[dict[str, Any]], seen: set[Any]) -> list[dict[str, Any]]:
    """The autoscaler's rounds that decided a change, with their reasons, that ``seen`` has not."""
    events = []
    for entry in rounds:
        decided = [d for d in entry.get("decisions", []) if d.get("target") != d.get("current")]
        if decided and ("autoscaler", entry["at"]) not in seen:
            seen.add(("autoscaler", entry["at"]))
            events.append({"at": entry["at"], "kind": "autoscaler", "label": "autoscaler: " + ", ".join(
                f"{d['vertex']} {d['current']}→{d['target']}" for d in decided),
                           "reason": "; ".join(f"{d['vertex']}: {d['reason']}" for d in decided)})
    return events


def digest(graph: dict[str, Any]) -> str:
    """A short name of a layout's content."""
    return hashlib.sha1(json.dumps(graph, sort_keys=True).encode()).hexdigest()[:12]


def changes(document: dict[str, Any], since: float | None, graph_key: str | None) -> dict[str, Any]:
    """``document`` for a page that holds the one made at ``since`` (its ``at``; None: none) with the graph
    ``graph_key``: the frontier samples and timeline entries made after it, the graph only if it is another."""
    update = {key: value for key, value in document.items() if key not in ("graph", "frontier_history", "timeline")}
    if graph_key != document["graph_key"]:
        update["graph"] = document["graph"]
    update["frontier_history"] = [s for s in document["frontier_history"] if since is None or s["at"] > since]
    update["timeline"] = [e for e in document["timeline"] if since is None or e["seen_at"] > since]
    return update


class JobBook:
    """What the page shows of one job, kept across samples (pure: fed readings, returns documents)."""

    def __init__(self, name: str, graph: dict[str, Any]) -> None:
        self.name, self.graph = name, graph
        self.previous: tuple[float, dict[str, Any]] | None = None
        self.frontiers: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY)
        self.timeline: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE)
        self.seen: set[Any] = set()
        self.graph_digest = digest(graph)  # the layout's part of the documents' graph_key

    def add(self, stats: dict[str, Any], at: float, wall: float, facts: dict[str, Any]) -> dict[str, Any]:
        """Take a ``job.stats()`` reading made at monotonic time ``at`` (wall clock ``wall``) and the
        driver's ``facts`` (``state``, ``latest`` epoch per output, epoch ``latencies`` in seconds,
        ``errors``, ``epochs_total``, ``graph``: a new layout after a rescale); return the document."""
        if facts.get("graph") is not None:
            self.graph, self.graph_digest = facts["graph"], digest(facts["graph"])
        before_at, before = self.previous if self.previous is not None else (at, {})
        seconds = at - before_at
        rate = rates(before.get("vertices", {}), stats.get("vertices", {}), seconds) if seconds > 0 else {}
        share = shares(before.get("replicas", {}), stats.get("replicas", {}), seconds) if seconds > 0 else {}
        self.previous = (at, stats)
        outputs = [n["name"] for n in self.graph["nodes"] if n["role"] == "output"]
        vertices = vertex_figures(self.graph, stats, rate, share)
        self.frontiers.append({"at": wall, "outputs": {name: vertices[name]["frontier"] for name in outputs}})
        events = _snapshot_events(stats.get("snapshots"), self.seen, wall) + _recovery_events(stats, self.seen)
        self.timeline.extend({**event, "seen_at": wall} for event in events)
        return self._document(stats, facts, wall, vertices, outputs, seconds)

    def _document(self, stats: dict[str, Any], facts: dict[str, Any], wall: float, vertices: dict[str, Any],
                  outputs: list[str], seconds: float) -> dict[str, Any]:
        latest = facts.get("latest", {})
        done = [latest.get(name) for name in outputs]
        latencies = facts.get("latencies", [])
        return {
            "job": self.name, "state": facts.get("state", "running"), "at": wall, "read_at": facts.get("read_at", wall),
            "window_s": round(seconds, 3),
            "graph": self.graph, "vertices": vertices,
            "graph_key": self.graph_digest + "".join(f".{vertices[name]['parallelism']}" for name in sorted(vertices)),
            "outputs": {name: {"latest_epoch": latest.get(name), "frontier": vertices[name]["frontier"]} for name in outputs},
            "frontier_history": list(self.frontiers),
            "epochs_completed": (min(done) + 1 if done and None not in done else 0),
            "epochs_total": facts.get("epochs_total"),
            "epoch_latency_s": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99), "count": len(latencies)},
            "snapshots": stats.get("snapshots"), "timeline": sorted(self.timeline, key=lambda e: e["at"]),
            "errors": facts.get("errors", []), "unreachable": stats.get("unreachable", []),
            "progress": {k: stats.get(k) for k in ("progress_calls", "progress_pushes", "data_messages", "backpressure_waits")},
        }
