"""The driver's wait for several actors' answers (``JobPlacement.wait``) when one of them fails:
the others that fail too are read, not left for Ray to report as unhandled errors when their
refs go (seen in a rescale whose replica was killed: a survivor's ``adopt`` of the pieces the
dead replica owned failed with ``OwnerDiedError`` after the dead one's own call had failed)."""

from __future__ import annotations

import gc
import logging
import time
from types import SimpleNamespace

import pytest
import ray

from raytide.driver.placement import JobPlacement
from tests.ray.test_rescale_deaths import Unhandled

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
def fails_after(seconds: float) -> None:
    time.sleep(seconds)
    raise ValueError(f"failed after {seconds} s")


def test_a_wait_that_fails_reads_the_answers_that_fail_after_the_first(ray_session):
    unhandled = Unhandled()
    logging.getLogger("ray._private.worker").addHandler(unhandled)
    try:
        refs = [fails_after.remote(0.0), fails_after.remote(0.3)]
        with pytest.raises(ray.exceptions.RayTaskError, match="failed after 0.0 s"):
            JobPlacement.wait(SimpleNamespace(name="waits"), refs, "two calls")
        del refs
        gc.collect()  # an answer nobody read is reported as its ref goes
        time.sleep(1.0)
    finally:
        logging.getLogger("ray._private.worker").removeHandler(unhandled)
    assert not unhandled.errors, unhandled.errors
