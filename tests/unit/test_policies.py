"""Scaling policies: the thesis's threshold table, DS2's rate policy and the thesis's file interface."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.autoscale.policies import (
    FilePolicy,
    RatePolicy,
    ScalingDecision,
    ThresholdPolicy,
    append_stats_sample,
    decisions_from_parameters,
    format_parameters,
    parse_parameters,
    rate_decision,
    target_input_rates,
    threshold_decision,
)
from raytide.autoscale.stats import JobStats, ReplicaStats, VertexStats
from raytide.errors import GraphError, RescaleError

WINDOW = 100.0


def with_throughput(throughput: float, parallelism: int, name: str = "stage2") -> VertexStats:
    """A vertex whose replicas together produced ``throughput`` records per second over WINDOW."""
    total = round(throughput * WINDOW)
    shares = [total // parallelism + (1 if i < total % parallelism else 0) for i in range(parallelism)]
    return VertexStats(name, tuple(ReplicaStats(n, n, WINDOW / 2, WINDOW) for n in shares))


def test_autoscale_package_imports_without_ray():
    code = "import sys, raytide.autoscale; assert 'ray' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- ScalingDecision


def test_decision_properties():
    d = ScalingDecision("map", 3, 5, "because")
    assert (d.delta, d.changes) == (2, True)
    assert ScalingDecision.keep("map", 3, "fine").changes is False
    assert d.revised(4, "trimmed") == ScalingDecision("map", 3, 4, "trimmed")


@pytest.mark.parametrize(("current", "target"), [(0, 1), (1, 0)])
def test_decision_parallelism_is_at_least_one(current, target):
    with pytest.raises(RescaleError, match="vertex 'map': parallelism must be >= 1"):
        ScalingDecision("map", current, target, "")


# ---------------------------------------------------------------- threshold policy (thesis listing 7.2)


def listing_7_2(throughput_application: float, throughput_goal: float, current_value: int) -> int:
    """The thesis's listing 7.2, lines 3-17, transcribed line by line (the oracle)."""
    value = current_value
    if throughput_application > throughput_goal:
        if throughput_application / throughput_goal > 2:
            factor = 4
        elif throughput_application / throughput_goal > 1.5:
            factor = 2
        elif throughput_application / throughput_goal > 1.25:
            factor = 1
        else:
            factor = 0
        if current_value > factor:
            value = current_value - factor
    elif throughput_application < throughput_goal:
        if throughput_application / throughput_goal < 0.5:
            factor = 4
        elif throughput_application / throughput_goal < 0.75:
            factor = 2
        elif throughput_application / throughput_goal < 0.9375:
            factor = 1
        else:
            factor = 0
        if current_value + factor < 48:
            value = current_value + factor
    return value


@pytest.mark.parametrize(
    ("throughput", "target", "reason"),
    [
        (250.0, 6, "throughput 250.0 > 2 x goal 100.0: scale down by 4"),
        (200.0, 8, "throughput 200.0 > 1.5 x goal 100.0: scale down by 2"),  # exactly 2x is not > 2
        (150.0, 9, "throughput 150.0 > 1.25 x goal 100.0: scale down by 1"),  # exactly 1.5x is not > 1.5
        (125.0, 10, "throughput 125.0 <= 1.25 x goal 100.0: keep 10"),
        (100.0, 10, "throughput 100.0 equals goal 100.0: keep 10"),
        (93.75, 10, "throughput 93.8 >= 0.9375 x goal 100.0: keep 10"),  # exactly 0.9375x is not < 0.9375
        (93.7, 11, "throughput 93.7 < 0.9375 x goal 100.0: scale up by 1"),
        (75.0, 11, "throughput 75.0 < 0.9375 x goal 100.0: scale up by 1"),
        (74.9, 12, "throughput 74.9 < 0.75 x goal 100.0: scale up by 2"),
        (50.0, 12, "throughput 50.0 < 0.75 x goal 100.0: scale up by 2"),
        (40.0, 14, "throughput 40.0 < 0.5 x goal 100.0: scale up by 4"),
    ],
)
def test_threshold_table_with_the_listings_strict_comparisons(throughput, target, reason):
    decision = threshold_decision(with_throughput(throughput, 10), goal=100.0)
    assert (decision.current, decision.target, decision.reason) == (10, target, reason)


