"""A vertex host reaches the roles seated in it (a job's progress actor, an input replica) through one
actor method per concurrency group, not one per seated method (issue 76): Ray exports, describes and
unpickles every method of an actor class at each host's start, on a first job's clock. Each seated
call still runs in the group it ran in before, so its thread, and its order with the calls of its
group, are unchanged. No Ray here: a recording handle stands for a host's actor handle, and the host's
methods run in this process."""

from __future__ import annotations

from typing import Any

import pytest

from raytide.actors.host_base import INPUT_PREFIX, SEAT_PREFIX, SEATED, SEATED_GROUPS, Leased
from raytide.actors.hosts import VertexHost
from raytide.driver.pool import _KINDS
from raytide.errors import ArgumentError


class _Recording:
    """Records ``name(*args)`` of any method called on it (a seat of a host, or a handle's ``.remote``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> str:
            self.calls.append((name, args))
            return name
        record.remote = record  # type: ignore[attr-defined]  # a handle's method is called with .remote
        return record


def _host() -> Any:
    """A vertex host with recording seats, made without its ``__init__``: no process to name, no modules to import."""
    host = VertexHost.__new__(VertexHost)
    host.label, host.seat, host.inputs = "vertex host 0", _Recording(), _Recording()
    return host


def test_a_vertex_host_has_one_method_per_seated_concurrency_group():
    methods = [name for name, value in vars(VertexHost).items() if callable(value)]
    groups = {group for seat in SEATED_GROUPS.values() for group in seat.values()}
    assert {name for name in methods if name.startswith(SEATED)} == {SEATED + group for group in groups}
    assert [name for name in methods if name.startswith((SEAT_PREFIX, INPUT_PREFIX))] == []
    assert len(methods) < 45, methods  # 83 with a method per seated method (91 as Ray counts, with the inherited)
    vertex_groups = _KINDS["vertex"][2]
    for group in groups:
        assert getattr(VertexHost, SEATED + group).__ray_concurrency_group__ == group
        assert group in vertex_groups, f"the pool creates vertex hosts without the group {group!r}"


@pytest.mark.parametrize(("prefix", "name", "group"), [
    (SEAT_PREFIX, "receive", "progress"), (SEAT_PREFIX, "take", "progress"), (SEAT_PREFIX, "next_events", "poll"),
    (SEAT_PREFIX, "watch", "watch"), (INPUT_PREFIX, "push", "input"), (INPUT_PREFIX, "take", "input"),
    (INPUT_PREFIX, "relay", "relay"), (INPUT_PREFIX, "fan_out", "fan_out"), (INPUT_PREFIX, "stats", "inspect"),
    (INPUT_PREFIX, "answer", "inspect"), (INPUT_PREFIX, "watch", "watch"),
])
def test_a_seated_call_goes_through_its_groups_method_to_its_seat(prefix, name, group):
    handle = _Recording()
    getattr(Leased(handle, 7, prefix), name).remote("a", 1)
    assert handle.calls == [(SEATED + group, (prefix, name, 7, "a", 1))]
    host = _host()
    getattr(VertexHost, SEATED + group)(host, *handle.calls[0][1])
    seat, other = (host.seat, host.inputs) if prefix == SEAT_PREFIX else (host.inputs, host.seat)
    assert seat.calls == [(name, (7, "a", 1))] and other.calls == []


def test_a_seated_call_in_another_group_or_of_no_such_method_is_refused():
    host = _host()
    with pytest.raises(ArgumentError, match="'input_'.*'push'.*'relay'"):
        VertexHost.seated_relay(host, INPUT_PREFIX, "push", 7)
    with pytest.raises(ArgumentError, match="'_call'"):
        VertexHost.seated_input(host, INPUT_PREFIX, "_call", 7)
    assert host.inputs.calls == []
    with pytest.raises(AttributeError, match="no method 'nonesuch'"):
        Leased(_Recording(), 7, SEAT_PREFIX).nonesuch  # noqa: B018
