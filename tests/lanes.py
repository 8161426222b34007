"""The suite's lanes, run side by side under pytest-xdist (``-n 4``, pyproject's default).

* Two **session lanes**, each in a worker of its own with a local Ray of its own (the
  ``ray_session`` fixture is per process): the **Spark lane** takes the files of
  :data:`SPARK_LANE_FILES` (every file that uses the session's Spark, so that Spark starts
  once, and the heaviest programs that run children: stream drivers, notebooks), the **Ray
  lane** every other test that uses a session's Ray. Each runs its tests one after the
  other (in the order of ``conftest.spark_last``), as in a run without xdist. One session
  lane left about a quarter of two cores idle, waiting on actors starting, on child
  processes and on polls, and was the run's critical path (1,100-1,225 s of 1,164-1,390).
* The **other lane**: the programs that start a Ray of their own in child processes
  (:data:`OWN_RAY_FILES`: the demo, ``ray job submit``, Ctrl-C, the memory children, the
  lost node), first in their worker, and every test that starts no Ray (unit, simulation,
  contract, doctests), in the other workers (two with ``-n 4``). Those last are CPU-bound
  and run at the lowest CPU priority (:func:`lower_priority`), so they fill the idle time
  of the session lanes and of the programs without slowing them. They are handed out a
  file at a time (:func:`unit_of`): a worker whose own tests are done takes the files still
  waiting, so no core stands idle at the end of the run while one worker works through the
  last of them alone. A session lane's worker that takes them first stops its Spark and Ray
  (``conftest.release_session_ray``): idle to the run's end, they took CPU from the simulations.

Two kinds of test must not share the CPUs: a program with a Ray of its own, and a session
test marked ``needs_both_cores`` (what it asserts depends on two free cores, as an
autoscaler's decision does). Each runs in its turn (:func:`cpu_turn`, a lock shared by the
workers). A ``needs_both_cores`` test also waits for the other session lane's test to end
and holds that lane back while it runs (a shared lock every session test holds, behind a
gate so that the holds of one lane cannot starve it), and stops every worker of the other
lane that has lowered its priority (SIGSTOP, then SIGCONT).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import psutil
import pytest

SESSION_LANE, SPARK_LANE, OTHER_LANE = "session", "session spark", "other"
SESSION_LANES = (SESSION_LANE, SPARK_LANE)

#: The files whose tests start a Ray of their own (``own_ray_env``) and no test uses the
#: session's; :func:`misplaced` checks both halves.
OWN_RAY_FILES = frozenset({
    "tests/ray/test_demo.py",
    "tests/ray/test_driver_exit.py",
    "tests/ray/test_interrupt.py",
    "tests/ray/test_job_submit.py",
    "tests/ray/test_memory.py",
    "tests/ray/test_node_loss.py",
})
#: The files of the Spark lane: every file that uses the session's Spark (:func:`misplaced`
#: checks it) and, to even out the two session lanes' time (summed test seconds of a full
#: run of tests/ray at load 20-49: 813 and 801), the heaviest files that run programs in children.
SPARK_LANE_FILES = frozenset({
    "tests/ray/test_baselines.py",
    "tests/ray/test_examples_iterative.py",
    "tests/ray/test_examples_spark.py",
    "tests/ray/test_guide_spark.py",
    "tests/ray/test_notebooks.py",
    "tests/ray/test_source_positions.py",
    "tests/ray/test_spark.py",
    "tests/ray/test_spark_dataflow.py",
    "tests/ray/test_spark_executor_kills.py",
    "tests/ray/test_spark_lifecycle.py",
    "tests/ray/test_spark_restart.py",
    "tests/ray/test_spark_stream.py",
    "tests/ray/test_spark_types.py",
    "tests/ray/test_stream_driver_restart.py",
    "tests/ray/test_ui.py",
})
#: The fixtures of the test session's Ray and Spark (conftest.py).
SESSION_FIXTURES = frozenset({"ray_session", "spark", "session_ray_env"})

#: Where a worker of the other lane writes its process id and start time once it lowers its
#: priority (one file per worker: ``other-lane-<pid>.pid``).
_PID_GLOB = "other-lane-*.pid"


def lane_of(nodeid: str) -> str:
    """The lane of the test with this node id."""
    module = nodeid.split("::", 1)[0]
    if not nodeid.startswith("tests/ray/") or module in OWN_RAY_FILES:
        return OTHER_LANE
    return SPARK_LANE if module in SPARK_LANE_FILES else SESSION_LANE


def unit_of(nodeid: str) -> str:
    """The unit of work the test with this node id is handed out in: each session lane whole,
    the programs with a Ray of their own whole (they run first in their worker, before it
    lowers its priority), and every other test with the rest of its file."""
    lane = lane_of(nodeid)
    if lane in SESSION_LANES:
        return lane
    module = nodeid.split("::", 1)[0]
    return OTHER_LANE if module in OWN_RAY_FILES else f"{OTHER_LANE} {module}"


def misplaced(items: list[pytest.Item]) -> list[str]:
    """What is wrong with the lanes of ``items``: a test in the other lane that uses the
    session's Ray (it would start a second one there), a session-lane test that starts a
    Ray of its own (it would share the CPUs with the session's tests), or a test of the Ray
    lane that uses the session's Spark (Spark would start in both session lanes)."""
    wrong = []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        lane = lane_of(item.nodeid)
        if lane == OTHER_LANE and fixtures & SESSION_FIXTURES:
            wrong.append(f"{item.nodeid}: uses the session's Ray, so its file must leave lanes.OWN_RAY_FILES")
        if lane in SESSION_LANES and "own_ray_env" in fixtures:
            wrong.append(f"{item.nodeid}: starts a Ray of its own, so its file belongs in lanes.OWN_RAY_FILES")
        if lane == SESSION_LANE and "_spark_on_ray" in fixtures:
            wrong.append(f"{item.nodeid}: uses the session's Spark, so its file belongs in lanes.SPARK_LANE_FILES")
    return wrong


def scheduler(config: pytest.Config, log):
    """xdist's scheduler for the lanes: the units of :func:`unit_of`, each given whole to one
    worker, which runs it in the collected order. Each session lane goes to a worker of its
    own, the programs with a Ray of their own to the next; the files of tests that start no Ray
    follow, in the collected order, each to the first worker with at most two tests left.
    (xdist's own ``loadgroup`` cannot be used: it marks a group in a node id, which pytest
    9's node ids no longer take.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not any(self.assigned_work.values()):  # the first: put the units in order (xdist sorts them by size)
                collected = list(dict.fromkeys(map(unit_of, self.collection or [])))
                rank = {unit: (unit not in (*SESSION_LANES, OTHER_LANE), i) for i, unit in enumerate(collected)}
                for unit in sorted(self.workqueue, key=rank.__getitem__):
                    self.workqueue.move_to_end(unit)
            super()._assign_work_unit(node)

    return LaneScheduling(config, log)


def shared_dir(config: pytest.Config) -> Path | None:
    """A directory both workers of this run share, or None outside xdist."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    return _made(_run_dir(workerinput["testrunuid"]))


@functools.cache
def _made(path: Path) -> Path:
    """``path``, made once per process (asked for twice by every test)."""
    path.mkdir(exist_ok=True)
    return path


def _run_dir(testrunuid: str) -> Path:
    return Path(tempfile.gettempdir()) / f"raytide-lanes-{testrunuid}"


def resume_other_lane(testrunuid: str) -> None:
    """SIGCONT to the other lane's workers that still run: called by the controller when a
    worker goes down, since a worker that died pausing the other lane cannot resume it."""
    for worker in _other_workers(_run_dir(testrunuid)):
        worker.send_signal(signal.SIGCONT)


def lower_priority(item: pytest.Item) -> bool:
    """Before a test that starts no Ray, in a worker of the other lane: drop to the lowest CPU
    priority (once; an unprivileged process cannot raise it again, which is why the programs
    with a Ray of their own run first) and say where this worker can be paused. Whether it
    dropped now: the worker's first such test (in a session lane's worker, its lane is done)."""
    shared = shared_dir(item.config)
    if shared is None or lane_of(item.nodeid) != OTHER_LANE or item.get_closest_marker("ray") is not None:
        return False
    me = psutil.Process()
    mine = shared / _PID_GLOB.replace("*", str(me.pid))
    if mine.exists():
        return False
    os.nice(19)
    mine.write_text(f"{me.pid} {me.create_time()}")
    return True


@contextlib.contextmanager
def cpu_turn(item: pytest.Item) -> Iterator[None]:
    """Run ``item`` in its turn (see the module docstring): a program with a Ray of its own
    or a ``needs_both_cores`` test one at a time, a session test while no ``needs_both_cores``
    test of the other session lane runs."""
    shared = shared_dir(item.config)
    if shared is None:
        yield
        return
    alone = item.get_closest_marker("needs_both_cores") is not None
    with contextlib.ExitStack() as stack:
        if alone or "own_ray_env" in getattr(item, "fixturenames", ()):
            _locked(stack, shared / "cpu.lock", fcntl.LOCK_EX)  # the other worker holds it for one test at most
        if lane_of(item.nodeid) in SESSION_LANES:
            _session_turn(stack, shared, alone)
        if alone:
            stack.enter_context(_other_lane_paused(shared))
        yield


@contextlib.contextmanager
def quiet_start(config: pytest.Config) -> Iterator[None]:
    """For a program with a Ray and a Spark of its own, inside its test's turn: the session
    lanes' whole turn (their running tests end, no new one starts) and the other lane's workers
    stopped. ``ray start --head`` gives its raylet a fixed 30 s to register with its GCS,
    which a head started beside two busy session lanes (load 30-50) missed three times in a
    row; and the demo's and ``ray job submit``'s Spark (three JVMs each) beside the Spark
    lane's stream drivers (a Spark each) ran past 240-420 s where they take 90-190 s alone."""
    shared = shared_dir(config)
    if shared is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        _session_turn(stack, shared, alone=True)
        stack.enter_context(_other_lane_paused(shared))
        yield


def _session_turn(stack: contextlib.ExitStack, shared: Path, alone: bool) -> None:
    """The session lanes' turn, held until ``stack`` closes: shared by their tests, whole for
    a ``needs_both_cores`` one. Taken behind a gate held only while the turn is taken, so that
    a test waiting for the whole turn bars the other lane's next test from taking its share."""
    how = fcntl.LOCK_EX if alone else fcntl.LOCK_SH
    gate = _locked(stack, shared / "session-gate.lock", how)
    _locked(stack, shared / "session-turn.lock", how)  # the other lane holds it for one test at most
    if not alone:
        fcntl.flock(gate, fcntl.LOCK_UN)


def _locked(stack: contextlib.ExitStack, path: Path, how: int) -> IO[str]:
    """``path`` opened and locked (``flock``) until ``stack`` closes it."""
    file = stack.enter_context(open(path, "a"))
    fcntl.flock(file, how)
    return file


@contextlib.contextmanager
def _other_lane_paused(shared: Path) -> Iterator[None]:
    """The other lane's workers stopped (those that have lowered their priority and still run)."""
    workers = [worker for worker in _other_workers(shared) if worker.pid != os.getpid()]
    for worker in workers:
        worker.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGCONT)


def _other_workers(shared: Path) -> list[psutil.Process]:
    """The other lane's workers that still run, each checked by its start time (a process id
    may have been reused)."""
    workers = []
    for path in shared.glob(_PID_GLOB):
        try:
            pid, started = path.read_text().split()
            process = psutil.Process(int(pid))
        except (FileNotFoundError, ValueError, psutil.Error):
            continue
        if process.create_time() == float(started):
            workers.append(process)
    return workers
