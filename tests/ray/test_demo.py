"""The demo end to end, as a newcomer runs it: ``examples/demo.py`` in a fresh process that
starts a Ray and a Spark of its own.

Two differences: its JVMs get the tests' JIT and bytecode-verification options
(``conftest.TEST_JVM_OPTIONS``), which change no output and save about 22 of the run's 70
CPU-seconds (the JIT's alone) and a fifth of each JVM's start; the line each JVM prints
about it ("Picked up JAVA_TOOL_OPTIONS: ...") is not noise of the demo's (``NOISE``). And
its Spark driver maps the run's class-data archive once it is made (``tests/jvm_archive.py``,
through ``SPARK_SUBMIT_OPTS``), quietly. The README's own command runs without either, as
checked by hand in a fresh clone."""

from __future__ import annotations

import re

import pytest

from tests import lanes
from tests.ray.jobs import run_example

pytestmark = [pytest.mark.ray, pytest.mark.spark]


#: Lines of Ray's, Spark's or log4j's logging that say WARN or ERROR (Spark's "26/11/22 12:50:07 WARN
#: Utils: ...", log4j's "ERROR StatusConsoleListener ...", Ray's "2026-11-22 ... WARNING dataset.py:8601"
#: and its C++ "[2026-11-22 ... W 3680 3778] file.cc:96:"), and Spark's default-log-level banner.
NOISE = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR) "
    r"|ERROR StatusConsoleListener"
    r"|\S+ \S+\s+(WARNING|ERROR) \S+\.py:\d+ -- "
    r"|\[\S+ \S+ [WEF] \d+ \d+\] \S+\.cc:\d+:"
    r"|Setting default log level)"
)


@pytest.mark.slow
def test_demo_runs_in_a_fresh_process_quietly_with_a_moving_bar_and_its_summary(tmp_path, own_ray_env, request):
    epochs = 4
    with lanes.quiet_start(request.config):  # its Ray and three JVMs beside the Spark lane's took over 240 s
        out, err = run_example(tmp_path, own_ray_env, "demo.py", "--lines", "20000", "--epochs", str(epochs))
    assert "records in:  20,000 lines" in out and "lines/s" in out and "words/s" in out, out
    assert re.search(r"^start-up: +\d+\.\d s", out, re.MULTILINE), out
    assert re.search(r"^processing: +\d+\.\d s", out, re.MULTILINE), out
    assert all(f"  epoch {epoch}: " in out for epoch in range(epochs)), out
    assert "back in Spark" in out and "|    word|" in out, out
    assert [line for line in (out + err).splitlines() if NOISE.match(line)] == [], out + err
    # tqdm redraws the bar on stderr after \r, at most every 0.1 s: a bar that never moved before
    # the end (results arriving in one burst) draws only 0/N and N/N.
    drawn = {int(done) for done in re.findall(rf"\b(\d+)/{epochs} \[", err)}
    assert drawn & set(range(1, epochs)), err
