"""tests.stream_driver.chained, which runs two stream drivers in one process one after the other.

Not in the unit tier: it starts a child Python and waits for it, and the unit tier forbids
waits that sleep (``subprocess.run`` polls the child's exit while it lingers under load)."""

from __future__ import annotations

import subprocess
import sys

from tests.stream_driver import chained


def test_chained_programs_run_in_turn_in_one_process_each_with_its_arguments():
    """Each program sees its own ``sys.argv`` and fresh globals, a marker follows each that
    returned, and a program that ends the process ends it there (as a SIGKILLed driver does)."""
    show = "import os, sys\nassert 'x' not in globals()\nx = 1\nprint(sys.argv[1:], os.getpid(), flush=True)"
    ends = "import sys\nsys.exit(int(sys.argv[1]))"
    run = subprocess.run([sys.executable, "-c", chained((show, ["a", "b c"]), (show, ["d"]), (ends, ["3"]), (show, ["e"]))],
                         capture_output=True, text=True, timeout=120)  # a child at nice 19 waits for the cores
    lines = run.stdout.splitlines()
    assert run.returncode == 3, run.stderr
    assert [lines[0].rsplit(" ", 1)[0], lines[1], lines[2].rsplit(" ", 1)[0], lines[3]] == \
        ["['a', 'b c']", "chained: done 0", "['d']", "chained: done 1"], lines
    assert len(lines) == 4 and lines[0].rsplit(" ", 1)[1] == lines[2].rsplit(" ", 1)[1], "one process, stopped by the third"
