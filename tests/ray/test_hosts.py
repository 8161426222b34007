"""Warm hosts: jobs lease them from the driver's pool and give them back reset; the pool
reuses them, replaces the dead, and releases the idle. Asserts on process ids and on what
the hosts hold, never on timings."""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

import pytest
import ray

import raytide as rt
from raytide.actors.hosts import unleased
from raytide.driver import pool as pool_module
from raytide.driver.pool import host_pool
from tests.ray.jobs import until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

#: Module-level state of user code: it lives in the host process, as on a reused Ray worker.
CALLS = {"count": 0}


def count_calls(x):
    CALLS["count"] += 1
    return CALLS["count"]


def boom(x):
    raise ValueError("bad record")


def sleep_long(x):
    time.sleep(600)
    return x


def _flow(name: str, fn=lambda x: x) -> rt.Dataflow:
    flow = rt.Dataflow(name)
    flow.input("numbers").map(fn, name="work").output("out")
    return flow


def _vertex_pids(job) -> set[int]:
    return {pid for name, pid in job.hosts().items() if not name.endswith("/progress")}


def _dead(handle) -> bool:
    try:
        ray.get(unleased(handle).ping.remote(), timeout=5)
    except ray.exceptions.RayActorError:
        return True
    except ray.exceptions.GetTimeoutError:  # alive but busy
        return False
    return False


def _idle(pool, kind: str = "vertex") -> list[int]:
    return pool.describe().get(f"{kind} idle", [])


@pytest.fixture
def fresh_pool(ray_session):
    """A pool of this test's own (the session's other tests leave hosts in theirs)."""
    rt.shutdown()
    yield host_pool()
    rt.configure_pool(idle_timeout=pool_module.IDLE_TIMEOUT, spares=pool_module.SPARES)
    rt.shutdown()


def test_a_second_job_runs_on_the_hosts_the_first_gave_back(fresh_pool):
    with rt.run(_flow("first"), inputs={"numbers": [[1, 2]]}, parallelism=2) as job:
        job.wait(timeout=60)
        first = job.hosts()
    chain = "numbers+work+out"
    assert set(first) == {f"{job.name}/{chain}/0", f"{job.name}/{chain}/1", f"{job.name}/progress"}
    assert len(set(first.values())) == 2, "two processes: the progress actor is seated in a vertex host"
    assert first[f"{job.name}/progress"] == first[f"{job.name}/{chain}/0"], "seated in the first replica's host"
    with rt.run(_flow("second"), inputs={"numbers": [[3]]}, parallelism=2) as job:
        job.wait(timeout=60)
        assert job.collect("out") == {0: [3]}
        assert set(job.hosts().values()) == set(first.values()), "the second job got the first one's processes"
        assert job.stats()["hosts"] == job.hosts()


def _word_count(name: str) -> rt.Dataflow:
    flow = rt.Dataflow(name)
    flow.input("lines").flat_map(str.split, name="words").count_by_key(lambda w: w, name="count").output("counts")
    return flow


def test_input_replicas_are_seated_in_the_hosts_of_the_replicas_they_feed(fresh_pool):
    """A word count at parallelism 2 starts two processes, as two hand-written actors: each input
    replica plays in the host of the counting replica of its number, and its sends there are calls
    in that process (``beside_calls``), not Ray calls."""
    lines = [["a b a", "b c"], ["c c d"]]
    with rt.run(_word_count("seated"), inputs={"lines": lines}, parallelism=2) as job:
        job.wait(timeout=60)
        hosts, result = job.hosts(), job.collect("counts")
        stats = job.placement.replica_stats()
        inputs, counts = (job.placement.plan.chain_of(vertex).name for vertex in ("lines", "count"))
    assert len(set(hosts.values())) == 2, hosts
    for replica in (0, 1):
        assert hosts[f"{job.name}/{inputs}/{replica}"] == hosts[f"{job.name}/{counts}/{replica}"], hosts
    assert sum(s["beside_calls"] for key, s in stats.items() if key.chain == inputs) > 0
    assert {e: dict(r) for e, r in result.items()} == {0: {"a": 2, "b": 2, "c": 1}, 1: {"c": 2, "d": 1}}


