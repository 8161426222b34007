"""Warm hosts: Ray actor processes that play one role at a time and are reused across jobs.

A host is leased by a job, told its role (a replica of a chain: :class:`VertexHost`, the
job's progress actor: :class:`ProgressHost`, or its snapshot coordinator:
:class:`CoordinatorHost`), and given back: reset, it waits in the driver's pool
(:mod:`raytide.driver.pool`) for the next job. Starting a job on warm hosts costs a few
calls instead of a process start per actor.

Every call of a role carries the lease it belongs to, and a host answers only calls of
its current lease: calls of a previous job still in flight when the host was re-leased
(a status push, a batch from a replica that was still draining) are dropped instead of
reaching the new job. Leases are numbered in the order the driver makes them, so a call
of a later lease than the host's arrived before the driver's ``take`` (Ray orders the
calls of one caller, not those of different callers): it waits, in arrival order, and
runs right after the ``take``. :class:`Leased` binds a handle to a lease, so the roles call each
other as before (``peer.receive.remote(...)``) without knowing of leases.

A host names itself after its role in Ray's log prefixes (the ``:actor_name:`` line that
Ray's log monitor reads): ``(raytide job/chain/replica pid=...)`` while leased,
``(raytide idle host pid=...)`` between jobs. Ray's actor table keeps the repr the host
started with (``raytide vertex host N``); ``job.stats()["hosts"]`` maps each replica to its
host's process id.

A vertex host also keeps large freed buffers in its process (the allocator section
below), because vectorised vertices allocate and free arrays of megabytes on every call.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import ray

from raytide.errors import ArgumentError

logger = logging.getLogger(__name__)

#: Ray's log monitor takes a line starting with this as the new name of the process's actor
#: (``ray._private.ray_constants.LOG_PREFIX_ACTOR_NAME``).
ACTOR_NAME_PREFIX = ":actor_name:"


class Leased(NamedTuple):
    """A host's handle bound to one lease: ``leased.method.remote(*args)`` calls
    ``method(lease, *args)`` on the host (pickles like the handle it holds); with a
    ``prefix``, the host's ``prefix + method`` (a role seated beside another in one host:
    :data:`SEAT_PREFIX`)."""

    handle: Any
    lease: int
    prefix: str = ""

    def __getattr__(self, name: str) -> _LeasedMethod:
        return _LeasedMethod(getattr(self.handle, self.prefix + name), self.lease)


class _LeasedMethod(NamedTuple):
    method: Any
    lease: int

    def remote(self, *args: Any) -> Any:
        return self.method.remote(self.lease, *args)


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

    @ray.method(concurrency_group="watch")
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
        gc.collect()  # walks what is not frozen: what the process made since it started (see _freeze_start_up)
        self._announce(f"raytide idle host ({self.label})")
        return True

    def raytide_objects(self) -> dict[str, int]:
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


def _freeze_start_up() -> None:
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


def _forwarding(name: str) -> Callable[..., Any]:
    """A host method that calls the role's method ``name`` if the lease is current."""

    def forward(self: Host, lease: int, *args: Any) -> Any:
        return self._call(lease, name, args)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = f"The role's ``{name}`` for the current lease (see :meth:`Host._call`)."
    return forward


#: The methods of :class:`~raytide.actors.vertex_actor.VertexActor` that other actors and the driver call.
VERTEX_METHODS = ("connect", "socket_address", "receive_many", "receive_marker", "inject_marker", "on_progress", "push", "push_refs",
                  "push_stream", "start_reader", "pump", "advance", "advance_quietly", "restore", "hand_over", "adopt", "resume",
                  "forget_delivered", "stats", "debug_state", "relay", "relay_with_refs", "relay_gathered", "fan_out",
                  "install_plan", "stepping", "restore_alone", "replay_to")
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
                    "describe", "stats", "hold", "replace", "subscribe")
#: The methods of :class:`~raytide.actors.coordinator_actor.CoordinatorActor` that the replicas and the driver call.
COORDINATOR_METHODS = ("acknowledge", "write_failed", "sync", "snapshot_now", "hold_now", "start", "restart", "pause",
                       "reconfigure", "stats", "lose")


