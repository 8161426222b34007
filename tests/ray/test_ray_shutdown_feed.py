"""``ray.shutdown()`` in a driver while a feeder thread pushes into its job: a real driver
process on the session's Ray (the session's own Ray must not be shut down).

After ``ray.shutdown()`` any Ray call starts a new Ray (Ray's auto-init; here, with
``RAY_ADDRESS`` set, it would join the session's cluster again), from whichever thread makes
it. Decided (docs/errors.md): the feeder's next push is refused before any Ray call, the
feeder stops, the job fails with an error that names the input and says Ray was shut
down, and neither the feeder, nor a wait on the job, nor its teardown starts Ray again.
The feed is held at a push until Ray is down, so the push comes after the shutdown every time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

CHILD = textwrap.dedent("""
    import json, threading
    import ray
    import raytide as rt

    ray.init(log_to_driver=False)  # RAY_ADDRESS: the session's Ray
    flow = rt.Dataflow("fed-while-shut-down")
    flow.input("numbers").map(lambda n: n + 1, name="plus-one").output("out")
    at_push, go_on = threading.Event(), threading.Event()

    def numbers():
        for epoch in range(1_000):
            if epoch == 3:
                at_push.set()
                go_on.wait(60)
            yield [epoch]

    job = rt.run(flow, {"numbers": numbers()}, parallelism=1)
    assert at_push.wait(60), "the feed did not reach epoch 3"
    feeder = job._feeders.threads[0]
    ray.shutdown()
    go_on.set()
    feeder.join(30)
    outcome = {"feeder_alive": feeder.is_alive(), "initialized": ray.is_initialized(), "error": str(job._supervisor.error)}
    try:
        job.wait(timeout=10)
    except Exception as error:
        outcome["wait"] = f"{type(error).__name__}: {error}"
    job.cancel()
    outcome["initialized_at_the_end"] = ray.is_initialized()
    print(json.dumps(outcome), flush=True)
""")


def test_a_feeder_pushing_after_ray_shutdown_stops_with_a_clear_error_and_starts_no_ray(session_ray_env):
    done = subprocess.run([sys.executable, "-c", CHILD], env=session_ray_env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["feeder_alive"] is False and outcome["initialized"] is False, outcome
    assert "feeding input 'numbers' failed" in outcome["error"] and "ray.shutdown() was called" in outcome["error"], outcome
    assert "no longer connected to Ray" in outcome["wait"] and outcome["initialized_at_the_end"] is False, outcome
    assert "Started a local Ray" not in done.stderr and done.stderr.count("Connected to Ray cluster") == 1, done.stderr
