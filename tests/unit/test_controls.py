"""Control steps: combination rule, clamp, hysteresis, cooldown and the CPU cap, each on its own."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from raytide.autoscale import controls
from raytide.autoscale.controls import (
    Streak,
    apply_cooldown,
    cap_by_free_cpus,
    clamp,
    combine,
    ignore_small_changes,
    record_changes,
    require_persistence,
)
from raytide.autoscale.policies import ScalingDecision as D

# ---------------------------------------------------------------- combine


def test_combine_takes_the_largest_target_per_vertex_and_says_so():
    rate = [D("a", 2, 5, "rate a"), D("b", 4, 2, "rate b")]
    threshold = [D("b", 4, 3, "threshold b"), D("c", 1, 1, "threshold c")]
    combined = combine(rate, threshold)
    assert combined == (
        D("a", 2, 5, "rate a"),
        D("b", 4, 3, "threshold b (largest of targets 2, 3)"),
        D("c", 1, 1, "threshold c"),
    )


def test_combine_ties_go_to_the_earlier_policy():
    assert combine([D("a", 1, 3, "first")], [D("a", 1, 3, "second")])[0].reason == "first (largest of targets 3, 3)"


def test_combine_rejects_disagreeing_current_parallelism():
    with pytest.raises(ValueError, match=r"vertex 'a': decisions disagree on current parallelism \[1, 2\]"):
        combine([D("a", 1, 3, "")], [D("a", 2, 3, "")])


decision_sets = st.lists(
    st.lists(st.builds(D, st.sampled_from("abc"), st.just(4), st.integers(1, 20), st.just("r")), max_size=4),
    max_size=4,
)


@given(decision_sets)
def test_combined_target_is_the_max_over_policies(sets):
    combined = {d.vertex: d.target for d in combine(*sets)}
    expected: dict[str, int] = {}
    for decisions in sets:
        for d in decisions:
            expected[d.vertex] = max(expected.get(d.vertex, 0), d.target)
    assert combined == expected


# ---------------------------------------------------------------- clamp


def test_clamp_limits_targets_and_says_so():
    decisions = (D("a", 5, 12, "r"), D("b", 5, 1, "r"), D("c", 5, 6, "r"))
    assert clamp(decisions, minimum=2, maximum=10) == (
        D("a", 5, 10, "r; clamped to 10"),
        D("b", 5, 2, "r; clamped to 2"),
        D("c", 5, 6, "r"),
    )
    assert clamp(decisions) == decisions


# ---------------------------------------------------------------- hysteresis


def test_small_changes_are_ignored_by_absolute_step():
    out = ignore_small_changes((D("a", 5, 6, "r"), D("b", 5, 7, "r"), D("c", 5, 5, "r")), min_step=2)
    assert out == (D("a", 5, 5, "r; change of +1 is smaller than 2: keep 5"), D("b", 5, 7, "r"), D("c", 5, 5, "r"))


def test_small_changes_are_ignored_by_fraction_of_current():
    out = ignore_small_changes((D("a", 10, 9, "r"), D("b", 10, 8, "r")), min_fraction=0.2)
    assert out == (D("a", 10, 10, "r; change of -1 is smaller than 2: keep 10"), D("b", 10, 8, "r"))


def test_persistence_lets_a_change_through_after_k_rounds_in_one_direction():
    streaks: dict[str, Streak] = {}
    targets = []
    for target in (6, 7, 6, 3, 6, 6, 5, 6):  # current is always 5
        (decision,), streaks = require_persistence([D("a", 5, target, "r")], streaks, rounds=3)
        targets.append(decision.target)
    # up, up, up(passes), down(restart), up, up, keep(restart), up
    assert targets == [5, 5, 6, 5, 5, 5, 5, 5]
    assert streaks == {"a": Streak(+1, 1)}


def test_persistence_says_how_far_the_streak_is():
    (d,), streaks = require_persistence([D("a", 5, 7, "r")], {"a": Streak(+1, 1)}, rounds=3)
    assert d.reason == "r; same direction 2 of 3 rounds: keep 5"
    assert streaks == {"a": Streak(+1, 2)}


def test_persistence_of_one_round_changes_nothing():
    decisions = (D("a", 5, 7, "r"), D("b", 5, 2, "r"))
    assert require_persistence(decisions, {}, rounds=1)[0] == decisions
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        require_persistence(decisions, {}, rounds=0)


# ---------------------------------------------------------------- cooldown


def test_cooldown_holds_changes_too_soon_after_the_last_one():
    decisions = (D("a", 2, 4, "r"), D("b", 2, 4, "r"), D("c", 2, 4, "r"), D("d", 2, 2, "r"))
    out = apply_cooldown(decisions, {"a": 95.0, "b": 70.0, "d": 99.0}, now=100.0, cooldown_seconds=30.0)
    assert out == (
        D("a", 2, 2, "r; cooldown: last change 5.0 s ago < 30.0 s: keep 2"),
        D("b", 2, 4, "r"),  # exactly the cooldown ago: allowed
        D("c", 2, 4, "r"),  # never changed
        D("d", 2, 2, "r"),
    )


def test_record_changes_notes_only_vertices_that_change():
    decisions = (D("a", 2, 4, "r"), D("b", 2, 2, "r"))
    assert record_changes({"b": 1.0, "c": 2.0}, decisions, now=10.0) == {"a": 10.0, "b": 1.0, "c": 2.0}


# ---------------------------------------------------------------- CPU cap


def test_cap_leaves_decisions_alone_when_the_cpus_suffice():
    decisions = (D("a", 2, 5, "r"), D("b", 4, 1, "r"))
    assert cap_by_free_cpus(decisions, free_cpus=3) == decisions


def test_cap_grants_the_largest_unmet_request_first_and_ignores_scale_downs():
    decisions = (D("a", 1, 6, "r"), D("b", 1, 3, "r"), D("c", 4, 1, "r"))
    out = cap_by_free_cpus(decisions, free_cpus=4)
    assert [d.target for d in out] == [4, 2, 1]
    assert out[0].reason == "r; capped by free CPUs: 3 of 5 more replicas (room for 4, 7 requested in all)"
    assert out[2] == decisions[2]


def test_cap_counts_cpus_per_replica():
    out = cap_by_free_cpus((D("a", 1, 5, "r"),), free_cpus=5, cpus_per_replica=2)
    assert out[0].target == 3


def test_cap_with_no_free_cpus_keeps_every_scale_up():
    out = cap_by_free_cpus((D("a", 1, 5, "r"),), free_cpus=0.5)
    assert out[0].target == 1 and out[0].reason.endswith("0 of 4 more replicas (room for 0, 4 requested in all)")


@given(
    st.lists(st.tuples(st.integers(1, 10), st.integers(1, 20)), max_size=6),
    st.floats(0, 40, allow_nan=False),
    st.sampled_from([0.5, 1.0, 2.0]),
)
@example([(1, 2)], 1.999999999999993, 2.0)  # free CPUs a rounding short of one replica still hold it
def test_cap_never_adds_more_replicas_than_free_cpus_allow(pairs, free_cpus, cpus_per_replica):
    decisions = tuple(D(f"v{i}", current, target, "r") for i, (current, target) in enumerate(pairs))
    out = cap_by_free_cpus(decisions, free_cpus, cpus_per_replica)
    added = sum(max(d.delta, 0) for d in out)
    requested = sum(max(d.delta, 0) for d in decisions)
    budget = int(free_cpus / cpus_per_replica + controls.CPU_ROUNDING)
    assert added * cpus_per_replica <= free_cpus + cpus_per_replica * controls.CPU_ROUNDING
    assert added == min(requested, budget)  # work-conserving: the budget is used up when asked for
    for before, after in zip(decisions, out):
        assert after.current == before.current
        assert after.target == before.target if before.delta <= 0 else before.current <= after.target <= before.target
