"""The driver's pool of warm hosts (:mod:`raytide.actors.hosts`): jobs lease hosts from it
and give them back; it keeps spares, notices deaths, and releases idle hosts.

One pool per driver process and Ray connection (:func:`host_pool`). Its decisions are
:class:`~raytide.driver.pool_book.PoolBook`'s; this shell creates, resets, pings and
kills hosts, and never blocks a job on anything but short waits: for hosts whose reset is
already under way, and for the idle hosts a lease hands out to answer a ping, so that a
host that died since its reset (a SIGKILL the housekeeping has not noticed yet) is
dropped, not handed to the next job. A daemon thread looks after it once a second: it takes the answers
of resets and pings, replaces dead spares and releases hosts unused for ``idle_timeout``.
After ``ray.shutdown()`` a call of ``ray.get``, ``ray.wait`` or ``ray.kill`` starts a new local
Ray (Ray's auto-init), so the pool calls Ray's functions without that wrapper
(:mod:`raytide.driver.connected`): one that races a shutdown raises instead. The thread also
checks the connection before each call (:func:`_connected`) and stops at the first check that
finds it gone.

Only hosts that reserve no CPUs are kept (``rt.run(num_cpus=0)``, the default): an idle
host that reserved CPUs would keep them from the rest of the cluster, so such hosts are
killed when their job ends. Ray kills every host when the driver disconnects
(``ray.shutdown()`` or the driver's exit); :func:`shutdown` kills them at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import ray

from raytide.actors.hosts import REPLICA_PREFIX, SEAT_PREFIX, Leased, remote_host, unleased
from raytide.core.arguments import non_negative, non_negative_int
from raytide.driver.connected import ray_get, ray_kill, ray_wait
from raytide.driver.pool_book import HostKind, PoolBook

logger = logging.getLogger(__name__)

#: Seconds a pool unused by any job keeps its idle hosts (and spares).
IDLE_TIMEOUT = 300.0
#: Idle vertex hosts kept started while the pool is in use.
SPARES = 0
#: Seconds a reset (or a spare's start) may take before the host is killed instead.
RESET_TIMEOUT = 30.0
#: Seconds a lease waits for hosts whose reset is under way before it starts new ones.
RESET_WAIT = 2.0
#: Seconds a lease waits for the idle hosts it hands out to answer a ping (a dead one is
#: replaced; one that does not answer in time is leased all the same: its job's setup waits
#: for it, with a timeout, and watches it).
LEASE_CHECK = 2.0
#: Seconds between two rounds of the pool's housekeeping.
HOUSEKEEPING_INTERVAL = 1.0

_CLASSES: dict[HostKind, Any] = {}


class RayGone(Exception):
    """This driver is no longer connected to Ray: the pool makes no more Ray calls."""


def _connected() -> None:
    """Raise :class:`RayGone` unless this driver is connected to Ray. Called just before each
    Ray call the pool's thread may make. A ``ray.shutdown()`` in another thread between this
    check and the call makes the call raise (the pool calls Ray's functions without the
    auto-init wrapper: :mod:`raytide.driver.connected`), never start a Ray."""
    if not ray.is_initialized():
        raise RayGone("the driver's Ray connection is closed")


#: Each kind of host: its threads for calls in Ray's default group (1: sequential) and its concurrency
#: groups (see Host.watch, ProgressHost.next_events, CoordinatorHost, host_base.SEATED_GROUPS).
_KINDS: dict[HostKind, tuple[int, dict[str, int]]] = {
    "vertex": (1, {"watch": 3, "relay": 2, "fan_out": 1, "inspect": 1, "progress": 1, "poll": 1, "input": 1}),
    "progress": (1, {"watch": 1, "poll": 1}),
    "coordinator": (4, {"watch": 1}),
}


def _remote_class(kind: HostKind) -> Any:
    """The Ray actor class of ``kind`` (made once: ``ray.remote`` pickles the class)."""
    if kind not in _CLASSES:
        _CLASSES[kind] = remote_host(*_KINDS[kind])
    return _CLASSES[kind]


def cluster_cpus() -> float:
    """The CPUs of the Ray cluster the driver is connected to (what widths are checked against,
    :func:`~raytide.rescale.widths.check_widths`)."""
    return float(ray.cluster_resources().get("CPU", 0.0))


@dataclass
class HostLease:
    """A host leased to a job: its handle bound to the lease, the raw handle and the process id."""

    number: int
    kind: HostKind
    handle: Any  # the raw actor handle (for ray.kill, pings)
    lease: int
    pooled: bool  # False: killed, not reset, when given back (it reserved CPUs)
    #: A role seated in a vertex host beside its replica, under the replica's lease (:meth:`HostPool.seat`):
    #: the prefix of its methods there (the progress actor's or an input replica's); given back with the
    #: replica's lease, not on its own.
    seat: str = ""

    @property
    def seated(self) -> bool:
        """Whether this is a role seated beside a replica's (no host of its own)."""
        return bool(self.seat)

    @property
    def leased(self) -> Leased:
        """The handle whose calls carry this lease (a seated role's: by its prefix and name, through its host's ``seated_*`` methods)."""
        return Leased(self.handle, self.lease, self.seat or (REPLICA_PREFIX if self.kind == "vertex" else ""))

    @property
    def leased_host(self) -> Leased:
        """The handle whose calls carry this lease to the host itself, not its role (``reset``, ``take`` of a coordinator)."""
        return Leased(self.handle, self.lease)