def test_seated_inputs_with_full_windows_both_ways_do_not_wait_on_themselves(fresh_pool):
    """Two hosts, each an input replica beside a counting replica, each input sending to both
    with one call in flight at most (``max_inflight=1``) and many epochs pushed at once: both
    windows toward the other host fill at once. An input waits for the other host's window on a
    thread and a lock of its own, so the counting replica beside it runs meanwhile; planted, an
    input that holds its host's thread while it waits (the seat in the default group, under the
    replica's lock) times out here, naming what it waited for."""
    lines = [[f"w{(epoch * 7 + i) % 23} w{i}" for i in range(40)] for epoch in range(60)]
    with rt.run(_word_count("windows"), inputs={"lines": lines}, parallelism=2, max_inflight=1) as job:
        job.wait(timeout=60)
        result = job.collect("counts")
        waits = sum(s["backpressure_waits"] for s in job.placement.replica_stats().values())
    expected = {e: dict(Counter(w for line in epoch for w in line.split())) for e, epoch in enumerate(lines)}
    assert {e: dict(r) for e, r in result.items()} == expected
    assert waits > 0, "the windows filled"


def test_a_reset_host_keeps_nothing_of_raytides_but_user_globals_persist(fresh_pool):
    with rt.run(_flow("globals", count_calls), inputs={"numbers": [[0, 0, 0]]}, parallelism=1) as job:
        job.wait(timeout=60)
        assert job.collect("out") == {0: [1, 2, 3]}
    until(lambda: len(_idle(fresh_pool)) == 1, "the host's reset", 60, every=0.2)
    (number,) = _idle(fresh_pool)
    held = ray.get(unleased(fresh_pool.handles[number]).raytide_objects.remote(), timeout=30)
    assert held == {"CoordinatorActor": 0, "PhysicalPlan": 0, "ProgressCore": 0, "ReplicaCore": 0, "SnapshotWriter": 0,
                    "Vertex": 0}, held
    with rt.run(_flow("globals2", count_calls), inputs={"numbers": [[0]]}, parallelism=1) as job:
        job.wait(timeout=60)
        assert job.collect("out") == {0: [4]}, "a module global of user code lives on in the reused process"


def test_a_reset_host_of_a_job_with_recovery_stops_its_snapshot_writer(fresh_pool, tmp_path):
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.05)
    with rt.run(_flow("writer"), inputs={"numbers": [[1], [2]]}, parallelism=1, recovery=recovery) as job:
        job.wait(timeout=60)
        job.snapshot(timeout=60)
        numbers = [lease.number for key, lease in job.placement.leases.items() if key != "the progress actor"]
        hosts = job.hosts()
        assert len(set(hosts.values())) == len(hosts), f"with recovery, a progress host of its own: {hosts}"
    until(lambda: set(numbers) <= set(_idle(fresh_pool)), "the hosts' resets", 60, every=0.2)
    for number in numbers:
        held = ray.get(unleased(fresh_pool.handles[number]).raytide_objects.remote(), timeout=30)
        assert held["SnapshotWriter"] == 0 and held["ReplicaCore"] == 0, held


