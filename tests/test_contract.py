"""The code's contract, checked where CI runs the tests: ruff (style, imports, one typing
style, bugbear) over the whole repository and mypy over the package, as configured in
pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean():
    result = run("ruff", "check", "raytide", "tests", "bench", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
