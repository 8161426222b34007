"""A driver feeding a job from a Spark Structured Streaming query, SIGKILLed at the two moments
that matter, each time followed by a new driver restored with ``restore="latest"`` on the
same checkpoint: every file's words are counted exactly once in the Parquet sink, and a
consumer that is not idempotent loses nothing and sees at most the epoch in its hands twice.

* killed between raytide's snapshot commit and Spark's ``commits/n`` (the callback of batch
  ``n`` is told the batch is held, and the process dies before it returns): Spark runs
  batch ``n`` again, and the restored job, which holds it, skips it;
* killed between Spark's ``offsets/n`` and the callback (batch ``n`` is planned, not yet
  handed to raytide): Spark runs it again, and the restored job takes it.

Real processes on the session's Ray, each driver with a Spark of its own (the files using
``session_ray_env`` run before the session's Spark starts, so its CPUs are free).
``bench/bench_stream_driver_kills.py`` kills the driver at random moments, many times.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.stream_driver import DRIVER, check_exactly_once, land_files

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]

FILES = 6


def test_a_driver_killed_at_each_moment_and_restored_counts_every_file_once(session_ray_env, tmp_path):
    land_files(tmp_path, FILES)
    for run, how in enumerate(["start,held:1", "restore,offsets:3", "restore"]):
        driver = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), str(FILES), how], env=session_ray_env,
                                capture_output=True, text=True, timeout=200)
        if run < 2:
            assert driver.returncode == -9, f"driver {run} was to SIGKILL itself ({how}):\n{driver.stderr[-3000:]}"
        else:
            assert driver.returncode == 0 and "finished" in driver.stdout, driver.stderr[-3000:]
    check_exactly_once(Path(tmp_path), FILES, kills=2)
