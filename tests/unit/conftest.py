"""The unit tier is pure: no Ray, no wall-clock sleeps. Anything that tries fails loudly."""

from __future__ import annotations

import time

import pytest


@pytest.fixture(autouse=True)
def _forbid_ray_and_sleep(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("unit tests must not start Ray or sleep; put this test under tests/ray/")

    monkeypatch.setattr(time, "sleep", refuse)
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a runtime dependency
        return
    monkeypatch.setattr(ray, "init", refuse)
