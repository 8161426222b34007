"""The Job's public surface on a real local Ray: run options, iteration, failing inputs, unknown outputs."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import ray

import raytide as rt

pytestmark = pytest.mark.ray

LINES = [["the quick brown fox", "the lazy dog"], [], ["a b a", "b"]]


def word_count() -> rt.Dataflow:
    flow = rt.Dataflow("job-api")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    return flow


def word_counts(epochs: list[list[str]]) -> dict[int, dict[str, int]]:
    """Plain Python: each non-empty epoch's word counts."""
    return {e: dict(Counter(w for line in lines for w in line.split())) for e, lines in enumerate(epochs) if lines}


def test_without_chaining_every_vertex_has_its_own_actors_and_the_result_is_the_same(ray_session):
    flow = word_count()
    with rt.run(flow, inputs={"lines": LINES}, parallelism=2, chaining=False) as job:
        job.wait(timeout=120)
        result = job.collect("out")
        chains = {chain for chain, _ in job.placement.actors}
    assert chains == set(flow.vertices), "one chain per vertex: nothing fused"
    assert {e: dict(r) for e, r in result.items()} == word_counts(LINES)


def free_cpus() -> float:
    return ray.available_resources().get("CPU", 0.0)


def eventually(condition, timeout: float = 30.0) -> bool:
    """Ray's resource view lags a little behind actors starting and stopping."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_num_cpus_reserves_that_many_cpus_per_vertex_host_while_the_job_runs(ray_session):
    before = free_cpus()
    with rt.run(word_count(), parallelism=1, num_cpus=0.25) as job:
        hosts = [lease for lease in job.placement.leases.values() if not lease.seated]
        assert len(hosts) == 1 < len(job.placement.actors), "the input replica is seated in the count's host"
        reserved = 0.25 * len(hosts)
        assert eventually(lambda: free_cpus() == pytest.approx(before - reserved)), (free_cpus(), before, reserved)
        job.push("lines", ["a b a"])
        job.close("lines")
        job.wait(timeout=60)
        assert {e: dict(r) for e, r in job.collect("out").items()} == {0: {"a": 2, "b": 1}}
    assert eventually(lambda: free_cpus() == pytest.approx(before)), "the CPUs come back when the job ends"


def test_a_job_with_one_output_iterates_over_its_epochs_as_they_complete(ray_session):
    with rt.run(word_count(), inputs={"lines": LINES}, parallelism=2) as job:
        seen = [(epoch, dict(records)) for epoch, records in job]
    counts = word_counts(LINES)
    assert seen == [(epoch, counts.get(epoch, {})) for epoch in range(len(LINES))], "the empty epoch 1 comes in its place"


def test_a_job_with_several_outputs_refuses_to_be_iterated(ray_session):
    flow = rt.Dataflow("two-outputs")
    lines = flow.input("lines")
    lines.output("raw")
    lines.map(str.upper).output("loud")
    with rt.run(flow, parallelism=1) as job:
        with pytest.raises(rt.GraphError, match=r"outputs \['raw', 'loud'\]; iterate over job.results\(name\)"):
            iter(job)


def test_an_input_iterable_that_raises_halfway_fails_the_job_naming_the_input(ray_session):
    def epochs():
        yield ["a b"]
        raise ValueError("the source broke at epoch 1")

    with rt.run(word_count(), inputs={"lines": epochs()}, parallelism=2) as job:
        with pytest.raises(rt.RaytideError, match="feeding input 'lines' failed.*the source broke at epoch 1") as info:
            job.wait(timeout=60)
    assert not isinstance(info.value, rt.JobTimeout), "it fails at once, it does not hang until the timeout"
    assert isinstance(info.value.__cause__, ValueError)


def test_an_unknown_output_is_a_graph_error_naming_it_and_the_outputs(ray_session):
    with rt.run(word_count(), inputs={"lines": LINES}, parallelism=1) as job:
        job.wait(timeout=60)
        with pytest.raises(rt.GraphError, match=r"'counts' is not an output of dataflow 'job-api'; outputs: \['out'\]"):
            job.collect("counts")
        with pytest.raises(rt.GraphError, match=r"'counts' is not an output of dataflow 'job-api'; outputs: \['out'\]"):
            next(job.results("counts"))


def test_stats_show_where_the_work_waits_and_who_is_busy(ray_session):
    """A slow vertex behind a fast one: while the job runs its replicas are the busy ones, its
    frontier trails the input, the tracker counts the backlog at it or upstream of it, and the
    fast one upstream waits for its window (backpressure); ``job.parallelism()`` gives every
    vertex's width."""
    flow = rt.Dataflow("stats")
    numbers = flow.input("numbers").map(lambda x: x + 1, name="fast")
    numbers.exchange(lambda x: x % 7, name="spread").map(lambda x: time.sleep(0.01) or x, name="slow").output("out")
    with rt.run(flow, parallelism=2, max_inflight=2, chaining=False) as job:
        assert job.parallelism() == {"numbers": 2, "fast": 2, "spread": 2, "slow": 2, "out": 2}
        for epoch in range(6):
            job.push("numbers", list(range(epoch * 80, epoch * 80 + 80)), epoch)
        # stats read the tracker before the replicas' counters (which wait for the event in hand),
        # so while "slow" has taken fewer than the 400 records of epochs 0-4, the tracker held one
        # of them pending: slow's frontier trails input epoch 5. Where it counts the backlog
        # depends on what the replicas held back: sample until it shows (not timed: a CI run
        # under load took only three samples, each ~1 s, over the 2.4 s of slow's work)
        pending, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            vertices = job.stats()["vertices"]
            if vertices["slow"]["records_in"] >= 400:
                break
            pending.append({name: vertices[name] for name in ("fast", "spread", "slow")})
            if sum(vertex["queued"] for vertex in pending[-1].values()) > 0:
                break
            time.sleep(0.02)
        assert pending and all(sample["slow"]["frontier"] is not None and sample["slow"]["frontier_lag"] >= 1
                               for sample in pending), pending
        assert sum(vertex["queued"] for vertex in pending[-1].values()) > 0, pending
        job.close("numbers")
        job.wait(timeout=120)
        stats = job.stats()
    replicas = stats["replicas"]
    slow_busy = sum(f["busy_s"] for n, f in replicas.items() if "/slow/" in n)
    fast_busy = sum(f["busy_s"] for n, f in replicas.items() if "/fast/" in n)
    assert slow_busy > 3.0 > fast_busy, (slow_busy, fast_busy)  # 480 records x 10 ms in the slow vertex
    assert sum(f["blocked_s"] for n, f in replicas.items() if "/spread/" in n) > 0.1, replicas
    assert sum(f["vertices"]["slow"]["records_in"] for n, f in replicas.items() if "/slow/" in n) == 480
    assert stats["vertices"]["slow"]["queued"] == 0 and stats["vertices"]["slow"]["frontier"] is None


