"""The driver's own threads call Ray's get, wait and kill without Ray's auto-init wrapper:
after a ``ray.shutdown()`` (here: no Ray at all) such a call fails and starts no Ray, and one
that passed the driver's check before Ray went fails with the check's explained error.

The calls run in a child Python: the worker running this file may be the one holding the
test session's Ray (the session lane takes the other lane's last files), and whether a call
starts a Ray can only be seen in a process that has none."""

from __future__ import annotations

import subprocess
import sys

#: The child bounds its own run (SIGALRM ends it after 120 s): a ``subprocess.run`` timeout
#: would poll the child with ``time.sleep``, which the unit tier refuses in the test's thread.
_PROBE = """
import signal
signal.alarm(120)
import ray
from ray.exceptions import RaySystemError
from raytide.driver.connected import ray_get, ray_kill, ray_wait

for name, call in [("get", lambda: ray_get([])), ("wait", lambda: ray_wait([], timeout=0)),
                   ("kill", lambda: ray_kill(None))]:
    try:
        call()
        outcome = "returned"
    except RaySystemError as error:
        outcome = "refused" if "Ray has not been started" in str(error) else f"other error: {error}"
    print(name, outcome, "ray started" if ray.is_initialized() else "no ray")

# A call already past the check when another thread shuts Ray down (the check is made while
# Ray still looks initialized: the first answer of `is_initialized` says so, the rest are real).
from raytide.driver import connected
answers = iter([True])
real = ray.is_initialized
connected.ray.is_initialized = lambda: next(answers, None) or real()
try:
    with connected.ray_calls("push into input 'numbers'"):
        ray_wait([], timeout=0)
    print("race returned")
except Exception as error:
    print("race", type(error).__name__, "explained" if "ray.shutdown() was called" in str(error) else str(error))
"""


def test_a_call_without_ray_raises_and_starts_no_ray():
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True)
    assert probe.returncode == 0, f"the probe ended with {probe.returncode} (-14: its 120 s alarm): {probe.stderr}"
    assert probe.stdout.splitlines() == ["get refused no ray", "wait refused no ray", "kill refused no ray",
                                         "race RaytideError explained"], probe.stdout + probe.stderr
