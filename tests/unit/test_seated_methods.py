"""Every call into a host goes through its Ray actor class's one method, ``call`` (issue 76): Ray
disassembles, exports, describes and unpickles every method of an actor class at the class's export,
each host's start and each handle's unpickling, on a first job's clock. The caller names the method
(a seated role's by its seat's prefix and its name) and puts the call in the concurrency group the
method always ran in, so its thread, and its order with the calls of its group, are unchanged. No Ray
here: a recording handle stands for a host's actor handle, and the host's methods run in this process."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import ray

from raytide.actors.host_base import (
    DEFAULT_GROUP,
    INPUT_PREFIX,
    REPLICA_PREFIX,
    SEAT_PREFIX,
    SEATED,
    SEATED_GROUPS,
    Leased,
    unleased,
)
from raytide.actors.hosts import CoordinatorHost, ProgressHost, RaytideHost, VertexHost, _methods
from raytide.driver.pool import _KINDS
from raytide.errors import ArgumentError


class _Recording:
    """Records ``name(*args)`` of any method called on it (a seat of a host)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> str:
            self.calls.append((name, args))
            return name
        return record


class _Handle:
    """Stands for a host's actor handle: records each call of its one method, ``call``, with the
    concurrency group Ray would run it in."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    @property
    def call(self) -> _Method:
        return _Method(self.calls, DEFAULT_GROUP)


class _Method(NamedTuple):
    calls: list
    group: str

    def options(self, concurrency_group: str) -> _Method:
        return _Method(self.calls, concurrency_group)

    def remote(self, *args: Any) -> None:
        self.calls.append((self.group, args))


def _host() -> Any:
    """A vertex host behind its actor class, with recording seats, made without their ``__init__``: no
    process to name, no modules to import."""
    host = VertexHost.__new__(VertexHost)
    host.label, host.seat, host.inputs = "vertex host 0", _Recording(), _Recording()
    shell = RaytideHost.__new__(RaytideHost)
    shell.host, shell.methods = host, _methods(VertexHost)
    return shell


def test_a_hosts_actor_class_has_as_few_methods_as_a_plain_actor_with_two():
    counted = [name for name, value in vars(ray.remote(RaytideHost).__ray_metadata__.modified_class).items()
               if callable(value) and not isinstance(value, type)]
    assert len(counted) <= 7, counted  # 25 for a vertex host with one method per seated concurrency group
    for kind in (VertexHost, ProgressHost, CoordinatorHost):
        assert not [name for name in vars(kind) if getattr(getattr(kind, name), "__ray_concurrency_group__", None)]
    groups = {group for seat in SEATED_GROUPS.values() for group in seat.values()} - {DEFAULT_GROUP}
    assert groups <= set(_KINDS["vertex"][1]), "the pool creates vertex hosts without a group a seat's call runs in"


@pytest.mark.parametrize(("prefix", "name", "group"), [
    (SEAT_PREFIX, "receive", "progress"), (SEAT_PREFIX, "take", "progress"), (SEAT_PREFIX, "next_events", "poll"),
    (SEAT_PREFIX, "watch", "watch"), (INPUT_PREFIX, "push", "input"), (INPUT_PREFIX, "take", "input"),
    (INPUT_PREFIX, "relay", "relay"), (INPUT_PREFIX, "fan_out", "fan_out"), (INPUT_PREFIX, "stats", "inspect"),
    (INPUT_PREFIX, "answer", "inspect"), (INPUT_PREFIX, "watch", "watch"),
])
def test_a_seated_call_goes_in_its_group_to_its_seat(prefix, name, group):
    handle = _Handle()
    getattr(Leased(handle, 7, prefix), name).remote("a", 1)
    assert handle.calls == [(group, (SEATED, group, prefix, name, 7, "a", 1))]
    shell = _host()
    shell.call(*handle.calls[0][1])
    seat, other = (shell.host.seat, shell.host.inputs) if prefix == SEAT_PREFIX else (shell.host.inputs, shell.host.seat)
    assert seat.calls == [(name, (7, "a", 1))] and other.calls == []


def test_a_seated_call_in_another_group_or_of_no_such_method_is_refused():
    shell = _host()
    with pytest.raises(ArgumentError, match="'input_'.*'push'.*'relay'"):
        shell.call(SEATED, "relay", INPUT_PREFIX, "push", 7)
    with pytest.raises(ArgumentError, match="'_call'"):
        shell.call(SEATED, "input", INPUT_PREFIX, "_call", 7)
    assert shell.host.inputs.calls == []
    with pytest.raises(AttributeError, match="no method 'nonesuch'"):
        Leased(_Handle(), 7, SEAT_PREFIX).nonesuch  # noqa: B018
    for name in ("_call", "_take", "nonesuch", "__init__"):
        with pytest.raises(AttributeError, match=f"raytide vertex host 0 has no method {name!r}"):
            shell.call(name, 7)


@pytest.mark.parametrize(("name", "group"), [
    ("receive_many", DEFAULT_GROUP), ("push", DEFAULT_GROUP), ("connect", DEFAULT_GROUP), ("relay", "relay"),
    ("fan_out", "fan_out"), ("stats", "inspect"), ("socket_address", "inspect"),
])
def test_a_replica_call_goes_in_its_group_to_the_hosts_role(name, group):
    """The replica a host plays is reached as a seat is, and runs as its own method ran: through the
    host's ``_call`` (the current lease's role, under the replica's lock but in the side groups)."""
    handle = _Handle()
    getattr(Leased(handle, 7, REPLICA_PREFIX), name).remote("a", 1)
    assert handle.calls == [(group, (SEATED, group, REPLICA_PREFIX, name, 7, "a", 1))]
    shell = _host()
    called = []
    shell.host._call = lambda lease, method, args: called.append((lease, method, args))
    shell.call(*handle.calls[0][1])
    assert called == [(7, name, ("a", 1))] and shell.host.seat.calls == [] and shell.host.inputs.calls == []


def test_a_call_of_the_hosts_own_methods_goes_in_their_groups():
    handle = _Handle()
    Leased(handle, 7, REPLICA_PREFIX).take.remote("plan")
    Leased(handle, 7, REPLICA_PREFIX).watch.remote()
    Leased(handle, 7).reset.remote()
    Leased(handle, 7).watch.remote()
    Leased(handle, 7).next_events.remote(0, 1.0)
    unleased(handle).ping.remote()
    assert handle.calls == [(DEFAULT_GROUP, (SEATED, DEFAULT_GROUP, REPLICA_PREFIX, "take", 7, "plan")),
                            ("watch", (SEATED, "watch", REPLICA_PREFIX, "watch", 7)),
                            (DEFAULT_GROUP, ("reset", 7)), ("watch", ("watch", 7)), ("poll", ("next_events", 7, 0, 1.0)),
                            (DEFAULT_GROUP, ("ping", None))]
    with pytest.raises(AttributeError, match="no method 'reset'"):
        Leased(handle, 7, REPLICA_PREFIX).reset  # noqa: B018  (the pool resets a host, not its replica)
