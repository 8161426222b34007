"""A stepped rescale's plan in the real engine (``LocalJob``, the replica cores Ray runs):
every sender routes a record by the owners in force at its epoch, and every record reaches
the replica the plan names at that epoch, under seeded interleavings (docs/rescaling.md,
"Stepped migration"). The state does not move yet here: the vertex under the plan is
stateless, so the test is of the routing alone."""

from __future__ import annotations

import random
from typing import Any

import pytest

import raytide as rt
from raytide.core.keygroups import KeyGroupAssignment, key_group
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp
from raytide.rescale.steps import StepPlan, plan_steps
from raytide.testing import LocalJob
from tests.sim.seeds import rotating

EPOCHS = 8


class Where(rt.Vertex):
    """Sends each record on with its epoch and the replica that received it."""

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        self.send_by(0, [(key, time.epoch, self.replica) for key in message], time)


def flow() -> rt.Dataflow:
    job = rt.Dataflow("stepped")
    job.input("keys", parallelism=2).unary(Where, exchange=lambda key: key, name="where",
                                           parallelism=3).output("seen")
    return job


def the_plan() -> StepPlan:
    """3 -> 2 replicas: the third's groups move to the other two, 8 groups a step from epoch 1."""
    return plan_steps(KeyGroupAssignment.contiguous(3), 2, first_epoch=1, groups_per_step=8)


def run(seed: int, plan: StepPlan) -> dict[int, list]:
    rng = random.Random(seed)
    keys = [[rng.randrange(400) for _ in range(rng.randrange(20, 40))] for _ in range(EPOCHS)]
    result = LocalJob(flow(), {"keys": keys}, seed=seed, step_plans=[plan.message("where")]).run()
    assert result.failure is None, f"seed {seed}: {result.failure}"
    seen = result.outputs["seen"]
    assert sorted(k for e in seen.values() for k, _, _ in e) == sorted(k for e in keys for k in e), f"seed {seed}"
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, *rotating(3, "stepped-routing")])
def test_every_record_reaches_the_owner_at_its_epoch(seed: int) -> None:
    plan = the_plan()
    assert len(plan.steps) >= 4 and plan.steps[-1].epoch < EPOCHS  # the steps fall inside the run
    seen = run(seed, plan)
    moved = 0
    for epoch, records in seen.items():
        for key, at, replica in records:
            assert at == epoch
            group = key_group(key)
            assert replica == plan.owner_at(group, epoch), f"seed {seed}: key {key} at epoch {epoch}"
            moved += replica != plan.before.owners[group]
    assert moved > 0, f"seed {seed}: no record went to a new owner"


def test_a_plan_that_comes_too_late_is_refused() -> None:
    plan = plan_steps(KeyGroupAssignment.contiguous(3), 2, first_epoch=0, groups_per_step=8)
    job = LocalJob(flow(), {"keys": [[1], [2]]}, seed=0)
    core = next(core for key, core in job.replicas.items() if key.chain == job.plan.chain_of("keys").name)
    core.advance_input("keys", 1)
    with pytest.raises(RescaleError, match=r"vertex 'where'.*first step is at epoch 0.*input 'keys' is at epoch 1"):
        core.install_plan(plan.message("where"))


def test_a_record_routed_by_another_table_is_refused() -> None:
    plan = the_plan()
    job = LocalJob(flow(), {"keys": [[1]]}, seed=0, step_plans=[plan.message("where")])
    core = job.replicas[next(key for key in job.replicas if key.chain == job.plan.chain_of("where").name)]
    stranger = next(k for k in range(1000) if plan.owner_at(key_group(k), 5) != core.replica)
    with pytest.raises(RescaleError, match=r"vertex 'where'.*epoch 5.*reached replica 0 on input 0, but replica"):
        core.stepped["where"].admit(0, Timestamp(5), [stranger])
