"""A stepped rescale's pure parts: the plan of steps, routing by the time a group moves, and a
replica's side of a step, against brute-force oracles (docs/rescaling.md, "Stepped migration").

The message flow under interleavings and crashes is tests/sim/test_stepped_migration_sim.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.keygroups import KeyGroupAssignment, key_group
from raytide.core.routing import column_key_groups
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp
from raytide.rescale.migration import ReplicaSteps, TimedRouter, frontier_passes
from raytide.rescale.steps import MigrationStep, StepPlan, groups_per_step_at_pace, plan_steps


@st.composite
def plans(draw: st.DrawFn) -> tuple[KeyGroupAssignment, int, StepPlan, tuple[int, int, int]]:
    """An old table (contiguous, or already rescaled once), a new width, its plan, and the
    plan's first epoch, epochs per step and groups per step."""
    groups = draw(st.integers(4, 48))
    old = KeyGroupAssignment.contiguous(draw(st.integers(1, min(groups, 6))), groups)
    if draw(st.booleans()):
        old = old.rescale(draw(st.integers(1, min(groups, 6))))[0]
    width = draw(st.integers(1, min(groups, 7)))
    first, every, size = draw(st.integers(0, 20)), draw(st.integers(1, 3)), draw(st.integers(1, 9))
    plan = plan_steps(old, width, first_epoch=first, groups_per_step=size, epochs_per_step=every)
    return old, width, plan, (first, every, size)


def brute_owner(old: KeyGroupAssignment, plan: StepPlan, group: int, epoch: int) -> int:
    """The owner at ``epoch``: the old owner, moved by every step at an epoch <= it, in turn."""
    owner = old.owners[group]
    for step in plan.steps:
        for move in step.moves:
            if move.key_group == group and step.epoch <= epoch:
                assert move.from_replica == owner
                owner = move.to_replica
    return owner


@settings(max_examples=200, deadline=None)
@given(plans(), st.data())
def test_the_plan_makes_rescales_moves_in_steps_and_the_owner_at_an_epoch_is_the_replay_of_the_steps(drawn, data):
    old, width, plan, (first, every, size) = drawn
    new, moves = old.rescale(width)
    assert plan.before.owners == old.owners and plan.width == max(old.parallelism, width)
    assert plan.after == new
    assert sorted(move for step in plan.steps for move in step.moves) == sorted(moves)
    assert all(step.moves for step in plan.steps)
    assert [step.epoch for step in plan.steps] == [first + i * every for i in range(len(plan.steps))]
    assert all(len(step.moves) == size for step in plan.steps[:-1])  # only the last step may be short
    assert all(len(step.moves) <= size for step in plan.steps)
    for epoch in data.draw(st.lists(st.integers(0, 60), max_size=8)):
        assert plan.owners_at(epoch) == tuple(brute_owner(old, plan, g, epoch) for g in range(old.key_groups))
    assert plan.owners_at(10**6) == new.owners


def test_each_pairs_moves_keep_their_group_order_and_steps_spread_over_the_pairs():
    old = KeyGroupAssignment.contiguous(2, 16)
    plan = plan_steps(old, 4, first_epoch=3, groups_per_step=2)
    pairs = {(m.from_replica, m.to_replica) for m in plan.steps[0].moves}
    assert pairs == {(0, 2), (1, 3)}  # one step takes a group from each old replica
    for pair in pairs:
        groups = [m.key_group for s in plan.steps for m in s.moves if (m.from_replica, m.to_replica) == pair]
        assert groups == sorted(groups)


def test_growing_starts_with_the_new_replicas_owning_nothing_and_shrinking_ends_narrow():
    grown = plan_steps(KeyGroupAssignment.contiguous(2, 8), 4, first_epoch=0, groups_per_step=1)
    assert grown.width == 4 and grown.before.groups_of(2) == grown.before.groups_of(3) == ()
    shrunk = plan_steps(KeyGroupAssignment.contiguous(4, 8), 1, first_epoch=5, groups_per_step=2)
    assert shrunk.width == 4 and shrunk.after.parallelism == 1
    assert set(shrunk.owners_at(shrunk.steps[-1].epoch)) == {0}


def test_bad_plans_are_refused_saying_what_was_wrong():
    old = KeyGroupAssignment.contiguous(2, 8)
    with pytest.raises(RescaleError, match="first epoch must be >= 0, got -1"):
        plan_steps(old, 3, first_epoch=-1, groups_per_step=1)
    with pytest.raises(RescaleError, match="groups_per_step >= 1"):
        plan_steps(old, 3, first_epoch=0, groups_per_step=0)
    move = old.rescale(3)[1][0]
    with pytest.raises(RescaleError, match="increasing epochs"):
        StepPlan(old, (MigrationStep(4, ()), MigrationStep(4, ())), old)
    with pytest.raises(RescaleError, match="each key group once"):
        StepPlan(old, (MigrationStep(4, (move,)), MigrationStep(5, (move,))), old)


