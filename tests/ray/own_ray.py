"""Child programs that start a Ray of their own, run again when Ray itself did not start.

``ray.init`` in a fresh process starts a raylet and waits a hard-coded 30 s for it to
register (``ray/_private/node.py``), then gives up with "The current node timed out during
startup". On a small machine (two cores), with the test session's Ray and Spark busy beside it,
that wait can run out before the child's program has done anything: a failure of the
machine's load, not of raytide, and one that would fail the run. So the tests that run
such a child (the demo, Ctrl-C, ``ray.shutdown``, the memory children) run it again, at
most :data:`ATTEMPTS` times, when that is how it failed, and only then; every other
failure is the test's to report. (``ray start`` and ``Cluster.add_node`` have the same
wait: ``test_job_submit`` and ``test_node_loss`` start their heads and clusters again
for the same reason; so does each session lane's own Ray, ``conftest.ray_session``.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: What ``ray.init`` raises when its raylet did not register within Ray's 30 s.
RAY_DID_NOT_START = "The current node timed out during startup"
#: Runs of a child program whose Ray did not start, at most.
ATTEMPTS = 3


def until_ray_starts(run: Callable[[], T], output: Callable[[T], str] = lambda _: "") -> T:
    """``run()``'s result, ``run`` called again (at most :data:`ATTEMPTS` times in all) while
    it says the child's Ray did not start: in the ``output`` of its result, or in the error it
    raised. Any other result or error is the caller's, at once. Each retry is said on stderr
    (pytest shows it with a failure)."""
    for attempt in range(1, ATTEMPTS):
        try:
            result = run()
        except Exception as error:  # a runner that raises with the child's stderr
            if RAY_DID_NOT_START not in str(error):
                raise
        else:
            if RAY_DID_NOT_START not in output(result):
                return result
        print(f"own_ray: the child's Ray did not start (attempt {attempt} of {ATTEMPTS}): running it again",
              file=sys.stderr, flush=True)
    return run()
