"""What a live rescale costs a running job, and how the autoscaler gets to a goal (raytide issue 19).

Pause (``pause_*``): a keyed job holding ``state_mb`` MB of state (``keys`` keys, each
with a blob in a ``stateful_map``) takes an epoch of records every ``pace`` seconds from
the driver, while the driver rescales its keyed vertex 1 -> 2 -> 1 -> 2 (warm hosts: the
pool is started before the clock). Per rescale:

* ``cut_s``: from asking for the cut to every replica holding (each processes what came
  before the cut, then holds), ``pause_s``: from then to every replica running again
  (nothing runs; both from ``job.stats()["rescales"]``), and ``call_s`` the whole
  ``job.rescale`` call, the new hosts' lease and the inputs' replay included;
* ``gap_s``: the longest time between two records processed by the keyed vertex around
  the rescale (each record's output is when it was processed, and only processing that
  counted reaches the output), against ``gap_calm_s``, the longest in the calm epochs;
* ``latency_spike_s``: the longest epoch latency (pushed -> its last record processed)
  of the epochs pushed during the rescale, against the calm epochs' median ``latency_calm_s``;
* issue 74's measures, over each rescale's window (from the call to its return; every
  epoch has a record for a key of every key group, :func:`epoch_records`):
  ``unmoved_idle_s``, the longest time any key group that the rescale does not move
  processed nothing (a gap between two of its records that overlaps the window), against
  ``unmoved_idle_calm_s``, the same over the calm epochs (the feed's own gaps, about one
  ``pace``); ``latency_p99_ratio``, the p99 epoch latency of the
  epochs pushed in the window over the calm epochs' p99; ``throughput_ratio``, records
  processed a second in the window over the calm rate. Targets: idle at most 20 ms, p99 at
  most 2x, throughput at least 0.8. A stepped rescale's ``unmoved_idle_plan_s`` is the idle time
  over its plan alone (from the install's start to the last step done; the short switch aside).
  The feed's own gaps between epochs are about one ``pace`` whatever a rescale does, so each idle is
  also given beyond them (``unmoved_idle_beyond_calm_*``: less ``unmoved_gap_p99_calm_s``, the p99
  of every key group's gaps over the calm epochs); ``pace=0.005`` makes those gaps small beside 20 ms.

Each is reported as the median and the max over the rescales of a run. ``recovery=0``: the
same job started without ``recovery=`` (its first rescale leases the coordinator of the cuts).
``stepped=1``: each rescale made with ``job.rescale(..., stepped=True)`` (the key groups moved
in steps while the others flow; growing, the new replica joins in place, or with ``join=0``
a short switch adds it; shrinking, the emptied replica retires in place, or with ``join=0`` a
short switch retires it; docs/rescaling.md, "Stepped migration"); ``stepped_s`` is the time its
steps took, ``grow_*`` and ``shrink_*`` the issue's measures of the growing and the shrinking
rescales alone. The call's time (``grow_call_s``, ``shrink_call_s``) and every
step of a rescale's record are also reported, growing and shrinking apart
(``grow_give_the_hosts_their_replicas_s``, ``shrink_install_the_plan_s``, ...): what the short
switch's hold is made of.

Autoscaler (``autoscale_*``): the Mandelbrot rows of ``examples/unbalanced.py`` from
parallelism 1 with a goal of 1.4 times one replica's true rate (measured first), rows for
about ``autoscale_s`` seconds at the goal, once with the rate policy and once with the
threshold policy: ``decisions`` (rounds that changed the width), the final width,
``goal_reached`` (the throughput after the last change over the goal), and
``reconfiguring_share``: the rescales' time from asking for their cut to running again
(``cut_s + pause_s``; the new hosts start before the cut, while the job runs as before, and
the job runs while the driver replays the calls after the cut), ``rescale_s``, over the
run's time, ``run_s``; ``paused_share``: the same with ``pause_s`` alone, when nothing runs.
"""

from __future__ import annotations

import functools
import os
import statistics
import tempfile
import threading
import time
from typing import Any

import raytide as rt
from bench.harness import ensure_ray
from examples.unbalanced import mandelbrot_flow, row_epochs
from raytide.core.keygroups import KeyGroupAssignment, key_group
from raytide.driver.joining import JOIN_ENV

PARAMS = {"state_mb": 10, "keys": 1000, "per_epoch": 200, "pace": 0.02, "calm_epochs": 40, "rescales": 4,
          "autoscale_s": 60, "only": "all", "recovery": 1, "stepped": 0, "join": 1}
REPEAT = 3