def test_threshold_scale_down_is_refused_not_clamped_when_current_is_not_above_the_step():
    # Listing 7.2 line 9: "if (currentValue > factor)"; 4 replicas and a step of 4 keep 4.
    refused = threshold_decision(with_throughput(300.0, 4), goal=100.0)
    assert refused.target == 4
    assert refused.reason == "throughput 300.0 > 2 x goal 100.0: scale down by 4 refused, 4 is not above 4: keep 4"
    assert threshold_decision(with_throughput(300.0, 5), goal=100.0).target == 1


def test_threshold_scale_up_is_refused_not_clamped_at_the_process_limit():
    # Listing 7.2 line 16: "if (currentValue + factor < 48)".
    refused = threshold_decision(with_throughput(10.0, 44), goal=100.0)
    assert refused.target == 44
    assert refused.reason.endswith("scale up by 4 refused, 44 + 4 is not below the limit 48: keep 44")
    assert threshold_decision(with_throughput(10.0, 43), goal=100.0).target == 47
    assert threshold_decision(with_throughput(10.0, 6), goal=100.0, process_limit=10).target == 6


@given(st.integers(0, 10**6), st.floats(0.01, 1e5), st.integers(1, 47))
def test_threshold_decision_equals_the_transcribed_listing(records, goal, current):
    idle = ReplicaStats(0, 0, 0.0, 10.0)
    stats = VertexStats("stage2", (ReplicaStats(records, records, 1.0, 10.0),) + (idle,) * (current - 1))
    decision = threshold_decision(stats, goal)
    assert decision.target == listing_7_2(stats.observed_output_rate, goal, current)
    assert 1 <= decision.target <= 47


def test_threshold_policy_decides_each_vertex_with_a_goal():
    job = JobStats((with_throughput(40.0, 2, "a"), with_throughput(300.0, 8, "b"), with_throughput(1.0, 1, "c")))
    decisions = ThresholdPolicy({"b": 100.0, "a": 100.0}).decide(job)
    assert [(d.vertex, d.target) for d in decisions] == [("b", 4), ("a", 6)]


def test_threshold_policy_needs_stats_for_every_goal():
    with pytest.raises(RescaleError, match=r"no stats for vertices with a throughput goal: \['z'\]"):
        ThresholdPolicy({"z": 1.0}).decide(JobStats((with_throughput(1.0, 1, "a"),)))


def test_threshold_goal_must_be_positive():
    with pytest.raises(ValueError, match="the throughput goal must be > 0"):
        threshold_decision(with_throughput(1.0, 1), goal=0.0)


# ---------------------------------------------------------------- rate policy (DS2)


def busy(name: str, parallelism: int, true_rate: float, records_in: int, selectivity: float = 1.0) -> VertexStats:
    """A vertex whose replicas each consumed ``records_in`` records at ``true_rate`` per busy second."""
    r = ReplicaStats(records_in, round(records_in * selectivity), records_in / true_rate, 10.0)
    return VertexStats(name, (r,) * parallelism)


def test_rate_decision_reason_and_target():
    d = rate_decision(busy("map", 1, true_rate=100.0, records_in=500), needed_rate=250.0)
    assert (d.current, d.target) == (1, 3)
    assert d.reason == "needs 250.0 records/s in at a true rate of 100.0 per replica: ceil(2.50) = 3"


def test_rate_decision_ignores_float_noise_at_integers():
    d = rate_decision(busy("map", 2, true_rate=100.0, records_in=500), needed_rate=400.0000000001)
    assert d.target == 4


def test_rate_decision_bounds():
    idle_need = rate_decision(busy("map", 3, true_rate=100.0, records_in=5), needed_rate=0.0)
    assert idle_need.target == 1 and idle_need.reason.endswith("ceil(0.00) = 0, at least 1")
    capped = rate_decision(busy("map", 1, true_rate=10.0, records_in=5), needed_rate=1000.0, max_parallelism=8)
    assert capped.target == 8 and capped.reason.endswith("ceil(100.00) = 100, capped at 8")


def test_rate_decision_keeps_when_rates_are_unknown():
    no_need = rate_decision(busy("map", 2, 100.0, 5), needed_rate=None)
    assert (no_need.target, no_need.reason) == (2, "needed input rate unknown: keep 2")
    idle = rate_decision(VertexStats("map", (ReplicaStats(0, 0, 0.0, 1.0),)), needed_rate=10.0)
    assert (idle.target, idle.reason) == (1, "no busy time observed, true rate unknown: keep 1")


