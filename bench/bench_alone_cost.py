"""What ``rt.Recovery(alone=True)`` costs a job that never fails (issue 74: whether a replica
should be recovered alone by default; docs/recovery.md, "What it costs"). With it every send
between replicas is numbered, kept in its sender's upstream log until a snapshot commits past
it, and checked against duplicates at its receiver (docs/recovery.md, "A replica recovered
alone"). Each run measures both settings, ``alone=False``
(every death rolls the whole job back) and ``alone=True`` (the default), alternating which goes first from run to run, with a
snapshot every second (``Recovery``'s default interval) in both (``--param only=running``: the
running stage and the upstream logs only):

* ``{setting}_wordcount_s``: the keyed word count of ``bench recovery`` (``keyed_flow``:
  ``flat_map -> count_by_key -> stateful_map``), ``epochs`` of ``lines`` lines pushed from the
  driver, from the first push to the last totals. Its ``count`` notifies, so no replica of it
  is ever recovered alone, and ``rt.run`` numbers nothing in it even with ``alone=True``
  (``numbering_for``): the same for the latency and components jobs below, whose pairs then
  measure only the noise (before that gate they measured numbering everywhere).
* ``{setting}_running_s``: the same input through ``bench recovery``'s ``running_flow`` (a
  4-replica stage counting per word as it receives, no notification), the job whose
  ``count`` replicas the rule recovers alone.
* ``{setting}_keyed_p50_ms``, ``_p99_ms``: ``bench latency``'s keyed epoch latency
  (``keyed_epochs`` small epochs one after the other).
* ``{setting}_increment_ms``: ``bench socket_ab``'s components increment: the example's job fed
  95% of the edges, then 1% at a time; the median of the five 1% epochs.
* ``upstream_log_mb``: with ``alone=True``, the most bytes all the running job's replicas kept
  in their upstream logs at once (messages kept times the pickled bytes of a message,
  :func:`_message_bytes`: the logs keep the transport's packed batches), sampled every
  ``paced`` epochs of 40 epochs of ``paced_lines`` lines paced as ``bench recovery``'s stage
  kill (an epoch every 50 ms).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import Counter

import raytide as rt
from bench.bench_components import example, graph
from bench.bench_latency import _median_p99_ms, keyed_epoch_latencies
from bench.bench_recovery import keyed_input, keyed_reference, run_keyed, running_flow, running_reference
from bench.harness import SETTLE_S, ensure_ray
from raytide.physical.pickled import pack_records, packed_size

PARAMS = {"epochs": 60, "lines": 5_000, "vocabulary": 20_000, "keyed_epochs": 300, "nodes": 200_000,
          "edges": 600_000, "parallelism": 2, "paced": 5, "paced_lines": 500, "only": "all"}
SETTINGS = {"whole": False, "alone": True}
RATIOS = [(f"{label}: alone / whole", f"alone_{metric}", f"whole_{metric}")
          for label, metric in (("word count", "wordcount_s"), ("running stage", "running_s"),
                                ("keyed p50", "keyed_p50_ms"), ("keyed p99", "keyed_p99_ms"),
                                ("1% increment", "increment_ms"))]
#: Seconds between the epochs of the paced feed whose upstream logs are sampled.
PACE = 0.05
_runs = 0


def run_running(data: list[list[str]], recovery: rt.Recovery, sample_every: int = 0) -> tuple[float, dict, float]:
    """``running_flow`` fed ``data``: seconds from the first push to the last epoch; its output; with
    ``sample_every``, the epochs paced (:data:`PACE`) and the most bytes its upstream logs kept
    at once (messages times :func:`_message_bytes`), sampled every ``sample_every`` epochs
    (0: fed at once, not sampled)."""
    most = 0.0
    with rt.run(running_flow(), parallelism=4, recovery=recovery) as job:
        job.wait_ready()
        clock = time.perf_counter()
        for epoch, lines in enumerate(data):
            job.push("lines", lines, epoch)
            if sample_every:
                job.advance("lines", epoch + 1)
                time.sleep(PACE)
                if epoch % sample_every == 0:
                    stats = job.stats()
                    kept = sum(replica["upstream_log"] for replica in stats["replicas"].values())
                    most = max(most, kept * _message_bytes(stats, data))
        job.close("lines")
        job.wait(timeout=600)
        return time.perf_counter() - clock, job.collect("totals"), most


def _message_bytes(stats: dict, data: list[list[str]]) -> float:
    """The bytes of one kept message: the only channels logged are the input's words into
    ``count`` (``logged_chains``; the sink, fed by 4 channels, is never recovered alone), kept as
    the pickled batch the transport sent, so a list of as many words as ``words`` sent per batch."""
    counters = [replica["vertices"]["words"] for replica in stats["replicas"].values() if "words" in replica["vertices"]]
    per_batch = sum(c["records_out"] for c in counters) / max(1, sum(c["batches_out"] for c in counters))
    words = [w for line in data[0] for w in line.split()][:max(1, round(per_batch))]
    return packed_size(pack_records(words)) * per_batch / len(words)


def _one(setting: str, data: list[list[str]], expected: dict, running: dict, root: str, keyed_epochs: int,
         edges, nodes: int, parallelism: int, only: str) -> dict[str, float]:
    out: dict[str, float] = {}
    elapsed, totals, _ = run_running(data, rt.Recovery(f"{root}/{setting}-running", interval=1.0,
                                                       alone=SETTINGS[setting]))
    assert {e: Counter(r) for e, r in totals.items() if r} == {e: c for e, c in running.items() if c}
    out[f"{setting}_running_s"] = elapsed
    time.sleep(SETTLE_S)
    if only == "running":
        return out
    elapsed, totals, _ = run_keyed(data, parallelism, rt.Recovery(f"{root}/{setting}", alone=SETTINGS[setting]))
    assert {e: Counter(r) for e, r in totals.items()} == expected
    out[f"{setting}_wordcount_s"] = elapsed
    time.sleep(SETTLE_S)
    latencies, _ = keyed_epoch_latencies(keyed_epochs, parallelism, rt.Recovery(f"{root}/{setting}-latency",
                                                                                alone=SETTINGS[setting]))
    out[f"{setting}_keyed_p50_ms"], out[f"{setting}_keyed_p99_ms"] = _median_p99_ms(latencies)
    time.sleep(SETTLE_S)
    cuts = [len(edges) * percent // 100 for percent in range(95, 101)]
    _, (_, *increments) = example(nodes, edges, parallelism, [edges[:cuts[0]]] + [
        edges[start:end] for start, end in zip(cuts, cuts[1:])],
        rt.Recovery(f"{root}/{setting}-cc", alone=SETTINGS[setting]))
    out[f"{setting}_increment_ms"] = statistics.median(increments) * 1e3
    time.sleep(SETTLE_S)
    return out


def measure(epochs: int, lines: int, vocabulary: int, keyed_epochs: int, nodes: int, edges: int,
            parallelism: int, paced: int, paced_lines: int, only: str) -> dict[str, float]:
    """One run: both settings, in the order this run's turn gives (see the module docstring);
    ``only="running"``: the running stage's throughput and upstream logs only."""
    global _runs
    ensure_ray()
    data = keyed_input(epochs, lines, vocabulary)
    expected, running = keyed_reference(data), running_reference(data)
    cc_edges = graph(nodes, edges, 0)[0] if only == "all" else None
    order = ("whole", "alone") if _runs % 2 == 0 else ("alone", "whole")
    _runs += 1
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as root:
        for setting in order:
            out.update(_one(setting, data, expected, running, root, keyed_epochs, cc_edges, nodes, parallelism, only))
        calm = [epoch[:paced_lines] for epoch in data[:40]]
        _, _, most = run_running(calm, rt.Recovery(f"{root}/paced", interval=1.0, alone=True), paced)
    out["upstream_log_mb"] = most / 1e6
    return out
