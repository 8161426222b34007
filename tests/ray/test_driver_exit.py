"""A driver that shuts Ray down while the host pool's thread is in the middle of a round: a
real child process with a Ray of its own (the session's Ray must not be shut down).

After ``ray.shutdown()`` any Ray call starts a new local Ray (Ray's auto-init), and the
pool's daemon thread makes Ray calls once a second. Once in about twenty runs of the demo
the round overlapped the demo's ``ray.shutdown()``: a second Ray started from that thread at
the driver's exit, and Ray's warning "SIGTERM handler is not set because current thread is
not the main thread" ended the demo's output. Here the round is held at its start until
Ray is down, so that overlap happens every time. ``rt.shutdown()`` after ``ray.shutdown()``
killed the pool's hosts with ``ray.kill``, which started a new Ray too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.ray.own_ray import until_ray_starts

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

CHILD = textwrap.dedent("""
    import json, threading, time
    import ray
    import raytide as rt
    from raytide.driver import pool

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    flow = rt.Dataflow("short")
    flow.input("numbers").map(lambda x: x + 1, name="plus-one").output("out")
    with rt.run(flow, {"numbers": [[1, 2, 3]]}, parallelism=2) as job:
        job.wait(timeout=120)
        assert sorted(job.collect("out")[0]) == [2, 3, 4]
    # the job gave its hosts back: the pool's next round has resets to take and idle hosts to ping

    in_round, go_on = threading.Event(), threading.Event()
    check_idle = pool.HostPool._check_idle

    def held(self):  # the round, held past its start until Ray is down
        in_round.set()
        go_on.wait(60)
        return check_idle(self)

    pool.HostPool._check_idle = held
    assert in_round.wait(30), "the pool's housekeeping never ran"
    thread = pool.host_pool().thread
    ray.shutdown()
    go_on.set()
    thread.join(30)
    time.sleep(1)  # a Ray started by the thread would be initialized by now
    outcome = {"initialized": ray.is_initialized(), "thread_alive": thread.is_alive()}
    rt.shutdown()  # kills the pool's hosts: with Ray gone there is nothing to kill, and no Ray to start
    outcome["initialized_after_rt_shutdown"] = ray.is_initialized()
    print(json.dumps(outcome), flush=True)
""")


@pytest.mark.slow
def test_after_ray_shutdown_neither_the_pools_round_nor_rt_shutdown_starts_ray_again(own_ray_env):
    done = until_ray_starts(lambda: subprocess.run([sys.executable, "-c", CHILD], env=own_ray_env, capture_output=True,
                                                   text=True, timeout=200), lambda child: child.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"initialized": False, "thread_alive": False, "initialized_after_rt_shutdown": False}, \
        done.stdout + done.stderr
    assert "SIGTERM handler is not set" not in done.stdout + done.stderr, done.stderr
