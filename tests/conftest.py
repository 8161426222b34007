"""Shared fixtures: one real local Ray for the whole session (2 CPUs, as on CI; one per session
lane under xdist), Spark on it, a check that every test's ``ray`` mark says whether it starts
Ray, an order of the test files in which the session's Spark starts once and is stopped only
by the last files, and the lanes the suite runs in side by side (tests/lanes.py)."""

from __future__ import annotations

import compileall
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from tests import jvm_archive, lanes
from tests.ray.own_ray import until_ray_starts

# A test may be paused while the other lane runs a test that needs both cores
# (tests/lanes.py), and times are measured in bench/, not asserted here: no deadlines.
settings.register_profile("raytide", deadline=None)
settings.load_profile("raytide")

#: JVM options for every JVM the tests start (Spark's driver, RayDP's app master and
#: executors, through the session's Ray and every child process): JIT-compile with the
#: client compiler only. The tests' JVMs live seconds to minutes, where the server
#: compiler's work never pays back: measured, a Ray start, a Spark start and a small conversion took
#: 51 CPU-seconds with it and 30-34 without, on 2 cores. And do not verify the bytecode of the
#: classes the JVM loads from jars (Spark's, RayDP's; the JDK's own never are): Spark loads
#: thousands at each start, and raytide ships no Java. Measured, a local Spark's start and a
#: small query: 8.8-11.7 CPU-seconds of its JVM with verification (median 10.4), 7.6-9.9
#: without (8.1; 0.74-0.93 pair by pair, six alternated pairs at load 17-40). The JVM reads
#: the variable itself and says so on stderr ("Picked up JAVA_TOOL_OPTIONS"), which is none
#: of the noise the demo's test checks the demo is free of.
TEST_JVM_OPTIONS = {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"}
#: Ray's log monitor (one per Ray the tests start: each session lane's, every child's own)
#: globs the session's log directory for new worker log files every 0.1 s until it watches
#: 1,000 files, and its cost grows with the files: a session lane's reached 500 and took
#: 3.4-4.2% of a core, 47 CPU-seconds in 23 minutes. No Ray of the tests forwards workers'
#: logs to its driver (``log_to_driver=False``), so a new file may wait 2 s to be seen:
#: measured on a copy of that lane's directory, the loop took 0.67-0.80 CPU-seconds in 15 s
#: before, 0.29-0.30 looking every 1 s (three alternated pairs), 0.22-0.25 every 2 s (two
#: runs; load 23-40). In a run of test_hosts.py and test_recovery.py, 0.51-0.55x per second.
TEST_RAY_OPTIONS = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "LOG_NAME_UPDATE_INTERVAL_S": "2"}
for _name, _value in {**TEST_JVM_OPTIONS, **TEST_RAY_OPTIONS}.items():
    os.environ.setdefault(_name, _value)

#: Fixtures that give a test a real Ray: the session's (``ray_session``, ``spark``, and
#: ``session_ray_env`` for a child process that joins it) or one that a child process
#: starts for itself (``own_ray_env``).
RAY_FIXTURES = frozenset({"ray_session", "spark", "session_ray_env", "own_ray_env"})


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray started once per test session and shut down at its end (or once its
    lane is done: :func:`release_session_ray`); started again
    when Ray itself did not start in time (tests/ray/own_ray.py): under xdist, two session
    lanes and a program with a Ray of its own start theirs at the same moment."""
    import ray

    if not ray.is_initialized():
        until_ray_starts(lambda: ray.init(num_cpus=2, include_dashboard=False,
                                          log_to_driver=bool(os.environ.get("RAYTIDE_TEST_LOGS"))))
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
    returns the running session. A test that stops Spark leaves the next one to start it again,
    which is why the files that stop it (``stops_spark``) run after every other user of it
    (see :func:`pytest_collection_modifyitems`).
    """
    from raytide.integrations.spark import start_spark

    if _SPARK_START_FAILURES:
        pytest.fail(f"Spark did not start earlier in this session, not tried again: {_SPARK_START_FAILURES[0]!r}")
    try:
        return start_spark("raytide-tests")
    except Exception as error:
        _SPARK_START_FAILURES.append(error)
        raise


#: Why the session's Spark did not start, once it did not: each later test asking for it fails at
#: once, rather than waiting through a start that cannot succeed (minutes each).
_SPARK_START_FAILURES: list[Exception] = []


@pytest.fixture
def own_ray_env() -> dict[str, str]:
    """The environment for a child process that starts a Ray of its own.

    ``RAY_ADDRESS`` is left out, so that the child never joins the test session's Ray,
    whose CPUs are taken in part by the session's Spark.
    """
    return {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}


@pytest.fixture(scope="session")
def session_ray_env(ray_session) -> dict[str, str]:
    """The environment for a child process that joins the test session's Ray (``RAY_ADDRESS``
    set to it), as a program does under ``ray job submit`` or in a notebook on a cluster:
    it saves the child a Ray start and stop of its own (15-20 s on 2 busy cores). Once per
    session, so that a module's fixture may start such children once for several tests.

    For programs that start no Spark of their own: the files using this run before the
    session's Spark starts (:func:`spark_last`), so the session's CPUs are free for them.
    """
    return {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}