def grow(state: Any, record: tuple[int, int]) -> tuple[Any, float]:
    """The keyed vertex: the first record of a key makes its blob; each emits when it was
    processed (the output keeps only the processing that counted: what a rescale rolls back
    is processed again, later)."""
    key, size = record
    blob, seen = state if state is not None else (bytes(size), 0)
    return (blob, seen + 1), time.time()


def keyed_flow() -> rt.Dataflow:
    flow = rt.Dataflow("rescale_bench")
    flow.input("records", parallelism=1).stateful_map(lambda r: r[0], grow, name="state").output("out")
    return flow


def measure_pause(state_mb: int, keys: int, per_epoch: int, pace: float, calm_epochs: int,
                  rescales: int, recovery: int = 1, stepped: int = 0, join: int = 1) -> dict[str, float]:
    """One run of the pause measurement; see the module docstring (``recovery=0``: the job
    is started without ``recovery=``; ``stepped=1``: rescaled in steps; ``join=0``: a stepped
    rescale adds or retires its replicas by the short switch, not in place)."""
    os.environ[JOIN_ENV] = str(join)
    blob = state_mb * 1_000_000 // keys
    pushed: dict[int, float] = {}
    windows: list[tuple[float, float]] = []
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as store, \
            rt.run(keyed_flow(), parallelism=1, recovery=rt.Recovery(store, interval=None) if recovery else None) as job:
        job.wait_ready()
        job.push("records", [(key, blob) for key in range(keys)], 0)  # every key's blob
        job.advance("records", 1)
        stop = threading.Event()

        def feed() -> None:
            epoch = 1
            while not stop.is_set():
                pushed[epoch] = time.time()
                job.push("records", epoch_records(epoch, keys, per_epoch), epoch)
                job.advance("records", epoch + 1)
                epoch += 1
                time.sleep(pace)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(calm_epochs * pace)
        for step in range(rescales):
            started = time.time()
            records.append(job.rescale({"state": 2 if step % 2 == 0 else 1}, timeout=300, stepped=bool(stepped)))
            time.sleep(0.5)  # the epochs held up, and some after
            windows.append((started, time.time()))
        stop.set()
        feeder.join()
        job.close("records")
        job.wait(timeout=600)
        out = job.collect("out")
    done = {epoch: max(at for _, at in part) for epoch, part in out.items() if epoch in pushed}
    processed = sorted(at for epoch, part in out.items() if epoch > 0 for _, at in part)
    metrics = {"state_mb": float(state_mb), "latency_calm_s": statistics.median(_latencies(pushed, done, windows[0][0])),
               "gap_calm_s": _longest_gap([at for at in processed if at < windows[0][0]])}
    per_rescale: dict[str, list[float]] = {"cut_s": [], "pause_s": [], "call_s": [], "gap_s": [],
                                           "latency_spike_s": [], "stepped_s": []}
    for index, ((start, end), record) in enumerate(zip(windows, records)):
        way = "grow" if index % 2 == 0 else "shrink"
        for name, seconds in record["steps"].items():  # one by one: the switch's, the plan's
            per_rescale.setdefault(f"{way}_{name.replace(' ', '_')}_s", []).append(seconds)
        per_rescale["cut_s"].append(record["cut_s"])
        per_rescale["pause_s"].append(record["pause_s"])
        per_rescale["call_s"].append(record["seconds"])
        per_rescale.setdefault(f"{way}_call_s", []).append(record["seconds"])
        per_rescale["stepped_s"].append(record["steps"].get("move the groups in steps", 0.0))
        per_rescale["gap_s"].append(_longest_gap([at for at in processed if start - 0.5 <= at <= end]))
        per_rescale["latency_spike_s"].append(max(done[e] - pushed[e] for e in done if start <= pushed[e] <= end))
    calls = [(start, start + record["seconds"]) for (start, _), record in zip(windows, records)]
    per_rescale.update(_issue_measures(out, pushed, done, calls, moved_groups(rescales)))
    plans = [(_plan_window(record), groups) for record, groups in zip(records, moved_groups(rescales))
             if record["mode"] == "stepped"]
    if plans:  # the short switch aside: what the plan's install and its steps stall
        times = _group_times(out)
        per_rescale["unmoved_idle_plan_s"] = [_idle(times, set(times) - groups, *window) for window, groups in plans]
    for name in ("unmoved_idle_s", "unmoved_idle_plan_s", "latency_p99_ratio", "throughput_ratio"):
        per_rescale[f"grow_{name}"] = per_rescale.get(name, [])[0::2]  # 1 -> 2: the join's (or the short switch's)
        per_rescale[f"shrink_{name}"] = per_rescale.get(name, [])[1::2]  # 2 -> 1: the retirement's (or the switch's)
    per_rescale = {name: values for name, values in per_rescale.items() if values}
    for name, values in per_rescale.items():
        metrics[f"{name}_p50"] = statistics.median(values)
        metrics[f"{name}_max"] = max(values)
    metrics.update(_calm_measures(out, pushed, done, (min(pushed.values()), windows[0][0])))
    metrics.update(_beyond_calm(metrics))
    return metrics