@given(st.floats(0.0, 1e6), st.floats(1.0, 1e4))
def test_rate_target_is_the_least_parallelism_that_sustains_the_needed_rate(needed, true_rate):
    stats = VertexStats("v", (ReplicaStats(1000, 1000, 1000 / true_rate, 10.0),))
    target = rate_decision(stats, needed).target
    per_replica = stats.true_rate_per_replica
    assert target * per_replica >= needed * (1 - 1e-9)
    assert target == 1 or (target - 1) * per_replica < needed


def test_target_rates_propagate_through_selectivities_fan_in_and_fan_out():
    job = JobStats(
        vertices=(
            busy("parse", 1, 100.0, 100, selectivity=0.5),
            busy("join", 1, 100.0, 100, selectivity=2.0),
            busy("left", 1, 100.0, 100),
            busy("right", 1, 100.0, 100, selectivity=0.1),
        ),
        edges=(("clicks", "parse"), ("parse", "join"), ("views", "join"), ("join", "left"), ("join", "right")),
        source_rates={"clicks": 1000.0, "views": 300.0},
    )
    assert target_input_rates(job) == {"parse": 1000.0, "join": 800.0, "left": 1600.0, "right": 1600.0}
    decisions = RatePolicy().decide(job)  # in topological order
    assert [(d.vertex, d.target) for d in decisions] == [("parse", 10), ("join", 8), ("left", 16), ("right", 16)]


def test_rates_downstream_of_a_vertex_that_consumed_nothing_are_unknown():
    job = JobStats(
        (VertexStats("a", (ReplicaStats(0, 0, 0.0, 1.0),)), busy("b", 2, 100.0, 10)),
        edges=(("src", "a"), ("a", "b")),
        source_rates={"src": 50.0},
    )
    assert target_input_rates(job) == {"a": 50.0, "b": None}
    assert [d.reason for d in RatePolicy().decide(job)] == [
        "no busy time observed, true rate unknown: keep 1",
        "needed input rate unknown: keep 2",
    ]


def test_a_vertex_without_upstream_that_is_not_a_source_has_unknown_rate():
    assert target_input_rates(JobStats((busy("lonely", 1, 10.0, 10),))) == {"lonely": None}


def test_rate_policy_needs_a_dag():
    job = JobStats((busy("a", 1, 1.0, 1), busy("b", 1, 1.0, 1)), edges=(("a", "b"), ("b", "a")))
    with pytest.raises(GraphError, match="cycle"):
        RatePolicy().decide(job)


def test_rate_policy_respects_max_parallelism():
    job = JobStats((busy("a", 1, 1.0, 1),), edges=(("s", "a"),), source_rates={"s": 100.0})
    assert RatePolicy(max_parallelism=5).decide(job)[0].target == 5


# ---------------------------------------------------------------- file interface (thesis section 5.5)


def test_parse_parameters_of_listing_5_12():
    listing = '{\n"stage1": 1,\n"stage2": 64,\n"stage3": 1\n}'
    assert parse_parameters(listing) == {"stage1": 1, "stage2": 64, "stage3": 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"stage2": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ('{"stage2": 0}', "'stage2' must be a positive integer, got 0"),
        ('{"stage2": 2.5}', "'stage2' must be a positive integer, got 2.5"),
        ('{"stage2": true}', "'stage2' must be a positive integer, got True"),
        ('{"stage2": "3"}', "'stage2' must be a positive integer, got '3'"),
    ],
)
def test_invalid_parameters_are_rescale_errors(text, message):
    with pytest.raises(RescaleError, match=message):
        parse_parameters(text)


@given(st.dictionaries(st.text(min_size=1), st.integers(1, 10**6)))
def test_parameters_round_trip(targets):
    assert parse_parameters(format_parameters(targets)) == targets


def two_replica_job(taken_at: float) -> JobStats:
    return JobStats(
        (
            VertexStats(
                "stage2",
                (ReplicaStats(74916, 74916, 1.0, 2.0), ReplicaStats(50588, 50587, 1.0, 2.0)),
            ),
        ),
        edges=(("stage1", "stage2"),),
        source_rates={"stage1": 1.0},
        taken_at=taken_at,
    )


def test_stats_sample_has_the_shape_of_listing_5_11():
    document = append_stats_sample({}, two_replica_job(taken_at=1675563909.814))
    assert document == {
        "stage2": {
            "1675563909814": {
                "Replica0": {"ItemsConsumed": 74916, "ItemsProduced": 74916, "averageItemsProduced": 37458.0},
                "Replica1": {"ItemsConsumed": 50588, "ItemsProduced": 50587, "averageItemsProduced": 25293.5},
            }
        }
    }


