"""What snapshots cost a running job, and how fast it recovers (raytide issue 18).

Throughput: the same job run without snapshots and with a snapshot every 1 s and every
0.2 s, alternating within each repetition, all on warm hosts with the actors up before
the clock (``job.wait_ready()``, which waits for the snapshot coordinator too: it is a
fresh process per job, whose start costs about a second of CPU that would otherwise
land in the clock, on the cores the job runs on):

* ``keyed_*_s``: a word count with keyed state across epochs, fed from the driver
  (``job.push``): ``flat_map(str.split) -> count_by_key -> stateful_map`` keeping each
  word's running total; 120 epochs of 5,000 lines of 10 Zipf words (vocabulary 20,000).
  The clock runs from the first push to the last epoch's totals at the driver.
* ``components_*_s``: the components benchmark's job (``bench/workloads/components.py``)
  on 300,000 nodes and 900,000 edges, from the edge array in the driver to the labels.

Ratios (``with snapshots / without``) are the overhead; the target is at most 5% lower
throughput at 1 s. ``--param only=throughput`` runs just these two jobs, ``only=keyed``
just the keyed one.

Recovery (``recovery_*``): the keyed job with a snapshot every 0.2 s, its epochs fed at
a steady pace (one every 50 ms); once two snapshots are committed (``--param kill_after``), an input replica's
process is SIGKILLed (one per repetition). ``recovery_to_restored_s``: from the kill to
the end of the recovery (noticed, a warm host taking the dead one's place, every
replica restored and resumed, inputs rewound); ``recovery_to_throughput_s``: from the
kill until the job is back on its input's schedule (the epochs fed but not handed back
are no more than before the kill, plus one). The output is checked against the
failure-free run's.

``recovery_restore_s`` is the recovery itself, from noticing the death, and
``recovery_step_*_s`` its steps.

``--param only=stage`` kills one replica of a 4-replica keyed stage instead
(:func:`measure_stage_kill`); ``--param stage=running`` runs it on a job whose stage may be
recovered alone (:func:`running_flow`), and ``--param alone=1`` turns that on: run both
``alone=0`` and ``alone=1`` for issue 74's whole-job-versus-alone ratio; ``state_keys=`` and
``state_bytes=`` give its stage keyed state to reload (:class:`RunningWordCounts`),
``stage_interval=`` its snapshot interval (default 0.2 s).

Snapshots: ``snapshot_bytes`` and ``snapshot_s`` of the last snapshot of the keyed job
at 0.2 s (from its trigger to its commit), ``snapshot_alignment_s`` the longest any
replica waited for its barriers, ``snapshot_mb_per_s`` size over duration, and the interval
``"auto"`` chose on the same job (``auto_interval_s``) from its measured snapshot cost,
with the utilization model's T* for that cost and the prior failure rate beside it
(``auto_model_interval_s``).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator

import numpy as np

import raytide as rt
from bench.harness import SETTLE_S, ensure_ray
from bench.workloads import components
from raytide.snapshots.interval import DEFAULT_PRIOR_RATE, optimal_interval

PARAMS = {"epochs": 120, "lines": 5_000, "vocabulary": 20_000, "nodes": 300_000, "edges": 900_000, "parallelism": 2,
          "only": "all", "alone": 0, "stage": "keyed", "kill_after": 2, "state_keys": 0, "state_bytes": 0,
          "stage_interval": 0.2}
#: The stage job of ``only=stage``: ``keyed`` (:func:`keyed_flow`: its ``count`` notifies, so
#: every recovery is whole-job) or ``running`` (:func:`running_flow`: one that may be recovered alone).
STAGES = ("keyed", "running")
#: What ``--param only=...`` runs: everything, the throughput of both jobs, or of the keyed job alone;
#: ``stage``: only the kill of one replica of a 4-replica keyed stage (:func:`measure_stage_kill`).
PARTS = {"all": {"keyed", "components", "rest"}, "throughput": {"keyed", "components"}, "keyed": {"keyed"},
         "stage": {"stage"}}
RATIOS = [
    ("keyed: snapshot every 1 s / none", "keyed_every_1s_s", "keyed_none_s"),
    ("keyed: snapshot every 0.2 s / none", "keyed_every_0.2s_s", "keyed_none_s"),
    ("components: snapshot every 1 s / none", "components_every_1s_s", "components_none_s"),
    ("components: snapshot every 0.2 s / none", "components_every_0.2s_s", "components_none_s"),
]
INTERVALS = {"none": None, "every_1s": 1.0, "every_0.2s": 0.2}
#: Seconds between the epochs fed to the job that is killed: it runs at the pace of its input.
RECOVERY_PACE = 0.05
#: The replicas of the stage job's keyed stage (``count``), one of which is killed.
STAGE_WIDTH = 4


def keyed_flow() -> rt.Dataflow:
    flow = rt.Dataflow("keyed_wordcount")
    counts = flow.input("lines").flat_map(str.split, name="words").count_by_key(lambda w: w, name="count")
    counts.stateful_map(lambda kv: kv[0], lambda total, kv: ((total or 0) + kv[1],) * 2,
                        name="running_totals").output("totals")  # records (word, its total so far)
    return flow


class RunningWordCounts(rt.Vertex):
    """Each word's count so far, sent for every occurrence as it is received (``(word, count)``),
    all of a batch's in one batch; no notification: a replica of it may be recovered alone.

    ``HELD``, ``(keys, bytes)``: keyed state this replica holds besides its counts, ``keys``
    distinct keys of ``bytes`` random bytes each (made at its first batch), saved and restored
    with its counts: what a whole-job rollback reloads at every replica and a recovery alone only
    at the lost one (``--param state_keys=``, ``state_bytes=``; set on a subclass, :func:`running_flow`:
    a factory that is not a ``Vertex`` class counts as notifying, which no replica recovers alone)."""

    HELD: tuple[int, int] = (0, 0)

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.held: dict[str, bytes] | None = None

    def on_recv(self, port: int, batch: list[str], time: object) -> None:
        if self.held is None:
            keys, size = self.HELD
            blob = np.random.default_rng(self.replica).bytes(keys * size)
            self.held = {f"held{self.replica}:{i}": blob[i * size:(i + 1) * size] for i in range(keys)}
        out = []
        for word in batch:
            self.counts[word] += 1
            out.append((word, self.counts[word]))
        self.send_by(0, out, time)

    def snapshot(self) -> dict:
        return {"counts": dict(self.counts), "held": self.held}

    def restore(self, state: dict) -> None:
        self.counts, self.held = Counter(state["counts"]), state["held"]


def running_flow(state_keys: int = 0, state_bytes: int = 0) -> rt.Dataflow:
    """The stage job a replica of which may be recovered alone (``decide``: one input channel,
    no notification, no loop, no output in its chain): lines (one input replica) split into
    words -> ``count`` (4 replicas, by word, :class:`RunningWordCounts`, holding ``state_keys``
    keys of ``state_bytes`` bytes besides, split evenly) -> a sink of one replica."""
    flow = rt.Dataflow("running_wordcount")
    words = flow.input("lines", parallelism=1).flat_map(str.split, name="words", parallelism=1)
    factory = type("HeldWordCounts", (RunningWordCounts,), {"HELD": (state_keys // STAGE_WIDTH, state_bytes)})
    counted = flow.vertex(factory, [words], exchange=[_word], name="count", parallelism=STAGE_WIDTH)[0]
    counted.map(_word, name="sink", parallelism=1).output("totals")
    return flow


def _word(value: object) -> object:
    """A word's key (the word) and the sink's map (the record as it is)."""
    return value


def running_reference(data: list[list[str]]) -> dict[int, Counter]:
    """Per epoch, each occurrence's ``(word, count so far)``."""
    totals: Counter = Counter()
    expected = {}
    for epoch, lines in enumerate(data):
        pairs = []
        for word in (w for line in lines for w in line.split()):
            totals[word] += 1
            pairs.append((word, totals[word]))
        expected[epoch] = Counter(pairs)
    return expected


