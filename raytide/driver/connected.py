"""The driver's check that it is still connected to Ray, made before the Ray calls its
threads make on their own (an input's call, from a feeder thread or ``job.push``; the long
poll for job events; a job's teardown).

After ``ray.shutdown()`` any Ray call starts a new local Ray (Ray's auto-init), from
whichever thread makes it: a feeder thread pushing into a job whose driver shut Ray down
would start one, and its job's actors are gone with the old one anyway. So each of these
calls is refused first with a :class:`~raytide.errors.RaytideError` that says why; a feeder
thread stops with it (the job's error, raised by its next wait). What is left of the race
with a ``ray.shutdown()`` in another thread is a call already past this check (a held push
sent by its own thread while the driver shuts Ray down): the calls go to Ray's ``get``,
``wait`` and ``kill`` without the auto-init wrapper (:data:`ray_get`, :data:`ray_wait`,
:data:`ray_kill`), so such a call fails instead of starting a Ray, and :func:`ray_calls` turns
its failure into the same explained error. A lost head leaves Ray initialized: its calls fail
with Ray's errors, which stop a feeder the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import ray
from ray._private import worker as _ray_worker

from raytide.errors import RaytideError

#: ``ray.get``, ``ray.wait`` and ``ray.kill`` as Ray defines them, before ``ray/__init__.py`` wraps
#: the public names to call ``ray.init()`` first when Ray is not initialized. The driver's own
#: threads (the pool's housekeeping, feeders, the output poll) call these: after a
#: ``ray.shutdown()`` they raise ``RaySystemError`` ("Ray has not been started yet") instead.
ray_get, ray_wait, ray_kill = _ray_worker.get, _ray_worker.wait, _ray_worker.kill


def require_ray(what: str) -> None:
    """Raise unless this driver is connected to Ray (``what``: the call about to be made).

    Raises:
        RaytideError: Ray was shut down in this driver (``ray.shutdown()``).
    """
    if not ray.is_initialized():
        raise _shut_down(what)


@contextlib.contextmanager
def ray_calls(what: str) -> Iterator[None]:
    """Make Ray calls for ``what`` (checked first with :func:`require_ray`); a call that fails
    because ``ray.shutdown()`` ran meanwhile, in another thread, raises the same explained error.

    Raises:
        RaytideError: Ray was shut down in this driver, before or during the calls.
    """
    require_ray(what)
    try:
        yield
    except Exception as error:
        if ray.is_initialized():
            raise
        raise _shut_down(what) from error


def _shut_down(what: str) -> RaytideError:
    return RaytideError(f"{what}: this driver is no longer connected to Ray (ray.shutdown() was called): nothing "
                        f"was sent, and no new Ray is started for it; the job's actors went with the Ray it ran on")
