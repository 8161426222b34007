"""A driver fed by a Spark Structured Streaming query, SIGKILLed at random moments and restored:
how many trials came out exactly once.

Run with ``python -m bench stream_driver_kills --repeat 1 --trials 20``. Each trial runs the
driver program of :mod:`tests.stream_driver` on ``files`` files (one micro-batch each): a
first driver is SIGKILLed at a moment drawn uniformly from the ``window_s`` seconds after
its consumer had its first epoch (or it finishes first), then a second one restores with
``restore="latest"`` on the same checkpoint and runs to the end. A trial is exact when
every file was counted once in the Parquet sink and the consumer lost nothing and saw at
most one epoch twice (:func:`tests.stream_driver.check_exactly_once`). The drivers join
this process's Ray (2 CPUs) and each starts a Spark of its own; a trial takes about a minute.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import ensure_ray
from tests.stream_driver import DRIVER, check_exactly_once, land_files

PARAMS = {"trials": 20, "files": 6, "window_s": 3.0, "seed": 1}
REPEAT = 1


def trial(root: Path, files: int, delay: float, env: dict[str, str]) -> tuple[bool, bool, str]:
    """One trial: ``(killed, exact, what went wrong)``."""
    land_files(root, files)
    consumed = root / "consumed.txt"
    first = subprocess.Popen([sys.executable, "-c", DRIVER, str(root), str(files), "start"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while first.poll() is None and not (consumed.exists() and consumed.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(delay)
    killed = first.poll() is None
    if killed:
        os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    second = subprocess.run([sys.executable, "-c", DRIVER, str(root), str(files), "restore"], env=env,
                            capture_output=True, text=True, timeout=300)
    if second.returncode != 0:
        return killed, False, second.stderr[-2000:]
    try:
        check_exactly_once(root, files)
    except AssertionError as error:
        return killed, False, str(error)
    return killed, True, ""


def measure(trials: int, files: int, window_s: float, seed: int) -> dict[str, float]:
    import ray

    ensure_ray()
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    rng = random.Random(seed)
    exact = killed = 0
    started = time.perf_counter()
    for index in range(trials):
        with tempfile.TemporaryDirectory(prefix="raytide-kill-") as root:
            delay = rng.uniform(0, window_s)
            was_killed, was_exact, why = trial(Path(root), files, delay, env)
            killed += was_killed
            exact += was_exact
            print(f"trial {index}: killed {delay:.2f} s after the first epoch: {was_killed}; exact: {was_exact} {why}",
                  flush=True)
    return {"trials": float(trials), "killed": float(killed), "exact": float(exact),
            "seconds_per_trial": (time.perf_counter() - started) / trials}