def keyed_input(epochs: int, lines: int, vocabulary: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(vocabulary)])
    out = []
    for _ in range(epochs):
        ids = np.minimum(rng.zipf(1.3, size=(lines, 10)) - 1, vocabulary - 1)
        out.append([" ".join(row) for row in words[ids]])
    return out


def keyed_reference(data: list[list[str]]) -> dict[int, Counter]:
    totals: Counter = Counter()
    expected = {}
    for epoch, lines in enumerate(data):
        counts = Counter(w for line in lines for w in line.split())
        totals.update(counts)
        expected[epoch] = Counter((w, totals[w]) for w in counts)
    return expected


def recovery_for(interval: float | str | None, store: str, alone: bool = False) -> rt.Recovery | None:
    """``alone``: ``Recovery(alone=True)``, every send numbered and kept in an upstream log."""
    return None if interval is None else rt.Recovery(store, interval=interval, alone=alone)


def run_keyed(data: list[list[str]], parallelism: int, recovery: rt.Recovery | None) -> tuple[float, dict, dict]:
    """Seconds from the first push to the last totals; the output per epoch; the job's stats."""
    with rt.run(keyed_flow(), parallelism=parallelism, recovery=recovery) as job:
        job.wait_ready()
        clock = time.perf_counter()
        for epoch, lines in enumerate(data):
            job.push("lines", lines, epoch)
        job.close("lines")
        job.wait(timeout=600)
        elapsed = time.perf_counter() - clock
        return elapsed, job.collect("totals"), job.stats()


