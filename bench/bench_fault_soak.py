"""A soak under faults: ``python -m bench fault_soak`` (30 minutes; ``--param minutes=N``).

A keyed job runs for ``minutes`` with a snapshot every ``interval`` seconds: every key's
numbers run on from 0 across epochs, and a ``stateful_map`` checks that each follows the
one before (a lost, repeated or reordered record fails the job). The driver feeds an
epoch every ``pace`` seconds from a generator and reads ``job.results`` meanwhile; every
``rescale_every_s`` it rescales the keyed vertex (2 -> 3 -> 2 ...), and every
``kill_every_s`` it SIGKILLs the process of a random actor of the job (a replica, the
progress actor or the coordinator).

Every epoch read is checked against what was fed, as it arrives (nothing is kept, so that
the check does not grow the driver): records ``lost``, ``duplicated`` and ``unexpected``,
and epochs ``out_of_order``; epochs never handed out count as lost at the end. The
latency of an epoch is the time from its feeding to its reading; ``p50``/``p99`` per
minute are printed (on stderr) as it runs and reported, with those over the whole soak.

Every ``sample_every_s`` the soak samples the private memory (unique set size) of the
driver and of every process of the job, and how much of Ray's object store is in use. A
process's growth is the least-squares slope of its samples after ``warmup_s`` (five
minutes), in MiB per hour, for the processes that lived through at least ``span_s`` (ten
minutes) of that span (a killed actor's replacement starts over); the object store's is the same
slope of its use. Private memory, not the resident size: a process's resident size also
counts the object store's pages it has touched, which belong to the store (bounded by its
size, measured on its own) and grow for a while in every process that reads objects. The
resident slopes are reported beside (``rss_growth_*``) for comparison. The targets: 0 lost,
0 duplicated, no process growing.

``--param plain_ray=1`` runs the same soak on plain Ray actors instead
(``bench/baselines/soak_ray.py``: the soak's processes, calls, snapshots, rescales and
kills, with nothing of raytide in them), sampled and reported the same way, so that
raytide's growth can be read against what Ray's own processes do under that load.
``--param plain_ray=2`` runs both at once, side by side, each with a Ray of its own, so
that they share the machine's hour: the plain soak's metrics come prefixed ``plain_``, and
each role's growth (``growth_role_<role>``: the median over the processes of that role,
the driver, the progress actor, the coordinator, the inputs and the keyed vertex) is
reported against plain Ray's as a ratio.

The soak runs in a child process with a Ray of its own (:func:`bench.bench_soak.run_child`),
so that the driver measured holds nothing but this job.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import re
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import raytide as rt
from bench.baselines.soak_ray import plain_soak
from bench.bench_soak import child_main, private_mib, process_ids, resident_mib, run_child
from bench.harness import ensure_ray
from tests.ray.jobs import next_in_sequence

PARAMS = {"minutes": 30.0, "interval": 0.5, "pace": 0.05, "rescale_every_s": 60.0, "kill_every_s": 120.0,
          "sample_every_s": 30.0, "warmup_s": 300.0, "span_s": 600.0, "seed": 0, "plain_ray": 0}
REPEAT = 1
#: The prefix of a process's private-memory growth among the metrics (:func:`_growth`).
GROWTH = "growth_mib_per_hour_"
#: Each role's process names, in raytide's soak and in the plain one (their prefixes).
ROLES = {"driver": ("driver", "driver"), "progress": ("progress", "progress"),
         "coordinator": ("coordinator", "coordinator"), "inputs": ("records/", "input/"), "keyed": ("check+out/", "keyed/")}
RATIOS = [(f"{role}'s memory growth, raytide / plain Ray side by side", f"growth_role_{role}",
           f"plain_growth_role_{role}") for role in ROLES]
#: Keys, and each key's numbers per epoch.
KEYS, PER_KEY = 12, 5
#: The widths the keyed vertex takes in turn.
WIDTHS = (3, 2)


def epoch_records(epoch: int) -> list[tuple[int, int]]:
    """What is fed at ``epoch``: each key's next ``PER_KEY`` numbers."""
    return [(key, epoch * PER_KEY + i) for i in range(PER_KEY) for key in range(KEYS)]


