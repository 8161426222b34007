"""The supervisor's stall rule on a real Ray (:mod:`raytide.driver.stall_ping`): an input replica
or the progress actor whose process is stopped (``SIGSTOP``) mid-job is alive to Ray, so no watch fails and nothing reports
it; the job stalls, the driver pings every actor, the stopped one does not answer, and it is
killed and recovered from exactly once: the output equals the failure-free reference. (With the
rule planted to declare nobody failed, this test ends in ``JobTimeout`` within its bound.)"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import raytide as rt
from tests.delivery import assert_exactly_once, read_outputs
from tests.ray.jobs import committed_snapshots
from tests.ray.test_recovery import a_replica, scenario

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]

#: The stall rule's bounds for the test: seconds without an event, then seconds to answer the ping.
STALL, PING = 1.0, 2.0


@pytest.mark.parametrize("victim", ["an input replica", "the progress actor"])
def test_a_stopped_actor_is_found_by_the_ping_killed_and_recovered_from(ray_session, tmp_path, victim):
    keyed = scenario("keyed")
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.1, stall_timeout=STALL, ping_timeout=PING)
    holder: list[rt.Job] = []
    started, stopped = threading.Event(), []

    def feed(epochs: list[list[Any]], stops_here: bool) -> Iterator[list[Any]]:
        for epoch, records in enumerate(epochs):
            if stops_here and epoch == len(epochs) // 2:
                assert started.wait(60)
                job = holder[0]
                deadline = time.monotonic() + 60
                while committed_snapshots(job) < 2:
                    assert time.monotonic() < deadline, "no two snapshots committed in 60 s"
                    time.sleep(0.05)
                name = "progress" if victim == "the progress actor" else "{}/{}".format(*a_replica(job, random.Random(7)))
                pid = job.hosts()[f"{job.name}/{name}"]
                os.kill(pid, signal.SIGSTOP)
                stopped.append((pid, time.monotonic()))
            time.sleep(0.02)
            yield records

    first = sorted(keyed.inputs)[0]
    inputs = {name: feed(epochs, name == first) for name, epochs in keyed.inputs.items()}
    try:
        with rt.run(keyed.flow, inputs=inputs, parallelism=2, recovery=recovery) as job:
            holder.append(job)
            started.set()
            got = read_outputs(job, sorted(keyed.expected), timeout=45.0)  # JobTimeout if the stop is never found
            stats = job.stats()
    finally:
        for pid, _ in stopped:  # never leave a stopped process behind (it would be a pooled host)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert stopped, "the replica was never stopped"
    assert_exactly_once(keyed.expected, got)
    recoveries = stats["recoveries"]
    assert recoveries["count"] == 1, recoveries
    cause = recoveries["recoveries"][0]["cause"]
    assert "did not answer the supervisor's ping" in cause, cause
