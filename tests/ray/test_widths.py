"""Widths nobody can run are refused before anything starts (issue 32): a keyed vertex wider
than its key groups, any vertex wider than the cluster can place (the session's Ray has 2
CPUs: 8 replicas that reserve none, 2 that reserve one CPU each), at ``rt.run`` and at
``job.rescale``; ``oversubscribe=True`` opts in."""

from __future__ import annotations

import pytest

import raytide as rt
from raytide.errors import ArgumentError

pytestmark = pytest.mark.ray


def counting() -> rt.Dataflow:
    flow = rt.Dataflow("widths")
    flow.input("words").count_by_key(lambda w: w, name="count").output("out")
    return flow


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("options", "message"), [
    ({"parallelism": 200, "oversubscribe": True}, r"vertex '.*' reads an exchange, so it has at most 128 .* 200 were"),
    ({"parallelism": 9}, r"vertex '.*': 9 replicas were asked for, more than the 8 this cluster can place \(2 CPUs"),
    ({"parallelism": 3, "num_cpus": 1}, r"3 replicas were asked for, more than the 2 .* 1 reserved per replica"),
])
def test_run_refuses_a_width_nobody_can_run_before_any_host_starts(ray_session, options, message):
    """(With the check planted out, the one-CPU case waited for Ray to place a third host
    until the test's timeout struck.)"""
    with pytest.raises(ArgumentError, match=message):
        rt.run(counting(), **options)


@pytest.mark.timeout(120)
def test_rescale_refuses_such_a_width_and_the_job_goes_on_while_oversubscribe_opts_in(ray_session, tmp_path):
    with rt.run(counting(), parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        hosts = job.hosts()
        job.push("words", ["a", "b", "a"], epoch=0)
        for width, limit in ((200, "at most 128"), (9, "more than the 8")):
            with pytest.raises(ArgumentError, match=rf"vertex 'count'.*{limit}"):
                job.rescale({"count": width})
            assert job.parallelism()["count"] == 1 and job.hosts() == hosts
        job.rescale({"count": 9}, oversubscribe=True)
        assert job.parallelism()["count"] == 9
        job.push("words", ["b"], epoch=1)
        job.close("words")
        job.wait(timeout=60)
        assert {e: sorted(r) for e, r in job.collect("out").items()} == {0: [("a", 2), ("b", 1)], 1: [("b", 1)]}


@pytest.mark.timeout(120)
def test_hosts_the_cluster_cannot_place_time_out_with_the_reason(ray_session, monkeypatch):
    """``oversubscribe=True`` with hosts that reserve a CPU each: Ray keeps the third pending
    (the session's Ray has 2 CPUs), and the start's timeout says so, as a recovery's does
    when a lost node's replacements find no CPU free. (Before, the message named only the
    wait: "starting and connecting vertex hosts took longer than 120 s".)"""
    monkeypatch.setattr("raytide.driver.job.SETUP_TIMEOUT", 5.0)
    with pytest.raises(rt.JobTimeout, match=r"took longer than 5 s; each of its hosts reserves 1 CPU and the cluster "
                                            r"has 0 free, so Ray may be keeping hosts pending"):
        rt.run(counting(), parallelism=3, num_cpus=1, oversubscribe=True)