def epoch_records(epoch: int, keys: int, per_epoch: int) -> list[tuple[int, int]]:
    """An epoch's ``per_epoch`` records: one for a key of every key group first (so that each
    group processes something every epoch, and a group that stops shows), then keys in turn."""
    firsts = _group_firsts(keys)[:per_epoch]
    rest = per_epoch - len(firsts)
    return [(key, 0) for key in firsts] + [(i % keys, 0) for i in range(epoch * rest, (epoch + 1) * rest)]


@functools.cache
def _group_firsts(keys: int) -> list[int]:
    """The lowest key of every key group among ``range(keys)``."""
    return list({key_group(key): key for key in reversed(range(keys))}.values())


def moved_groups(rescales: int) -> list[set[int]]:
    """The key groups each rescale of the keyed vertex (1 -> 2 -> 1 -> ...) moves, by its
    tables (the fewest moves, as the driver computes them)."""
    table, moved = KeyGroupAssignment.contiguous(1), []
    for step in range(rescales):
        table, moves = table.rescale(2 if step % 2 == 0 else 1)
        moved.append({move.key_group for move in moves})
    return moved


def _plan_window(record: dict[str, Any]) -> tuple[float, float]:
    """A stepped rescale's plan, wall-clock: from its install's start to its last step seen done."""
    start, end = record["stepped"]["window"]
    return start - record["steps"].get("install the plan", 0.0), end


def _group_times(out: dict[int, list]) -> dict[int, list[float]]:
    """When each key group processed each of its records (the warm-up epoch 0 aside)."""
    times: dict[int, list[float]] = {}
    for epoch, part in out.items():
        for key, at in part if epoch > 0 else ():
            times.setdefault(key_group(key), []).append(at)
    return {group: sorted(ats) for group, ats in times.items()}


def _gaps(times: dict[int, list[float]], groups: set[int], start: float, end: float) -> list[float]:
    """Each time one of ``groups`` processed nothing (between two of its records), of those overlapping [start, end]."""
    return [b - a for group in groups for a, b in zip(times.get(group, []), times.get(group, [])[1:])
            if b >= start and a <= end]


def _idle(times: dict[int, list[float]], groups: set[int], start: float, end: float) -> float:
    """The longest time one of ``groups`` processed nothing, of the gaps overlapping [start, end]."""
    return max(_gaps(times, groups, start, end), default=0.0)


def _beyond_calm(metrics: dict[str, float]) -> dict[str, float]:
    """Each unmoved-idle figure less the calm gaps' p99 (``unmoved_gap_p99_calm_s``, 0 at least): the idle
    a rescale adds to the feed's own gaps between epochs, which are about one ``pace`` whatever it does."""
    calm = metrics["unmoved_gap_p99_calm_s"]
    return {name.replace("_idle_", "_idle_beyond_calm_"): max(0.0, value - calm) for name, value in metrics.items()
            if "unmoved_idle_" in name and "_calm_" not in name}


def _rate(out: dict[int, list], start: float, end: float) -> float:
    return sum(start <= at <= end for epoch, part in out.items() if epoch > 0 for _, at in part) / (end - start)


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else max(values)


def _issue_measures(out: dict[int, list], pushed: dict[int, float], done: dict[int, float],
                    calls: list[tuple[float, float]], moved: list[set[int]]) -> dict[str, list[float]]:
    """Issue 74's measures of each rescale's window (see the module docstring), as ratios
    to the calm epochs' where the issue asks for ratios."""
    times = _group_times(out)
    calm_p99 = _p99(_latencies(pushed, done, calls[0][0]))
    calm_rate = _rate(out, min(pushed.values()), calls[0][0])
    found: dict[str, list[float]] = {"unmoved_idle_s": [], "latency_p99_ratio": [], "throughput_ratio": []}
    for (start, end), groups in zip(calls, moved):
        found["unmoved_idle_s"].append(_idle(times, set(times) - groups, start, end))
        inside = [done[e] - pushed[e] for e in done if start <= pushed[e] <= end]
        found["latency_p99_ratio"].append(_p99(inside) / calm_p99 if inside else float("nan"))
        found["throughput_ratio"].append(_rate(out, start, end) / calm_rate)
    return found