def test_the_statistics_are_exported_as_ray_metrics(ray_session):
    """Each replica's records in and out, busy and blocked seconds reach Ray's Prometheus
    endpoint, tagged by job, vertex and replica (Ray reports them every few seconds)."""
    with rt.run(word_count(), inputs={"lines": LINES}, parallelism=2, name="metrics-job") as job:
        job.wait(timeout=120)
        counted = job.stats()["vertices"]["out"]["records_in"]
    port = ray._private.worker.global_worker.node.metrics_export_port
    wanted = ("ray_raytide_records_in", "ray_raytide_records_out", "ray_raytide_busy_seconds",
              "ray_raytide_blocked_seconds")
    deadline = time.monotonic() + 60
    while True:  # the final figures are published when the hosts are given back, then reported
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        ours = [line for line in text.splitlines() if 'job="metrics-job"' in line]
        received = sum(float(line.rsplit(" ", 1)[1]) for line in ours
                       if line.startswith("ray_raytide_records_in{") and 'vertex="out"' in line)
        if all(any(line.startswith(name + "{") for line in ours) for name in wanted) and received == counted:
            break
        assert time.monotonic() < deadline, f"not exported within 60 s ({received} of {counted}); ours: {ours}"
        time.sleep(1)
    assert any('replica="1"' in line for line in ours)


def doubled_pairs() -> rt.Dataflow:
    flow = rt.Dataflow("array-output")
    flow.input("rows").map_batches(lambda rows: np.asarray(rows, dtype=np.int64).reshape(-1, 2) * 2,
                                   name="double").output("out")
    return flow