@dataclass
class Tally:
    """Records and epochs read, against what was fed; latencies of the current minute."""

    next_epoch: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    out_of_order: int = 0
    latencies: list[float] = field(default_factory=list)
    minute: list[float] = field(default_factory=list)

    def read(self, epoch: int, records: list, fed_at: float | None) -> None:
        if epoch < self.next_epoch:
            self.out_of_order += 1
        else:
            self.lost += (epoch - self.next_epoch) * KEYS * PER_KEY  # epochs skipped are lost
            self.next_epoch = epoch + 1
        got = Counter(record for _, record in records)
        expected = Counter(epoch_records(epoch))
        self.lost += sum((expected - got).values())
        extra = got - expected
        self.duplicated += sum(n for record, n in extra.items() if record in expected)
        self.unexpected += sum(n for record, n in extra.items() if record not in expected)
        if fed_at is not None:
            latency = time.monotonic() - fed_at
            self.latencies.append(latency)
            self.minute.append(latency)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def soak(minutes: float, interval: float, pace: float, rescale_every_s: float, kill_every_s: float,
         sample_every_s: float, warmup_s: float, span_s: float, seed: int, plain_ray: int = 0) -> dict[str, float]:
    """Run the soak in this process (a fresh one: it starts Ray); see the module docstring."""
    ensure_ray()
    if plain_ray:
        return plain_ray_soak(minutes, interval, pace, rescale_every_s, kill_every_s, sample_every_s, warmup_s, span_s,
                              seed)
    rng = random.Random(seed)
    flow = rt.Dataflow("fault-soak")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    fed_at: dict[int, float] = {}
    stop = threading.Event()
    fed = [0]

    def feed() -> Iterator[list[tuple[int, int]]]:
        epoch = 0
        while not stop.is_set():
            fed_at[epoch] = time.monotonic()
            yield epoch_records(epoch)
            epoch += 1
            fed[0] = epoch
            time.sleep(pace)

    tally = Tally()
    over_time: dict[str, float] = {}
    kills = rescales = 0
    recovery = rt.Recovery(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"raytide-fault-soak-{os.getpid()}"),
                           interval=interval, max_restarts=10_000)
    started = time.monotonic()
    memory = MemorySamples(started)
    end = started + minutes * 60
    next_rescale, next_kill, next_sample, next_minute = (started + rescale_every_s, started + kill_every_s,
                                                         started, started + 60)
    with rt.run(flow, {"records": feed()}, parallelism=2, recovery=recovery) as job:
        results = job.results("out", timeout=minutes * 60 + 600)
        for epoch, records in results:
            tally.read(epoch, records, fed_at.pop(epoch, None))
            now = time.monotonic()
            if now >= next_sample:
                memory.sample(process_ids(job))
                next_sample = now + sample_every_s
            if now >= next_minute:
                minute = round((now - started) / 60)
                over_time[f"latency_p50_ms_minute_{minute:02d}"] = percentile(tally.minute, 0.5) * 1000
                over_time[f"latency_p99_ms_minute_{minute:02d}"] = percentile(tally.minute, 0.99) * 1000
                print(f"  minute {minute}: epochs {tally.next_epoch}, latency p50 "
                      f"{over_time[f'latency_p50_ms_minute_{minute:02d}']:.0f} ms p99 "
                      f"{over_time[f'latency_p99_ms_minute_{minute:02d}']:.0f} ms, lost {tally.lost}, duplicated "
                      f"{tally.duplicated}, kills {kills}, rescales {rescales}", file=sys.stderr, flush=True)
                tally.minute.clear()
                next_minute = now + 60
            if now >= end:
                stop.set()
            elif now >= next_rescale:
                job.rescale({"check": WIDTHS[rescales % len(WIDTHS)]}, timeout=120)
                rescales += 1
                next_rescale = time.monotonic() + rescale_every_s
            elif now >= next_kill:
                hosts = {name: pid for name, pid in job.hosts().items() if pid > 0}
                os.kill(hosts[rng.choice(sorted(hosts))], signal.SIGKILL)
                kills += 1
                next_kill = time.monotonic() + kill_every_s
        recoveries = job.stats()["recoveries"]["count"]
    tally.lost += max(0, fed[0] - tally.next_epoch) * KEYS * PER_KEY  # fed, never handed out
    metrics = {"minutes": minutes, "epochs": float(tally.next_epoch), "kills": float(kills),
               "rescales": float(rescales), "recoveries": float(recoveries), "lost": float(tally.lost),
               "duplicated": float(tally.duplicated), "unexpected": float(tally.unexpected),
               "out_of_order": float(tally.out_of_order),
               "latency_p50_ms": percentile(tally.latencies, 0.5) * 1000,
               "latency_p99_ms": percentile(tally.latencies, 0.99) * 1000,
               "latency_mean_ms": statistics.fmean(tally.latencies) * 1000 if tally.latencies else float("nan")}
    metrics.update(memory.growth(warmup_s, span_s))
    return {**metrics, **over_time}


def plain_ray_soak(minutes: float, interval: float, pace: float, rescale_every_s: float, kill_every_s: float,
                   sample_every_s: float, warmup_s: float, span_s: float, seed: int) -> dict[str, float]:
    """The soak on plain Ray actors (``bench/baselines/soak_ray.py``), its memory sampled as raytide's is."""
    memory = MemorySamples(time.monotonic())
    metrics = plain_soak(minutes, interval, pace, rescale_every_s, kill_every_s, sample_every_s, seed,
                         epoch_records, WIDTHS, memory.sample)
    return {**metrics, **memory.growth(warmup_s, span_s)}