@dataclass
class _Pending:
    """A call whose answer the pool waits for: a spare's first ping, or a reset."""

    ref: Any
    what: str  # "start" or "reset"


@dataclass
class HostPool:
    """Warm hosts of one driver; see the module docstring."""

    idle_timeout: float = IDLE_TIMEOUT
    spares: int = SPARES
    book: PoolBook = field(init=False)
    handles: dict[int, Any] = field(default_factory=dict)
    pending: dict[int, _Pending] = field(default_factory=dict)
    pings: dict[int, Any] = field(default_factory=dict)
    leases: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    closed: bool = False

    def __post_init__(self) -> None:
        self.book = PoolBook(self.idle_timeout, self.spares)
        self.thread = threading.Thread(target=self._housekeeping, name="raytide-host-pool", daemon=True)
        self.thread.start()

    # -- jobs ------------------------------------------------------------------------------

    def lease(self, kind: HostKind, count: int, num_cpus: float = 0.0, spares_now: bool = True) -> list[HostLease]:
        """``count`` hosts of ``kind`` for a job: idle ones first, each checked alive (a ping;
        a dead one is dropped and another taken), then new ones (not waited for: the job's
        first calls queue behind their start). The spares used up are started again now, or,
        without ``spares_now`` (a recovery's replacement), by the housekeeping thread within
        :data:`HOUSEKEEPING_INTERVAL`: a process's start takes a core for about a second, which
        the recovery under way would share (docs/recovery.md, "Recovered alone on Ray, measured")."""
        if num_cpus:
            with self.lock:
                return [self._lease_one(self._create(kind, None, num_cpus), kind, pooled=False) for _ in range(count)]
        self._wait_for_resets(kind, count)
        numbers: list[int] = []
        while len(numbers) < count:
            with self.lock:
                reused, new = self.book.lease(kind, count - len(numbers), time.monotonic())
                for number in new:
                    self._create(kind, number)
            numbers += self._alive(reused) + new
        with self.lock:
            leased = [self._lease_one(number, kind, pooled=True) for number in numbers]
            if spares_now:
                self._start_spares()
            return leased

    def _alive(self, numbers: list[int]) -> list[int]:
        """The hosts among ``numbers`` (leased, idle a moment ago) that did not die: a ping
        each, waited for up to :data:`LEASE_CHECK` s; the dead leave the pool."""
        pings = {number: unleased(self.handles[number]).ping.remote() for number in numbers}
        ray_wait(list(pings.values()), num_returns=len(pings), timeout=LEASE_CHECK)
        alive = []
        for number, ref in pings.items():
            try:
                ray_get(ref, timeout=0)
            except ray.exceptions.GetTimeoutError:  # slow, not known dead
                pass
            except Exception:  # the host died while idle (or while it was given back)
                logger.info("a raytide host died while idle; the pool drops it instead of leasing it")
                with self.lock:
                    self._kill(number)
                continue
            alive.append(number)
        return alive

    def keep_spares(self, count: int) -> None:
        """Keep at least ``count`` spare vertex hosts started from now on (a job with recovery
        replaces a dead replica with one at once)."""
        with self.lock:
            self.spares = self.book.spares = max(self.book.spares, count)
            self._start_spares()

    @staticmethod
    def seat(host: HostLease, prefix: str = SEAT_PREFIX) -> HostLease:
        """The lease of a role seated in the vertex host ``host`` leased to the same job (the progress
        actor's, or with :data:`~raytide.actors.hosts.INPUT_PREFIX` an input replica's): no
        process of its own (a first job starts one process fewer), reset and killed with
        ``host``. Only for a job without recovery: a replica's death takes the seated role
        with it, where a recovery alone needs the others to live (docs/hosts.md)."""
        assert host.kind == "vertex" and not host.seated, f"a role is seated in a vertex host, not {host}"
        return replace(host, seat=prefix)

    def _lease_one(self, number: int, kind: HostKind, pooled: bool) -> HostLease:
        self.leases += 1
        return HostLease(number, kind, self.handles[number], self.leases, pooled)

    def give_back(self, hosts: list[HostLease]) -> list[Any]:
        """A job is done with ``hosts``: reset the pooled ones (idle once the reset says the
        host is clean), kill the others. Returns at once, with the handles of the killed."""
        killed = []
        with self.lock:
            now = time.monotonic()
            for host in hosts:
                if host.seated:  # reset with its host's lease, or killed with it
                    continue
                if not host.pooled or self.closed:
                    self._kill(host.number)
                    killed.append(host.handle)
                    continue
                self.book.give_back([host.number], now)
                self.pending[host.number] = _Pending(host.leased_host.reset.remote(), "reset")
        return killed

    def _wait_for_resets(self, kind: HostKind, count: int) -> None:
        """Wait briefly for hosts of ``kind`` being reset (a job that just ended) when the idle
        ones are too few: a reset takes milliseconds, a new process a second or more."""
        with self.lock:
            short = count - len(self.book.of(kind, "idle"))
            resetting = [self.pending[n].ref for n in self.book.of(kind, "resetting") if n in self.pending]
        if short > 0 and resetting:
            ray_wait(resetting, num_returns=min(short, len(resetting)), timeout=RESET_WAIT)
            self._take_answers()

    # -- housekeeping ----------------------------------------------------------------------

    def _housekeeping(self) -> None:
        while not self.closed:
            time.sleep(HOUSEKEEPING_INTERVAL)
            try:
                self._take_answers()
                self._check_idle()
                with self.lock:
                    now = time.monotonic()
                    for number in self.book.to_release(now) + self.book.stuck(now, RESET_TIMEOUT):
                        self._kill(number)
                    self._start_spares()
            except RayGone:
                return
            except Exception:  # the pool must outlive a bad round (a host dying)
                logger.debug("host pool housekeeping failed", exc_info=True)

    def _take_answers(self) -> None:
        """Resets and starts that answered: clean hosts become idle, the others are killed."""
        with self.lock:
            refs = {p.ref: n for n, p in self.pending.items()}
            if not refs:
                return
            _connected()
            ready, _ = ray_wait(list(refs), num_returns=len(refs), timeout=0)
            now = time.monotonic()
            for ref in ready:
                _connected()
                number = refs[ref]
                pending = self.pending.pop(number)
                try:
                    answer = ray_get(ref)
                except Exception:  # the host died
                    answer = None
                if pending.what == "start" and answer is not None:
                    self.book.started(number, now)
                elif pending.what == "reset" and answer is True:
                    self.book.reset_done(number, True, now)
                else:
                    self.book.reset_done(number, False, now)
                    self._kill(number)

    def _check_idle(self) -> None:
        """Ping idle hosts (one ping in flight each); forget those that died."""
        with self.lock:
            idle = [n for kind in _KINDS for n in self.book.of(kind, "idle")]
            for number in idle:
                _connected()
                ref = self.pings.get(number)
                if ref is None:
                    self.pings[number] = unleased(self.handles[number]).ping.remote()
                    continue
                ready, _ = ray_wait([ref], timeout=0)
                if ready:
                    del self.pings[number]
                    try:
                        ray_get(ref)
                    except Exception:
                        logger.info("an idle raytide host died; the pool forgets it")
                        self._kill(number)

    def _start_spares(self) -> None:
        for number in self.book.spares_to_start(time.monotonic()):
            self._create("vertex", number)
            self.pending[number] = _Pending(unleased(self.handles[number]).ping.remote(), "start")

    # -- processes -------------------------------------------------------------------------

    def _create(self, kind: HostKind, number: int | None, num_cpus: float = 0.0) -> int:
        if number is None:
            number = self.book.next_number
            self.book.next_number += 1
        _connected()
        # unnamed: Ray registers a named actor's name with the GCS before ``remote`` returns,
        # 30-50 ms per host on the driver, one after the other; its repr names it instead
        self.handles[number] = _remote_class(kind).options(
            num_cpus=num_cpus, max_restarts=0, max_task_retries=0,
        ).remote(kind, number)
        return number

    def _kill(self, number: int) -> None:
        self.book.drop(number)
        self.pending.pop(number, None)
        self.pings.pop(number, None)
        handle = self.handles.pop(number, None)
        if handle is not None:
            try:
                _connected()
                ray_kill(handle)
            except Exception:  # already gone (with Ray, if it was shut down)
                pass

    def shutdown(self) -> None:
        """Kill every host (leased ones too: their jobs fail) and stop the housekeeping."""
        with self.lock:
            self.closed = True
            for number in list(self.handles):
                self._kill(number)

    def describe(self) -> dict[str, list[int]]:
        """Host numbers per kind and state (for tests and ``rt.pool_status()``)."""
        with self.lock:
            self._take_answers()
            states: dict[str, list[int]] = {}
            for number, record in self.book.hosts.items():
                states.setdefault(f"{record.kind} {record.state}", []).append(number)
            return states


