"""What ``job.stats()`` reports of a job's actors, and what a wait that timed out says: the replicas' counters summed per vertex
and kept per replica, and the progress actor's view of each vertex (its queued work, its
frontier and how far that trails the inputs); in a job with recovery, the coordinator's,
the recoveries', the rescales' and the autoscaler's figures."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import ray

from raytide.driver import snapshot_health
from raytide.driver.placement import JobPlacement
from raytide.driver.recovery import JobRecovery

#: Longest ``job.stats()`` waits for one actor's figures (an actor on a lost node does not
#: answer until Ray declares it dead).
STATS_TIMEOUT = 60.0


def _ask(call: Any, timeout: float | None = None) -> tuple[Any, str | None]:
    """The answer of an actor's ``call``, or None and why there is none (it died, or did
    not answer within ``timeout``, :data:`STATS_TIMEOUT` by default)."""
    try:
        return ray.get(call, timeout=STATS_TIMEOUT if timeout is None else timeout), None
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as error:
        return None, f"unreachable: {type(error).__name__}"


def unfinished(placement: JobPlacement, open_inputs: dict[str, int], done: dict[str, int | None],
               busy_probe: float, feeds: dict[str, str]) -> str:
    """What an unfinished job is waiting for: the slowest busy replica (each answering a ping
    within ``busy_probe`` s or called busy), the inputs still open, the latest complete epoch
    per output, the progress actor's account of the pending work, and what each stream
    input's feed (``feeds``) is doing."""
    try:
        pending = ray.get(placement.progress.describe.remote(), timeout=10)
    except Exception as error:  # the description must not fail itself
        pending = {"progress actor": f"unreachable: {error!r}"}
    return (f"{placement.slowest_busy(busy_probe)}; inputs still open (at epoch): {open_inputs}; latest complete "
            f"epoch per output: {done}; " + "; ".join(f"{k}: {v or 'none'}" for k, v in pending.items())
            + (f"; stream feeds: {feeds}" if feeds else ""))


def actor_stats(placement: JobPlacement, fed: list[int], late: Callable[[list], dict[str, Any]] = lambda _: {}) -> dict[str, Any]:
    """The counters of ``placement``'s actors; ``fed``: the epochs the open inputs are at;
    ``late``: the late records per event-time input, given those the replicas' readers
    counted (each replica's, per input). A replica that died (and is not replaced yet) or
    does not answer is left out and named under ``unreachable``."""
    # the tracker first: the replicas' counters are then the later reading, so work they do
    # not count yet was pending when the tracker answered
    progress, _ = _ask(placement.progress.stats.remote())
    if progress is None:  # dead, or the job is torn down (its host's lease is over)
        progress = {"batches_applied": None, "calls": None, "pushes": None, "pushes_by_socket": None,
                    "fan_outs": None, "vertices": {}}
    answers = placement.replica_stats(STATS_TIMEOUT)
    alive = {key: answer for key, answer in answers.items() if answer is not None}
    per_replica = list(alive.values())
    vertices: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.Counter())
    for stats in per_replica:
        for name, counters in stats["vertices"].items():
            vertices[name].update(counters)
    data_batches = sum(stats["vertices"][placement.plan.chain(key.chain).vertices[0]]["batches_in"]
                       for key, stats in alive.items())
    return {
        "vertices": {n: {**c, **_progress_of(n, progress["vertices"], fed)} for n, c in vertices.items()},
        "replicas": {placement.host_name(key): {"busy_s": stats["busy_s"], "blocked_s": stats["blocked_s"],
                                                "restores": stats["restores"], "upstream_log": stats["upstream_log"],
                                                "log_dropped": stats["log_dropped"],
                                                "vertices": stats["vertices"]}
                     for key, stats in alive.items()},
        "progress_batches": progress["batches_applied"],
        "progress_pushes": progress["pushes"],
        "progress_pushes_by_socket": progress["pushes_by_socket"],  # of those, sent on the replica's socket
        "progress_calls": progress["calls"],  # Ray calls to the progress actor: several batches may share one
        "progress_fan_outs": progress["fan_outs"],  # its calls to relays with pushes to deliver (several in each)
        "progress_relayed": sum(s["relay"]["relayed"] for s in per_replica),  # replicas' calls to their node's relay
        "progress_relay_calls": sum(s["relay"]["forwarded"] for s in per_replica),  # the relays' calls to the progress actor
        "progress_relay_upward": sum(s["relay"]["upward"] for s in per_replica),  # node relays' calls to their group's relay
        "progress_relay_runs": sum(s["relay"]["runs"] for s in per_replica),  # each a replica's messages the relay merged
        "data_messages": data_batches,
        "data_calls": sum(s["data_calls"] for s in per_replica),  # Ray calls: a replica's batches to one peer share one
        "socket_frames": sum(s["socket_frames"] for s in per_replica),  # of the data calls and markers, those sent by socket
        "max_inflight_seen": max((s["max_inflight_seen"] for s in per_replica), default=0),
        "backpressure_waits": sum(s["backpressure_waits"] for s in per_replica),
        "local_sends": sum(s["local_sends"] for s in per_replica),
        "unreachable": [placement.host_name(key) for key, answer in answers.items() if answer is None],
        "late": late([s.get("late", {}) for s in per_replica]),
    }


def _progress_of(vertex: str, progress: dict[str, dict[str, int | None]], fed: list[int]) -> dict[str, int | None]:
    """``queued`` and ``frontier`` of ``vertex`` (from the progress tracker), and
    ``frontier_lag``: how many epochs its frontier trails the latest epoch an open input
    is at (``fed``; None once nothing more can arrive, or no input is open)."""
    if vertex not in progress:
        return {}
    frontier = progress[vertex]["frontier"]
    lag = max(fed) - frontier if fed and frontier is not None else None
    return {**progress[vertex], "frontier_lag": lag}


def recovery_stats(recovery: JobRecovery, autoscaler: Any, finished: bool) -> dict[str, Any]:
    """``snapshots`` (the coordinator's figures), ``recoveries``, ``rescales`` and the
    ``autoscaler``'s timeline (None without one); an actor that died or does not answer is
    named unreachable, a coordinator that died and is not replaced yet as such, and one that
    has not answered the driver for a while as silent, at once (:mod:`raytide.driver.snapshot_health`)."""
    snapshots: Any = {"coordinator": "died; a recovery is replacing it"}
    health, now = recovery.health, time.monotonic()
    if recovery.coordinator is not None:  # a finished job's driver syncs no more: only the figures' call counts
        snapshots = health.silent(now, recovery.coordinator_name(), syncing=not finished)
    if snapshots is None:
        answer, why = _ask(recovery.coordinator.stats.remote(), snapshot_health.SILENT_AFTER)
        if why is None and answer is None:  # its host no longer plays it: the job was torn down
            why = "released with the job's hosts (the job was torn down)"
        snapshots = {**answer, **health.stats()} if why is None else health.silent(
            now, recovery.coordinator_name(), time.monotonic() - now, not finished) or {"coordinator": why}
    return {"snapshots": snapshots, "recoveries": recovery.stats(), "rescales": recovery.rescale_stats(),
            "autoscaler": autoscaler_timeline(autoscaler, finished)}


def autoscaler_timeline(autoscaler: Any, finished: bool) -> Any:
    """The ``autoscaler``'s timeline (None without one; why, if it does not answer)."""
    if autoscaler is None:
        return None
    timeline, why = _ask(autoscaler.timeline.remote(finished))
    return timeline if why is None else why
