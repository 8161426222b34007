"""The seeds of the simulations' seeded trials: fixed ones, the same in every run (what was
found once stays found, and the thresholds the tests assert were measured on them), and a
few that rotate between runs, so that the suite keeps exploring interleavings it has not
tried.

A trial is a pure function of its seed, and every trial's assertion names its seed; a
rotating seed that failed (``seed 1234567``) is run again with ``RAYTIDE_SIM_SEEDS=1234567``
(comma-separated: these seeds in place of the rotation; ``RAYTIDE_SIM_SEEDS=`` with nothing:
no rotation). The rotation of a run is drawn once per run: all pytest-xdist workers share it
(from the run's id), so a test's rotating seeds do not depend on the worker it lands on.
"""

from __future__ import annotations

import os
import random

#: Rotating seeds start here: apart from every fixed seed a test uses.
ROTATING_FROM = 1_000_000


def _rotation() -> random.Random:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # one per run, the same in every worker
    return random.Random(run if run else os.urandom(8))


_RUN = _rotation().randrange(1 << 30)
#: The rotating seeds drawn in this process, per ``salt``: a failed simulation's report lists them.
DRAWN: dict[str, list[int]] = {}


def rotating(count: int, salt: str) -> list[int]:
    """This run's ``count`` rotating seeds for the trials named ``salt`` (or the seeds
    ``RAYTIDE_SIM_SEEDS`` gives)."""
    given = os.environ.get("RAYTIDE_SIM_SEEDS")
    if given is not None:
        drawn = [int(seed) for seed in given.split(",") if seed.strip()]
    else:
        rng = random.Random(f"{_RUN}-{salt}")
        drawn = [ROTATING_FROM + rng.randrange(1 << 30) for _ in range(count)]
    DRAWN[salt] = drawn
    return drawn


def seeds(fixed: int, salt: str, rotate: int | None = None) -> list[int]:
    """Seeds ``0 .. fixed - 1``, then this run's rotating ones for ``salt`` (by default one
    per 50 fixed seeds, at least one)."""
    return [*range(fixed), *rotating(max(1, fixed // 50) if rotate is None else rotate, salt)]
