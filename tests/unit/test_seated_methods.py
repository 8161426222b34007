"""A vertex host reaches the roles seated in it (a job's progress actor, an input replica) and the replica
it plays itself through one actor method per concurrency group, not one per role method (issue 76): Ray
disassembles, exports, describes and unpickles every method of an actor class at each host's start, on a
first job's clock. Each call still runs in the group it ran in before, so its thread, and its order with
the calls of its group, are unchanged. No Ray here: a recording handle stands for a host's actor handle,
and the host's methods run in this process."""

from __future__ import annotations

from typing import Any

import pytest

from raytide.actors.host_base import (
    DEFAULT_GROUP,
    INPUT_PREFIX,
    REPLICA_PREFIX,
    SEAT_PREFIX,
    SEATED,
    SEATED_GROUPS,
    VERTEX_METHODS,
    Leased,
)
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
    assert not set(methods) & set(VERTEX_METHODS), "a replica's method is an actor method of its own again"
    assert len(methods) < 16, methods  # 83 with a method per seated method, 44 with one per replica method
    vertex_groups = _KINDS["vertex"][2]
    for group in groups - {DEFAULT_GROUP}:
        assert getattr(VertexHost, SEATED + group).__ray_concurrency_group__ == group
        assert group in vertex_groups, f"the pool creates vertex hosts without the group {group!r}"
    assert not hasattr(getattr(VertexHost, SEATED + DEFAULT_GROUP), "__ray_concurrency_group__")  # Ray's default group


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


@pytest.mark.parametrize(("name", "group"), [
    ("receive_many", DEFAULT_GROUP), ("push", DEFAULT_GROUP), ("connect", DEFAULT_GROUP), ("relay", "relay"),
    ("fan_out", "fan_out"), ("stats", "inspect"), ("socket_address", "inspect"),
])
def test_a_replica_call_goes_through_its_groups_method_to_the_hosts_role(name, group):
    """The replica a host plays is reached as a seat is, and runs as its own method ran: through the
    host's ``_call`` (the current lease's role, under the replica's lock but in the side groups)."""
    handle = _Recording()
    getattr(Leased(handle, 7, REPLICA_PREFIX), name).remote("a", 1)
    assert handle.calls == [(SEATED + group, (REPLICA_PREFIX, name, 7, "a", 1))]
    host = _host()
    called = []
    host._call = lambda lease, method, args: called.append((lease, method, args))
    getattr(VertexHost, SEATED + group)(host, *handle.calls[0][1])
    assert called == [(7, name, ("a", 1))] and host.seat.calls == [] and host.inputs.calls == []


def test_a_replica_call_of_the_hosts_own_methods_goes_to_them():
    handle = _Recording()
    Leased(handle, 7, REPLICA_PREFIX).take.remote("plan")
    Leased(handle, 7, REPLICA_PREFIX).watch.remote()
    assert handle.calls == [(SEATED + DEFAULT_GROUP, (REPLICA_PREFIX, "take", 7, "plan")),
                            (SEATED + "watch", (REPLICA_PREFIX, "watch", 7))]
    with pytest.raises(AttributeError, match="no method 'reset'"):
        Leased(handle, 7, REPLICA_PREFIX).reset  # noqa: B018  (the pool resets a host by its raw handle)