@dataclass
class MemorySamples:
    """Each process's ``(at, private, resident)`` samples and the object store's ``(at, MiB)``,
    ``at`` in seconds since ``started``."""

    started: float
    processes: dict[tuple[str, int], list[tuple[float, float, float]]] = field(default_factory=dict)
    store: list[tuple[float, float]] = field(default_factory=list)

    def sample(self, pids: dict[str, int]) -> None:
        """Sample the processes named in ``pids`` (those gone since are skipped) and the store."""
        at = time.monotonic() - self.started
        for name, pid in pids.items():
            taken = _memory(pid)
            if taken is not None:
                self.processes.setdefault((name, pid), []).append((at, *taken))
        self.store.append((at, _object_store_mib()))

    def growth(self, warmup_s: float, span_s: float) -> dict[str, float]:
        """See :func:`_growth`."""
        return _growth(self.processes, self.store, warmup_s, span_s)


def _memory(pid: int) -> tuple[float, float] | None:
    """``(private, resident)`` MiB of process ``pid``; None if it is gone."""
    try:
        return private_mib(pid), resident_mib(pid)
    except Exception:  # psutil.NoSuchProcess: killed since job.hosts() named it
        return None


def _object_store_mib() -> float:
    """MiB of the object store in use of the Ray this process is connected to, as ``ray
    memory --stats-only`` reports it (NaN if its wording changed). The address is given, as
    another Ray may run on the machine (the plain-Ray soak beside raytide's, paired)."""
    import ray
    from ray._private.internal_api import memory_summary  # what the ``ray memory`` command calls

    summary = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    found = re.search(r"Plasma memory usage (\d+) MiB", summary)
    return float(found.group(1)) if found else float("nan")


def _slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``(seconds, MiB)`` samples, in MiB per hour."""
    times, values = zip(*samples)
    return statistics.linear_regression(times, values).slope * 3600


def _growth(memory: dict[tuple[str, int], list[tuple[float, float, float]]], store: list[tuple[float, float]],
            warmup_s: float, span_s: float) -> dict[str, float]:
    """Per process that lived through at least ``span_s`` seconds after the warm-up, the slope of
    its private memory (``growth_mib_per_hour_<name>#<pid>``) and of its resident size
    (``rss_growth_...``); the largest, the driver's, the object store's, and how many
    processes were measured."""
    growth: dict[str, float] = {}
    rss: dict[str, float] = {}
    for (name, pid), samples in memory.items():
        after = [sample for sample in samples if sample[0] >= warmup_s]
        if len(after) >= 3 and after[-1][0] - after[0][0] >= span_s:
            growth[f"{name}#{pid}"] = _slope_per_hour([(at, private) for at, private, _ in after])
            rss[f"{name}#{pid}"] = _slope_per_hour([(at, resident) for at, _, resident in after])
    driver = next((rate for name, rate in growth.items() if name.startswith("driver#")), float("nan"))
    used = [(at, mib) for at, mib in store if at >= warmup_s and mib == mib]
    return {"processes_measured": float(len(growth)), "driver_growth_mib_per_hour": driver,
            "max_process_growth_mib_per_hour": max(growth.values(), default=float("nan")),
            "object_store_growth_mib_per_hour": _slope_per_hour(used) if len(used) >= 3 else float("nan"),
            "object_store_mib_at_end": store[-1][1] if store else float("nan"),
            **{f"{GROWTH}{name}": rate for name, rate in sorted(growth.items())},
            **{f"rss_growth_mib_per_hour_{name}": rate for name, rate in sorted(rss.items())}}


def measure(minutes: float, interval: float, pace: float, rescale_every_s: float, kill_every_s: float,
            sample_every_s: float, warmup_s: float, span_s: float, seed: int, plain_ray: int) -> dict[str, float]:
    params = {"minutes": minutes, "interval": interval, "pace": pace, "rescale_every_s": rescale_every_s,
              "kill_every_s": kill_every_s, "sample_every_s": sample_every_s, "warmup_s": warmup_s, "span_s": span_s,
              "seed": seed, "plain_ray": plain_ray}
    timeout = minutes * 60 + 900
    if plain_ray != 2:
        return run_child("bench.bench_fault_soak", params, timeout=timeout)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        soaks = [pool.submit(run_child, "bench.bench_fault_soak", {**params, "plain_ray": plain}, timeout=timeout,
                             ray_address="local") for plain in (0, 1)]
        raytide, plain = (soak.result() for soak in soaks)
    plain.update(role_growth(plain, 1))
    return {**raytide, **role_growth(raytide, 0), **{f"plain_{name}": value for name, value in plain.items()}}


def role_growth(metrics: dict[str, float], side: int) -> dict[str, float]:
    """Each role's growth (``growth_role_<role>``, MiB per hour): the median over the measured
    processes of that role in ``metrics``, a soak's (``side``: 0 raytide's, 1 the plain one's)."""
    processes = {name.removeprefix(GROWTH): rate for name, rate in metrics.items() if name.startswith(GROWTH)}
    rates = {role: [rate for process, rate in processes.items() if process.startswith(prefixes[side])]
             for role, prefixes in ROLES.items()}
    return {f"growth_role_{role}": statistics.median(found) for role, found in rates.items() if found}


if __name__ == "__main__":
    child_main(soak)
