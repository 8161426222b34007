"""The autoscaler actor on a real Ray: it finds the width a goal needs and the driver makes it.

The workload is the thesis's Mandelbrot rows (``examples/unbalanced.py``): CPU-bound pure
Python, one core per replica. The session's Ray has 2 CPUs, so a goal one replica cannot
meet and two can is the test: the rate policy must get there from parallelism 1. How much
faster two replicas then are is a speed, measured by ``python -m bench rescale`` (its
``autoscale_*`` figures), not asserted here: on 2 shared cores it swings with the load.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raytide as rt
from examples.unbalanced import mandelbrot_flow, mandelbrot_row, row_epochs
from raytide.errors import ArgumentError

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]
#: The rate policy decides from measured rates, and the grant from free CPUs: the other lane
#: waits meanwhile (tests/lanes.py). The file policy measures nothing, and the latency
#: policy's bottleneck sleeps, so it is one however busy the machine.
needs_both_cores = pytest.mark.needs_both_cores


def true_rate_of_one_replica(tmp_path: Path) -> float:
    """Rows a second one ``mandelbrot`` replica computes while busy (DS2's true rate)."""
    with rt.run(mandelbrot_flow(), {"rows": row_epochs(800)}, parallelism=1) as job:
        job.wait(timeout=300)
        stats = job.stats()
    busy = sum(r["busy_s"] for name, r in stats["replicas"].items() if "mandelbrot" in name)
    return stats["vertices"]["mandelbrot"]["records_in"] / busy


def rate_at(timeline: list[dict], width: int) -> float:
    """Rows a second ``mandelbrot`` computed over the autoscaler's windows at ``width`` replicas."""
    windows = [(entry["throughput"]["mandelbrot"], entry["window_s"]) for entry in timeline
               if entry["parallelism"].get("mandelbrot") == width]
    assert windows, f"no window at {width} replicas: {timeline}"
    return sum(rate * seconds for rate, seconds in windows) / sum(seconds for _, seconds in windows)


@pytest.mark.timeout(600)
@needs_both_cores
def test_the_rate_policy_takes_mandelbrot_from_one_replica_to_the_goal(ray_session, tmp_path):
    rate = true_rate_of_one_replica(tmp_path)
    goal = 1.4 * rate  # one replica cannot, two can (the session's Ray has 2 CPUs)
    autoscale = rt.Autoscale(policy="rate", rate=goal, interval=1.0, cooldown=1.0)
    rows = int(goal * 14)
    with rt.run(mandelbrot_flow(), {"rows": row_epochs(rows)}, parallelism=1,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=None), autoscale=autoscale) as job:
        job.wait(timeout=300)
        out = job.collect("out")
        timeline = job.stats()["autoscaler"]
    made = [entry for entry in timeline if entry["changes"]]
    assert made and made[0]["changes"] == {"mandelbrot": 2}, timeline
    assert "ceil(" in next(d["reason"] for d in made[0]["decisions"] if d["vertex"] == "mandelbrot")
    assert len(made) <= 3 and made[0]["rescale"]["pause_s"] > 0
    assert rate_at(timeline, 1) > 0 and rate_at(timeline, 2) > 0, timeline  # windows measured at both widths
    got = sorted(row for records in out.values() for row in records)
    assert [y for y, _ in got] == list(range(rows))
    assert all(got[y] == mandelbrot_row(y) for y in range(0, rows, 97))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("recovers", [True, False], ids=["with recovery", "without recovery"])
def test_the_file_policy_follows_a_parameters_json_written_by_another_process(ray_session, tmp_path, recovers):
    """In a job without recovery too: it is rescaled as one with recovery is (issue 74)."""
    parameters, stats = tmp_path / "parameters.json", tmp_path / "stats.json"
    autoscale = rt.Autoscale(policy="file", parameters=str(parameters), stats=str(stats), interval=0.5, cooldown=0.0)
    writer = [sys.executable, "-c", "import json, sys; json.dump({'mandelbrot': 2, 'out': 2}, open(sys.argv[1], 'w'))",
              str(parameters)]
    with rt.run(mandelbrot_flow(), {"rows": row_epochs(6000)}, parallelism=1,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=None) if recovers else None,
                autoscale=autoscale) as job:
        deadline = time.monotonic() + 120
        while not stats.exists() or not parameters.exists():
            assert time.monotonic() < deadline, "the autoscaler wrote no stats.json"
            job.collect("out")
            time.sleep(0.1)
        assert json.loads(parameters.read_text())["mandelbrot"] == 1  # created with the current widths
        subprocess.run(writer, check=True)
        while job.parallelism()["mandelbrot"] != 2:
            assert time.monotonic() < deadline, f"not rescaled: {job.stats()['autoscaler'][-3:]}"
            job.collect("out")
            time.sleep(0.1)
        made = job.stats()
        job.cancel()
    assert [r["after"]["mandelbrot"] for r in made["rescales"]] == [2] and made["autoscaler"], made.get("rescales")
    document = json.loads(stats.read_text())
    samples = document["mandelbrot"]
    assert samples and all(set(replicas) <= {"Replica0", "Replica1"} for replicas in samples.values())
    assert {"ItemsConsumed", "ItemsProduced", "averageItemsProduced"} == set(next(iter(samples.values()))["Replica0"])