class VertexHost(Host):
    """A host whose role is one replica of one chain (a :class:`~raytide.actors.vertex_actor.VertexActor`).

    Sequential, like the role it plays: Ray runs one caller's calls in submission order,
    which keeps every channel FIFO (see :mod:`raytide.actors.vertex_actor`). The node's
    progress relay, if this host is it, runs on threads of its own (the concurrency groups
    ``relay``: :data:`RELAY_METHODS`, and ``fan_out``: :data:`FAN_OUT_METHODS`), and so do
    the replica's statistics (``inspect``: :data:`INSPECT_METHODS`).
    """

    def __init__(self, number: int) -> None:
        super().__init__(f"vertex host {number}")
        import raytide.actors.vertex_actor  # noqa: F401  (warm: imported once per process, not per job)

        #: Held by each call of the replica (the default group) and by its socket's delivery thread
        #: (:mod:`raytide.actors.socket_hops`): one event at a time, as on a sequential actor.
        self.serial = threading.RLock()
        #: The seat of a job's progress actor, played beside the replica under the same lease
        #: (``progress_*`` methods, :data:`SEAT_PREFIX`), with a lock and threads of its own.
        self.seat = ProgressHost(number, seated=True)

        _freeze_start_up()

    @ray.method(concurrency_group="inspect")
    def answer(self, lease: int | None = None) -> int:  # type: ignore[override]  # ray.method's type, not the signature
        """:meth:`Host.answer` on the ``inspect`` thread: a replica busy with an event answers too, where
        its :meth:`ping` waits behind the event (which is how a timeout finds the busy replicas)."""
        return os.getpid()

    def take(self, lease: int, plan: Any, job: str, chain: str, replica: int, max_inflight: int, pretouch_mb: int,
             myself: Any, recovery: Any = None, incarnation: int = 0, sockets: bool = False) -> int:
        """Become replica ``replica`` of ``chain`` for ``lease`` in ``incarnation`` (``sockets``: reached by
        peers on this node over a socket, :mod:`raytide.actors.socket_hops`); returns this process's id."""
        from raytide.actors.vertex_actor import VertexActor

        if keep_freed_buffers() and pretouch_mb:
            pretouch(pretouch_mb)
        with self.serial:
            kept = getattr(self.role, "kept", None) if lease == self.lease else None  # a rescale (see VertexActor.hand_over)
            role = VertexActor(plan, job, chain, replica, max_inflight, Leased(myself, lease), recovery,
                               incarnation, kept, self.serial if sockets else None)
            return self._take(lease, role, f"{job}/{chain}/{replica}")

    def _call(self, lease: int, method: str, args: tuple) -> Any:
        """:meth:`Host._call`; a call of the default group holds :attr:`serial` (the others run beside it)."""
        if method in _VERTEX_GROUPS:
            return super()._call(lease, method, args)
        with self.serial:
            return super()._call(lease, method, args)

    def reset(self, lease: int) -> bool:
        """:meth:`Host.reset`, holding :attr:`serial`: no frame is delivered into a role being
        closed; the progress role seated here under ``lease``, if any, is dropped too."""
        with self.serial:
            clean = super().reset(lease)
        self.seat.reset(lease)
        return clean


