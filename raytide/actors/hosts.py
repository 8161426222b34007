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
import logging
import threading
import time
from typing import Any

import ray

from raytide.actors.host_base import (  # noqa: F401  (kept importable here)
    ACTOR_NAME_PREFIX,
    COORDINATOR_METHODS,
    DEFAULT_GROUP,
    FAN_OUT_METHODS,
    INPUT_GROUPS,
    INPUT_PREFIX,
    INSPECT_METHODS,
    PROGRESS_METHODS,
    RELAY_METHODS,
    REPLICA_PREFIX,
    SEAT_GROUPS,
    SEAT_PREFIX,
    SEATED,
    SEATED_GROUPS,
    VERTEX_GROUPS,
    VERTEX_METHODS,
    Beside,
    Host,
    Leased,
    announce,
    forwarding,
    freeze_start_up,
    unleased,
)
from raytide.errors import ArgumentError

logger = logging.getLogger(__name__)


class VertexHost(Host):
    """A host whose role is one replica of one chain (a :class:`~raytide.actors.vertex_actor.VertexActor`).

    Sequential, like the role it plays: Ray runs one caller's calls in submission order,
    which keeps every channel FIFO (see :mod:`raytide.actors.vertex_actor`). The node's
    progress relay, if this host is it, runs on threads of its own (the concurrency groups
    ``relay``: :data:`RELAY_METHODS`, and ``fan_out``: :data:`FAN_OUT_METHODS`), and so do
    the replica's statistics (``inspect``: :data:`INSPECT_METHODS`), and the roles seated beside
    the replica (:attr:`seat`, :attr:`inputs`).
    """

    def __init__(self, number: int, beside: VertexHost | None = None) -> None:
        """``beside``: the host whose input seat this is (:attr:`inputs`), not a process of its
        own: it leaves the process's name, imports and garbage collector to that host."""
        super().__init__(f"vertex host {number}", named=beside is None)
        #: Held by each call of the replica (the default group) and by its socket's delivery thread
        #: (:mod:`raytide.actors.socket_hops`): one event at a time, as on a sequential actor.
        self.serial = threading.RLock()
        self.beside = beside
        if beside is not None:
            return
        import raytide.actors.vertex_actor  # noqa: F401  (warm: imported once per process, not per job)

        #: The seat of a job's progress actor, played beside the replica under the same lease
        #: (its calls by :data:`SEAT_PREFIX` and name, through the ``seated_*`` methods), with a lock and threads of its own.
        self.seat = ProgressHost(number, seated=True)
        #: The seat of an input replica that feeds the replica played here, under the same lease
        #: (by :data:`INPUT_PREFIX` and name, the same way), on a thread and with a lock of its own: its
        #: sends to this host's replica run in this process (:class:`~raytide.actors.host_base.Beside`),
        #: and its wait for a full window toward another host's holds only its own lock.
        self.inputs = VertexHost(number, beside=self)

        freeze_start_up()

    def take(self, lease: int, plan: Any, job: str, chain: str, replica: int, max_inflight: int, pretouch_mb: int,
             myself: Any, recovery: Any = None, incarnation: int = 0, sockets: bool = False) -> int:
        """Become replica ``replica`` of ``chain`` for ``lease`` in ``incarnation`` (``sockets``: reached by
        peers on this node over a socket, :mod:`raytide.actors.socket_hops`); returns this process's id."""
        from raytide.actors.vertex_actor import VertexActor

        if self.beside is None and keep_freed_buffers() and pretouch_mb:  # the host's replica's, not again for its seat
            pretouch(pretouch_mb)
        with self.serial:
            kept = getattr(self.role, "kept", None) if lease == self.lease else None  # a rescale (see VertexActor.hand_over)
            seated = self.beside is not None
            beside = Beside(myself._actor_id, self.beside._call) if self.beside is not None else None
            role = VertexActor(plan, job, chain, replica, max_inflight, Leased(myself, lease, INPUT_PREFIX if seated else REPLICA_PREFIX),
                               recovery, incarnation, kept, self.serial if sockets else None, beside)
            return self._take(lease, role, f"{job}/{chain}/{replica}")

    def seated(self, group: str, prefix: str, name: str, lease: int, *args: Any) -> Any:
        """The method ``name`` of the role seated here with ``prefix`` (:attr:`seat`, :attr:`inputs`, or with
        :data:`REPLICA_PREFIX` the replica this host plays), called in the concurrency group ``group``
        (:data:`~raytide.actors.host_base.SEATED_GROUPS`: the replica's ``answer``, say, in ``inspect``,
        where a replica busy with an event answers at once, while its ``ping`` waits behind the event). A
        replica's method (one the host class does not have: :data:`VERTEX_METHODS`) goes to the seat's
        :meth:`Host._call`.

        Raises:
            ArgumentError: the seat has no such method in that group.
        """
        if SEATED_GROUPS.get(prefix, {}).get(name) != group:
            raise ArgumentError(f"{self!r}: the seat {prefix!r} has no method {name!r} in the concurrency group {group!r}")
        seat = getattr(self, _SEATS[prefix]) if _SEATS[prefix] else self
        if isinstance(seat, VertexHost) and name in VERTEX_METHODS:
            return seat._call(lease, name, args)
        return getattr(seat, name)(lease, *args)

    def _call(self, lease: int, method: str, args: tuple) -> Any:
        """:meth:`Host._call`; a call of the default group holds :attr:`serial` (the others run beside it)."""
        if method in VERTEX_GROUPS:
            return super()._call(lease, method, args)
        with self.serial:
            return super()._call(lease, method, args)

    def reset(self, lease: int) -> bool:
        """:meth:`Host.reset`, holding :attr:`serial`: no frame is delivered into a role being
        closed; the input and progress roles seated here under ``lease``, if any, are dropped too."""
        with self.serial:
            clean = super().reset(lease)
        if self.beside is None:
            self.inputs.reset(lease)
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

            freeze_start_up()

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

        freeze_start_up()

    def take(self, lease: int, job: str, plan: Any, recovery: Any, inputs: dict, incarnation: int, first_id: int) -> int:
        """Become the snapshot coordinator of ``job`` (whose replicas ``plan`` lays out) for
        ``lease``; returns this process's id."""
        from raytide.actors.coordinator_actor import CoordinatorActor

        return self._take(lease, CoordinatorActor(plan, recovery, inputs, incarnation, first_id), f"{job}/coordinator")