def slow_score(x: int) -> int:
    """The bottleneck: 4 ms a record (sleeping, so two replicas are twice as fast however busy the machine)."""
    time.sleep(0.004)
    return x


@pytest.mark.timeout(600)
def test_the_latency_policy_finds_the_bottleneck_by_progress_tracking_and_widens_it(ray_session, tmp_path):
    """Records arrive faster than one replica of ``score`` handles them: the frontier of the
    output falls behind the input's, the latency passes the goal, and the vertex with work
    queued that is busiest is ``score`` (not ``parse`` before it, nor ``out`` after it)."""
    flow = rt.Dataflow("bottleneck")
    flow.input("numbers").map(lambda x: x + 1, name="parse").exchange(lambda x: x, name="spread") \
        .map(slow_score, name="score").output("out")

    def paced():
        for epoch in range(400):
            yield list(range(epoch * 40, (epoch + 1) * 40))  # 40 records every 0.1 s: 400 a second
            time.sleep(0.1)

    autoscale = rt.Autoscale(policy="latency", latency=0.5, interval=1.0, cooldown=3.0)
    with rt.run(flow, {"numbers": paced()}, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None),
                autoscale=autoscale) as job:
        deadline = time.monotonic() + 120
        while job.parallelism()["score"] == 1:
            assert time.monotonic() < deadline, job.stats()["autoscaler"]
            job.collect("out")
            time.sleep(0.2)
        timeline = job.stats()["autoscaler"]
        job.cancel()
    made = next(entry for entry in timeline if entry["changes"])
    assert set(made["changes"]) <= {"spread", "score", "out"}, made
    reason = next(d["reason"] for d in made["decisions"] if d["target"] != d["current"])
    assert "bottleneck 'score'" in reason or "bottleneck 'spread'" in reason, reason
    assert made["frontier_lag"]["out"] >= 1


@pytest.mark.timeout(600)
@needs_both_cores
def test_short_of_cpus_it_grants_what_is_free_and_asks_the_cluster_for_the_rest(ray_session, tmp_path):
    """DS2 wants 6 replicas of ``mandelbrot``; one CPU is free: it adds one, and asks Ray's
    cluster autoscaler (``request_resources``) for the CPUs the other four need."""
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.autoscaler.v2.utils import is_autoscaler_v2
    from ray.experimental.internal_kv import _internal_kv_get

    if is_autoscaler_v2():
        pytest.skip("Ray's v2 autoscaler keeps resource requests in the GCS, not in the KV store read here")
    autoscale = rt.Autoscale(policy="rate", rate=100_000.0, max_parallelism=6, interval=1.0, cooldown=30.0,
                             request_resources=True)
    with rt.run(mandelbrot_flow(), {"rows": row_epochs(100_000)}, parallelism=1,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=None), autoscale=autoscale) as job:
        deadline = time.monotonic() + 120
        while job.parallelism()["mandelbrot"] == 1:
            assert time.monotonic() < deadline, job.stats()["autoscaler"]
            job.collect("out")
            time.sleep(0.2)
        made = next(entry for entry in job.stats()["autoscaler"] if entry["changes"])
        job.cancel()
    assert made["changes"] == {"mandelbrot": 2} and made["free_cpus"] == 1.0
    reason = next(d["reason"] for d in made["decisions"] if d["vertex"] == "mandelbrot")
    assert "capped at 6" in reason and "capped by free CPUs" in reason, reason
    requested = json.loads(_internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL))
    assert requested == [{"CPU": 1}] * 6, requested  # the cluster's 2 CPUs and 4 more


def test_run_refuses_an_autoscaler_naming_a_vertex_the_job_does_not_have(ray_session, tmp_path):
    """(Before, the job started and the autoscaler never rescaled anything, saying nothing.)"""
    flow = rt.Dataflow("named")
    flow.input("numbers").map(lambda x: x, name="rows").output("out")
    with pytest.raises(ArgumentError, match=r"Autoscale vertices names 'nosuch', which is not one of the job's "
                                               r"vertices it can rescale: \['out', 'rows'\]"):
        rt.run(flow, recovery=rt.Recovery(str(tmp_path / "store")),
               autoscale=rt.Autoscale(policy="rate", rate=100.0, vertices=["nosuch"]))
