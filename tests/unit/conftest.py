"""The unit tier is pure: no Ray, no wall-clock sleeps. Anything that tries fails loudly."""

from __future__ import annotations

import threading
import time

import pytest


@pytest.fixture(autouse=True)
def _forbid_ray_and_sleep(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("unit tests must not start Ray or sleep; put this test under tests/ray/")

    real_sleep, test_thread = time.sleep, threading.current_thread()

    def sleep(seconds):  # background threads of an earlier tier (py4j, Ray) may still sleep
        if threading.current_thread() is test_thread:
            refuse()
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a runtime dependency
        return
    monkeypatch.setattr(ray, "init", refuse)
