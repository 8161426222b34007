"""The allocator settings of vertex actors: freed buffers are reused without page faults,
and pretouched memory serves a first large allocation without any.

Here rather than in the unit tier: it runs fresh Python processes and waits for them.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

import raytide as rt
from raytide.actors.hosts import PRETOUCH_LIMIT_MB
from tests.ray.jobs import run_collect

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="tunes glibc's mallopt thresholds; other C libraries have none to tune")

CHURN = """
import resource, sys
import numpy as np
if sys.argv[1] == "tuned":
    from raytide.actors.hosts import keep_freed_buffers
    assert keep_freed_buffers()
rng = np.random.default_rng(0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):  # arrays of 0.8 to 16 MB, allocated and freed like a vectorised vertex's temporaries
    arrays = [np.ones(int(n)) for n in rng.integers(100_000, 2_000_000, 6)]
    del arrays
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

FIRST_EPOCH = """
import resource, sys
import numpy as np
from raytide.actors.hosts import keep_freed_buffers, pretouch
assert keep_freed_buffers()
pretouch(int(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
arrays = [np.ones(125_000) for _ in range(40)]  # 40 MB of a first epoch's 1 MB arrays, alive together
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(script: str, arg: str) -> int:
    out = subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip())


@glibc_only
def test_freed_buffers_are_reused_instead_of_faulting_in_again():
    default, tuned = page_faults(CHURN, "default"), page_faults(CHURN, "tuned")
    assert tuned * 5 < default, (tuned, default)


@glibc_only
def test_pretouched_memory_serves_the_first_large_arrays_without_page_faults():
    cold, warm = page_faults(FIRST_EPOCH, "0"), page_faults(FIRST_EPOCH, "48")
    assert cold > 9_000, "40 MB of fresh arrays fault in about 10,000 pages"
    assert warm * 10 < cold, (warm, cold)


@pytest.mark.parametrize("size", [-1, PRETOUCH_LIMIT_MB + 1, 1.5, "8"])
def test_a_pretouch_size_out_of_range_is_rejected_before_any_actor_starts(size):
    flow = rt.Dataflow("pretouch")
    flow.input("x").output("out")
    with pytest.raises(ValueError, match=f"pretouch_mb must be an integer from 0 to {PRETOUCH_LIMIT_MB}"):
        rt.run(flow, pretouch_mb=size)


@pytest.mark.ray
def test_a_pretouched_job_computes_what_an_untouched_one_does(ray_session):
    flow = rt.Dataflow("pretouched")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    result = run_collect(flow, {"lines": [["a b a"], ["c"]]}, pretouch_mb=16)
    assert {e: sorted(r) for e, r in result.items()} == {0: [("a", 2), ("b", 1)], 1: [("c", 1)]}