class ProgressHost(Host):
    """A host whose role is a job's progress actor (a :class:`~raytide.actors.progress_actor.ProgressActor`).

    Created with a concurrency group ``poll`` for the driver's long poll, which waits
    without blocking the progress calls (see :mod:`raytide.actors.progress_actor`).
    """

    def __init__(self, number: int, seated: bool = False) -> None:
        """``seated``: the seat of a vertex host (:attr:`VertexHost.seat`), not a process of
        its own: it leaves the process's name, imports and garbage collector to that host."""
        super().__init__(f"progress host {number}", named=not seated)
        #: Held by each call of the role but the long poll, and by its socket's delivery thread.
        self.serial = threading.RLock()
        if not seated:
            import raytide.actors.progress_actor  # noqa: F401  (warm)

            _freeze_start_up()

    def take(self, lease: int, job: str, graph: Any, outputs: list[str], initial: list, sockets: bool = False) -> int:
        """Become the progress actor of ``job`` for ``lease`` (``sockets``: replicas on this node send it
        their messages over a socket); returns this process's id."""
        from raytide.actors.progress_actor import ProgressActor

        with self.serial:
            role = ProgressActor(graph, outputs, initial, self.serial if sockets else None, f"{job}/progress")
            return self._take(lease, role, f"{job}/progress")

    def _call(self, lease: int, method: str, args: tuple) -> Any:
        """:meth:`Host._call`, holding :attr:`serial` (the long poll does not come this way)."""
        with self.serial:
            return super()._call(lease, method, args)

    def reset(self, lease: int) -> bool:
        """:meth:`Host.reset`, holding :attr:`serial`: no frame is delivered into a role being closed."""
        with self.serial:
            return super().reset(lease)

    @ray.method(concurrency_group="poll")
    def next_events(self, lease: int, cursor: int, timeout: float) -> Any:
        """The role's long poll (in the ``poll`` concurrency group, so not ordered with the
        driver's ``take``): no events while the lease is not (or no longer) this host's."""
        role = self.role
        if lease != self.lease or role is None:
            time.sleep(min(timeout, 0.01))
            return [], cursor
        return role.next_events(cursor, timeout)


class CoordinatorHost(Host):
    """A host whose role is a job's snapshot coordinator (a
    :class:`~raytide.actors.coordinator_actor.CoordinatorActor`).

    Created with several threads (``max_concurrency``) and a concurrency group ``watch``,
    as the coordinator needs: a driver's ``snapshot_now`` waits while the replicas'
    acknowledgements come in.
    """

    def __init__(self, number: int) -> None:
        super().__init__(f"coordinator host {number}")
        import raytide.actors.coordinator_actor  # noqa: F401  (warm)

        _freeze_start_up()

    def take(self, lease: int, job: str, plan: Any, recovery: Any, inputs: dict, incarnation: int, first_id: int) -> int:
        """Become the snapshot coordinator of ``job`` (whose replicas ``plan`` lays out) for
        ``lease``; returns this process's id."""
        from raytide.actors.coordinator_actor import CoordinatorActor

        return self._take(lease, CoordinatorActor(plan, recovery, inputs, incarnation, first_id), f"{job}/coordinator")


#: How a vertex host names the methods of the progress role seated in it (:attr:`VertexHost.seat`):
#: a job without recovery plays its progress actor in one of its vertex hosts, a process fewer.
SEAT_PREFIX = "progress_"
#: The seat's methods on a vertex host, and the concurrency group each runs in: its own thread
#: (``progress``) for the role's calls, in turn, beside the replica's, as in a progress host.
SEAT_GROUPS = {**dict.fromkeys(("take", "ping", "answer", *PROGRESS_METHODS), "progress"), "next_events": "poll",
               "watch": "watch"}


def _seated(name: str) -> Callable[..., Any]:
    """A vertex host method that calls the seat's method ``name`` (:attr:`VertexHost.seat`)."""

    def forward(self: VertexHost, lease: int, *args: Any) -> Any:
        return getattr(self.seat, name)(lease, *args)

    forward.__name__ = forward.__qualname__ = SEAT_PREFIX + name
    forward.__doc__ = f"The seated progress role's ``{name}`` (see :attr:`VertexHost.seat`)."
    return forward


_VERTEX_GROUPS = {**dict.fromkeys(RELAY_METHODS, "relay"), **dict.fromkeys(FAN_OUT_METHODS, "fan_out"),
                  **dict.fromkeys(INSPECT_METHODS, "inspect")}
for _name in VERTEX_METHODS:
    _method = _forwarding(_name)
    _group = _VERTEX_GROUPS.get(_name)
    setattr(VertexHost, _name, ray.method(concurrency_group=_group)(_method) if _group else _method)
