"""The driver's thread that sends pushes held for an advance that did not come
(:class:`raytide.driver.held_pushes.HeldPushes`): it sends them after ``HOLD_S``, keeps going
while some are still held, ends when idle, and keeps an error for the driver's next call."""

from __future__ import annotations

import threading

import pytest

import raytide as rt
from raytide.driver import held_pushes, inputs
from raytide.driver.held_pushes import HeldPushes
from raytide.physical.plan import compile_plan

WAIT = 10.0  # a deadline for the thread, never reached when it works


def test_held_pushes_are_sent_after_the_hold_and_again_while_some_are_still_held():
    calls: list[float] = []
    done = threading.Event()

    def send_old(age: float) -> bool:
        calls.append(age)
        if len(calls) == 2:
            done.set()
        return len(calls) < 2  # the first time, one is still too young

    held = HeldPushes(send_old)
    held.held()
    assert done.wait(WAIT), calls
    assert calls == [held_pushes.HOLD_S, held_pushes.HOLD_S]


def test_the_thread_ends_when_idle_and_the_next_push_starts_another(monkeypatch):
    monkeypatch.setattr(held_pushes, "SENDER_IDLE_S", 0.01)
    sent = threading.Event()
    held = HeldPushes(lambda age: sent.set() or False)
    held.held()
    first = held.thread
    assert first is not None and sent.wait(WAIT)
    first.join(WAIT)
    assert not first.is_alive() and held.thread is None
    sent.clear()
    held.held()
    assert held.thread is not None and held.thread is not first and sent.wait(WAIT)


def test_an_error_stops_the_thread_and_is_kept_for_the_drivers_next_call():
    def send_old(age: float) -> bool:
        raise ValueError("the restored snapshot refuses this feed")

    held = HeldPushes(send_old)
    held.held()
    thread = held.thread
    assert thread is not None
    thread.join(WAIT)
    assert not thread.is_alive() and held.thread is None and isinstance(held.error, ValueError)


def test_the_drivers_next_call_into_an_input_raises_what_stopped_the_thread():
    flow = rt.Dataflow("flow")
    flow.input("numbers").output("out")
    feeds = inputs.InputFeeds(compile_plan(flow), {"numbers": []}, max_inflight=1, batch_size=1, raise_if_failed=lambda: None)
    feeds.held_pushes.error = ValueError("the restored snapshot refuses this feed")
    with pytest.raises(ValueError, match="refuses"):
        feeds.push("numbers", [1])