@given(st.integers(1, 256), st.none() | st.integers(-1, 500), st.integers(1, 128))
def test_steps_are_the_fewest_groups_that_fit_the_moves_in_the_epochs_given(moves, epochs, most):
    chosen = groups_per_step_at_pace(moves, epochs, most)
    if epochs is None or epochs < 1:
        assert chosen == most
        return
    fitting = [n for n in range(1, most + 1) if -(-moves // n) <= epochs]
    assert chosen == (min(fitting) if fitting else most)


def test_steps_at_pace_refuse_no_moves_or_no_groups():
    with pytest.raises(RescaleError, match="moves and most must be >= 1"):
        groups_per_step_at_pace(0, 10, 8)


@settings(max_examples=100, deadline=None)
@given(plans(), st.lists(st.tuples(st.integers(0, 500), st.integers(0, 40)), max_size=60), st.booleans())
def test_a_sender_routes_each_record_to_the_owner_in_force_at_its_epoch(drawn, records, columnar):
    plan = drawn[2]
    groups = plan.before.key_groups
    router = TimedRouter("k" if columnar else (lambda record: record[0]), plan)
    for epoch in sorted({epoch for _, epoch in records}):
        keys = [key for key, at in records if at == epoch]
        batch = [{"k": key} for key in keys] if columnar else [(key, epoch) for key in keys]
        for replica, part in router.route(batch, Timestamp(epoch, (1,))):
            for record in part:
                key = record["k"] if columnar else record[0]
                group = int(column_key_groups(np.asarray([key]), groups)[0]) if columnar else key_group(key, groups)
                assert replica == plan.owner_at(group, epoch)


def one_move_plan() -> tuple[StepPlan, int]:
    """Four groups on two replicas going to three: one group moves, from 1 to 2, at epoch 5."""
    plan = plan_steps(KeyGroupAssignment.contiguous(2, 4), 3, first_epoch=5, groups_per_step=1)
    (step,) = plan.steps
    assert [(m.from_replica, m.to_replica) for m in step.moves] == [(1, 2)]
    return plan, step.moves[0].key_group


def test_the_old_owner_holds_its_capability_until_its_frontier_passes_the_step():
    plan, group = one_move_plan()
    old = ReplicaSteps("count", 1, plan)
    assert old.capabilities() == [5]
    assert old.receive(group, Timestamp(4, (9,)), "r") is True
    assert old.due([Timestamp(4, (0,)), Timestamp(7, (0,))]) == []
    assert old.capabilities() == [5]
    (handoff,) = old.due([Timestamp(5, (0,))])
    assert (handoff.epoch, handoff.groups, handoff.to_replica) == (5, (group,), 2)
    assert old.capabilities() == [] and old.due([]) == []  # handed over once
    with pytest.raises(RescaleError, match=rf"vertex 'count': a record of key group {group} at epoch 4 reached replica 1 "
                                           r"after the group's state left it at epoch 5"):
        old.receive(group, Timestamp(4), "late")


def test_the_new_owner_keeps_the_groups_records_until_its_state_comes_then_gives_them_in_order():
    plan, group = one_move_plan()
    new = ReplicaSteps("count", 2, plan)
    assert not new.done
    assert [new.receive(group, Timestamp(e), f"r{e}") for e in (5, 6, 5)] == [False, False, False]
    assert new.arrived([group]) == [(group, Timestamp(5), "r5"), (group, Timestamp(6), "r6"), (group, Timestamp(5), "r5")]
    assert new.receive(group, Timestamp(6), "after") is True and new.done
    with pytest.raises(RescaleError, match=f"handed key group {group}, which it had received already"):
        new.arrived([group])
    with pytest.raises(RescaleError, match="handed key group 0, which it does not receive in the plan"):
        new.arrived([0])


def test_a_record_routed_to_a_replica_not_owning_its_group_at_its_epoch_is_refused_naming_it():
    plan, group = one_move_plan()
    with pytest.raises(RescaleError, match=rf"vertex 'count': a record of key group {group} at epoch 5 reached "
                                           r"replica 1, but replica 2 owns the group at that epoch"):
        ReplicaSteps("count", 1, plan).receive(group, Timestamp(5), "r")
    with pytest.raises(RescaleError, match="replica 1 owns the group at that epoch"):
        ReplicaSteps("count", 2, plan).receive(group, Timestamp(4), "r")


def test_a_frontier_passes_an_epoch_when_no_element_is_before_it_loop_rounds_aside():
    assert frontier_passes([], 3)
    assert frontier_passes([Timestamp(3, (0,)), Timestamp(4, (0,))], 3)
    assert not frontier_passes([Timestamp(2, (99,)), Timestamp(4, (0,))], 3)


@settings(max_examples=100, deadline=None)
@given(plans(), st.lists(st.tuples(st.integers(0, 47), st.integers(0, 40)), max_size=30))
def test_every_record_is_admitted_by_exactly_one_replica_the_owner_at_its_epoch_and_kept_ones_come_back_in_order(
        drawn, records):
    plan = drawn[2]
    replicas = [ReplicaSteps("count", r, plan) for r in range(plan.width)]
    kept: dict[int, list] = {}
    for index, (group, epoch) in enumerate(records):
        group %= plan.before.key_groups
        admitted = []
        for steps in replicas:
            try:
                now = steps.receive(group, Timestamp(epoch), index)
            except RescaleError:
                continue
            admitted.append(steps.replica)
            if not now:
                kept.setdefault(steps.replica, []).append((group, index))
        assert admitted == [plan.owner_at(group, epoch)]
    for replica, records_kept in kept.items():
        groups = {group for group, _ in records_kept}
        released = replicas[replica].arrived(groups)
        assert [(group, index) for group, _, index in released] == records_kept


def test_a_group_handed_over_is_gone_for_the_epochs_before_its_step_only() -> None:
    plan = plan_steps(KeyGroupAssignment.contiguous(2, 8), 1, first_epoch=3, groups_per_step=2)
    steps = ReplicaSteps("v", 1, plan)
    first = plan.steps[0]
    assert steps.gone(first.epoch - 1) == set()
    steps.due([Timestamp(first.epoch)])
    moved = {move.key_group for move in first.moves}
    assert steps.gone(first.epoch - 1) == moved and steps.gone(first.epoch) == set()
