"""The driver's own threads call Ray's get, wait and kill without Ray's auto-init wrapper:
after a ``ray.shutdown()`` (here: no Ray at all) such a call fails and starts no Ray."""

from __future__ import annotations

import pytest
import ray
from ray.exceptions import RaySystemError

from raytide.driver.connected import ray_get, ray_kill, ray_wait


@pytest.mark.parametrize("call", [lambda: ray_get([]), lambda: ray_wait([], timeout=0), lambda: ray_kill(None)],
                         ids=["get", "wait", "kill"])
def test_a_call_without_ray_raises_and_starts_no_ray(call):
    assert not ray.is_initialized()
    with pytest.raises(RaySystemError, match="Ray has not been started"):
        call()
    assert not ray.is_initialized()