def test_the_snapshot_coordinator_plays_a_pooled_host_that_the_next_job_reuses(fresh_pool, tmp_path):
    """The coordinator is a role too: its host goes back to the pool with the job's others,
    keeps no coordinator (its clock thread, which holds it, stopped at the reset), and
    the next job with recovery takes it instead of starting a process. The job's spare
    vertex host was asked for after the job's own hosts, coordinator included (hosts are
    numbered in the order the pool creates them): on a first job, a spare created sooner
    started beside them and ahead of the coordinator, which the driver waits for."""
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.05)
    with rt.run(_flow("coordinated"), inputs={"numbers": [[1], [2]]}, parallelism=1, recovery=recovery) as job:
        own = {lease.number for lease in job.placement.leases.values()} | {job.placement.coordinator_lease.number}
        spares = set(fresh_pool.handles) - own
        assert spares and min(spares) > max(own), f"the job's hosts {sorted(own)}, the spare {sorted(spares)}"
        job.wait(timeout=60)
        job.snapshot(timeout=60)
        first = job.hosts()[f"{job.name}/coordinator"]
        number = job.placement.coordinator_lease.number
    until(lambda: number in _idle(fresh_pool, "coordinator"), "the coordinator host's reset", 60, every=0.2)
    held = ray.get(unleased(fresh_pool.handles[number]).raytide_objects.remote(), timeout=30)
    assert held["CoordinatorActor"] == 0, held
    with rt.run(_flow("coordinated2"), inputs={"numbers": [[3]]}, parallelism=1, recovery=recovery) as job:
        job.wait(timeout=60)
        job.snapshot(timeout=60)
        assert job.hosts()[f"{job.name}/coordinator"] == first, "the second job's coordinator runs in the first one's host"
        assert job.collect("out") == {0: [3]}


def test_a_failed_jobs_host_is_reused_after_a_clean_reset_and_killed_if_it_never_resets(fresh_pool, monkeypatch):
    with rt.run(_flow("failing", boom), inputs={"numbers": [[1]]}, parallelism=1) as job:
        with pytest.raises(rt.UserCodeError):
            job.wait(timeout=60)
        failed = _vertex_pids(job)
    with rt.run(_flow("after"), inputs={"numbers": [[1]]}, parallelism=1) as job:
        job.wait(timeout=60)
        assert _vertex_pids(job) == failed, "a failed job's host that reset cleanly is reused"

    monkeypatch.setattr(pool_module, "RESET_TIMEOUT", 1.0)
    job = rt.run(_flow("stuck", sleep_long), parallelism=1)
    job.push("numbers", [1])
    stuck, (handle,) = _vertex_pids(job), list(job.placement.actors.values())
    time.sleep(2.0)  # the vertex is inside its long sleep: its reset cannot run
    job.cancel()
    until(lambda: _dead(handle), "the pool to kill the host that did not reset", 60, every=0.2)
    with rt.run(_flow("next"), inputs={"numbers": [[1]]}, parallelism=1) as job:
        job.wait(timeout=60)
        assert job.collect("out") == {0: [1]}
        assert not _vertex_pids(job) & stuck


def test_idle_hosts_are_released_after_the_idle_timeout(fresh_pool):
    rt.configure_pool(idle_timeout=1.0)
    with rt.run(_flow("brief"), inputs={"numbers": [[1]]}, parallelism=2) as job:
        job.wait(timeout=60)
        handles = list(job.placement.actors.values())
    until(lambda: fresh_pool.describe() == {}, "the pool to release its idle hosts", 60, every=0.2)
    until(lambda: all(map(_dead, handles)), "the released hosts' processes to exit", 60, every=0.2)


def test_concurrent_jobs_each_get_hosts_of_their_own(fresh_pool):
    jobs = [rt.run(_flow(f"concurrent{i}"), parallelism=1) for i in range(3)]
    try:
        pids = [set(job.hosts().values()) for job in jobs]
        for i, job in enumerate(jobs):
            job.push("numbers", [i])
            job.close("numbers")
        for i, job in enumerate(jobs):
            job.wait(timeout=60)
            assert job.collect("out") == {0: [i]}
    finally:
        for job in jobs:
            job.cancel()
    assert len(set.union(*pids)) == sum(map(len, pids)) == 3, "no process is shared by two running jobs"


