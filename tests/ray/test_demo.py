"""The demo end to end, as a newcomer runs it: ``examples/demo.py`` in a fresh process that
starts a Ray and a Spark of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


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
def test_demo_runs_in_a_fresh_process_quietly_with_a_moving_bar_and_its_summary(tmp_path, own_ray_env):
    epochs = 4
    out, err = run_demo(tmp_path, own_ray_env, "--lines", "20000", "--epochs", str(epochs))
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


def run_demo(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[str, str]:
    """Run examples/demo.py in a fresh process; its stdout and stderr, after checking it exited with 0."""
    # Output goes to files, not pipes: Ray's and Spark's helper processes inherit the
    # descriptors, and reading a pipe to its end would also wait for them.
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        demo = subprocess.Popen([sys.executable, "examples/demo.py", *args], cwd=ROOT,
                                env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            demo.wait(timeout=240)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    out, err = stdout.read_text(), stderr.read_text()
    assert demo.returncode == 0, f"exit code {demo.returncode}\n{out[-3000:]}\n{err[-5000:]}"
    return out, err
