"""What every warm host does (:mod:`raytide.actors.hosts` has the kinds): leases, the calls
of a lease not taken yet, a reset that drops the role, its name in Ray's log prefixes, and
what a test asks of a host's process (``raytide_objects``, ``census``).

Every call of a role carries the lease it belongs to, and a host answers only calls of its
current lease (see :mod:`raytide.actors.hosts`). :class:`Leased` binds a handle to a lease,
so the roles call each other as before (``peer.receive.remote(...)``) without knowing of
leases; with a prefix, it calls a role seated beside another in one host.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import ray

#: Ray's log monitor takes a line starting with this as the new name of the process's actor
#: (``ray._private.ray_constants.LOG_PREFIX_ACTOR_NAME``).
ACTOR_NAME_PREFIX = ":actor_name:"

#: The methods of :class:`~raytide.actors.vertex_actor.VertexActor` that other actors and the driver call.
VERTEX_METHODS = ("connect", "socket_address", "receive_many", "receive_marker", "inject_marker", "on_progress", "push", "push_refs",
                  "push_stream", "start_reader", "pump", "advance", "advance_quietly", "restore", "hand_over", "adopt", "resume",
                  "forget_delivered", "stats", "debug_state", "relay", "relay_with_refs", "relay_gathered", "fan_out",
                  "install_plan", "stepping", "widen", "retire", "restore_alone", "replay_to")
#: The vertex role's methods that run on the host's ``relay`` threads, not in turn with the
#: replica's calls (:mod:`raytide.actors.progress_relay`).
RELAY_METHODS = ("relay", "relay_with_refs", "relay_gathered")
#: The vertex role's method that delivers a relay's pushes (:mod:`raytide.physical.relay_tree`),
#: on a thread of its own: one, so that a relay delivers its bundles in the order it took them.
FAN_OUT_METHODS = ("fan_out",)
#: The vertex role's methods that answer ``job.stats()`` and a peer's ask for its socket, on a
#: thread of its own: a replica busy with an event (a slow user function) answers at once, not after it.
INSPECT_METHODS = ("stats", "socket_address")
#: The methods of :class:`~raytide.actors.progress_actor.ProgressActor` called from outside (but the long poll).
PROGRESS_METHODS = ("connect", "socket_address", "restore", "receive", "receive_with_refs", "receive_relayed", "fail", "frontier",
                    "describe", "stats", "hold", "replace", "join", "leave", "subscribe")
#: The methods of :class:`~raytide.actors.coordinator_actor.CoordinatorActor` that the replicas and the driver call.
COORDINATOR_METHODS = ("acknowledge", "write_failed", "sync", "snapshot_now", "hold_now", "start", "restart", "pause",
                       "reconfigure", "widen", "stats", "lose")

#: The vertex role's methods that run beside the replica's calls, and their concurrency groups (the rest run in turn,
#: in the default group).
VERTEX_GROUPS = {**dict.fromkeys(RELAY_METHODS, "relay"), **dict.fromkeys(FAN_OUT_METHODS, "fan_out"),
                 **dict.fromkeys(INSPECT_METHODS, "inspect")}

#: How a vertex host names the methods of the progress role seated in it (:attr:`~raytide.actors.hosts.VertexHost.seat`):
#: a job without recovery plays its progress actor in one of its vertex hosts, a process fewer.
SEAT_PREFIX = "progress_"
#: How a vertex host names the methods of the input replica seated in it (:attr:`~raytide.actors.hosts.VertexHost.inputs`):
#: a job without recovery plays an input replica in the host of the replica it feeds, a process fewer.
INPUT_PREFIX = "input_"
#: The progress seat's methods on a vertex host, and the concurrency group each runs in: its own thread
#: (``progress``) for the role's calls, in turn, beside the replica's, as in a progress host.
SEAT_GROUPS = {**dict.fromkeys(("take", "ping", "answer", *PROGRESS_METHODS), "progress"), "next_events": "poll",
               "watch": "watch"}
#: The input seat's methods on a vertex host, and the concurrency group each runs in: the replica's own groups
#: but the default, whose calls run on the seat's thread (``input``), in turn, beside the host's replica.
INPUT_GROUPS = {**{name: VERTEX_GROUPS.get(name, "input") for name in ("take", "ping", *VERTEX_METHODS)},
                "answer": "inspect", "watch": "watch"}
#: How a vertex host's handle names the methods of the replica the host plays itself (a :class:`Leased` handle
#: with this prefix): they go through the same per-group methods as a seat's, so the host has no actor method
#: per role method either.
REPLICA_PREFIX = "replica_"
#: Ray's default concurrency group, as a seat's group: its method (``seated_default``) has no group of its own,
#: so its calls run in turn with the host's other default calls (``take``, ``reset``), as the replica's always did.
DEFAULT_GROUP = "default"
#: The replica's methods on its vertex host, and the concurrency group each runs in: the groups they ran in as
#: methods of their own (:data:`VERTEX_GROUPS`, else the default group, in turn).
REPLICA_GROUPS = {**{name: VERTEX_GROUPS.get(name, DEFAULT_GROUP) for name in ("take", "ping", *VERTEX_METHODS)},
                  "answer": "inspect", "watch": "watch"}
#: Per seat (its prefix), the concurrency group of each of its methods. A host's Ray actor class has one method
#: that every call goes through (:class:`~raytide.actors.host_actor.RaytideHost`), a seated role's with its
#: seat's prefix and its name (the vertex host's :data:`SEATED`), and the caller puts the call in its group
#: (Ray's ``.options(concurrency_group=...)``): Ray disassembles (``dis``), pickles and describes every method
#: of an actor class at its export and at each host's start and handle's unpickling, on a first job's clock (a
#: vertex host had 91 methods with one per seated method, 52 with one per replica method, 25 with one per
#: group; the driver's ``dis`` of the class took 28 ms of CPU at 52, 2026-11-30).
SEATED_GROUPS = {SEAT_PREFIX: SEAT_GROUPS, INPUT_PREFIX: INPUT_GROUPS, REPLICA_PREFIX: REPLICA_GROUPS}
#: The vertex host's method that calls a seated role (:meth:`~raytide.actors.hosts.VertexHost.seated`).
SEATED = "seated"
#: The concurrency group of a host's own methods that do not run in Ray's default group (a call with no seat):
#: a lease's watch waits on threads of its own, the progress host's long poll on one of its own.
HOST_GROUPS = {"watch": "watch", "next_events": "poll"}


def seated_group(prefix: str, name: str) -> str:
    """The concurrency group the seat ``prefix``'s method ``name`` runs in.

    Raises:
        AttributeError: the seat has no such method (as a handle has no such method).
    """
    group = SEATED_GROUPS.get(prefix, {}).get(name)
    if group is None:
        raise AttributeError(f"the seat {prefix!r} of a vertex host has no method {name!r}")
    return group


class Leased(NamedTuple):
    """A host's handle bound to one lease: ``leased.method.remote(*args)`` calls
    ``method(lease, *args)`` on the host (pickles like the handle it holds); with a
    ``prefix``, the method of a role seated beside another in one host (:data:`SEAT_PREFIX`,
    :data:`INPUT_PREFIX`) or of the vertex host's own replica (:data:`REPLICA_PREFIX`), through the
    host's :data:`SEATED` method. Either way in the concurrency group the method runs in
    (:data:`SEATED_GROUPS`, :data:`HOST_GROUPS`). A lease of ``None`` is for the calls any lease
    may make (``ping``, ``node``, ``census``, ...: :func:`unleased`)."""

    handle: Any
    lease: int | None
    prefix: str = ""

    def __getattr__(self, name: str) -> HostMethod:
        if name.startswith("_"):  # not a host's method (copy, pickle and NamedTuple look such names up)
            raise AttributeError(name)
        if self.prefix:
            group = seated_group(self.prefix, name)
            return HostMethod(self.handle, group, (SEATED, group, self.prefix, name, self.lease))
        return HostMethod(self.handle, HOST_GROUPS.get(name, DEFAULT_GROUP), (name, self.lease))


def unleased(handle: Any) -> Leased:
    """``handle`` (a host's raw actor handle) for the calls any lease may make: ``ping``, ``node``,
    ``raytide_objects``, ``census``."""
    return Leased(handle, None)


class HostMethod(NamedTuple):
    """A host's method, called with ``remote(*args)``: its host's one actor method, ``call``, with the
    method's name and leading arguments (``head``), in the method's concurrency ``group``."""

    handle: Any
    group: str
    head: tuple

    def remote(self, *args: Any) -> Any:
        call = self.handle.call if self.group == DEFAULT_GROUP else self.handle.call.options(concurrency_group=self.group)
        return call.remote(*self.head, *args)


class Beside(NamedTuple):
    """The replica a seated role's host plays beside it (:attr:`~raytide.actors.hosts.VertexHost.inputs`):
    a send to it is a call in this process (``call(lease, method, args)``, the host's own
    :meth:`Host._call`, which holds that replica's lock), not a Ray call: no window to wait in,
    and no wait of this process's thread for a call queued behind it on this process."""

    actor: Any  # the host's actor id
    call: Callable[[int, str, tuple], Any]

    def plays(self, peer: Any) -> bool:
        """Whether ``peer`` (a :class:`Leased` handle) is the replica this host plays itself, not a seat of it."""
        return isinstance(peer, Leased) and peer.prefix == REPLICA_PREFIX and peer.handle._actor_id == self.actor


def announce(name: str) -> None:
    """Name this process ``name`` in Ray's log prefixes from now on (stdout and stderr)."""
    for stream in (sys.stdout, sys.stderr):
        print(f"{ACTOR_NAME_PREFIX}{name}", file=stream, flush=True)


class Host:
    """A process that plays one role at a time; the base of :class:`VertexHost`,
    :class:`ProgressHost` and :class:`CoordinatorHost`.

    A coordinator host runs calls on several threads, so the lease, the role and the calls
    kept for a later lease change only under :attr:`leases`' lock: a call of a later lease
    is either kept before its ``take`` swaps them, or runs after it.
    """

    def __init__(self, label: str, named: bool = True) -> None:
        """``named``: this host names its process in Ray's log prefixes (not a role seated in another host)."""
        self.label, self.named = label, named
        self.role: Any = None
        self.lease = -1
        self.ended = -1  # the last lease given back
        self.leases = threading.Condition()  # notified when a lease is taken or given back (for watch)
        self.early: dict[int, list[tuple[str, tuple]]] = {}  # calls of leases not taken yet
        self._announce(f"raytide idle host ({label})")

    def _announce(self, name: str) -> None:
        if self.named:
            announce(name)

    def __repr__(self) -> str:
        return f"raytide {self.label}"

    def ping(self, lease: int | None = None) -> int:
        """Liveness check for the driver and the pool: this host's process id (any lease may ask)."""
        return os.getpid()

    def answer(self, lease: int | None = None) -> int:
        """The supervisor's ping of a stalled job (:mod:`raytide.driver.stall_ping`): this host's process
        id; a host that does not answer in time is declared failed."""
        return os.getpid()

    def node(self, lease: int | None = None) -> str:
        """The id of the Ray node this host runs on (where the driver places progress relays)."""
        return ray.get_runtime_context().get_node_id()

    def watch(self, lease: int) -> None:
        """Returns once ``lease`` is over (given back, or a later one taken): while it lasts,
        the driver's pending call costs nothing, and fails the moment this process dies
        (the driver's liveness check, :class:`~raytide.driver.outputs.Liveness`)."""
        with self.leases:
            self.leases.wait_for(lambda: self.ended >= lease or self.lease > lease)

    def _take(self, lease: int, role: Any, name: str) -> int:
        """Play ``role`` for ``lease``; a role this lease had (a rescale gives a kept host a
        new one) is closed first."""
        if lease == self.lease and self.role is not None and hasattr(self.role, "close"):
            self.role.close()
        with self.leases:
            self.role, self.lease = role, lease
            self.leases.notify_all()
            early = self.early.pop(lease, [])
            self.early = {later: calls for later, calls in self.early.items() if later > lease}
        self._announce(f"raytide {name}")
        for method, args in early:
            getattr(role, method)(*args)
        return os.getpid()

    def _call(self, lease: int, method: str, args: tuple) -> Any:
        """``role.method(*args)`` for the current lease; kept for a later one; dropped for an earlier one."""
        with self.leases:
            if lease != self.lease:
                if lease > self.lease:
                    self.early.setdefault(lease, []).append((method, args))
                return None
            role = self.role
        return getattr(role, method)(*args)

    def reset(self, lease: int) -> bool:
        """Drop the role of ``lease`` and everything it held (plan, channels, vertex objects,
        buffered records); True if the host is clean now. Module-level globals of user code
        stay, as they do on a Ray worker that runs one task after another."""
        if lease != self.lease:
            return False
        close = getattr(self.role, "close", None)
        if close is not None:
            close()
        with self.leases:
            self.role, self.lease, self.ended = None, -1, lease
            self.leases.notify_all()
        gc.collect()  # walks what is not frozen: what the process made since it started (see freeze_start_up)
        self._announce(f"raytide idle host ({self.label})")
        return True

    def raytide_objects(self, lease: int | None = None) -> dict[str, int]:
        """How many objects of raytide's runtime classes this process holds (tests check a
        reset host holds none), frozen ones included; the process stays thawed after it."""
        from raytide.actors.coordinator_actor import CoordinatorActor
        from raytide.core.vertex import Vertex
        from raytide.engine.progress_core import ProgressCore
        from raytide.engine.replica import ReplicaCore
        from raytide.physical.plan import PhysicalPlan
        from raytide.snapshots.writer import SnapshotWriter

        gc.collect()
        gc.unfreeze()  # the permanent generation too, uncollected: a job's garbage frozen there is counted
        kinds = (CoordinatorActor, PhysicalPlan, ProgressCore, ReplicaCore, SnapshotWriter, Vertex)
        counts = dict.fromkeys((kind.__name__ for kind in kinds), 0)
        for thing in gc.get_objects():
            for kind in kinds:
                if isinstance(thing, kind):
                    counts[kind.__name__] += 1
        return counts

    def census(self, lease: int | None = None) -> dict[str, Any]:
        """What this process holds that a long-running job could pile up: the actors it has
        Python handles to (``actors``, their ids in hex), the entries of its Ray core worker's
        reference table (``references``: the object refs counted here) and the objects the
        garbage collector tracks (``objects``). Tests check that a replica holds handles only
        to the actors it calls, however many rescales and recoveries it went through."""
        gc.collect()
        things = gc.get_objects()
        actors = {thing._actor_id.hex() for thing in things if isinstance(thing, ray.actor.ActorHandle)}
        references = ray._private.worker.global_worker.core_worker.get_all_reference_counts()  # type: ignore[attr-defined]
        return {"actors": sorted(actors), "references": len(references), "objects": len(things)}


def freeze_start_up() -> None:
    """Move what exists when a host has started (its imports, the host) to the garbage
    collector's permanent generation, where no collection walks it: it lives as long as the
    process. A job's objects are never frozen, so a reset's collection finds their cycles
    and walks only what the process made since it started, where freezing at every job's start
    and thawing and collecting everything at its end would walk the whole process at every job's
    end (80,000-120,000 objects, 60-100 ms of CPU per host).

    No collection comes first: it would walk the whole process (66,000 objects in a vertex
    host) for 18-25 ms of CPU on the clock of a job's first start, to find some 31 objects
    of garbage, which the freeze keeps instead, once per process.
    """
    gc.freeze()


def forwarding(name: str) -> Callable[..., Any]:
    """A host method that calls the role's method ``name`` if the lease is current."""

    def forward(self: Host, lease: int, *args: Any) -> Any:
        return self._call(lease, name, args)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = f"The role's ``{name}`` for the current lease (see :meth:`Host._call`)."
    return forward
