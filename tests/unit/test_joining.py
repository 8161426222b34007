"""A growing stepped rescale's join without a new incarnation (pure; docs/rescaling.md, "A
growing switch without a new incarnation"): where it is refused
(:func:`~raytide.engine.joining.join_refusal`), a sender's core taking the wider plan in place
(:meth:`ReplicaCore.widen`: its epoch tokens reach the joined replicas, its data keeps its
table), and the progress core's join (:meth:`ProgressCore.join`: the joined replica is pushed
its statuses). A shrink's retiring switch, the mirror: its refusals (``retire_refusal``), a sender
narrowed past the retiring replicas once the plan's steps emptied them (its tokens reach the
replicas left alone, its data routes by the plan's final table narrowed), a retiring replica's
core refusing to leave while it has steps left, and the progress core letting it go only once
all it sent is applied. On Ray: ``tests/ray/test_rescale_stepped.py``."""

from __future__ import annotations

import pytest

import raytide as rt
from raytide.core.keygroups import KeyGroupAssignment
from raytide.engine.joining import join_refusal, retire_refusal
from raytide.engine.progress_core import ProgressCore
from raytide.engine.replica import ReplicaCore
from raytide.errors import RescaleError
from raytide.physical.plan import compile_plan
from raytide.physical.protocol import Declaration, EpochClosed, ProgressBatch, ReplicaKey, Sequenced
from raytide.rescale.steps import plan_steps
from raytide.rescale.widths import new_widths
from tests.unit.test_replica_core import Recorder


def keyed(behind: bool = False) -> rt.Dataflow:
    """A keyed vertex ``sum`` behind an input, its output fused behind it (or, ``behind``, a keyed vertex of its own)."""
    flow = rt.Dataflow("keyed")
    summed = flow.input("n", parallelism=1).stateful_map(lambda r: r[0], lambda s, r: (s, r), name="sum")
    if behind:
        summed = summed.stateful_map(lambda r: r[1], lambda s, r: (s, r), name="again")
    summed.output("out")
    return flow


def rescaled(flow: rt.Dataflow, width: int, widths: dict[str, int]) -> tuple:
    plan = compile_plan(flow, width)
    return plan, compile_plan(flow, width, widths=new_widths(plan, widths))


def test_a_keyed_vertex_with_only_its_output_behind_joins_and_the_rest_is_refused_saying_why():
    assert join_refusal(*rescaled(keyed(), 2, {"sum": 4}), "sum") is None
    assert "does not grow" in join_refusal(*rescaled(keyed(), 4, {"sum": 2}), "sum")
    assert "sends to ['again'] in other replicas" in join_refusal(*rescaled(keyed(True), 2, {"sum": 3}), "sum")
    wide = rt.Dataflow("wide")
    wide.input("n", parallelism=8).stateful_map(lambda r: r[0], lambda s, r: (s, r), name="sum").output("out")
    assert "epoch tokens" in join_refusal(*rescaled(wide, 8, {"sum": 9}), "sum")  # 8 x 9 pairs: past MAX_TOKEN_PAIRS


def test_a_widened_sender_sends_its_tokens_to_the_joined_replicas_and_its_data_by_its_old_table():
    old, new = rescaled(keyed(), 2, {"sum": 4})
    chain = old.chain_of("n").name
    core = ReplicaCore(old, chain, 0, transport := Recorder())
    core.widen(new)
    core.push_input("n", [(key, 1) for key in range(200)], 0)
    core.advance_input("n", 1)
    assert sorted(to.replica for to, _, token, _ in transport.tokens if token == EpochClosed(1)) == [0, 1, 2, 3]
    table = core.outbox.tables()[("n", 0, 0)]
    assert table.parallelism == 2  # no joined replica owns a key group before the plan's steps


def test_the_progress_core_pushes_a_joined_replica_its_statuses():
    plan = compile_plan(keyed(), 2)
    core = ProgressCore(plan.graph, plan.outputs, plan.initial_pointstamps())
    core.connect({})
    joined = ReplicaKey(plan.chain_of("sum").name, 2)
    locations = ReplicaCore(plan, joined.chain, 0, Recorder()).subscriptions()
    pushes = core.join(joined, locations).pushes
    assert [key for key, _ in pushes] == [joined] and set(pushes[0][1].statuses) == set(locations)


def test_the_retiring_replicas_of_a_keyed_vertex_with_only_its_output_behind_leave_and_the_rest_is_refused():
    assert retire_refusal(*rescaled(keyed(), 4, {"sum": 2}), "sum") is None
    assert "does not shrink" in retire_refusal(*rescaled(keyed(), 2, {"sum": 4}), "sum")
    assert "sends to ['again'] in other replicas" in retire_refusal(*rescaled(keyed(True), 3, {"sum": 2}), "sum")


def test_a_narrowed_sender_sends_its_tokens_to_the_replicas_left_and_its_data_by_the_plans_final_table():
    old, new = rescaled(keyed(), 4, {"sum": 2})
    core = ReplicaCore(old, old.chain_of("n").name, 0, transport := Recorder())
    steps = plan_steps(KeyGroupAssignment.contiguous(4), 2, 1, 8)
    core.install_plan(steps.message("sum"))
    core.widen(new)
    core.advance_input("n", steps.steps[-1].epoch)
    core.push_input("n", [(key, 1) for key in range(200)], steps.steps[-1].epoch)
    core.advance_input("n", steps.steps[-1].epoch + 1)
    assert sorted({to.replica for to, _, _, _ in transport.tokens}) == [0, 1]
    table = core.outbox.tables()[("n", 0, 0)]
    assert (table.parallelism, table.owners) == (2, steps.after.owners)
    stray = ReplicaCore(old, old.chain_of("n").name, 0, Recorder())
    stray.install_plan(plan_steps(KeyGroupAssignment.contiguous(4), 3, 1, 8).message("sum"))  # replica 2 keeps groups
    with pytest.raises(RescaleError, match="outside"):
        stray.widen(new)


def test_a_retiring_replica_leaves_once_its_steps_are_done_and_its_progress_is_applied():
    old, _ = rescaled(keyed(), 2, {"sum": 1})
    chain = old.chain_of("sum").name
    core = ReplicaCore(old, chain, 1, transport := Recorder())
    core.install_plan(plan_steps(KeyGroupAssignment.contiguous(2), 1, 1, 8).message("sum"))
    why, _ = core.retire()
    assert why is not None and "steps left" in why and not transport.sent  # its groups not handed over yet
    assert all(isinstance(message, Declaration) for message in transport.messages)  # only its wait for the step
    progress = ProgressCore(old.graph, old.outputs, old.initial_pointstamps())
    progress.connect({})
    leaving = ReplicaKey(chain, 1)
    assert ReplicaCore(old, chain, 1, quiet := Recorder()).retire() == (None, 1) and len(quiet.messages) == 1
    assert not progress.leave(leaving, 1)  # its last message not applied yet: counted on
    progress.receive(Sequenced(leaving, 0, quiet.messages[0]))
    assert progress.leave(leaving, 1) and leaving not in progress.publisher.subscriptions
    progress.receive(Sequenced(leaving, 0, ProgressBatch([], False, None, None, {})))  # a replica joined later under its key
