"""Fixtures of the simulation tests."""

from __future__ import annotations

import collections
import gc
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from raytide.engine.riding import Rides
from tests.sim import seeds

#: A filesystem in memory, where the machine has one (Linux's tmpfs).
MEMORY_FS = Path("/dev/shm")
#: Allocations (less deallocations) between two collections of the garbage collector's youngest generation.
YOUNG_COLLECTION = 20_000


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the tests are collected, everything imported so far (pytest, Ray, pyarrow, the
    test modules) is moved out of the garbage collector's generations (``gc.freeze``): the
    simulations allocate millions of short-lived objects, and each full collection they set
    off would otherwise walk that whole heap again. Nothing is freed later or sooner that a
    test can see: what was frozen is in use to the end of the run anyway.

    The youngest generation is collected every :data:`YOUNG_COLLECTION` allocations rather than
    every 700 (CPython's default): a step of a trial allocates hundreds of objects that die within
    it, so with the default a collection ran every few steps, walking objects still in use.
    Nothing a trial draws depends on when they run (the hashes of every trial's chosen actions
    over the recovery, runtime and zombie simulations are the same either way)."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])


@pytest.fixture
def store_root(tmp_path: Path) -> Iterator[Path]:
    """A directory for the snapshot stores of a test's trials: a real filesystem, in memory
    where the machine has one, deleted after the test.

    The simulations write tens of thousands of small snapshot parts per run of the suite;
    on this machine's disk (ext4, mounted with ``discard``) creating them took 15-25% of a
    trial's time, and pytest deleted them again at the start of a later session. A failed
    trial is reproduced from its seed, not from its store.
    """
    if not (MEMORY_FS.is_dir() and os.access(MEMORY_FS, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=MEMORY_FS, prefix="raytide-sim-") as root:
        yield Path(root)


@pytest.fixture
def rides_carried(monkeypatch: pytest.MonkeyPatch) -> collections.Counter:
    """Per chain, the progress batches its replicas sent with their data (:meth:`Rides.place`
    kept them for a peer) during the test, counted as the rules decide."""
    carried: collections.Counter = collections.Counter()
    place = Rides.place

    def counted(rides: Rides, call, in_event, pending):
        calls = place(rides, call, in_event, pending)
        carried[rides.chain] += not calls
        return calls

    monkeypatch.setattr(Rides, "place", counted)
    return carried


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed simulation's report lists the rotating seeds drawn so far in its process
    (:mod:`tests.sim.seeds`): the assertion names the seed that failed."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and seeds.DRAWN:
        drawn = "; ".join(f"{salt}: {','.join(map(str, found))}" for salt, found in seeds.DRAWN.items())
        report.sections.append(("rotating simulation seeds (RAYTIDE_SIM_SEEDS=... runs one again)", drawn))
