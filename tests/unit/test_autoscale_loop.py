"""The autoscaler's pure parts: the monitor's windows, the latency policy, one MAPE round, the config."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import raytide as rt
from raytide.autoscale.latency import LatencyPolicy, bottleneck, latency_seconds
from raytide.autoscale.loop import FINISHED_FIRST, ControlLoop, settled
from raytide.autoscale.monitor import Sample, free_cpus, window_stats
from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats
from raytide.errors import ArgumentError


def reading(at: float, busy: float, records: int, frontier: int | None = 0, chain: str = "map") -> Sample:
    return Sample(at, {(chain, 0): {"busy_s": busy, "blocked_s": 0.0,
                                    "vertices": {"map": {"records_in": records, "records_out": 2 * records}}}},
                  {"map": {"queued": 1, "frontier": frontier}})


def test_a_window_is_the_difference_of_two_readings():
    stats = window_stats(reading(10.0, 1.0, 100), reading(12.0, 2.0, 300, frontier=4), {"map": ("map", 1)}, [], {})
    vertex = stats.vertex("map")
    assert (vertex.records_in, vertex.records_out, vertex.replicas[0].busy_seconds) == (200, 400, 1.0)
    assert vertex.true_rate_per_replica == 200.0 and vertex.selectivity == 2.0
    assert stats.epoch_seconds == 0.5 and vertex.frontier_lag == 0


def test_a_replica_whose_counters_went_back_counts_from_zero():
    """A rescale gives a host a new role: its counters restart."""
    stats = window_stats(reading(10.0, 5.0, 900), reading(11.0, 0.5, 50), {"map": ("map", 1)}, [], {})
    assert stats.vertex("map").records_in == 50 and stats.vertex("map").replicas[0].busy_seconds == 0.5


def test_free_cpus_count_a_busy_process_once_however_many_vertices_it_hosts():
    before, after = reading(0.0, 0.0, 0), reading(1.0, 0.9, 10)
    assert free_cpus(2, before, after) == 1.0
    assert free_cpus(2, before, reading(1.0, 0.1, 10)) == 2.0
    assert free_cpus(0.5, before, after) == 0.0


def job(*vertices: VertexStats, epoch_seconds: float | None = 0.5) -> JobStats:
    return JobStats(vertices, epoch_seconds=epoch_seconds)


def vertex(name: str, busy: float, queued: int, lag: int | None, width: int = 1) -> VertexStats:
    return VertexStats(name, tuple(ReplicaStats(10, 10, busy, 1.0) for _ in range(width)), queued, lag)


@given(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 50), st.integers(0, 20), st.integers(1, 6)),
                min_size=1, max_size=6),
       st.floats(0.05, 5), st.floats(0.1, 20))
def test_the_latency_policy_changes_at_most_one_vertex_and_only_in_the_direction_the_goal_asks(shape, seconds, goal):
    stats = job(*(vertex(f"v{i}", busy, queued, lag, width) for i, (busy, queued, lag, width) in enumerate(shape)),
                epoch_seconds=seconds)
    decisions = LatencyPolicy(goal).decide(stats)
    changed = [d for d in decisions if d.changes]
    latency = max(lag for _, _, lag, _ in shape) * seconds
    assert latency_seconds(stats) == pytest.approx(latency)
    assert len(changed) <= 1 and all(d.reason for d in decisions)
    if latency > goal and any(queued for _, queued, _, _ in shape):
        (grown,) = changed
        slow = bottleneck(stats)
        assert slow is not None and grown.vertex == slow.vertex
        assert grown.current + 1 <= grown.target <= 2 * grown.current
        assert grown.target == min(2 * grown.current, max(grown.current + 1, math.ceil(grown.current * latency / goal)))
    elif changed:
        assert latency < goal / 2 and changed[0].target == changed[0].current - 1


def test_the_bottleneck_is_the_busiest_vertex_with_work_queued():
    stats = job(vertex("parse", 0.2, 9, 0), vertex("score", 0.95, 3, 4), vertex("idle", 1.0, 0, 4))
    assert bottleneck(stats).vertex == "score"
    assert latency_seconds(job(vertex("a", 1, 1, 3), epoch_seconds=None)) is None


def test_a_round_merges_vertices_that_keep_one_width_into_one_change():
    busy = ReplicaStats(records_in=100, records_out=100, busy_seconds=1.0, window_seconds=1.0)
    stats = JobStats((VertexStats("count", (busy,)), VertexStats("out", (ReplicaStats(100, 0, 0.01, 1.0),))),
                     (("numbers", "count"), ("count", "out")), {"numbers": 350.0})
    loop = ControlLoop(rt.Autoscale(policy="rate", rate=350.0, cooldown=5.0), {"count", "out"},
                       {"count": "count", "out": "count"}, max_parallelism=8)
    decisions, changes = loop.round(stats, now=1.0, free_cpus=8)
    assert changes == {"count": 4}  # out asks for 1; count's 4 wins for the group
    assert [d.vertex for d in decisions] == ["count"]
    _, again = loop.round(stats, now=2.0, free_cpus=8)
    assert again == {}  # the cooldown holds the next change back
    assert any("cooldown" in d.reason for d in loop.round(stats, now=3.0, free_cpus=8)[0])


def test_the_free_cpus_cap_a_round_and_the_shortfall_is_kept():
    busy = ReplicaStats(records_in=100, records_out=100, busy_seconds=1.0, window_seconds=1.0)
    stats = JobStats((VertexStats("rows", (busy,)),), (("numbers", "rows"),), {"numbers": 450.0})
    loop = ControlLoop(rt.Autoscale(policy="rate", rate=450.0), {"rows"}, {"rows": "rows"}, 8)
    decisions, changes = loop.round(stats, now=1.0, free_cpus=1)
    assert changes == {"rows": 2} and loop.shortfall == 3 and "capped by free CPUs" in decisions[0].reason


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"policy": "rate"}, r"needs rate="),
    ({"policy": "file", "parameters": "p.json"}, r"needs stats="),
    ({"policy": "fastest"}, r"policy must be one of"),
    ({"policy": "threshold", "throughput": -1}, r"throughput must be records per second above 0"),
    ({"policy": "latency", "latency": 1, "min_parallelism": 3, "max_parallelism": 2}, r"below min_parallelism"),
    ({"policy": "rate", "rate": 5, "vertices": "rows"}, r"a list of vertex names"),
    ({"policy": "rate", "rate": float("inf")}, r"rate must be records per second above 0 and finite"),
    ({"policy": "rate", "rate": {"numbers": float("nan")}}, r"rate must be records per second above 0 and finite"),
    ({"policy": "latency", "latency": float("inf")}, r"latency must be seconds above 0 and finite"),
    ({"policy": "file", "parameters": "/no/such/dir/parameters.json", "stats": "stats.json"},
     r"parameters='/no/such/dir/parameters.json': its directory '/no/such/dir' does not exist"),
])
def test_an_autoscale_that_cannot_work_is_refused_and_says_why(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        rt.Autoscale(**kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rate": 5, "vertices": ["nosuch"]}, r"vertices names 'nosuch', which is not one of the job's vertices it can "
                                          r"rescale: \['out', 'rows'\]"),
    ({"rate": 5, "vertices": ["numbers"]}, r"vertices names 'numbers'"),
    ({"rate": {"nosuch": 5.0}}, r"rate names 'nosuch', which is not one of the job's inputs: \['numbers'\]"),
])
def test_names_the_job_does_not_have_are_refused(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        rt.Autoscale(policy="rate", **kwargs).check_names(["numbers", "rows", "out"], ["numbers"])


def test_a_group_counts_its_replicas_once_against_the_free_cpus():
    """Both members want 4 more replicas; they are one process per replica: 2 free CPUs give
    the group 2 more, and the shortfall is 2, not 6."""
    busy = ReplicaStats(records_in=100, records_out=100, busy_seconds=1.0, window_seconds=1.0)
    stats = JobStats((VertexStats("rows", (busy,)), VertexStats("out", (busy,))), (("numbers", "rows"), ("rows", "out")),
                     {"numbers": 500.0})
    loop = ControlLoop(rt.Autoscale(policy="rate", rate=500.0), {"rows", "out"}, {"rows": "rows", "out": "rows"}, 8)
    _, changes = loop.round(stats, now=1.0, free_cpus=2)
    assert changes == {"rows": 3} and loop.shortfall == 2


def test_a_change_still_to_make_when_the_job_finished_reads_as_not_made():
    """The last round decided a change the driver never made (the job finished first): while
    the job runs it is pending (None); after, it says why it was not made, never as made."""
    rounds = [{"changes": {"rows": 2}, "rescale": {"pause_s": 0.2}}, {"changes": {}, "rescale": None},
              {"changes": {"rows": 1}, "rescale": None}]
    assert [r["rescale"] for r in settled(rounds, job_finished=False)] == [{"pause_s": 0.2}, None, None]
    assert [r["rescale"] for r in settled(rounds, job_finished=True)] == [
        {"pause_s": 0.2}, None, {"not_made": FINISHED_FIRST}]
    assert rounds[2]["rescale"] is None  # the actor's own record is not changed