def run_components(edges: np.ndarray, parallelism: int, recovery: rt.Recovery | None) -> float:
    batch = -(-len(edges) // parallelism)
    with components.start_job(parallelism, batch_size=batch, recovery=recovery) as job:
        job.wait_ready()
        clock = time.perf_counter()
        components.solve(job, edges)
        return time.perf_counter() - clock


def measure_recovery(data: list[list[str]], parallelism: int, store: str,
                     expected: dict[int, Counter], kill_after: int = 2) -> dict[str, float]:
    """Kill an input replica's process once ``kill_after`` snapshots are committed (more leave the
    driver's spare host time to start, as in a long-running job); see the module docstring."""
    pushed: list[float] = []
    arrivals: list[float] = []
    got: dict[int, list] = {}
    killed_at = None

    def paced() -> Iterator[list[str]]:
        for lines in data:
            time.sleep(RECOVERY_PACE)
            pushed.append(time.time())
            yield lines

    with rt.run(keyed_flow(), inputs={"lines": paced()}, parallelism=parallelism,
                recovery=rt.Recovery(store, interval=0.2)) as job:
        for epoch, records in job.results("totals", timeout=600):
            arrivals.append(time.time())
            got[epoch] = records
            if killed_at is None and job.stats()["snapshots"]["committed"] >= kill_after:
                victim = random.choice(sorted(key for key in job.placement.actors if "lines" in key.chain))
                killed_at = time.time()
                os.kill(job.hosts()[f"{job.name}/{victim.chain}/{victim.replica}"], signal.SIGKILL)
        record = job.stats()["recoveries"]["recoveries"][0]
    assert {e: Counter(r) for e, r in got.items() if r} == {e: c for e, c in expected.items() if c}, \
        "the output differs from the failure-free run"
    assert killed_at is not None

    def lag(at: float) -> int:  # epochs fed but not handed back yet
        return sum(t <= at for t in pushed) - sum(t <= at for t in arrivals)

    usual = statistics.median(lag(t) for t in arrivals if t < killed_at)
    back = next(t for t in arrivals if t > record["finished_at"] and lag(t) <= usual + 1)
    steps = {f"recovery_step_{step.replace(' ', '_')}_s": seconds for step, seconds in record["steps"].items()}
    return {"recovery_to_restored_s": record["finished_at"] - killed_at, "recovery_to_throughput_s": back - killed_at,
            "recovery_restore_s": record["seconds"], **steps}


def measure_stage_kill(data: list[list[str]], store: str, expected: dict[int, Counter], alone: bool = False,
                       stage: str = "keyed", kill_after: int = 2, held: tuple[int, int] = (0, 0),
                       interval: float = 0.2) -> dict[str, float]:
    """One replica of the 4-replica keyed stage (``count``, after the exchange, of the ``stage`` job:
    :data:`STAGES`) SIGKILLed once ``kill_after`` (default two; more leave the driver's spare host
    time to start, as it has in a job that runs for long)
    snapshots are committed, the input paced: ``stage_kill_to_next_epoch_s`` from the kill to the
    first epoch fed after the kill being handed out (issue 74's measure: a
    replica recovered alone should take at most half of today's whole-job recovery),
    ``stage_recovered_alone`` (1.0 if the recovery's record says ``"alone"``: with ``alone`` and
    the ``running`` stage; otherwise the record's ``why`` says what the rule found), and of the
    other replicas, ``stage_survivors_reloaded`` those whose process reset its state and
    ``stage_survivors_same_pid`` those still in the same process; where the time went:
    ``stage_kill_to_noticed_s`` (the death noticed), ``stage_recovery_s`` (the recovery, its
    steps ``stage_step_*_s``), ``stage_recovered_to_next_epoch_s`` (the epoch's trip after it).
    ``held``: the ``running`` stage's keyed state besides its counts, ``(keys, bytes per key)``."""
    arrivals: list[tuple[float, int]] = []
    pushed: list[float] = []
    got: dict[int, list] = {}
    killed_at, pids = None, {}

    def paced() -> Iterator[list[str]]:
        for lines in data:
            time.sleep(RECOVERY_PACE)
            pushed.append(time.time())
            yield lines

    recovery = rt.Recovery(store, interval=interval, alone=alone)
    flow = keyed_flow() if stage == "keyed" else running_flow(*held)
    with rt.run(flow, inputs={"lines": paced()}, parallelism=4, recovery=recovery) as job:
        for epoch, records in job.results("totals", timeout=600):
            arrivals.append((time.time(), epoch))
            got[epoch] = records
            if killed_at is None and job.stats()["snapshots"]["committed"] >= kill_after:
                killed_at, pids = time.time(), dict(job.hosts())
                os.kill(pids.pop(f"{job.name}/count/1"), signal.SIGKILL)
        stats = job.stats()
        record = stats["recoveries"]["recoveries"][0]
        same = sum(job.hosts().get(name) == pid for name, pid in pids.items() if name in stats["replicas"])
        reloaded = sum(stats["replicas"][name]["restores"] > 0 for name in pids if name in stats["replicas"])
    assert {e: Counter(r) for e, r in got.items() if r} == {e: c for e, c in expected.items() if c}, \
        "the output differs from the failure-free run"
    assert killed_at is not None
    first = next(epoch for epoch, at in enumerate(pushed) if at > killed_at)
    after = next(at for at, epoch in arrivals if epoch >= first)
    steps = {f"stage_step_{step.replace(' ', '_')}_s": seconds for step, seconds in record["steps"].items()}
    noticed = record["finished_at"] - record["seconds"]
    return {"stage_kill_to_next_epoch_s": after - killed_at, "stage_recovery_s": record["seconds"],
            "stage_kill_to_noticed_s": noticed - killed_at, "stage_recovered_to_next_epoch_s": after - record["finished_at"],
            "stage_snapshot_mb": stats["snapshots"]["last_size_bytes"] / 1e6,
            "stage_recovered_alone": float(record["kind"] == "alone"), "stage_survivors_reloaded": float(reloaded),
            "stage_survivors_same_pid": float(same), **steps}


def measure(epochs: int, lines: int, vocabulary: int, nodes: int, edges: int, parallelism: int,
            only: str = "all", alone: int = 0, stage: str = "keyed", kill_after: int = 2, state_keys: int = 0,
            state_bytes: int = 0, stage_interval: float = 0.2) -> dict[str, float]:
    """One run; ``only``: ``"all"``, ``"throughput"`` (keyed and components), ``"keyed"`` or ``"stage"`` (see
    :data:`PARTS`); ``alone=1``: the keyed jobs and the stage's with ``Recovery(alone=True)`` (numbered sends);
    ``stage``: the stage's job (:data:`STAGES`); ``kill_after``: the commits before its kill (the stage's, or the
    input replica's of ``recovery_*``); ``state_keys``, ``state_bytes``: the ``running`` stage's keyed state besides
    its counts (:class:`RunningWordCounts`); ``stage_interval``: the stage job's snapshot interval."""
    if stage not in STAGES:
        raise ValueError(f"--param stage={stage!r}: one of {STAGES}")
    parts = PARTS[only]
    ensure_ray()
    from bench.baselines.data import random_graph_edges

    data = keyed_input(epochs, lines, vocabulary)
    expected = keyed_reference(data)
    graph = random_graph_edges(nodes, edges, seed=0)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as root:
        for label, interval in INTERVALS.items() if "keyed" in parts else ():
            elapsed, totals, stats = run_keyed(data, parallelism, recovery_for(interval, f"{root}/keyed-{label}", bool(alone)))
            assert {e: Counter(r) for e, r in totals.items()} == expected
            out[f"keyed_{label}_s"] = elapsed
            if label == "every_0.2s":
                snapshots = stats["snapshots"]
                out["snapshot_bytes"] = float(snapshots["last_size_bytes"])
                out["snapshot_s"] = snapshots["last_duration_s"]
                out["snapshot_alignment_s"] = snapshots["last_alignment_s"]
                out["snapshot_mb_per_s"] = snapshots["last_size_bytes"] / snapshots["last_duration_s"] / 1e6
                out["snapshots_taken_at_0.2s"] = float(snapshots["committed"])
            time.sleep(SETTLE_S)
        if "stage" in parts:
            reference = expected if stage == "keyed" else running_reference(data)
            return measure_stage_kill(data, f"{root}/stage", reference, bool(alone), stage, kill_after,
                                      (state_keys, state_bytes), stage_interval)
        for label, interval in INTERVALS.items() if "components" in parts else ():
            out[f"components_{label}_s"] = run_components(graph, parallelism,
                                                          recovery_for(interval, f"{root}/cc-{label}"))
            time.sleep(SETTLE_S)
        if "rest" not in parts:
            return out
        _, _, stats = run_keyed(data, parallelism, recovery_for("auto", f"{root}/auto"))
        out["auto_interval_s"] = stats["snapshots"]["interval_s"]
        cost = stats["snapshots"]["last_duration_s"] or 0.0
        out["auto_model_interval_s"] = optimal_interval(cost, DEFAULT_PRIOR_RATE) if cost else float("nan")
        out.update(measure_recovery(data, parallelism, f"{root}/recovery", expected, kill_after))
    return out