_POOL: HostPool | None = None
_POOL_CONNECTION: str | None = None
_POOL_LOCK = threading.Lock()
_SETTINGS: dict[str, Any] = {"idle_timeout": IDLE_TIMEOUT, "spares": SPARES}


def host_pool() -> HostPool:
    """This driver's pool for the current Ray connection (a new one after ``ray.shutdown()``
    and ``ray.init()``: the old hosts died with the old connection)."""
    global _POOL, _POOL_CONNECTION
    connection = ray.get_runtime_context().get_worker_id()
    with _POOL_LOCK:
        if _POOL is None or _POOL_CONNECTION != connection or _POOL.closed:
            if _POOL is not None:
                _POOL.closed = True
            _POOL, _POOL_CONNECTION = HostPool(**_SETTINGS), connection
        return _POOL


def configure(*, idle_timeout: float | None = None, spares: int | None = None) -> None:
    """Set the pool's idle timeout (seconds unused before idle hosts are released) and the
    number of spare vertex hosts it keeps started; applies to the current pool and later ones."""
    if idle_timeout is not None:
        _SETTINGS["idle_timeout"] = non_negative(idle_timeout, "idle_timeout")
    if spares is not None:
        _SETTINGS["spares"] = non_negative_int(spares, "spares")
    if _POOL is not None:
        with _POOL.lock:
            _POOL.idle_timeout = _POOL.book.idle_timeout = _SETTINGS["idle_timeout"]
            _POOL.spares = _POOL.book.spares = _SETTINGS["spares"]


def shutdown() -> None:
    """Kill every warm host of this driver now (Ray does it anyway when the driver disconnects)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.shutdown()
            _POOL = None