def test_a_host_killed_while_idle_is_forgotten_and_a_job_on_a_killed_host_fails_clearly(fresh_pool):
    with rt.run(_flow("before"), inputs={"numbers": [[1]]}, parallelism=2) as job:
        job.wait(timeout=60)
    until(lambda: len(_idle(fresh_pool)) == 2, "the hosts' resets", 60, every=0.2)
    victim = _idle(fresh_pool)[0]
    victim_pid = ray.get(unleased(fresh_pool.handles[victim]).ping.remote(), timeout=30)
    ray.kill(fresh_pool.handles[victim])
    until(lambda: victim not in _idle(fresh_pool), "the pool to notice the dead idle host", 60, every=0.2)
    with rt.run(_flow("after"), inputs={"numbers": [[1, 2]]}, parallelism=2) as job:
        job.wait(timeout=60)
        assert sorted(job.collect("out")[0]) == [1, 2]
        assert victim_pid not in _vertex_pids(job)

    job = rt.run(_flow("leased"), parallelism=2)
    key = next(iter(job.placement.actors))
    ray.kill(job.placement.actors[key])
    job.push("numbers", [1, 2, 3])
    with pytest.raises(rt.ReplicaLost, match=re.escape(f"replica {job.name}/{key.chain}/{key.replica} (vertices")):
        job.wait(timeout=60)
    dead_pid = job.hosts()[f"{job.name}/{key.chain}/{key.replica}"]
    with rt.run(_flow("again"), inputs={"numbers": [[1]]}, parallelism=2) as job:
        job.wait(timeout=60)
        assert dead_pid not in _vertex_pids(job)


def test_a_host_that_dies_just_before_a_lease_is_not_handed_to_the_next_job(fresh_pool):
    """SIGKILLed a moment before the next job starts, before the pool's housekeeping could
    notice: the lease's own ping finds it dead and the job gets another host. (With the
    check planted out, the job failed at its start with Ray's raw ActorDiedError.)"""
    with rt.run(_flow("before"), inputs={"numbers": [[1]]}, parallelism=2) as job:
        job.wait(timeout=60)
    until(lambda: len(_idle(fresh_pool)) == 2, "the hosts' resets", 60, every=0.2)
    victims = {ray.get(unleased(fresh_pool.handles[number]).ping.remote(), timeout=30) for number in _idle(fresh_pool)}
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    with rt.run(_flow("after"), inputs={"numbers": [[1, 2]]}, parallelism=2) as job:
        job.wait(timeout=60)
        assert sorted(job.collect("out")[0]) == [1, 2]
        assert not victims & _vertex_pids(job)
    assert not set(_idle(fresh_pool)) & victims


def test_a_spare_is_kept_started_and_taken_by_the_next_job(fresh_pool):
    rt.configure_pool(spares=1)
    first = rt.run(_flow("holder"), parallelism=1)  # holds its hosts while the second starts
    try:
        until(lambda: len(_idle(fresh_pool)) == 1, "the spare to start", 60, every=0.2)
        (spare,) = _idle(fresh_pool)
        spare_pid = ray.get(unleased(fresh_pool.handles[spare]).ping.remote(), timeout=30)
        with rt.run(_flow("taker"), inputs={"numbers": [[1]]}, parallelism=1) as second:
            second.wait(timeout=60)
            assert _vertex_pids(second) == {spare_pid}
    finally:
        first.cancel()


def test_spares_killed_while_idle_are_replaced_by_new_ones(fresh_pool):
    rt.configure_pool(spares=1)
    with rt.run(_flow("starter"), inputs={"numbers": [[1]]}, parallelism=1) as job:
        job.wait(timeout=60)
    until(lambda: len(_idle(fresh_pool)) == 2, "the job's host reset and the spare started", 60, every=0.2)
    victims = _idle(fresh_pool)
    victim_pids = set(ray.get([unleased(fresh_pool.handles[n]).ping.remote() for n in victims], timeout=30))
    for number in victims:
        ray.kill(fresh_pool.handles[number])
    until(lambda: any(n not in victims for n in _idle(fresh_pool)), "the pool to start a new spare", 60, every=0.2)
    new = [n for n in _idle(fresh_pool) if n not in victims]
    assert not victim_pids & set(ray.get([unleased(fresh_pool.handles[n]).ping.remote() for n in new], timeout=30))
