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


@pytest.fixture(scope="session")
def spark(ray_session):
    """Spark on the session's Ray through RayDP (raytide's start_spark), started once: it costs 10-20 s."""
    from raytide.integrations.spark import start_spark, stop_spark

    session = start_spark("raytide-tests")
    yield session
    stop_spark()
