"""A driver feeding a job from a Spark Structured Streaming query, SIGKILLed at the two moments
that matter, each time followed by a new driver restored with ``restore="latest"`` on the
same checkpoint: every file's words are counted exactly once in the Parquet sink, and a
consumer that is not idempotent loses nothing and sees at most the epoch in its hands twice.

* killed between raytide's snapshot commit and Spark's ``commits/n`` (the callback of batch
  ``n`` is told the batch is held, and the process dies before it returns): Spark runs
  batch ``n`` again, and the restored job, which holds it, skips it;
* killed between Spark's ``offsets/n`` and the callback (batch ``n`` is planned, not yet
  handed to raytide): Spark runs it again, and the restored job takes it.

And a Spark executor SIGKILLed while the driver lives (issue 34, recovered in place since issue
74): the replicas read the micro-batch again from the restarted executor, and the same driver goes
on to the end (``docs/streaming.md``, "Every failure, one outcome").

All three happen to one stream, one driver after the other on the same checkpoint; and a
stream with event time through a driver killed the same way, then restored.

Real processes on the session's Ray, each driver process with a Spark of its own (the files
using ``session_ray_env`` run before the session's Spark starts, so its CPUs are free). The
module's four driver processes serve both streams: the event-time stream's restored driver,
once finished, runs the word stream's first driver in its process (``chained``), which
saves a fifth process's start (about 35 s of 100 on 2 busy cores). ``bench/bench_stream_driver_kills.py``
kills the driver at random moments, many times.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import raytide as rt
from tests.stream_driver import DRIVER, EVENT_DRIVER, MAX_DELAY, WINDOW, chained, check_exactly_once, land_clicks, land_files
from tests.unit.test_clocked_stream import reference

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

FILES = 6
#: How long one driver process may take: a few tens of seconds alone; the last of the word
#: stream's (its executor killed) took more than 200 s beside the rest of a full run at load 30-50.
DRIVER_TIMEOUT = 300


def click_windows(landed: list[list[tuple[float, int]]]) -> tuple[dict, set, Counter]:
    """For the clicks ``landed`` (one micro-batch per file): each click's epoch and the late ones,
    by the plain-Python reference at parallelism 2, and the count per ``(page, window start)``
    of the clicks not late, but for the last two files' (far ahead: they close every window)."""
    stream = [[[{"t": t, "page": page, "n": (b, i)} for i, (t, page) in enumerate(clicks)]] for b, clicks in enumerate(landed)]
    epochs, late = reference(stream, 2, rt.EventTime("t", max_delay=MAX_DELAY))
    pages = {click["n"]: click["page"] for batch in stream for click in batch[0]}
    windows = Counter((pages[n], epoch // WINDOW * WINDOW) for n, epoch in epochs.items()
                      if n not in late and n[0] < len(landed) - 2)
    return epochs, late, windows


@pytest.fixture(scope="module")
def drivers(session_ray_env, tmp_path_factory) -> dict:
    """The module's first two driver processes, on two streams: the clicks' first driver
    (SIGKILLed with batch 2 held), then the clicks' restored driver and, in its process once it
    finished, the words' first driver (SIGKILLed with batch 1 held). Returns the roots of the
    two streams, the clicks' reference, the environment and both processes' results; the word
    stream's test runs its later drivers itself (each test's timeout covers two or three)."""
    words, clicks = tmp_path_factory.mktemp("words"), tmp_path_factory.mktemp("clicks")
    land_files(words, FILES)
    epochs, late, windows = click_windows(land_clicks(clicks, 6))
    click_args = [str(clicks), str(len(windows))]
    programs = [[sys.executable, "-c", EVENT_DRIVER, *click_args, "start,held:2"],
                [sys.executable, "-c", chained((EVENT_DRIVER, [*click_args, "restore"]),
                                               (DRIVER, [str(words), str(FILES), "start,held:1"]))]]
    runs = [subprocess.run(program, env=session_ray_env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT)
            for program in programs]
    return {"words": words, "clicks": clicks, "epochs": epochs, "late": late, "windows": windows, "runs": runs,
            "env": session_ray_env}


def test_a_stream_with_event_time_into_tumbling_windows_across_a_killed_driver_counts_every_window_once(drivers):
    """Clicks with event times (out of order within ``max_delay`` and beyond it) from files
    landing one per micro-batch, into 4-second tumbling counts per page at parallelism 2
    (``from_spark_stream(..., event_time="t")``, a clock per input replica). The first driver
    is SIGKILLed with batch 2 held by a snapshot but not committed by Spark (the replicas'
    clocks hold records for epochs the watermark has not reached); a new driver with
    ``restore="latest"`` resumes from the batch count in that snapshot. Every window is
    counted once, equal to a plain-Python reference (the records not late, each replica
    judging its files in batch order), and the late records counted in ``job.stats()`` are
    exactly those beyond the bound. (The second driver's process goes on with another stream
    once this one finished: :func:`drivers`.)"""
    epochs, late, windows = drivers["epochs"], drivers["late"], drivers["windows"]
    assert late, "the clicks have some beyond the bound"
    first, second = drivers["runs"][:2]
    assert first.returncode == -9, f"the first driver was to SIGKILL itself:\n{first.stderr[-3000:]}"
    assert "chained: done 0" in second.stdout and "finished" in second.stdout.split("chained: done 0")[0], second.stderr[-3000:]
    consumed: dict[int, list] = {}
    for line in (drivers["clicks"] / "consumed.txt").read_text().splitlines():
        epoch, records = line.split(" ", 1)
        assert consumed.setdefault(int(epoch), ast.literal_eval(records)) == ast.literal_eval(records), f"epoch {epoch}"
    got = [(page, start) for records in consumed.values() for page, start, _, _ in records]
    assert len(got) == len(set(got)), f"a window handed out in two epochs: {sorted(got)}"
    assert Counter({(page, start): count for records in consumed.values() for page, start, _, count in records}) == windows
    counted = json.loads(re.search(r"^late (.*)$", second.stdout.split("chained: done 0")[0], re.M)[1])
    assert counted["records"] == len(late)
    assert {int(e): n for e, n in counted["by_epoch"].items()} == Counter(epochs[n] for n in late)


def test_drivers_killed_at_each_moment_restored_and_a_spark_executor_killed_mid_stream_count_every_file_once(drivers):
    """One stream through three drivers on one checkpoint: the first SIGKILLed with batch 1
    held but not committed, the second (restored) with batch 3 planned but not handed over,
    the third (restored) going on to the end across its Spark executor's SIGKILL at batch 4;
    every file counted once at the end.

    The executor caching micro-batch 4 is SIGKILLed once Spark has computed and cached the
    batch, before the input replicas read it. Ray restarts the executor actor under its old
    name and it joins Spark under a new executor id, its cache empty: the replicas' reads wait
    until it is up and read again (it computes the batch again), and the next batches, cached
    under the new id, are read from the actor RayDP's map of restarted executors names. The
    third driver is not killed with an epoch in hand, so it adds none seen twice to the two
    killed drivers' one each. (One stream through all three costs a driver less than a
    separate stream for the executor's kill. The first runs in the process of the click
    stream's last driver, after it finished: :func:`drivers`.)"""
    words = drivers["words"]
    driver = drivers["runs"][1]  # the first, in the process of the clicks' last driver
    for run, how in enumerate(["start,held:1", "restore,offsets:3"]):
        if run:
            driver = subprocess.run([sys.executable, "-c", DRIVER, str(words), str(FILES), how], env=drivers["env"],
                                    capture_output=True, text=True, timeout=DRIVER_TIMEOUT)
        assert driver.returncode == -9 and "chained: done 1" not in driver.stdout, \
            f"driver {run} was to SIGKILL itself ({how}):\n{driver.stderr[-3000:]}"
    last = subprocess.run([sys.executable, "-c", DRIVER, str(words), str(FILES), "restore,executor:4"],
                          env=drivers["env"], capture_output=True, text=True, timeout=DRIVER_TIMEOUT)
    assert "killed Spark executor 'raydp-executor-" in last.stdout and "at micro-batch 4:" in last.stdout, \
        f"the executor was not killed:\n{last.stdout[-2000:]}\n{last.stderr[-3000:]}"
    assert last.returncode == 0 and "finished" in last.stdout, \
        f"the driver was to go on across its executor's death:\n{last.stderr[-3000:]}"
    check_exactly_once(Path(words), FILES, kills=2)
