"""Where a job's actors run: the hosts it leased from the driver's pool, the role each plays,
and the handles the driver, the recovery and the rescale address them by.

A :class:`JobPlacement` is the one object that knows the job's actors. ``Job`` (the user's
handle) feeds and reads the job through it; a recovery (:mod:`raytide.driver.recovery`)
replaces the dead hosts in it, and a rescale (:mod:`raytide.driver.rescale`) switches it to
another plan. Every call that waits, waits with a timeout that says what it waited for.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.actors import socket_hops
from raytide.actors.hosts import INPUT_PREFIX, unleased
from raytide.driver.outputs import Liveness
from raytide.driver.pool import HostLease, host_pool
from raytide.engine.outbox import receivers
from raytide.errors import JobTimeout
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ProgressRoute, ReplicaKey
from raytide.physical.relay_tree import delivers_to, push_paths, relay_groups
from raytide.progress.reachability import Location
from raytide.snapshots.config import Recovery

logger = logging.getLogger(__name__)
#: Seconds the other answers of a wait that failed get to arrive, so that their own failures are read (_read_the_rest).
SETTLE_FAILED_S = 1.0

#: The progress actor's key among the actors a placement holds (the others are ReplicaKeys).
PROGRESS = "the progress actor"
#: The coordinator's key among the actors the driver watches.
COORDINATOR = "the snapshot coordinator"
#: How long setup calls (creating and connecting actors) may take.
SETUP_TIMEOUT = 120.0
#: How long tearing a job down waits for its actors' processes to exit.
TEARDOWN_TIMEOUT = 10.0
#: A job whose cluster has at least this many live nodes sends its progress through one
#: relay per node (:mod:`raytide.actors.progress_relay`); on one node, every replica calls
#: the progress actor itself, which costs a hop less.
RELAYS_FROM_NODES = 2


@dataclass(frozen=True)
class HostSettings:
    """What every vertex host of a job is given with its role."""

    max_inflight: int
    num_cpus: float
    pretouch_mb: int
    recovery: Recovery | None
    #: Replicas on one node send each other data over sockets (:mod:`raytide.actors.socket_hops`),
    #: as the driver's ``RAYTIDE_SOCKET_HOPS`` setting said when the job started.
    sockets: bool = field(default_factory=socket_hops.enabled)


class JobPlacement:
    """The hosts of one job and the roles they play.

    Attributes:
        plan: the plan the hosts play now (a rescale replaces it).
        actors: each replica's host (the raw actor handles: ``ray.kill`` and ``ping`` take them).
        peers: each replica's handle bound to its host's lease (what other actors call).
        progress: the progress actor's handle, bound to its lease.
        relay_of: per replica, its node's progress relay (a replica's key), if the job has them (:meth:`route`).
        upstream_of: per node's relay, the group's relay it forwards to, if not the progress actor.
        liveness: one pending watch per actor (:meth:`watch`).
    """

    def __init__(self, plan: PhysicalPlan, name: str, settings: HostSettings) -> None:
        """Lease the job's hosts (warm ones from earlier jobs first; new ones start in
        parallel) without waiting for them: :meth:`take_roles` gives them their roles.

        A job without recovery seats its input replicas in the hosts of the replicas they feed
        (:func:`input_seats`) and its progress actor in the host of its first replica of its own
        (replica 0 of a chain, which every rescale keeps): fewer processes to start. A job with
        recovery gives each a host of its own, as a recovery of a replica alone needs the
        others to outlive it (docs/hosts.md, "A first job's start")."""
        self.plan, self.name, self.settings = plan, name, settings
        self.pool = host_pool()
        seats = input_seats(plan) if settings.recovery is None else {}
        keys = plan.replica_keys()
        own = [key for key in keys if key not in seats]
        self.leases: dict[Hashable, HostLease] = dict(zip(own, self.pool.lease("vertex", len(own), settings.num_cpus)))
        self.leases.update({key: self.pool.seat(self.leases[host], INPUT_PREFIX) for key, host in seats.items()})
        self.leases[PROGRESS] = (self.pool.lease("progress", 1)[0] if settings.recovery is not None
                                 else self.pool.seat(self.leases[own[0]]))
        #: Hosts that play no replica of the plan now but carry a seated input replica (a rescale took
        #: their replica away): kept, and given back with the job, or given a replica by a later rescale.
        self.bare: list[HostLease] = []
        self.coordinator_lease: HostLease | None = None
        self.actors: dict[ReplicaKey, Any] = {key: self.leases[key].handle for key in keys}
        self.peers: dict[ReplicaKey, Any] = {key: self.leases[key].leased for key in keys}
        self.progress: Any = self.leases[PROGRESS].leased
        self.unbounded = set(plan.with_role("feedback"))  # sends out of a feedback vertex never wait
        self.relay_of: dict[ReplicaKey, ReplicaKey] = {}
        self.upstream_of: dict[ReplicaKey, ReplicaKey] = {}
        self._nodes: dict[Any, str] = {}  # each host's node, by its handle (asked once)
        self.liveness = Liveness({})
        self._plan_ref = ray.put(plan)
        self._pids: dict[str, int | Any] = {}

    # -- roles -----------------------------------------------------------------------------

    def take_roles(self, coordinator: Any) -> tuple[list, list]:
        """Tell every leased host its role and connect the replicas; returns the refs of the
        vertex hosts' process ids and of their connections (each connection answers with
        the locations that replica subscribes to), for :meth:`started` to wait on."""
        keys = self.plan.replica_keys()
        self.place_relays()
        pids = [self._take_vertex(key) for key in keys]
        self._pids[self.host_name(PROGRESS)] = self.progress.take.remote(
            self.name, self.plan.graph, self.plan.outputs, self.plan.initial_pointstamps(), self.settings.sockets)
        return pids, [self.peers[key].connect.remote(self.peers_of(key), self.unbounded, self.route(key), coordinator)
                      for key in keys]

    def peers_of(self, key: ReplicaKey) -> dict[ReplicaKey, Any]:
        """The handles replica ``key`` is given (``connect``, ``restore``, ``adopt``): of the
        replicas it sends to and, if its host is a node's relay, of those it delivers pushes
        to. No others: every handle a process unpickles is registered with its Ray core
        worker, and a replica given all the job's at every rescale and recovery held them all."""
        needed = receivers(self.plan, key) | delivers_to(key, self.relay_of, self.upstream_of)
        return {peer: handle for peer, handle in self.peers.items() if peer in needed}

    @property
    def relays(self) -> dict[ReplicaKey, Any]:
        """Per replica, its node's relay's handle, if the job has relays."""
        return {key: self.peers[relay] for key, relay in self.relay_of.items()}

    def route(self, key: ReplicaKey) -> ProgressRoute:
        """Where replica ``key`` sends its progress: its node's relay, if the job has them (and,
        if it is one, where it forwards)."""
        relay, upstream = self.relay_of.get(key), self.upstream_of.get(key)
        return ProgressRoute(self.progress, None if relay is None else self.peers[relay],
                             None if upstream is None else self.peers[upstream])

    def progress_replicas(self, subscriptions: dict[ReplicaKey, list[Location]]) -> dict[ReplicaKey, tuple]:
        """What the progress actor is told of each replica (``connect``, ``restore``): its
        handle, the locations it reads, and its path down the relays for its pushes."""
        paths = push_paths(self.relay_of, self.upstream_of)
        return {key: (self.peers[key], locations, paths.get(key, ())) for key, locations in subscriptions.items()}

    def place_relays(self) -> None:
        """Choose each node's progress relay, the host of its first replica (in the plan's
        order), if the job's replicas run on at least :data:`RELAYS_FROM_NODES` nodes; else
        none; and, on more nodes than :data:`~raytide.physical.relay_tree.RELAY_FANIN`, the
        group's relay each node's relay forwards to. On a cluster of that many live nodes,
        asks each host it has not asked before which node it is on (and so waits for new
        hosts to start)."""
        self.relay_of, self.upstream_of = {}, {}
        if sum(1 for node in ray.nodes() if node["Alive"]) < RELAYS_FROM_NODES:
            return
        keys = self.plan.replica_keys()
        unknown = [self.actors[key] for key in keys if self.actors[key] not in self._nodes]
        known = self._nodes | dict(zip(unknown, self.wait([unleased(actor).node.remote() for actor in unknown],
                                                          f"asking {len(unknown)} hosts which node they are on")))
        # only the hosts the job has now: a dead or given-back host's handle is not kept alive here
        self._nodes = {self.actors[key]: known[self.actors[key]] for key in keys}
        relay_on: dict[str, ReplicaKey] = {}  # each node's relay
        for key in keys:
            relay_on.setdefault(self._nodes[self.actors[key]], key)
        if len(relay_on) >= RELAYS_FROM_NODES:
            self.relay_of = {key: relay_on[self._nodes[self.actors[key]]] for key in keys}
            self.upstream_of = relay_groups(list(relay_on.values()))

    def started(self, pids: list, connections: list, timeout: float) -> None:
        """Wait for the hosts :meth:`take_roles` addressed, then connect the progress actor to
        the replicas' subscriptions. The driver does not wait for the progress host, which
        keeps what replicas send before it is connected.

        Raises:
            JobTimeout: the hosts did not all answer within ``timeout`` seconds.
        """
        keys = self.plan.replica_keys()
        answers = self.wait(pids + connections, "starting and connecting vertex hosts", timeout)
        vertex_pids, subscriptions = answers[: len(keys)], answers[len(keys):]
        self.progress.connect.remote(self.progress_replicas(dict(zip(keys, subscriptions))))
        self._pids.update({self.host_name(key): pid for key, pid in zip(keys, vertex_pids)})

    def _take_vertex(self, key: ReplicaKey, incarnation: int = 0) -> Any:
        """Tell the host leased for ``key`` to become that replica; the ref of its process id."""
        lease, settings = self.leases[key], self.settings
        return lease.leased.take.remote(self._plan_ref, self.name, key.chain, key.replica,
                                        settings.max_inflight, settings.pretouch_mb, lease.handle, settings.recovery,
                                        incarnation, settings.sockets)

    def lease_coordinator(self, recovery: Recovery, incarnation: int, first_id: int) -> Any:
        """Lease a host for the job's snapshot coordinator (a new one after a coordinator's
        death: the old lease goes back with the dead), give it the role and wait until it
        has taken it; returns the coordinator's handle, bound to the lease.

        The wait is what keeps the driver's calls whole: the coordinator's host runs calls
        on several threads, so a call sent right after the ``take`` may run before it, and
        a call of a lease not taken yet is only kept (its answer, such as ``sync``'s
        commits, would be lost). Meanwhile the vertex hosts' processes start.

        Raises:
            JobTimeout: the host did not take the role within :data:`SETUP_TIMEOUT`.
        """
        if self.coordinator_lease is not None:  # dead: the pool forgets it (see replace_dead)
            self.pool.give_back([self.coordinator_lease])
        self.coordinator_lease = lease = self.pool.lease("coordinator", 1)[0]
        take = lease.leased_host.take.remote(self.name, self.plan, recovery, self.input_replicas(), incarnation, first_id)
        self._pids[f"{self.name}/coordinator"] = self.wait([take], "starting the snapshot coordinator")[0]
        return lease.leased

    def watch(self, coordinator: Any = None) -> None:
        """Watch every actor of the job for its death: the hosts, under their leases, and the
        coordinator if there is one."""
        actors: dict[Hashable, Any] = {key: host.leased for key, host in self.leases.items()}
        if coordinator is not None:
            actors[COORDINATOR] = coordinator
        self.liveness = Liveness(actors, before=self.liveness)

    # -- a recovery and a rescale ----------------------------------------------------------

    def replace_dead(self, dead: list[Hashable], coordinator: Any) -> list[str]:
        """Lease warm hosts for the dead replicas (and progress actor) in ``dead`` and give them
        their roles (:meth:`replacing`), waiting once for all of it; returns the names of the replaced."""
        names, refs = self.replacing(dead, coordinator)
        self.wait(refs, f"replacing {', '.join(names)} (taking the roles, connecting the replicas)")
        return names

    def replacing(self, dead: list[Hashable], coordinator: Any) -> tuple[list[str], list]:
        """Lease warm hosts for the dead in ``dead`` and send them their roles and the replicas'
        connections, without waiting: the names of the replaced, and the refs of the answers.
        The nodes' relays are chosen again (a new host may be on another node, and a dead relay
        needs a successor); the recovery's restore tells every replica its route. The dead go
        back to the pool at once, which forgets them: no dead host's handle is kept for the rest
        of the job; the spares used up start again after the recovery (``spares_now``). A host
        runs the driver's calls in the order they were sent (one caller, a sequential actor), so
        its ``connect`` follows its ``take``, and a caller's next call to it (a restore) follows
        both, without a round trip between them, which a loaded machine stretches
        (docs/recovery.md, "Recovered alone on Ray, measured")."""
        replaced: list[ReplicaKey] = []
        refs = []
        for key in dead:
            self.pool.give_back([self.leases.pop(key)])
            if key == PROGRESS:
                self.leases[PROGRESS] = lease = self.pool.lease("progress", 1, spares_now=False)[0]
                self.progress = lease.leased
                refs.append(self.progress.take.remote(self.name, self.plan.graph, self.plan.outputs,
                                                      self.plan.initial_pointstamps(), self.settings.sockets))
            else:
                assert isinstance(key, ReplicaKey)
                self.leases[key] = lease = self.pool.lease("vertex", 1, self.settings.num_cpus, spares_now=False)[0]
                self.actors[key], self.peers[key] = lease.handle, lease.leased
                refs.append(self._take_vertex(key))
                replaced.append(key)
            self._pids[self.host_name(key)] = unleased(lease.handle).ping.remote()
        self.place_relays()
        refs += [self.peers[key].connect.remote(self.peers_of(key), self.unbounded, self.route(key), coordinator)
                 for key in replaced]
        return [self.host_name(key) for key in dead], refs

    def add_hosts(self, plan: PhysicalPlan) -> list[HostLease]:
        """Lease, from the warm pool, the hosts ``plan`` needs beyond the job's own (a rescale,
        before its cut), and wait until they answer: a host that is still starting does so
        before the job pauses, not during."""
        have = len(self._own_hosts()) + len(self.bare)
        need = sum(1 for key in plan.replica_keys() if not (key in self.leases and self.leases[key].seated))
        fresh = self.pool.lease("vertex", max(0, need - have), self.settings.num_cpus)
        self.wait([unleased(lease.handle).ping.remote() for lease in fresh], f"starting {len(fresh)} hosts to rescale onto")
        return fresh

    def reconfigure(self, plan: PhysicalPlan, incarnation: int, fresh: list[HostLease], coordinator: Any) -> dict[str, int]:
        """Switch to ``plan`` (a rescale): every replica of it gets a host, the one that played
        the same replica before, else another of the job's, else one of ``fresh``
        (:meth:`add_hosts`); the job's hosts left over go back to the pool. Each takes its
        role in ``incarnation`` and learns its peers. Returns how many hosts were ``kept``,
        ``added`` and ``returned``."""
        keys = plan.replica_keys()
        leases, returned = self._hosts_for(keys, fresh)
        kept = len({lease.number for lease in [*leases.values(), *self.bare]} - {lease.number for lease in fresh})
        seat = self.leases[PROGRESS]
        assert not (seat.seated and any(lease.number == seat.number for lease in returned)), \
            "a rescale gave back the host its progress actor is seated in"
        self.pool.give_back(returned)
        self.leases = {PROGRESS: seat, **leases}
        self.plan, self._plan_ref = plan, ray.put(plan)
        self.actors = {key: leases[key].handle for key in keys}
        self.peers = {key: leases[key].leased for key in keys}
        self.place_relays()
        pids = [self._take_vertex(key, incarnation) for key in keys]
        connects = [self.peers[key].connect.remote(self.peers_of(key), self.unbounded, self.route(key), coordinator)
                    for key in keys]
        answers = self.wait(pids + connects, f"giving {len(keys)} hosts their replicas of the rescaled job")
        self._pids = {name: pid for name, pid in self._pids.items() if name.endswith(("/progress", "/coordinator"))}
        self._pids.update({self.host_name(key): pid for key, pid in zip(keys, answers)})
        return {"kept": kept, "added": len(fresh), "returned": len(returned)}

    def admit(self, plan: PhysicalPlan, fresh: list[HostLease], incarnation: int, coordinator: Any) -> tuple[list, list]:
        """A stepped growth's join (:mod:`raytide.driver.joining`): play ``plan`` from now, its new replicas on
        the :attr:`bare` hosts and ``fresh`` (:meth:`add_hosts`), each sent its role in ``incarnation`` and its
        peers; their keys and the refs of the answers. :meth:`retire` to the old plan undoes it."""
        keys = [key for key in plan.replica_keys() if key not in self.leases]
        hosts = [*self.bare, *fresh]  # a host that carries an input's seat first, as :meth:`_hosts_for` does
        self.leases.update(zip(keys, hosts))
        self.bare = hosts[len(keys):]
        self.actors.update({key: self.leases[key].handle for key in keys})
        self.peers.update({key: self.leases[key].leased for key in keys})
        self.plan, self._plan_ref = plan, ray.put(plan)
        pids = [self._take_vertex(key, incarnation) for key in keys]
        self._pids.update({self.host_name(key): pid for key, pid in zip(keys, pids)})
        return keys, pids + [self.peers[key].connect.remote(self.peers_of(key), self.unbounded, self.route(key),
                                                            coordinator) for key in keys]

    def retire(self, plan: PhysicalPlan) -> None:
        """A shrink's retiring switch in place, or a join undone (:mod:`raytide.driver.joining`): play ``plan``
        from now, the hosts of the replicas it lacks back to the pool (one carrying an input's seat kept: :attr:`bare`)."""
        gone = [key for key in self.plan.replica_keys() if key not in set(plan.replica_keys())]
        leases, returned = self._hosts_for(plan.replica_keys(), [])
        self.pool.give_back(returned)
        self.leases = {PROGRESS: self.leases[PROGRESS], **leases}
        for key in gone:
            del self.actors[key], self.peers[key]
            self._pids.pop(self.host_name(key), None)
        self.plan, self._plan_ref = plan, ray.put(plan)

    def _own_hosts(self) -> dict[ReplicaKey, HostLease]:
        """The leases of the replicas that play a host of their own (not seated)."""
        return {key: lease for key, lease in self.leases.items() if isinstance(key, ReplicaKey) and not lease.seated}

    def _hosts_for(self, keys: list[ReplicaKey], fresh: list[HostLease]) -> tuple[dict[Hashable, HostLease], list[HostLease]]:
        """A rescale's hosts for ``keys``, and the hosts to give back: a replica kept keeps its host
        (an input its seat: inputs keep their widths); a new one takes a host of a replica gone, one
        that carries an input's seat first, else one of ``fresh``. A host whose replica is gone but
        that carries an input's seat is kept (:attr:`bare`), never given back under the input."""
        old = {key: lease for key, lease in self.leases.items() if isinstance(key, ReplicaKey)}
        leases: dict[Hashable, HostLease] = {key: old.pop(key) for key in keys if key in old}
        carrying = {lease.number for lease in leases.values() if lease.seated}
        spare = self.bare + sorted((lease for lease in old.values() if not lease.seated),
                                   key=lambda lease: lease.number not in carrying)
        missing = [key for key in keys if key not in leases]
        leases.update(zip(missing, spare + fresh))
        left = spare[len(missing):]
        self.bare = [lease for lease in left if lease.number in carrying]
        return leases, [lease for lease in left if lease.number not in carrying]

    def give_back(self, leases: list[HostLease]) -> None:
        """Give hosts the job does not use back to the pool (a rescale that did not happen)."""
        self.pool.give_back(leases)

    def input_replicas(self) -> dict[ReplicaKey, Any]:
        """The replicas that host an input (where barriers are injected)."""
        plan = self.plan
        return {key: peer for key, peer in self.peers.items()
                if any(vertex in plan.inputs for vertex in plan.chain(key.chain).vertices)}

    def input_handles(self) -> dict[str, list[Any]]:
        """Per input, its replicas' handles in replica order."""
        plan = self.plan
        return {name: [self.peers[ReplicaKey(plan.chain_of(name).name, r)] for r in range(plan.width(name))]
                for name in plan.inputs}

    # -- inspection and teardown -----------------------------------------------------------

    def seated_in(self, key: Hashable) -> Hashable:
        """``key``, or, for a progress actor seated in a vertex host (:meth:`~raytide.driver.pool.HostPool.seat`),
        the replica that host plays: the two die as one process, and the replica's vertices are
        what a user can act on."""
        seat = self.leases.get(key)
        if key != PROGRESS or seat is None or not seat.seated:
            return key
        return next(replica for replica, lease in self.leases.items() if replica != PROGRESS and lease.number == seat.number)

    def host_name(self, key: Hashable) -> str:
        """``job/chain/replica`` or ``job/progress``: how a host is named in Ray's log prefixes."""
        return f"{self.name}/progress" if key == PROGRESS else f"{self.name}/{key.chain}/{key.replica}"  # type: ignore[attr-defined]

    def hosts(self) -> dict[str, int]:
        """The process id of each host, by ``job/chain/replica`` (and ``job/progress``, and
        ``job/coordinator`` in a job with recovery); -1 for one that died before its first answer."""
        for name, pid in self._pids.items():
            if isinstance(pid, ray.ObjectRef):
                try:
                    self._pids[name] = ray.get(pid, timeout=SETUP_TIMEOUT)
                except ray.exceptions.RayActorError:
                    self._pids[name] = -1
        return dict(self._pids)

    def pid_of(self, name: str) -> int | None:
        """The process id of host ``name`` if known already (None: not yet answered, or no such host); never waits."""
        pid = self._pids.get(name)
        return pid if isinstance(pid, int) else None

    def replica_stats(self, timeout: float = 60.0) -> dict[ReplicaKey, dict[str, Any] | None]:
        """Every replica's counters; None for one whose actor is dead, or did not answer
        within ``timeout`` seconds of the call (all asked at once; one on a lost node does
        not answer until Ray declares it dead)."""
        refs = {key: peer.stats.remote() for key, peer in self.peers.items()}
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        answers: dict[ReplicaKey, dict[str, Any] | None] = {}
        for key, ref in refs.items():
            try:
                answers[key] = ray.get(ref, timeout=0)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                answers[key] = None
        return answers

    def slowest_busy(self, within: float) -> str:
        """The busy replicas furthest downstream, for timeout messages.

        Replicas hold back the progress of what they send while it cannot matter, so the
        tracker sees pending work upstream of a bottleneck (the progress description's
        "earliest pending work"). A replica that does not answer a ping within ``within``
        seconds is busy: running user code, or waiting for a slower receiver. Of the busy
        ones, those from which no other busy one is reachable are where the work waits.
        """
        pings = {key: unleased(handle).ping.remote() for key, handle in self.actors.items()}
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=within)
        busy = [key for key, ref in pings.items() if ref not in set(ready)]
        plan = self.plan

        def reaches(a: ReplicaKey, b: ReplicaKey) -> bool:
            last, head = plan.chain(a.chain).vertices[-1], plan.chain(b.chain).vertices[0]
            return a.chain != b.chain and bool(plan.graph.summaries(Location.of_vertex(last), Location.of_vertex(head)))

        slowest = [key for key in busy if not any(reaches(key, other) for other in busy)]
        if not slowest:
            return f"no replica was busy for {within:.0f} s"
        return "slowest (busy, furthest downstream): " + ", ".join(
            f"vertex {plan.chain(key.chain).vertices[0]!r} ({self.host_name(key)})" for key in slowest)

    def release(self) -> None:
        """Give every host back to the pool, which resets them for the next job. Hosts that
        reserved CPUs are killed, not kept, and ``ray.kill`` returns at once: wait (a bounded
        time) until their processes are gone, so that the next job finds the CPUs free."""
        coordinator = [self.coordinator_lease] if self.coordinator_lease is not None else []
        killed = self.pool.give_back([*self.leases.values(), *self.bare, *coordinator])
        if killed:
            gone = [unleased(handle).ping.remote() for handle in killed]
            _, alive = ray.wait(gone, num_returns=len(gone), timeout=TEARDOWN_TIMEOUT)
            if alive:
                logger.warning("job %r: %d hosts still alive %.0f s after being killed", self.name, len(alive),
                               TEARDOWN_TIMEOUT)

    def wait(self, refs: list, what: str, timeout: float = SETUP_TIMEOUT) -> list:
        """``ray.get(refs)`` within ``timeout``.

        Raises:
            JobTimeout: naming ``what`` took too long.
        """
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError as error:
            raise JobTimeout(f"job {self.name!r}: {what} took longer than {timeout:.0f} s{self._cpu_shortage()}") from error
        except ray.exceptions.RayError:
            _read_the_rest(refs)
            raise

    def _cpu_shortage(self) -> str:
        """Why hosts may not have started, if the cluster lacks the CPUs they reserve (a node
        lost from a cluster the job filled: Ray keeps the replacements pending)."""
        need = self.settings.num_cpus
        if not need:
            return ""
        free = float(ray.available_resources().get("CPU", 0.0))
        if free >= need:
            return ""
        return (f"; each of its hosts reserves {need:g} CPU and the cluster has {free:g} free, so Ray may be keeping "
                f"hosts pending (start the job with num_cpus=0, or give the cluster more CPUs)")


