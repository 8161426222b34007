"""Progress through a relay per node (:mod:`raytide.actors.progress_relay`), on real Ray.

A job uses relays when its cluster has :data:`~raytide.driver.placement.RELAYS_FROM_NODES`
live nodes; these tests lower that to one, so the one node of the test session has a relay
(the four-node run of ``tests/ray/test_node_loss.py`` uses them as a cluster would). The
outputs are compared with the plain-Python reference, counting lost, duplicated and
reordered records.
"""

from __future__ import annotations

import random

import pytest

import raytide as rt
from raytide.driver import placement
from tests.delivery import assert_exactly_once, read_outputs
from tests.ray.test_recovery import check, run_and_kill, sigkill
from tests.ray.test_rescale import sequence_rescaled_1_4_2_3
from tests.sim.scenarios import SCENARIOS

pytestmark = pytest.mark.ray


@pytest.fixture
def relays_on_one_node(monkeypatch):
    monkeypatch.setattr(placement, "RELAYS_FROM_NODES", 1)


def test_a_job_whose_progress_goes_through_a_relay_gives_exactly_the_reference_output(ray_session, relays_on_one_node):
    scenario = SCENARIOS["keyed"](random.Random(5), epochs=30)
    with rt.run(scenario.flow, inputs=scenario.inputs, parallelism=2) as job:
        relays = set(job.placement.relays.values())
        got = read_outputs(job, sorted(scenario.expected))
        stats = job.stats()
    assert_exactly_once(scenario.expected, got)
    assert len(relays) == 1  # one node, one relay, which every replica sends through
    assert stats["progress_relayed"] > 0 and stats["progress_relay_calls"] > 0, stats
    # Every call the progress actor took came from the relay, which took more than it made,
    # and merged a replica's consecutive messages into one run.
    assert stats["progress_calls"] == stats["progress_relay_calls"] <= stats["progress_relayed"], stats
    assert stats["progress_relay_runs"] > 0, stats
    # and the progress actor's pushes went down the relay: a call per bundle, not per push
    assert 0 < stats["progress_fan_outs"] < stats["progress_pushes"], stats


def test_the_relays_host_killed_mid_job_is_recovered_from_with_exactly_the_reference_output(
        ray_session, tmp_path, relays_on_one_node):
    """The relay is the host of the node's first replica: its SIGKILL loses what it gathered
    of every replica's progress; the recovery chooses the relay again and the job ends exact,
    and the driver keeps no handle of the dead host for it."""
    scenario = SCENARIOS["keyed"](random.Random(1), epochs=30)
    jobs: list[rt.Job] = []

    def kill_the_relay(job: rt.Job) -> None:
        jobs.append(job)
        relay = next(iter(set(job.placement.relays.values())))
        key = next(key for key, peer in job.placement.peers.items() if peer == relay)
        sigkill(job, f"{key.chain}/{key.replica}")

    got, stats = run_and_kill(scenario, tmp_path, [kill_the_relay])
    check(scenario, got)
    assert stats["recoveries"]["count"] == 1
    assert stats["progress_relayed"] > 0, stats
    placement = jobs[0].placement  # which node each host is on: asked of the hosts it has now, and only those kept
    assert set(placement._nodes) == {placement.actors[key] for key in placement.plan.replica_keys()}


@pytest.mark.timeout(600)
def test_a_job_rescaled_1_4_2_3_with_relays_sees_every_record_once_in_order(ray_session, tmp_path, relays_on_one_node):
    """Each rescale chooses the relay again among the new widths' hosts (the first replica's
    host may go back to the pool): every record still arrives once, in order per key."""
    _, stats = sequence_rescaled_1_4_2_3(tmp_path)
    assert stats["parallelism"]["check"] == 3 and len(stats["rescales"]) == 3
    # (a replica's counters start again with each role its host takes; the progress actor's do not)
    assert stats["progress_relayed"] >= stats["progress_relay_calls"] > 0, stats
