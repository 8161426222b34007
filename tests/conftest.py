"""Shared fixtures: one real local Ray for the whole session (2 CPUs, as on CI), Spark on it,
and a check that every test's ``ray`` mark says whether it starts Ray."""

from __future__ import annotations

import os

import pytest

#: Fixtures that give a test a real Ray: the session's (``ray_session``, ``spark``) or one
#: that a child process starts for itself (``own_ray_env``).
RAY_FIXTURES = frozenset({"ray_session", "spark", "own_ray_env"})


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray started once per test session and shut down at its end."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=bool(os.environ.get("RAYTIDE_TEST_LOGS")))
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def _spark_on_ray(ray_session):
    """Stops Spark on Ray at the end of the session, if a test started it."""
    from raytide.integrations.spark import stop_spark

    yield
    stop_spark()


@pytest.fixture
def spark(_spark_on_ray):
    """Spark on the session's Ray through RayDP (raytide's start_spark).

    Started by the first test that asks for it (10-20 s) and kept for the others: start_spark
    returns the running session. A test that stops Spark leaves the next one to start it again.
    """
    from raytide.integrations.spark import start_spark

    return start_spark("raytide-tests")


@pytest.fixture
def own_ray_env() -> dict[str, str]:
    """The environment for a child process that starts a Ray of its own.

    ``RAY_ADDRESS`` is left out, so that the child never joins the test session's Ray,
    whose CPUs are taken in part by the session's Spark.
    """
    return {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse to run when a test's marks disagree with the fixtures it uses.

    A test has the ``ray`` mark exactly when it uses a fixture of :data:`RAY_FIXTURES`, so that
    ``-m "not ray"`` runs every test that starts no Ray and none that does; a test using the
    ``spark`` fixture also has the ``spark`` mark.
    """
    wrong = []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        uses_ray = sorted(fixtures & RAY_FIXTURES)
        marked = item.get_closest_marker("ray") is not None
        if uses_ray and not marked:
            wrong.append(f"{item.nodeid}: uses {', '.join(uses_ray)} but has no ray mark")
        elif marked and not uses_ray:
            wrong.append(f"{item.nodeid}: has the ray mark but uses none of {', '.join(sorted(RAY_FIXTURES))}")
        if "spark" in fixtures and item.get_closest_marker("spark") is None:
            wrong.append(f"{item.nodeid}: uses spark but has no spark mark")
    if wrong:
        raise pytest.UsageError("marks that disagree with the fixtures used:\n  " + "\n  ".join(wrong))
