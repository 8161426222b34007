"""Shared fixtures: one real local Ray for the whole session (2 CPUs, as on CI)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray started once per test session and shut down at its end."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=bool(os.environ.get("RAYTIDE_TEST_LOGS")))
    yield ray
    ray.shutdown()
