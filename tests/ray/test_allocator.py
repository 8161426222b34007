"""The allocator setting of vertex actors: freed buffers are reused without page faults.

Here rather than in the unit tier: it runs fresh Python processes and waits for them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CHURN = """
import resource, sys
import numpy as np
if sys.argv[1] == "tuned":
    from raytide.actors.allocator import keep_freed_buffers
    assert keep_freed_buffers()
rng = np.random.default_rng(0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):  # arrays of 0.8 to 16 MB, allocated and freed like a vectorised vertex's temporaries
    arrays = [np.ones(int(n)) for n in rng.integers(100_000, 2_000_000, 6)]
    del arrays
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_buffers_are_reused_instead_of_faulting_in_again():
    default, tuned = page_faults("default"), page_faults("tuned")
    assert tuned * 5 < default, (tuned, default)