def _calm_measures(out: dict[int, list], pushed: dict[int, float], done: dict[int, float],
                   calm: tuple[float, float]) -> dict[str, float]:
    """The calm epochs' own figures the ratios are taken against."""
    times = _group_times(out)
    return {"unmoved_idle_calm_s": _idle(times, set(times), calm[0] + 0.1, calm[1]),
            "unmoved_gap_p99_calm_s": _p99(_gaps(times, set(times), calm[0] + 0.1, calm[1])),
            "latency_p99_calm_s": _p99(_latencies(pushed, done, calm[1])), "calm_records_per_s": _rate(out, *calm)}


def _latencies(pushed: dict[int, float], done: dict[int, float], before: float) -> list[float]:
    """The latencies of the epochs done before ``before`` (the calm ones)."""
    return [done[e] - pushed[e] for e in done if done[e] < before]


def _longest_gap(times: list[float]) -> float:
    times = sorted(times)
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def one_replica_rate() -> float:
    """Rows a second one ``mandelbrot`` replica computes while busy."""
    with rt.run(mandelbrot_flow(), {"rows": row_epochs(800)}, parallelism=1) as job:
        job.wait(timeout=300)
        stats = job.stats()
    busy = sum(r["busy_s"] for name, r in stats["replicas"].items() if "mandelbrot" in name)
    return stats["vertices"]["mandelbrot"]["records_in"] / busy


def measure_autoscale(policy: str, goal: float, seconds: float) -> dict[str, float]:
    """The autoscaler on Mandelbrot from one replica; see the module docstring."""
    goals = {"rate": {"rate": goal}, "threshold": {"throughput": {"mandelbrot": goal}}}[policy]
    autoscale = rt.Autoscale(policy=policy, interval=1.0, cooldown=2.0, **goals)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as store, \
            rt.run(mandelbrot_flow(), {"rows": row_epochs(int(goal * seconds))}, parallelism=1,
                   recovery=rt.Recovery(store, interval=None), autoscale=autoscale) as job:
        started = time.monotonic()
        job.wait(timeout=600)
        elapsed = time.monotonic() - started
        stats = job.stats()
    made = [entry for entry in stats["autoscaler"] if entry["changes"]]
    reconfiguring = sum(r["cut_s"] + r["pause_s"] for r in stats["rescales"])
    paused = sum(r["pause_s"] for r in stats["rescales"])
    return {f"autoscale_{policy}_decisions": float(len(made)),
            f"autoscale_{policy}_final_width": float(stats["parallelism"]["mandelbrot"]),
            f"autoscale_{policy}_goal_reached": entry_rate(stats["autoscaler"], goal),
            f"autoscale_{policy}_rescale_s": reconfiguring,
            f"autoscale_{policy}_run_s": elapsed,
            f"autoscale_{policy}_reconfiguring_share": reconfiguring / elapsed,
            f"autoscale_{policy}_paused_share": paused / elapsed}


def entry_rate(timeline: list[dict[str, Any]], goal: float) -> float:
    """The throughput of ``mandelbrot`` over the windows after the last change, as a share of ``goal``."""
    last = max((i for i, entry in enumerate(timeline) if entry["changes"]), default=-1)
    after = [(e["throughput"]["mandelbrot"], e["window_s"]) for e in timeline[last + 1:] if "mandelbrot" in e["throughput"]]
    return sum(rate * seconds for rate, seconds in after) / sum(seconds for _, seconds in after) / goal if after else 0.0


def measure(state_mb: int, keys: int, per_epoch: int, pace: float, calm_epochs: int, rescales: int,
            autoscale_s: float, only: str, recovery: int, stepped: int, join: int) -> dict[str, float]:
    """One run: the pause at ``state_mb`` MB (``only="pause"``), the autoscaler (``"autoscale"``), or both."""
    ensure_ray()
    metrics: dict[str, float] = {}
    if only in ("all", "pause"):
        metrics.update(measure_pause(state_mb, keys, per_epoch, pace, calm_epochs, rescales, recovery, stepped, join))
    if only in ("all", "autoscale"):
        goal = 1.4 * one_replica_rate()
        metrics["autoscale_goal_rows_per_s"] = goal
        for policy in ("rate", "threshold"):
            metrics.update(measure_autoscale(policy, goal, autoscale_s))
    return metrics