def input_seats(plan: PhysicalPlan) -> dict[ReplicaKey, ReplicaKey]:
    """Where a job without recovery seats its input replicas: replica ``r`` of an input's chain
    in the host of replica ``r`` of the first chain it sends to that has one and is no input's
    (an input has no upstream, so the replica it is seated beside never sends to it: no wait of
    either on the other, docs/hosts.md), one input replica per host. An input's chain that sends
    to nobody (the whole job fused into it) keeps hosts of its own."""
    inputs = {plan.chain_of(name).name for name in plan.inputs}
    order = {key: at for at, key in enumerate(plan.replica_keys())}
    seats: dict[ReplicaKey, ReplicaKey] = {}
    for key in order:
        if key.chain not in inputs:
            continue
        beside = sorted((to for to in receivers(plan, key) if to.replica == key.replica and to.chain not in inputs
                         and to not in seats.values()), key=order.__getitem__)
        if beside:
            seats[key] = beside[0]
    return seats


def _read_the_rest(refs: list) -> None:
    """Read, ignoring their errors, the answers of ``refs`` that arrive within :data:`SETTLE_FAILED_S`: one of
    them failed (an actor died), and an answer that failed too and that nobody reads Ray reports as an unhandled
    error when its ref goes (a replica's ``adopt`` of pieces the dead replica owned: ``OwnerDiedError``)."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=SETTLE_FAILED_S)
    for ref in ready:
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(ref, timeout=0)
