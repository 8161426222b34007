"""Killing a Spark executor for real: SIGKILL the process of RayDP's executor actor (found through
Ray's actor table) and wait until Ray has seen it die; shared by the Spark tests that check an
executor's death is recovered in place (``raytide.integrations.spark.partitions``)."""

from __future__ import annotations

import os
import signal
import time


def restarts(name: str) -> int:
    """How many times Ray has restarted the executor actor named ``name``."""
    import ray
    from ray._private.state import actors

    return actors(ray.get_actor(name)._actor_id.hex())["NumRestarts"]


def kill_executor(name: str, timeout: float = 60.0) -> int:
    """SIGKILL the process of the executor actor named ``name``; back once Ray has seen it die
    (it is restarting, or restarted in another process). Returns the killed process's pid."""
    import ray
    from ray._private.state import actors

    actor = ray.get_actor(name)._actor_id.hex()
    pid = actors(actor)["Pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while actors(actor)["State"] == "ALIVE" and actors(actor)["Pid"] == pid:
        assert time.monotonic() < deadline, f"Ray did not see Spark executor {name!r} (pid {pid}) die in {timeout} s"
        time.sleep(0.05)
    return pid