def test_an_output_of_arrays_reaches_results_as_one_array_per_epoch_or_as_records(ray_session):
    """Epoch 0 small (inline parts), epoch 1 over 64 KiB per replica (object refs, fetched when the
    epoch completes), epoch 2 empty: the same rows whether read as records, NumPy or Arrow."""
    epochs = [np.arange(6).reshape(3, 2), np.arange(100_000).reshape(50_000, 2), np.empty((0, 2), dtype=np.int64)]
    expected = [sorted(map(tuple, (2 * rows).tolist())) for rows in epochs]
    got = {}
    for batch_format in (None, "numpy", "pyarrow"):
        with rt.run(doubled_pairs(), parallelism=2) as job:
            job.push("rows", epochs[0], 0)
            job.push("rows", epochs[1], 1)
            job.advance("rows", 2)
            job.close("rows")  # at epoch 2, which completes with no records
            got[batch_format] = list(job.results("out", timeout=60, batch_format=batch_format))
    assert [(e, sorted(map(tuple, records))) for e, records in got[None]] == list(enumerate(expected))
    assert all(isinstance(batch, np.ndarray) for _, batch in got["numpy"])
    assert [(e, sorted(map(tuple, batch.reshape(-1, 2).tolist()))) for e, batch in got["numpy"]] == list(enumerate(expected))
    assert [(e, sorted(map(tuple, table.column("value").to_pylist()))) if table.num_rows else (e, [])
            for e, table in got["pyarrow"]] == list(enumerate(expected))


@ray.remote(num_cpus=0)
class Silent:
    """An actor whose figures come too late."""

    def stats(self) -> dict:
        time.sleep(5)
        return {}


def test_stats_say_when_the_progress_actor_does_not_answer(ray_session, monkeypatch):
    """A progress actor that does not answer (dead, on a lost node, or torn down) leaves its
    figures None; a missing one used to fail ``job.stats()`` with a ``KeyError``."""
    from raytide.driver.stats import actor_stats

    monkeypatch.setattr("raytide.driver.stats.STATS_TIMEOUT", 0.5)
    placement = SimpleNamespace(progress=Silent.remote(), replica_stats=lambda timeout: {})
    stats = actor_stats(placement, [3])
    assert stats["progress_calls"] is None and stats["progress_fan_outs"] is None and stats["vertices"] == {}, stats


def test_stats_say_when_the_coordinator_does_not_answer_or_is_being_replaced(ray_session, monkeypatch):
    """``job.stats()`` while a recovery runs: a coordinator on a lost node does not answer
    (Ray declares it dead only later), and one that died is not replaced at once. Both used
    to escape as Ray's ``GetTimeoutError`` and an ``AttributeError`` of None (seen on a
    four-node cluster with a node removed)."""
    from raytide.driver.snapshot_health import SnapshotHealth
    from raytide.driver.stats import recovery_stats

    monkeypatch.setattr("raytide.driver.stats.STATS_TIMEOUT", 0.5)
    monkeypatch.setattr("raytide.driver.snapshot_health.SILENT_AFTER", 0.5)
    recovery = SimpleNamespace(coordinator=Silent.remote(), stats=lambda: {"count": 0}, rescale_stats=lambda: [],
                               health=SnapshotHealth("j", rt.Recovery("unused")),
                               coordinator_name=lambda: "the snapshot coordinator j/coordinator")
    silent = recovery_stats(recovery, None, False)["snapshots"]  # its stats() did not answer: silent, said at once
    assert silent["coordinator"].startswith("the snapshot coordinator j/coordinator has not answered for"), silent
    assert silent["silent_s"] >= 0.5, silent
    ray.kill(recovery.coordinator)
    recovery.coordinator = None
    assert recovery_stats(recovery, None, False)["snapshots"] == {"coordinator": "died; a recovery is replacing it"}


@ray.remote(num_cpus=0)
class Released:
    """A host that no longer plays the coordinator: a call of the job's lease answers None."""

    def stats(self) -> None:
        return None


