"""Stats snapshots: derived rates, validation, and the job graph's order."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats
from raytide.errors import GraphError


def replica(records_in=100, records_out=50, busy=0.5, window=1.0, **extra):
    return ReplicaStats(records_in, records_out, busy, window, **extra)


def test_replica_rates():
    r = replica(records_in=300, records_out=150, busy=1.5, window=3.0, blocked_seconds=0.75, queue_length=4)
    assert r.true_processing_rate == 200.0
    assert r.true_output_rate == 100.0
    assert r.observed_input_rate == 100.0
    assert r.observed_output_rate == 50.0
    assert r.selectivity == 0.5
    assert r.utilization == 0.5
    assert r.backpressure_ratio == 0.25


def test_rates_that_nothing_was_observed_for_are_none():
    idle = replica(records_in=0, records_out=0, busy=0.0)
    assert idle.true_processing_rate is None
    assert idle.true_output_rate is None
    assert idle.selectivity is None
    assert idle.observed_input_rate == 0.0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("window_seconds", 0.0, "window_seconds must be > 0"),
        ("records_in", -1, "records_in must be >= 0"),
        ("records_out", -1, "records_out must be >= 0"),
        ("busy_seconds", -0.1, "busy_seconds must be >= 0"),
        ("blocked_seconds", -0.1, "blocked_seconds must be >= 0"),
        ("queue_length", -1, "queue_length must be >= 0"),
    ],
)
def test_invalid_replica_stats_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(replica(), **{field: value})


def test_snapshots_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        replica().records_in = 3  # type: ignore[misc]
    job = JobStats((VertexStats("a", (replica(),)),), source_rates={"s": 1.0})
    with pytest.raises(TypeError):
        job.source_rates["s"] = 2.0  # type: ignore[index]


def test_vertex_aggregates_over_replicas():
    v = VertexStats(
        "map",
        (
            replica(records_in=100, records_out=50, busy=0.5, window=2.0),
            replica(records_in=300, records_out=150, busy=1.0, window=2.0),
            replica(records_in=0, records_out=0, busy=0.0, window=1.0),  # started mid-window, idle
        ),
    )
    assert v.parallelism == 3
    assert (v.records_in, v.records_out) == (400, 200)
    assert v.window_seconds == 2.0
    assert v.observed_input_rate == 200.0
    assert v.observed_output_rate == 100.0
    assert v.selectivity == 0.5
    assert v.true_rate_per_replica == 250.0  # mean of 200 and 300; the idle replica tells nothing


def test_vertex_without_busy_replicas_has_no_true_rate():
    assert VertexStats("a", (replica(0, 0, 0.0),)).true_rate_per_replica is None


def test_vertex_needs_at_least_one_replica():
    with pytest.raises(ValueError, match="vertex 'a' has no replica stats"):
        VertexStats("a", ())


@given(st.lists(st.tuples(st.integers(0, 10_000), st.floats(0.001, 10.0)), min_size=1, max_size=8))
def test_true_rate_per_replica_lies_between_the_replicas_rates(samples):
    v = VertexStats("v", tuple(replica(n, n, busy, 10.0) for n, busy in samples))
    rates = [n / busy for n, busy in samples]
    assert min(rates) - 1e-6 <= v.true_rate_per_replica <= max(rates) + 1e-6


def diamond() -> JobStats:
    v = VertexStats
    return JobStats(
        vertices=(v("sink", (replica(),)), v("left", (replica(),)), v("right", (replica(),)), v("split", (replica(),))),
        edges=(("src", "split"), ("split", "left"), ("split", "right"), ("left", "sink"), ("right", "sink")),
        source_rates={"src": 10.0},
    )


def test_topological_order_puts_every_node_after_its_upstream_nodes():
    job = diamond()
    assert job.topological_order() == ("src", "split", "left", "right", "sink")
    assert job.upstream_of("sink") == ("left", "right")
    assert job.nodes == ("left", "right", "sink", "split", "src")


def test_a_cycle_is_a_graph_error_naming_its_nodes():
    job = JobStats(
        (VertexStats("a", (replica(),)), VertexStats("b", (replica(),))),
        edges=(("src", "a"), ("a", "b"), ("b", "a")),
        source_rates={"src": 1.0},
    )
    with pytest.raises(GraphError, match=r"cycle through or after \['a', 'b'\]"):
        job.topological_order()


def test_edges_must_name_vertices_or_sources():
    with pytest.raises(GraphError, match=r"neither vertices nor sources: \['ghost'\]"):
        JobStats((VertexStats("a", (replica(),)),), edges=(("ghost", "a"),))


def test_vertices_are_reported_once():
    with pytest.raises(ValueError, match=r"reported twice: \['a'\]"):
        JobStats((VertexStats("a", (replica(),)), VertexStats("a", (replica(),))))


def test_source_rates_are_not_negative():
    with pytest.raises(ValueError, match="source 's' has a negative rate"):
        JobStats((), source_rates={"s": -1.0})


def test_unknown_vertex_lookup_is_a_key_error():
    with pytest.raises(KeyError, match="no stats for vertex 'x'"):
        diamond().vertex("x")
