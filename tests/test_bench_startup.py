"""``bench startup`` compares two start-ups in one child process: the modules Ray's serialization
context imports in the driver at its first call must be imported before either clock, or the side
that comes first in a child pays them (25-30 ms, a tenth of the NumPy actors' start-up)."""

from __future__ import annotations

import subprocess
import sys

#: In a fresh interpreter: what building Ray's serialization context imports after ``bench.bench_startup``.
PROBE = """
import sys
import bench.bench_startup
from ray.util import serialization_addons

class Context:  # stands for Ray's serialization context: takes every serializer registered
    def __getattr__(self, name):
        return lambda *args, **kwargs: None

before = set(sys.modules)
serialization_addons.apply(Context())
print(sorted(set(sys.modules) - before))
"""


def test_the_bench_child_imports_what_rays_serialization_context_imports_before_the_clocks():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