def pytest_configure(config: pytest.Config) -> None:
    """Compile raytide's modules to bytecode once, in the controller, before any test.

    This machine (and CI) sets ``PYTHONDONTWRITEBYTECODE``, and a checkout has no
    ``__pycache__``: every Ray worker the suite starts (hundreds) would compile raytide
    from source again at its import, about 55 ms of CPU in a vertex host (``docs/hosts.md``).
    An installed raytide has its bytecode; Python still reads bytecode that is there, so the
    tests' hosts start as a user's do. ``compileall`` writes each file atomically, so a
    process importing meanwhile reads either the source or a whole file. Then start making
    the Spark drivers' class-data archive (:func:`_start_jvm_archive`).
    """
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(Path(__file__).resolve().parent.parent / "raytide", quiet=1)
        _start_jvm_archive(config)


def _start_jvm_archive(config: pytest.Config) -> None:
    """In a run that holds tests of tests/ray, make the class-data archive of the Spark driver
    JVMs (tests/jvm_archive.py) in a directory of the run's, and have every process started
    after this use it; the controller only, before any worker starts. A run whose environment
    sets ``SPARK_SUBMIT_OPTS`` already keeps its own (an archive made beforehand, say)."""
    if jvm_archive.SUBMIT_OPTIONS in os.environ:
        return
    ray_tests = Path(__file__).resolve().parent / "ray"
    paths = [Path(arg.split("::", 1)[0]).resolve() for arg in config.args]
    if not any(path == ray_tests or ray_tests in path.parents or path in ray_tests.parents for path in paths):
        return
    directory = Path(tempfile.mkdtemp(prefix="raytide-tests-jvm-"))
    process = jvm_archive.start(directory)

    def clean() -> None:
        jvm_archive.stop(process)
        shutil.rmtree(directory, ignore_errors=True)

    config.add_cleanup(clean)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse to run when a test's marks disagree with the fixtures it uses; then order the
    files so that the session's Spark starts once.

    A test has the ``ray`` mark exactly when it uses a fixture of :data:`RAY_FIXTURES`, so that
    ``-m "not ray"`` runs every test that starts no Ray and none that does; a test using the
    ``spark`` fixture also has the ``spark`` mark. A test with the ``stops_spark`` mark uses
    the session's Ray.
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
        if item.get_closest_marker("stops_spark") is not None and "ray_session" not in fixtures:
            wrong.append(f"{item.nodeid}: has the stops_spark mark but does not use ray_session")
    wrong += lanes.misplaced(items)
    if wrong:
        raise pytest.UsageError("marks that disagree with the fixtures used:\n  " + "\n  ".join(wrong))
    items[:] = spark_last(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The suite's lanes side by side (tests/lanes.py)."""
    return lanes.scheduler(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if lanes.lower_priority(item):
        release_session_ray()


def release_session_ray() -> None:
    """Stop this worker's session Spark and Ray, if it has them: called when a session lane's
    worker, its own lane done, takes the other lane's tests (tests/lanes.py), none of which
    uses them. Kept to the run's end, they went on taking CPU the simulations wait for: the
    Spark driver's JVM, Ray's daemons (2.7-4.5 CPU-seconds a minute for an idle local Ray)
    and the pool's idle hosts (about 0.5 each) until their idle timeout. The session
    fixtures' own teardown then finds nothing left to stop."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    if "raydp" in sys.modules:  # a Spark was started here (or may have been)
        from raytide.integrations.spark import stop_spark

        stop_spark()
    ray.shutdown()


def pytest_testnodedown(node, error) -> None:
    """A worker went down (in the controller): the other lane must not stay paused (tests/lanes.py)."""
    lanes.resume_other_lane(node.workerinput["testrunuid"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A test that must not share the CPUs with another lane runs in its turn (tests/lanes.py),
    its module's fixtures set up and torn down in that turn too."""
    with lanes.cpu_turn(item):
        return (yield)


def spark_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the files that use the session's Spark moved to the end, those that stop
    it (a ``stops_spark`` test) after the others; otherwise in the order collected, except that
    the files holding a ``needs_both_cores`` test come last before the Spark users.

    Whole files move (their module fixtures are set up once); a file uses the session's Spark
    if one of its tests uses ``_spark_on_ray`` (the ``spark`` fixture, or a fixture of the file
    built on it). So Spark starts once, at the first of these files, holds a Ray CPU only
    while they run, and no test after a stop starts it again (a restart costs 30 s or more).

    A ``needs_both_cores`` test waits for the CPU turn (tests/lanes.py) that the other lane's
    programs with a Ray of their own, which that lane runs first, take one after the other:
    placed early, the session lane stood idle through them (2.5 minutes measured). Placed
    late, those programs run beside the session's first files. (This order was tried once
    before and undone when a Ctrl-C test and a driver-restart test failed beside it; both
    failures had causes of their own, since fixed: the Ctrl-C test's job could finish before
    the interrupt, and a restore read one epoch for all of an input's replicas.)
    """
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    stops = {module(item) for item in items if item.get_closest_marker("stops_spark") is not None}
    users = {module(item) for item in items if "_spark_on_ray" in getattr(item, "fixturenames", ())} - stops
    alone = {module(item) for item in items if item.get_closest_marker("needs_both_cores") is not None}
    rank = {name: 0.5 for name in alone} | {name: 1 for name in users} | {name: 2 for name in stops}
    return sorted(items, key=lambda item: rank.get(module(item), 0))  # stable: collected order within a rank