def test_stats_of_a_torn_down_job_say_its_coordinator_was_released(ray_session):
    """A job torn down before any reading of its figures: its coordinator's host answers None
    (the lease is over), which failed ``job.stats()`` with a ``TypeError``."""
    from raytide.driver.snapshot_health import SnapshotHealth
    from raytide.driver.stats import recovery_stats

    released = Released.remote()
    ray.get(released.stats.remote(), timeout=60)  # started: it answers at once from now on
    recovery = SimpleNamespace(coordinator=released, stats=lambda: {"count": 0}, rescale_stats=lambda: [],
                               health=SnapshotHealth("j", rt.Recovery("unused")),
                               coordinator_name=lambda: "the snapshot coordinator j/coordinator")
    assert recovery_stats(recovery, None, True)["snapshots"] == \
        {"coordinator": "released with the job's hosts (the job was torn down)"}
    ray.kill(released)


def test_a_finished_jobs_stats_stay_those_of_its_end(ray_session, tmp_path):
    """``job.stats()`` read after ``job.wait()``, again, and after the ``with`` block: the same
    snapshot figures, and after the teardown the last reading. The driver reads no coordinator
    answer once a job has finished, so its last ``sync`` call used to count as silent past
    ``SILENT_AFTER`` (3 s) and ``snapshots`` lost its figures; after the teardown, the released
    coordinator's None answer failed ``job.stats()`` with a ``TypeError``."""
    flow = rt.Dataflow("stats-at-end")
    flow.input("xs", parallelism=1).map(lambda x: x + 1).output("out")
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        job.push("xs", [1], epoch=0)
        job.snapshot(timeout=60)
        job.push("xs", [2], epoch=1)
        job.close("xs")
        job.wait(timeout=60)
        health = job._recovery.health
        assert health.sent_at is not None, "the driver's last sync call is in flight"
        health.sent_at -= 10  # as if read 10 s after the end (no sleep: the clock is the call's age)
        first = job.stats()
        assert first["snapshots"]["committed"] == 1, first["snapshots"]
        last = job.stats()  # read live while the actors are there (a snapshot in flight at the end may commit)
        assert last["snapshots"] == first["snapshots"]
    assert job.stats() == last, "the last figures of the finished job stay after its teardown"


def test_stats_answer_while_a_replica_is_busy_and_leave_out_one_that_cannot_answer(ray_session, monkeypatch, tmp_path):
    """A replica busy in a user function answers ``job.stats()`` at once: its statistics run
    on a thread of their own, so they show the batch it took and has not put out yet, and
    the function's time so far as busy (before: it answered after the function, or was named
    unreachable after a minute). One that cannot answer (here: its process stopped; on a
    lost node: until Ray declares it dead) is named under ``unreachable`` after the wait."""
    monkeypatch.setattr("raytide.driver.stats.STATS_TIMEOUT", 2.0)
    go = tmp_path / "go"

    def slow(x: int) -> int:  # busy until the test creates ``go`` (at most a minute)
        deadline = time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return x

    flow = rt.Dataflow("busy-replica")
    flow.input("x").map(slow, name="slow").output("out")
    with rt.run(flow, parallelism=1) as job:
        replica = f"{job.name}/x+slow+out/0"
        job.push("x", [1])
        deadline = time.monotonic() + 30
        while job.stats()["vertices"]["slow"]["records_in"] == 0:  # until the replica is in the sleep
            assert time.monotonic() < deadline, "the replica never took the record"
            time.sleep(0.05)
        before = job.stats()
        time.sleep(1.0)
        stats = job.stats()
        assert stats["unreachable"] == [] and replica in stats["replicas"], stats
        assert (stats["vertices"]["slow"]["records_in"], stats["vertices"]["slow"]["records_out"]) == (1, 0), stats
        # the event in hand counts as busy while it runs (the autoscaler samples it so too)
        assert stats["replicas"][replica]["busy_s"] - before["replicas"][replica]["busy_s"] >= 0.9, (before, stats)
        pid = job.hosts()[replica]
        os.kill(pid, signal.SIGSTOP)
        try:
            assert job.stats()["unreachable"] == [replica]
        finally:
            os.kill(pid, signal.SIGCONT)
        go.touch()
        job.close("x")
        job.wait(timeout=60)
        assert job.collect("out") == {0: [1]}