def test_stats_samples_stay_in_time_order_and_are_trimmed():
    document = append_stats_sample({}, two_replica_job(3.0), max_samples=2)
    with pytest.raises(ValueError, match="stats sample at 3000 ms is not after 3000 ms for vertex 'stage2'"):
        append_stats_sample(document, two_replica_job(3.0))
    for t in (4.0, 5.0):
        document = append_stats_sample(document, two_replica_job(t), max_samples=2)
    assert list(document["stage2"]) == ["4000", "5000"]


def test_append_stats_sample_does_not_change_its_input():
    first = append_stats_sample({}, two_replica_job(1.0))
    snapshot = json.dumps(first)
    append_stats_sample(first, two_replica_job(2.0))
    assert json.dumps(first) == snapshot


def test_decisions_from_parameters():
    job = two_replica_job(1.0)
    decisions = decisions_from_parameters(job, {"stage1": 1, "stage2": 5})  # the source is ignored
    assert decisions == (ScalingDecision("stage2", 2, 5, "parameters.json asks for 5 replicas"),)
    with pytest.raises(RescaleError, match=r"names vertices the job does not have: \['stage9'\]"):
        decisions_from_parameters(job, {"stage9": 1})


def listing_7_1_throughput(document: dict, stage: str, last_timestamp: str | None) -> tuple[float | None, str]:
    """The thesis's listing 7.1, lines 8-25: items produced after the last read, per second."""
    items_produced, init_timestamp = 0, None
    if last_timestamp is not None:
        start_counting = False
        for current_timestamp in document[stage]:
            if start_counting:
                for compute in document[stage][current_timestamp]:
                    items_produced += document[stage][current_timestamp][compute]["ItemsProduced"]
            if current_timestamp == last_timestamp:
                start_counting = True
                init_timestamp = current_timestamp
    new_last = max(document[stage], key=int)
    if init_timestamp is None:
        return None, new_last  # the first read only remembers where it is
    return items_produced / ((int(new_last) - int(init_timestamp)) / 1000), new_last


def test_file_policy_is_driven_by_the_thesis_algorithm_written_against_the_files(tmp_path):
    parameters, stats_file = tmp_path / "parameters.json", tmp_path / "stats.json"
    policy = FilePolicy(parameters, stats_file)
    goal = 100_000.0

    # First round: raytide writes the stats and creates parameters.json with the current parallelism.
    first = policy.decide(two_replica_job(taken_at=1000.0))
    assert [d.reason for d in first] == ["created parameters.json with the current parallelism: keep 2"]
    assert json.loads(parameters.read_text()) == {"stage2": 2}
    _, last = listing_7_1_throughput(json.loads(stats_file.read_text()), "stage2", None)

    # Second round: the external algorithm reads stats.json, applies listing 7.2, writes parameters.json.
    job = two_replica_job(taken_at=1002.0)
    policy.write_stats(job)
    throughput, last = listing_7_1_throughput(json.loads(stats_file.read_text()), "stage2", last)
    assert throughput == job.vertex("stage2").observed_output_rate == 62751.5
    current = json.loads(parameters.read_text())
    parameters.write_text(json.dumps({"stage2": listing_7_2(throughput, goal, current["stage2"])}))

    # raytide follows the file, and the built-in threshold policy agrees with the external one.
    third = policy.decide(two_replica_job(taken_at=1004.0))
    assert [(d.current, d.target) for d in third] == [(2, 4)]
    assert ThresholdPolicy({"stage2": goal}).decide(job)[0].target == 4
    assert list(json.loads(stats_file.read_text())["stage2"]) == ["1000000", "1002000", "1004000"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parameters.json", "stats.json"]  # no partial files


def test_file_policy_keeps_everything_when_parameters_cannot_be_used(tmp_path):
    parameters = tmp_path / "parameters.json"
    policy = FilePolicy(parameters, tmp_path / "stats.json")
    parameters.write_text('{"stage2": ')  # an external writer half-way through
    assert [d.reason for d in policy.decide(two_replica_job(1.0))] == [
        "parameters.json ignored: parameters.json is not valid JSON: "
        "Expecting value: line 1 column 12 (char 11): keep 2"
    ]
    parameters.write_text('{"nope": 3}')
    assert policy.decide(two_replica_job(2.0))[0].target == 2


def test_file_policy_rejects_a_stats_file_that_is_not_json(tmp_path):
    (tmp_path / "stats.json").write_text("garbage")
    with pytest.raises(RescaleError, match="stats.json is not valid JSON"):
        FilePolicy(tmp_path / "parameters.json", tmp_path / "stats.json").decide(two_replica_job(1.0))

