"""Pure modules import without Ray: the algorithms stay testable and the actors stay thin."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = [
    "raytide",
    "raytide.dataflow",
    "raytide.operators",
    "raytide.progress",
    "raytide.progress.tracker",
    "raytide.progress.publisher",
    "raytide.progress.inorder",
    "raytide.progress.outputs",
    "raytide.actors.replica",
    "raytide.actors.plan",
    "raytide.actors.channels",
    "raytide.actors.markers",
    "raytide.snapshots",
    "raytide.snapshots.barriers",
    "raytide.autoscale",
    "raytide.sources",
    "raytide.integrations.records",
]


@pytest.mark.parametrize("module", PURE)
def test_pure_module_does_not_import_ray(module):
    code = f"import sys, {module}; sys.exit(1 if 'ray' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, f"{module} pulls in ray"


def test_public_api():
    import raytide

    assert sorted(raytide.__all__) == [
        "Dataflow", "GraphError", "Job", "JobTimeout", "Loop", "Probe", "ProgressError", "RaytideError",
        "Stream", "Timestamp", "UserCodeError", "Vertex", "run",
    ]
    assert callable(raytide.run)