for _name in PROGRESS_METHODS:
    setattr(ProgressHost, _name, _forwarding(_name))
for _name, _group in SEAT_GROUPS.items():
    setattr(VertexHost, SEAT_PREFIX + _name, ray.method(concurrency_group=_group)(_seated(_name)))
for _name in COORDINATOR_METHODS:
    setattr(CoordinatorHost, _name, _forwarding(_name))


# -- the host process's allocator ---------------------------------------------------------
#
# Keep large freed buffers inside a vertex actor's process instead of handing them back to the OS.
#
# Vectorised vertices allocate and free arrays of a few megabytes on every call. glibc
# serves a block above its *mmap threshold* with a fresh ``mmap`` and unmaps it on
# ``free``, so the next array of that size page-faults on every 4 KiB page again. The
# threshold adapts to a process's history, so two replicas of the same vertex can differ
# threefold in page faults and in time (connected components' slower replica has taken
# 36,000 page faults per run against 13,000 for the other, and finished its iterations
# 2-4 times later). Pinning the thresholds makes freed blocks up to
# :data:`MMAP_THRESHOLD` come back from the heap (already mapped), and keeps up to
# :data:`TRIM_THRESHOLD` of free heap in the process, at the cost of that much resident
# memory at most.
#
# Only glibc has ``mallopt`` with these parameters; elsewhere this does nothing.
#
# :func:`pretouch` goes one step further, as the JVM's ``-XX:+AlwaysPreTouch`` (and
# Flink's former ``taskmanager.memory.preallocate``) do: it grows the heap by a given
# amount at start-up, touching every page, and frees it again. With the thresholds pinned
# the pages stay mapped, so the first large epoch takes its arrays from them instead of
# faulting in fresh memory (a page fault costs 1 to 15 µs, and connected components'
# first iteration takes 10,000 of them per replica). Start-up pays
# for those faults instead, and the actor keeps that much resident memory.

#: glibc's ``mallopt`` parameter numbers (``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed value on 64-bit).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory at the top of the heap kept before it is returned to the OS.
TRIM_THRESHOLD = 128 * 1024 * 1024
#: The most :func:`pretouch` may take: half the trim threshold, so that the pretouched pages
#: plus the free memory a vertex leaves at the top of the heap stay below it (beyond it,
#: glibc would hand them all back at the next ``free``).
PRETOUCH_LIMIT_MB = TRIM_THRESHOLD // (2 << 20)
#: Size of the blocks :func:`pretouch` allocates: well below :data:`MMAP_THRESHOLD`, so they come from the heap.
_PRETOUCH_BLOCK = 8 << 20


def keep_freed_buffers() -> bool:
    """Pin glibc's mmap and trim thresholds in this process; returns whether it applied."""
    try:  # the C library is already loaded: look the symbol up in the process (find_library runs ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt (macOS, Windows): nothing to tune
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not applied:
        logger.debug("mallopt refused the thresholds; the allocator keeps its defaults")
    return applied


def pretouch(megabytes: int) -> None:
    """Map ``megabytes`` MiB of heap now, so that later arrays reuse them without page faults.

    Call it after :func:`keep_freed_buffers` applied: with glibc's default thresholds the
    freed pages would go straight back to the OS.

    Raises:
        ValueError: ``megabytes`` is negative or above :data:`PRETOUCH_LIMIT_MB`.
    """
    check_pretouch(megabytes)
    blocks = [bytearray(_PRETOUCH_BLOCK) for _ in range(-(-(megabytes << 20) // _PRETOUCH_BLOCK))]  # zero-filled: touched
    del blocks


def check_pretouch(megabytes: int) -> None:
    """Reject a :func:`pretouch` size that is not an integer from 0 to :data:`PRETOUCH_LIMIT_MB`."""
    if not isinstance(megabytes, int) or not 0 <= megabytes <= PRETOUCH_LIMIT_MB:
        raise ArgumentError(f"pretouch_mb must be an integer from 0 to {PRETOUCH_LIMIT_MB} (MiB per vertex actor), not {megabytes!r}")
