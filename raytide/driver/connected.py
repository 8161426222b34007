"""The driver's check that it is still connected to Ray, made before the Ray calls its
threads make on their own (an input's call, from a feeder thread or ``job.push``; the long
poll for job events; a job's teardown).

After ``ray.shutdown()`` any Ray call starts a new local Ray (Ray's auto-init), from
whichever thread makes it: a feeder thread pushing into a job whose driver shut Ray down
would start one, and its job's actors are gone with the old one anyway. So each of these
calls is refused first with a :class:`~raytide.errors.RaytideError` that says why; a feeder
thread stops with it (the job's error, raised by its next wait). What is left of the race
with a ``ray.shutdown()`` in another thread is the few bytecodes between this check and
Ray's own. A lost head leaves Ray initialized: its calls fail with Ray's errors, which stop a
feeder the same way.
"""

from __future__ import annotations

import ray

from raytide.errors import RaytideError


def require_ray(what: str) -> None:
    """Raise unless this driver is connected to Ray (``what``: the call about to be made).

    Raises:
        RaytideError: Ray was shut down in this driver (``ray.shutdown()``).
    """
    if not ray.is_initialized():
        raise RaytideError(f"{what}: this driver is no longer connected to Ray (ray.shutdown() was called): nothing "
                           f"was sent, and no new Ray is started for it; the job's actors went with the Ray it ran on")
