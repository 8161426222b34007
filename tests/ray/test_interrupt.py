"""Ctrl-C in the driver while it waits for a job tears the job down: a real SIGINT sent to a
child process that runs a job on a Ray of its own. Torn down means every host of the job
given back to the pool and reset, holding nothing of the job (or killed)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.ray.own_ray import until_ray_starts

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

CHILD = textwrap.dedent("""
    import json, signal, sys, time
    import ray
    import raytide as rt
    from raytide.actors.hosts import unleased

    # Ctrl-C as at a terminal: a shell runs a background job with SIGINT ignored, and the
    # child of a suite started that way would inherit that (and never be interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    flow = rt.Dataflow("interrupted")
    flow.input("numbers").map(lambda x: time.sleep(1) or x, name="sleepy").output("out")
    job = rt.run(flow, parallelism=2, batch_size=1)  # a host is never long inside one batch
    job.push("numbers", list(range(12)))  # 6 s of work: Ctrl-C comes after 1 s
    # the input stays open, so the job cannot finish before the Ctrl-C however slowly this
    # process runs (a loaded machine once starved it past the 6 s of work before it waited)
    print("waiting", flush=True)
    try:
        job.wait(timeout=120)
        outcome = "finished"
    except KeyboardInterrupt:
        outcome = "interrupted"
    # every host was given back: reset (idle in the pool, holding nothing of the job) or dead
    numbers = {lease.number for lease in job.placement.leases.values()}
    deadline = time.monotonic() + 60
    while True:
        states = job.placement.pool.describe()
        alive = sorted(n for state, hosts in states.items() if not state.endswith("idle") for n in hosts if n in numbers)
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    held = [ray.get(unleased(job.placement.pool.handles[n]).raytide_objects.remote(), timeout=30) for n in states.get("vertex idle", [])]
    alive += [counts for counts in held if any(counts.values())]
    try:
        job.wait(timeout=5)
        after = "no error"
    except rt.JobCancelled as error:
        after = str(error)
    print(json.dumps({"outcome": outcome, "alive": alive, "after": after}), flush=True)
""")


def start_child(env: dict[str, str]) -> tuple[subprocess.Popen, str, str]:
    """The child, started; its first line of output ("waiting" once its job waits), and its
    stderr if it ended without that line."""
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    assert child.stdout is not None and child.stderr is not None
    line = child.stdout.readline()
    return child, line, "" if line.strip() == "waiting" else child.communicate(timeout=60)[1]


def test_ctrl_c_during_wait_cancels_the_job_and_leaves_no_actors(own_ray_env):
    child, line, err = until_ray_starts(lambda: start_child(own_ray_env), lambda started: started[2])
    try:
        assert line.strip() == "waiting", f"the child did not start its job: {line!r} {err}"
        time.sleep(1.0)  # inside job.wait()
        child.send_signal(signal.SIGINT)
        try:  # the child's own waits add up to 60 s for the pool and 30 s per host check, more on a loaded machine
            out, err = child.communicate(timeout=200)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            pytest.fail(f"the child did not end within 200 s of the Ctrl-C; its output: {out[-1000:]!r}; "
                        f"its stderr: {err[-3000:]}")
    finally:
        if child.poll() is None:
            child.kill()
    lines = out.strip().splitlines()
    if not lines:
        pytest.fail(f"the child ended (exit {child.returncode}) without its report; its stderr: {err[-3000:]}")
    report = json.loads(lines[-1])
    assert report["outcome"] == "interrupted", err[-2000:]
    assert report["alive"] == [], f"hosts still held by the job after the interrupt: {report['alive']}"
    assert "cancelled by Ctrl-C (KeyboardInterrupt)" in report["after"]