#: The attribute of a vertex host that plays each seat (by its prefix; the replica's is the host itself).
_SEATS = {SEAT_PREFIX: "seat", INPUT_PREFIX: "inputs", REPLICA_PREFIX: ""}


class RaytideHost:
    """The Ray actor class of every host: a :class:`VertexHost`, :class:`ProgressHost` or
    :class:`CoordinatorHost` (``kind``) behind one actor method, :meth:`call`, that every call of
    the driver and of the roles goes through (:class:`~raytide.actors.host_base.Leased` names the
    method and puts the call in its concurrency group).

    Why one method: Ray disassembles (``dis``) every method of an actor class when it exports the
    class, wraps each for its tracing and describes each in every handle, in the driver before its
    first host starts and in each host as it loads the class and unpickles its peers' handles, all on
    a first job's clock. A vertex host class had 25 methods as Ray counts them (its own, inherited
    and private ones, and Ray's four); this one has seven, one more than a plain actor with two.
    """

    def __init__(self, kind: str, number: int) -> None:
        self.host: Host = _KIND_CLASSES[kind](number)
        self.methods = _methods(type(self.host))

    def __repr__(self) -> str:
        return repr(self.host)

    def call(self, name: str, *args: Any) -> Any:
        """The host's method ``name`` with ``args``.

        Raises:
            AttributeError: the host has no such method (a public method of its class).
        """
        if name not in self.methods:
            raise AttributeError(f"{self.host!r} has no method {name!r}")
        return getattr(self.host, name)(*args)


def remote_host(threads: int, groups: dict[str, int]) -> Any:
    """:class:`RaytideHost` as a Ray actor class running ``threads`` calls at a time in Ray's default
    concurrency group and the ``groups`` (name: threads) beside it."""
    return ray.remote(max_concurrency=threads, concurrency_groups=groups)(RaytideHost)  # type: ignore[call-overload]


def _methods(cls: type) -> frozenset[str]:
    """The methods of the host class ``cls`` a call may name: its public ones."""
    return frozenset(name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name)))


for _name in PROGRESS_METHODS:
    setattr(ProgressHost, _name, forwarding(_name))
for _name in COORDINATOR_METHODS:
    setattr(CoordinatorHost, _name, forwarding(_name))

#: Each kind of host (:class:`RaytideHost`'s first argument) and its class.
_KIND_CLASSES: dict[str, type[VertexHost] | type[ProgressHost] | type[CoordinatorHost]] = {
    "vertex": VertexHost, "progress": ProgressHost, "coordinator": CoordinatorHost}


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
