"""Running a dataflow on Ray: ``rt.run(flow, ...)`` places the actors and returns a :class:`Job`::

    with rt.run(flow, inputs={"lines": [["a b", "b"], ["c"]]}) as job:
        job.wait(timeout=60)
        job.collect("counts")     # {0: [('a', 1), ('b', 2)], 1: [('c', 1)]}

The driver talks to the job through two kinds of actors: the vertex actors (one per
replica of each chain of fused vertices, named ``job/chain/replica`` in the Ray
dashboard) and the progress actor, which also gathers completed output epochs and
failures. Every wait on the driver has a timeout and says what it waited for.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import ray

from raytide.actors.autoscaler_actor import AutoscalerActor
from raytide.actors.hosts import check_pretouch
from raytide.autoscale.config import Autoscale
from raytide.core.arguments import non_negative, positive_int
from raytide.core.dataflow import Dataflow, Probe
from raytide.driver.inputs import InputFeeds
from raytide.driver.outputs import POLL_SLACK, Liveness, OutputCollector
from raytide.driver.pool import HostLease, cluster_cpus, host_pool
from raytide.driver.recovery import COORDINATOR, RECOVERY_POLL, JobRecovery
from raytide.driver.rescale import rescale
from raytide.errors import (
    ActorLost,
    ArgumentError,
    GraphError,
    InternalError,
    JobCancelled,
    JobTimeout,
    RaytideError,
    ReplicaLost,
    RescaleError,
    SnapshotError,
)
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import Marker, ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.rescale.reshard import reshard_snapshot
from raytide.rescale.widths import check_widths, new_widths
from raytide.snapshots.config import Recovery
from raytide.snapshots.recovery import RestorePoint, restore_point
from raytide.snapshots.replica_state import HeldReport
from raytide.snapshots.store import SnapshotStore
from raytide.sources.base import BlockRefs, Placement, Reader
from raytide.sources.iterable import as_source

logger = logging.getLogger(__name__)

#: The progress actor's key among the actors the driver watches (the others are ReplicaKeys).
PROGRESS = "the progress actor"

#: How long setup calls (creating and connecting actors) may take.
SETUP_TIMEOUT = 120.0
#: How long a replica may take to answer a ping before a timeout message calls it busy.
BUSY_PROBE = 1.0
#: The longest the autoscaler's long poll for changes waits (the driver keeps one pending).
AUTOSCALE_POLL = 5.0
#: How long tearing a job down waits for its actors' processes to exit.
TEARDOWN_TIMEOUT = 10.0


def run(
    flow: Dataflow,
    inputs: dict[str, Any] | None = None,
    parallelism: int | None = None,
    *,
    max_inflight: int = 16,
    batch_size: int = 4096,
    chaining: bool = True,
    num_cpus: float = 0,
    pretouch_mb: int = 0,
    name: str | None = None,
    recovery: Recovery | None = None,
    restore: int | str | None = None,
    autoscale: Autoscale | None = None,
    oversubscribe: bool = False,
) -> Job:
    """Start ``flow`` on the current Ray cluster (a local one if none is running).

    Args:
        flow: the dataflow to run.
        inputs: records per input, consumed lazily with backpressure: a
            :class:`~raytide.sources.base.Source` (read in the input replicas, such as
            :class:`~raytide.sources.TextFileSource` and
            :func:`~raytide.integrations.ray_data.from_dataset`, or on the driver, such as
            :func:`~raytide.integrations.spark.from_spark`) or an iterable of per-epoch
            record lists (epoch 0, 1, ...), read on the driver. Inputs not given here are
            fed with :meth:`Job.push`, :meth:`Job.advance` and :meth:`Job.close`.
        parallelism: replicas per vertex, overriding the dataflow's default.
        max_inflight: unacknowledged batches allowed per channel before a sender waits.
        batch_size: records per message when the driver pushes records.
        chaining: fuse pipeline-connected vertices into one actor.
        num_cpus: CPUs Ray reserves per vertex actor.
        pretouch_mb: MiB of memory each vertex actor maps at start-up and keeps for its
            arrays (like the JVM's ``-XX:+AlwaysPreTouch``, see
            :mod:`raytide.actors.hosts`): the page faults of a first large epoch move
            to start-up, at the cost of that much resident memory per actor. At most 64.
        name: the job name in actor names (default: the dataflow name plus a short id).
        recovery: take snapshots and recover from the death of any of the job's actors
            with exactly-once output (see :class:`~raytide.Recovery`): sources read in the
            replicas resume from their readers' positions, and the driver keeps what it
            sent an input itself until a committed snapshot covers it.
        restore: with ``recovery``, start from a committed snapshot of its store, ``"latest"``
            or an id (from ``job.stop()``, say), of an earlier run of the same program: its
            state comes back, the epochs that run handed out are not handed out again, and
            inputs fed the same way from their start continue where the snapshot left them.
            Vertices other than inputs may have another parallelism than in that run: the
            snapshot is first written again for this job's, keyed state moving to the new
            owners of its key groups (:mod:`raytide.rescale.reshard`).
        autoscale: with ``recovery``, an autoscaler actor that rescales the job's vertices
            while it runs, towards a goal (see :class:`~raytide.Autoscale`); the driver
            makes its changes while it waits on the job (``wait``, ``results``, ``collect``).
        oversubscribe: allow a vertex more replicas than the cluster can place
            (:func:`~raytide.rescale.widths.width_limit`: its CPUs over ``num_cpus``, or 4 per
            CPU when replicas reserve none).

    Raises:
        GraphError: the dataflow is invalid or ``inputs`` names an unknown input.
        ArgumentError: a count that is not a positive integer (``parallelism``,
            ``max_inflight``, ``batch_size``), a negative ``num_cpus``, ``pretouch_mb`` out
            of range, a vertex wider than its key groups or (without ``oversubscribe``) than
            the cluster can place (an ArgumentError is a ValueError too).
        SnapshotError: ``recovery``'s store cannot be written (a probe file is written and
            deleted first).
    """
    check_pretouch(pretouch_mb)
    max_inflight = positive_int(max_inflight, "max_inflight")
    batch_size = positive_int(batch_size, "batch_size")
    num_cpus = non_negative(num_cpus, "num_cpus")
    if name is not None and (not isinstance(name, str) or not name):
        raise ArgumentError(f"name must be a non-empty string, not {name!r}")
    if recovery is not None and not isinstance(recovery, Recovery):
        raise ArgumentError(f"recovery must be an rt.Recovery(...), not {type(recovery).__name__}")
    if autoscale is not None and (recovery is None or not isinstance(autoscale, Autoscale)):
        raise ArgumentError(f"autoscale must be an rt.Autoscale(...), with recovery=rt.Recovery(store) (a rescale "
                            f"moves state through its store); got autoscale={autoscale!r}, recovery={recovery!r}")
    if restore is not None and (recovery is None or not (restore == "latest" or _is_id(restore))):
        raise ArgumentError(f"restore must be 'latest' or a snapshot id, with recovery=rt.Recovery(store) "
                            f"naming the store; got restore={restore!r}, recovery={recovery!r}")
    if recovery is not None:  # a store it cannot write would abandon every snapshot, silently
        SnapshotStore(recovery.store, recovery.signing_key).check_writable()
    plan = compile_plan(flow, parallelism, chaining)
    unknown = sorted(set(inputs or {}) - set(plan.inputs))
    if unknown:
        raise GraphError(f"inputs {unknown} are not inputs of dataflow {plan.name!r}; its inputs are {plan.inputs}")
    if autoscale is not None:
        autoscale.check_names(plan.vertices, plan.inputs)
    sources = {input_name: as_source(source, input_name) for input_name, source in (inputs or {}).items()}
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    check_widths(plan, {name: plan.width(name) for name in plan.vertices}, cluster_cpus(), num_cpus, oversubscribe)
    restore_id = None
    if restore is not None:  # laid out for this job's parallelism first, if need be (a new snapshot)
        assert recovery is not None
        store = SnapshotStore(recovery.store, recovery.signing_key)
        restore_id = reshard_snapshot(plan, store, None if restore == "latest" else restore,  # type: ignore[arg-type]
                                      recovery.retain)
        if restore_id is None:
            raise SnapshotError(f"restore={restore!r}: the store {recovery.store!r} has no committed snapshot")
    job = Job(plan, name or f"{flow.name}-{uuid.uuid4().hex[:6]}", max_inflight, batch_size, num_cpus, pretouch_mb,
              recovery, restoring=restore is not None,
              recompile=functools.partial(compile_plan, flow, parallelism, chaining), autoscale=autoscale)
    try:
        if restore_id is not None:
            job.restore_from(restore_id)
        for input_name, source in sources.items():
            job.feed(input_name, source)
    except BaseException:  # a source that cannot start (a missing file): leave no actors behind
        job.cancel()
        raise
    return job


class Job:
    """A running dataflow: feed inputs, wait, read outputs, inspect, cancel."""

    def __init__(self, plan: PhysicalPlan, name: str, max_inflight: int, batch_size: int, num_cpus: float,
                 pretouch_mb: int, recovery: Recovery | None = None, restoring: bool = False,
                 recompile: Callable[[dict[str, int]], PhysicalPlan] | None = None,
                 autoscale: Autoscale | None = None) -> None:
        """``restoring``: the job will be restored from a snapshot (:meth:`restore_from`) before it runs.
        ``recompile``: the plan of the same dataflow with other widths (for :meth:`rescale`).
        ``autoscale``: start an autoscaler actor (:mod:`raytide.actors.autoscaler_actor`)."""
        self.plan, self.name = plan, name
        self.recompile = recompile
        self.max_inflight, self.batch_size = max_inflight, batch_size
        self.num_cpus, self.pretouch_mb = num_cpus, pretouch_mb
        self._error: BaseException | None = None
        self._torn_down = False
        self._feeders: list[threading.Thread] = []
        self._recovery = JobRecovery(recovery) if recovery is not None else None
        #: Longest wait for events between two liveness checks (shorter with recovery: a
        #: death is noticed within about two checks).
        self._poll_s = RECOVERY_POLL if recovery is not None else 0.5
        self._dead_leases: list[HostLease] = []
        self._delivered_before: dict[str, int] = {}
        #: Per input read in the replicas, the readers handed out (a recovery hands them out again).
        self.replica_readers: dict[str, list[Reader[Any]]] = {}
        self._rescaling = False
        #: Held by a rescale throughout and by every pump: a rescale from another thread waits
        #: for the one under way, and no thread takes events while a rescale changes the job.
        self._driving = threading.RLock()
        self._start(num_cpus, pretouch_mb, restoring)
        self._autoscaler: Any = None
        if autoscale is not None:
            self._autoscaler = _autoscaler_class().options(num_cpus=0, max_restarts=0).remote(
                name, autoscale, plan, self.peers, self.progress, num_cpus)
            self._autoscale_ref = self._autoscaler.next_change.remote(AUTOSCALE_POLL)

    # -- setup ---------------------------------------------------------------------------

    def _start(self, num_cpus: float, pretouch_mb: int, restoring: bool) -> None:
        """Lease hosts (warm ones from earlier jobs first; new ones start in parallel), give
        each its role, connect them. The driver waits for the vertex hosts, not for the
        progress host, which keeps what replicas send before it is connected."""
        plan = self.plan
        self._pool = pool = host_pool()
        keys = plan.replica_keys()
        self._leases: dict[Hashable, HostLease] = dict(zip(keys, pool.lease("vertex", len(keys), num_cpus)))
        self._leases[PROGRESS] = pool.lease("progress", 1)[0]
        #: Each replica's host (the raw actor handles: ``ray.kill`` and ``ping`` take them).
        self.actors: dict[ReplicaKey, Any] = {key: self._leases[key].handle for key in keys}
        peers = {key: self._leases[key].leased for key in keys}
        self.peers = peers
        self.progress = self._leases[PROGRESS].leased
        self._plan_ref = ray.put(plan)
        pids = [self._take_vertex(key) for key in keys]
        progress = self._leases[PROGRESS]
        pids.append(progress.handle.take.remote(progress.lease, self.name, plan.graph, plan.outputs,
                                                plan.initial_pointstamps()))
        self._unbounded = unbounded = set(plan.with_role("feedback"))  # sends out of a feedback vertex never wait
        self.outputs = OutputCollector(self.progress, plan.outputs, self._recovery.recovery.output_commit
                                       if self._recovery is not None else "epoch")
        self.inputs = InputFeeds(plan.name, {name: [peers[ReplicaKey(plan.chain_of(name).name, r)]
                                                    for r in range(plan.width(name))] for name in plan.inputs},
                                 self.max_inflight, self.batch_size, self._raise_if_failed,
                                 keep_calls=self._recovery is not None)
        coordinator = None
        if self._recovery is not None:
            pool.keep_spares(1)  # a warm host to replace a dead one
            self._recovery.start_run(self)
            coordinator = self._recovery.coordinator
        self._watch()
        connects = [peer.connect.remote(peers, unbounded, self.progress, coordinator) for peer in peers.values()]
        answers = self._get(pids[:-1] + connects, "starting and connecting vertex hosts")
        if coordinator is not None and not restoring:  # a restored job's snapshots begin once it is restored
            coordinator.start.remote()
        vertex_pids, subscriptions = answers[: len(keys)], answers[len(keys):]
        self.progress.connect.remote({key: (peers[key], locs) for key, locs in zip(keys, subscriptions)})
        self._pids: dict[str, int | Any] = {self._host_name(key): pid for key, pid in zip(keys, vertex_pids)}
        self._pids[self._host_name(PROGRESS)] = pids[-1]

    def _take_vertex(self, key: ReplicaKey, incarnation: int = 0) -> Any:
        """Tell the host leased for ``key`` to become that replica; the ref of its process id."""
        lease = self._leases[key]
        recovery = self._recovery.recovery if self._recovery is not None else None
        return lease.handle.take.remote(lease.lease, self._plan_ref, self.name, key.chain, key.replica,
                                        self.max_inflight, self.pretouch_mb, lease.handle, recovery, incarnation)

    def hosts_to_add(self, plan: PhysicalPlan) -> list[HostLease]:
        """Lease, from the warm pool, the hosts ``plan`` needs beyond the job's own (a rescale,
        before its cut), and wait until they answer: a host that is still starting does so
        before the job pauses, not during."""
        have = sum(1 for key in self._leases if isinstance(key, ReplicaKey))
        fresh = self._pool.lease("vertex", max(0, len(plan.replica_keys()) - have), self.num_cpus)
        self._wait_setup([lease.handle.ping.remote() for lease in fresh], f"starting {len(fresh)} hosts to rescale onto")
        return fresh

    def reconfigure_hosts(self, plan: PhysicalPlan, incarnation: int, fresh: list[HostLease]) -> dict[str, int]:
        """Switch to ``plan`` (a rescale): every replica of it gets a host, the one that played
        the same replica before, else another of the job's, else one of ``fresh``
        (:meth:`hosts_to_add`); the job's hosts left over go back to the pool. Each takes its
        role in ``incarnation`` and learns its peers. Returns how many hosts were ``kept``,
        ``added`` and ``returned``."""
        old = {key: lease for key, lease in self._leases.items() if isinstance(key, ReplicaKey)}
        keys = plan.replica_keys()
        leases: dict[Hashable, HostLease] = {key: old.pop(key) for key in keys if key in old}
        spare = list(old.values())
        missing = [key for key in keys if key not in leases]
        kept = len(leases) + min(len(spare), len(missing))
        leases.update(zip(missing, spare + fresh))
        returned = spare[len(missing):]
        self._pool.give_back(returned)
        self._leases = {PROGRESS: self._leases[PROGRESS], **leases}
        self.plan, self._plan_ref = plan, ray.put(plan)
        self.actors = {key: leases[key].handle for key in keys}
        self.peers = {key: leases[key].leased for key in keys}
        coordinator = self._recovery.coordinator if self._recovery is not None else None
        pids = [self._take_vertex(key, incarnation) for key in keys]
        connects = [self.peers[key].connect.remote(self.peers, self._unbounded, self.progress, coordinator)
                    for key in keys]
        answers = self._wait_setup(pids + connects, f"giving {len(keys)} hosts their replicas of the rescaled job")
        self._pids = {name: pid for name, pid in self._pids.items() if name.endswith(("/progress", "/coordinator"))}
        self._pids.update({self._host_name(key): pid for key, pid in zip(keys, answers)})
        return {"kept": kept, "added": len(fresh), "returned": len(returned)}

    def give_back(self, leases: list[HostLease]) -> None:
        """Give hosts the job does not use back to the pool (a rescale that did not happen)."""
        self._pool.give_back(leases)

    def _watch(self) -> None:
        """Watch every actor of the job for its death (the hosts, under their leases, and the
        coordinator if there is one)."""
        actors: dict[Hashable, Any] = {key: host.leased for key, host in self._leases.items()}
        if self._recovery is not None:
            actors[COORDINATOR] = self._recovery.coordinator
        self.liveness = Liveness(actors)

    def replace_dead_hosts(self, dead: list[Hashable]) -> list[str]:
        """Lease warm hosts for the dead replicas (and progress actor) in ``dead`` and give them
        their roles; returns the names of the replaced. For a recovery."""
        for key in dead:
            self._dead_leases.append(self._leases.pop(key))
            if key == PROGRESS:
                self._leases[PROGRESS] = lease = self._pool.lease("progress", 1)[0]
                self._wait_setup([lease.handle.take.remote(lease.lease, self.name, self.plan.graph, self.plan.outputs,
                                                           self.plan.initial_pointstamps())], "replacing the progress host")
                self.progress = self.outputs.progress = lease.leased
            else:
                assert isinstance(key, ReplicaKey)
                self._leases[key] = lease = self._pool.lease("vertex", 1, self.num_cpus)[0]
                self.actors[key] = lease.handle
                self.peers[key] = lease.leased
                self._wait_setup([self._take_vertex(key)], f"replacing replica {key}")
                self._wait_setup([lease.leased.connect.remote(self.peers, self._unbounded, self.progress,
                                                              self._recovery.coordinator if self._recovery else None)],
                                 f"connecting replica {key}")
            self._pids[self._host_name(key)] = lease.handle.ping.remote()
        return [self._host_name(key) for key in dead]

    def _wait_setup(self, refs: list, what: str) -> list:
        try:
            return ray.get(refs, timeout=SETUP_TIMEOUT)
        except ray.exceptions.GetTimeoutError as error:
            raise JobTimeout(f"job {self.name!r}: {what} took longer than {SETUP_TIMEOUT:.0f} s") from error

    def delivered(self) -> dict[str, int]:
        """Per output, the last epoch the driver has been handed (-1: none yet; in a job
        restored from an earlier run's snapshot, what that run had been handed counts)."""
        return {name: max(self._delivered_before.get(name, -1), -1 if epoch is None else epoch)
                for name, epoch in self.outputs.latest().items()}

    def restore_from(self, snapshot_id: int) -> None:
        """Start from committed snapshot ``snapshot_id`` of an earlier run (laid out for this job)."""
        recovery = self._require_recovery("restore=")
        point = restore_point(self.plan, recovery.store, snapshot_id)
        self._delivered_before = point.delivered
        self.outputs.resume_after(point.delivered)
        self.outputs.release(point.complete)  # what it holds complete is final: it is never computed again
        recovery.start_from(self, point)

    def skip_inputs(self, point: RestorePoint) -> None:
        """Skip, per input replica, the calls ``point`` had consumed (see :meth:`InputFeeds.skip`)."""
        self.inputs.skip({(vertex, key.replica): position for key, per_vertex in point.positions.items()
                          for vertex, position in per_vertex.items()},
                         {name: point.input_epoch(name) for name in self.plan.inputs})

    def _host_name(self, key: Hashable) -> str:
        """``job/chain/replica`` or ``job/progress``: how a host is named in Ray's log prefixes."""
        return f"{self.name}/progress" if key == PROGRESS else f"{self.name}/{key.chain}/{key.replica}"  # type: ignore[attr-defined]

    def hosts(self) -> dict[str, int]:
        """The process id of each host of this job, by ``job/chain/replica`` (and ``job/progress``;
        ``job/coordinator`` in a job with recovery)."""
        if self._recovery is not None and self._recovery.coordinator is not None:
            self._pids[f"{self.name}/coordinator"] = self._recovery.coordinator.ping.remote()
        for name, pid in self._pids.items():
            if isinstance(pid, ray.ObjectRef):
                try:
                    self._pids[name] = ray.get(pid, timeout=SETUP_TIMEOUT)
                except ray.exceptions.RayActorError:  # it died before its first answer
                    self._pids[name] = -1
        return dict(self._pids)

    def wait_ready(self, timeout: float = SETUP_TIMEOUT) -> None:
        """Block until the progress actor (and the snapshot coordinator, in a job with recovery)
        is up too; ``rt.run`` returns once the vertex actors are.

        Running does not need this (what replicas send the progress actor waits in Ray's
        queue until it runs), but a measurement that leaves start-up out does.
        """
        refs = [self.progress.ping.remote()]
        if self._recovery is not None:
            refs.append(self._recovery.coordinator.ping.remote())
        self._get(refs, "starting the progress host and the snapshot coordinator", timeout)

    def _get(self, refs: list, what: str, timeout: float = SETUP_TIMEOUT) -> list:
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError as error:
            self.cancel()
            raise JobTimeout(f"job {self.name!r}: {what} took longer than {timeout:.0f} s") from error

    # -- inputs --------------------------------------------------------------------------

    def _input_replicas(self, name: str) -> list[Any]:
        self.inputs.check(name)
        return self.inputs.replicas[name]

    def push(self, name: str, records: Any, epoch: int | None = None) -> None:
        """Send ``records`` into input ``name`` at ``epoch`` (default: the input's current epoch).

        Pushing at a later epoch first advances the input to it; pushing at an earlier
        epoch than the input's, or into a closed input, raises :class:`GraphError`.
        Records are spread over the input's replicas in turn, across pushes.

        Raises:
            RecordError: ``records`` is not a batch or iterable of records (a string, None),
                or a record does not pickle (nothing of the push is sent then).
            JobCancelled: the job was cancelled.
        """
        self._raise_if_failed()
        self.inputs.push(name, records, epoch)

    def push_refs(self, name: str, refs: list, epoch: int) -> None:
        """Send object refs of batches (e.g. Arrow tables) into input ``name``; replicas read them."""
        self._raise_if_failed()
        self.inputs.push_refs(name, refs, epoch)

    def advance(self, name: str, epoch: int) -> None:
        """Tell input ``name`` that no more records will come before ``epoch``."""
        self._raise_if_failed()
        self.inputs.advance(name, epoch)

    def close(self, name: str) -> None:
        """No more records will come into input ``name``."""
        self._raise_if_failed()
        self.inputs.close(name)

    def feed(self, name: str, source: Any) -> None:
        """Feed input ``name`` from ``source``, then close it.

        ``source`` is a :class:`~raytide.sources.base.Source` or an iterable of per-epoch
        record lists (see :func:`~raytide.sources.iterable.as_source`). A source read in
        the replicas gets one reader per input replica, each read there; a driver-side
        source's one reader runs on a background thread of the driver, which pushes what
        it yields.

        Raises:
            GraphError: ``name`` is not an input, ``source`` is neither a source nor an
                iterable, or it made the wrong number of readers.
        """
        replicas = self._input_replicas(name)
        source = as_source(source, name)
        on_driver = source.placement is Placement.DRIVER
        wanted = 1 if on_driver else len(replicas)
        readers = source.readers(wanted)
        if len(readers) != wanted:
            raise GraphError(f"source for input {name!r} made {len(readers)} readers, not {wanted}")
        if on_driver:
            thread = threading.Thread(target=self._feed, args=(name, readers[0]), name=f"raytide-feed-{name}", daemon=True)
            self._feeders.append(thread)
            thread.start()
            return
        self.inputs.hand_over(name)
        self.replica_readers[name] = readers
        self.start_readers(name, self.inputs.incarnation)

    def start_readers(self, name: str, incarnation: int) -> None:
        """Give each replica of input ``name`` its reader (again, after a recovery: each seeks
        to where its restored snapshot says it was)."""
        replicas = self._input_replicas(name)
        self._get([r.start_reader.remote(incarnation, name, reader)
                   for r, reader in zip(replicas, self.replica_readers[name])], f"starting readers of {name!r}")

    def _feed(self, name: str, reader: Reader[Any]) -> None:
        try:
            for epoch, batch in reader:
                if isinstance(batch, BlockRefs):
                    self.push_refs(name, list(batch.refs), epoch)
                else:
                    self.push(name, batch, epoch)
            self.close(name)
        except BaseException as error:  # surfaced by wait()/results()
            if not self._torn_down:
                self._error = RaytideError(f"feeding input {name!r} failed: {error!r}")
                self._error.__cause__ = error

    # -- outputs and waiting -------------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Take new events from the progress actor (waiting up to ``timeout``); check liveness.

        In a job with recovery, a death starts a recovery instead of failing the job. Not
        while another thread rescales the job (it waits for the rescale to end).
        """
        with self._driving:
            self._pump_now(timeout)

    def _pump_now(self, timeout: float) -> None:
        self._raise_if_failed()
        with self._cancelled_on_interrupt():
            try:
                failures = self.outputs.poll(timeout)
            except ray.exceptions.RayActorError as error:
                failures = [self._lost(PROGRESS, error)]
                failures[0].__cause__ = error
            dead = self.liveness.check()
            if dead is not None:
                failures.append(self._lost(*dead))
                failures[-1].__cause__ = dead[1]
            if self._recovery is not None:
                coordinator_died = self._recovery.sync(self)
                if coordinator_died is not None:
                    failures.append(ActorLost(coordinator_died))
            deaths = [f for f in failures if isinstance(f, (ReplicaLost, ActorLost))]
            if self._recovery is not None and deaths and len(deaths) == len(failures):
                self._recover("; ".join(map(str, deaths)))
            elif failures:
                self._fail(failures[0])
            if self._autoscaler is not None and not self._rescaling:
                self._autoscale()

    def _autoscale(self) -> None:
        """Make the changes the autoscaler decided on, if it has (without waiting for it)."""
        if not ray.wait([self._autoscale_ref], timeout=0)[0]:
            return
        try:
            changes = ray.get(self._autoscale_ref)
        except ray.exceptions.RayActorError as error:
            logger.warning("job %r: the autoscaler died (%s); the job goes on at its widths", self.name, error)
            self._autoscaler = None
            return
        record: dict[str, Any] | None = None
        if changes and self.outputs.finished:
            record = {"not_made": "the job had finished"}
        elif changes:
            try:
                record = self.rescale(changes)
            except RaytideError as error:
                logger.warning("job %r: the autoscaler's rescale %s was not made: %s", self.name, changes, error)
                record = {"not_made": str(error)}
        self._autoscaler.rescaled.remote(record, self.plan, self.peers, self.progress)
        self._autoscale_ref = self._autoscaler.next_change.remote(AUTOSCALE_POLL)

    def _recover(self, cause: str) -> None:
        assert self._recovery is not None
        try:
            self._recovery.recover(self, cause)
        except RaytideError as error:
            self._fail(error)
        if self._autoscaler is not None:  # it reads the replaced actors from now on
            self._autoscaler.rescaled.remote(None, self.plan, self.peers, self.progress)

    @contextlib.contextmanager
    def _cancelled_on_interrupt(self) -> Iterator[None]:
        """Ctrl-C (KeyboardInterrupt) while the driver waits tears the job down, then goes on up:
        a notebook's interrupted cell leaves no actors running. A broken guarantee
        (:class:`InternalError`) fails the job."""
        try:
            yield
        except InternalError as error:
            self._fail(error)
        except KeyboardInterrupt:
            self._cancel("Ctrl-C (KeyboardInterrupt) while the driver waited for it")
            raise

    def _lost(self, key: Any, error: BaseException) -> RaytideError:
        if key in (PROGRESS, COORDINATOR):
            return ActorLost(f"job {self.name!r}: {key} died: {type(error).__name__}")
        return ReplicaLost(f"{self.name}/{key.chain}/{key.replica}", self.plan.chain(key.chain).vertices,
                           "the driver's liveness check", type(error).__name__)

    def _fail(self, error: BaseException, cause: BaseException | None = None) -> None:
        if self._error is None:
            self._error = error
            if cause is not None:
                error.__cause__ = cause
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            self.cancel()
            raise self._error

    def wait(self, timeout: float = 600.0) -> None:
        """Wait until every input is closed and the dataflow has drained.

        Ctrl-C (KeyboardInterrupt) during the wait cancels the job, then propagates.

        Raises:
            JobTimeout: not finished within ``timeout`` seconds (says what is still open and
                which vertex holds the earliest pending work).
            JobCancelled: the job was cancelled before it finished.
            RaytideError: a vertex failed or an actor died.
        """
        deadline = time.monotonic() + timeout
        with self._cancelled_on_interrupt():
            while not self.outputs.finished:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobTimeout(self._describe_unfinished(timeout))
                self._pump(min(left, self._poll_s))

    def _describe_unfinished(self, timeout: float) -> str:
        open_inputs = self.inputs.open_inputs()
        done = self.outputs.latest()
        try:
            pending = ray.get(self.progress.describe.remote(), timeout=10)
        except Exception as error:  # the description must not fail itself
            pending = {"progress actor": f"unreachable: {error!r}"}
        return (f"job {self.name!r} did not finish within {timeout:.0f} s; {self._slowest_busy()}; inputs still open "
                f"(at epoch): {open_inputs}; latest complete epoch per output: {done}; "
                + "; ".join(f"{k}: {v or 'none'}" for k, v in pending.items()))

    def _slowest_busy(self, within: float = BUSY_PROBE) -> str:
        """The busy replicas furthest downstream, for timeout messages.

        Replicas hold back the progress of what they send while it cannot matter, so the
        tracker sees pending work upstream of a bottleneck (the progress description's
        "earliest pending work"). A replica that does not answer a ping within ``within``
        seconds is busy: running user code, or waiting for a slower receiver. Of the busy
        ones, those from which no other busy one is reachable are where the work waits.
        """
        pings = {key: handle.ping.remote() for key, handle in self.actors.items()}
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=within)
        busy = [key for key, ref in pings.items() if ref not in set(ready)]
        graph = self.plan.graph

        def reaches(a: ReplicaKey, b: ReplicaKey) -> bool:
            last, head = self.plan.chain(a.chain).vertices[-1], self.plan.chain(b.chain).vertices[0]
            return a.chain != b.chain and bool(graph.summaries(Location.of_vertex(last), Location.of_vertex(head)))

        slowest = [key for key in busy if not any(reaches(key, other) for other in busy)]
        if not slowest:
            return f"no replica was busy for {within:.0f} s"
        return "slowest (busy, furthest downstream): " + ", ".join(
            f"vertex {self.plan.chain(key.chain).vertices[0]!r} ({self._host_name(key)})" for key in slowest)

    def results(self, name: str, timeout: float = 600.0) -> Iterator[tuple[int, list]]:
        """Yield ``(epoch, records)`` of output ``name`` as each epoch completes, until the job finishes.

        Consuming releases: an epoch yielded here is dropped from the driver (so a job that
        runs for weeks keeps there only what was not consumed yet), and :meth:`collect`
        afterwards returns only the epochs not yet yielded. Each epoch is yielded once,
        across all iterators over this output.
        """
        self._check_output(name)
        deadline = time.monotonic() + timeout
        while True:
            for epoch in iter(lambda: self.outputs.first(name), None):
                yield epoch, self.outputs.take(name, epoch)
            if self.outputs.finished:
                return
            if time.monotonic() > deadline:
                raise JobTimeout(self._describe_unfinished(timeout))
            self._pump(self._poll_s)

    def __iter__(self) -> Iterator[tuple[int, list]]:
        outputs = self.plan.outputs
        if len(outputs) != 1:
            raise GraphError(f"the job has outputs {outputs}; iterate over job.results(name)")
        return self.results(outputs[0])

    def _check_output(self, name: str) -> None:
        if name not in self.plan.outputs:
            raise GraphError(f"{name!r} is not an output of dataflow {self.plan.name!r}; outputs: {self.plan.outputs}")

    def collect(self, name: str) -> dict[int, list]:
        """The records of output ``name`` per completed epoch so far: ``{epoch: records}``.

        The driver keeps what this returns (for batch use: call it again and get the same
        epochs and more) until :meth:`results` yields those epochs, which releases them; so
        after ``results`` this returns only the epochs it has not yielded yet.
        """
        self._check_output(name)
        if not self._torn_down:
            self._pump(0)
        return {epoch: self.outputs.records(name, epoch) for epoch in self.outputs.epochs(name)}

    def output_parts(self, name: str) -> dict[int, list]:
        """The packed record lists of output ``name`` per completed epoch (object refs or inline blobs).

        Large epochs stay in the object store where the sinks put them. After the job is
        torn down, the records it kept on the driver are packed again.
        """
        self._check_output(name)
        if not self._torn_down:
            self._pump(0)
        return self.outputs.packed(name, kept=self._torn_down)

    def snapshot(self, timeout: float = 60.0) -> int:
        """Take a snapshot now and wait until it is committed; returns its id (a job with recovery).

        Raises:
            SnapshotError: the snapshot was abandoned or not committed within ``timeout`` (the
                message names the job, its inputs' epochs and the coordinator's reason; a
                vertex whose state does not pickle fails the job with a SnapshotError naming
                it, the replica and the snapshot).
            ArgumentError: the job was started without ``recovery``.
        """
        recovery = self._require_recovery("job.snapshot()")
        at = self.inputs.open_inputs()
        try:
            return ray.get(recovery.coordinator.snapshot_now.remote(timeout, self.delivered()),
                           timeout=timeout + POLL_SLACK)
        except ray.exceptions.GetTimeoutError as error:
            raise SnapshotError(f"job {self.name!r}: no snapshot committed within {timeout:g} s") from error
        except ray.exceptions.RayTaskError as error:  # the coordinator's own error, without Ray's banner
            raise SnapshotError(f"job {self.name!r} (inputs at epochs {at}): {error.cause}") from None

    def stop(self, timeout: float = 60.0) -> int:
        """Take a final snapshot (a savepoint), tear the job down and return the snapshot's id.

        The driver takes no more events from the job once the savepoint is triggered, so the
        epochs it was handed (still readable with :meth:`collect`) are exactly those the
        savepoint records as delivered. A later ``rt.run(..., recovery=..., restore=id)`` of
        the same program, fed the same inputs from their start, continues from there and
        hands out only the epochs after them.
        """
        snapshot_id = self.snapshot(timeout)
        self._cancel(f"job.stop() after savepoint {snapshot_id}")
        return snapshot_id

    def _require_recovery(self, what: str) -> JobRecovery:
        if self._recovery is None:
            raise ArgumentError(f"{what} needs a job started with rt.run(..., recovery=rt.Recovery(store))")
        return self._recovery

    def inject_marker(self, marker: Marker) -> None:
        """Inject a control marker at every input replica; it travels in band behind earlier records."""
        self.inputs.inject_marker(marker)

    def replica_stats(self) -> dict[tuple[str, int], dict[str, Any]]:
        """The raw counters of every replica (including what each saw at each marker)."""
        keys = list(self.peers)
        return dict(zip(keys, ray.get([self.peers[k].stats.remote() for k in keys], timeout=60)))

    def frontier(self, probe: Probe) -> list[Timestamp]:
        """How far the probed stream has progressed: the timestamps that may still arrive there."""
        return ray.get(self.progress.frontier.remote(Location.of_input(probe.vertex, 0)), timeout=30)

    # -- inspection and teardown ---------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Records and batches per vertex, progress traffic, backpressure figures; in a job with
        recovery also ``snapshots`` and ``recoveries``. A replica that died (and is not
        replaced yet) is left out of the counters and named under ``unreachable``.

        Per vertex also its ``queued`` work (messages on their way to it or waiting in its
        replicas), its ``frontier`` (the earliest epoch that may still arrive) and
        ``frontier_lag`` (epochs behind the latest input); per replica (``replicas``, by
        ``job/chain/replica``) ``busy_s`` handling events, ``blocked_s`` waiting for a
        receiver's window (backpressure), and its own counters per vertex."""
        answers = self._replica_stats()
        alive = {key: answer for key, answer in answers.items() if answer is not None}
        keys, per_replica = list(alive), list(alive.values())
        vertices: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.Counter())
        for stats in per_replica:
            for name, counters in stats["vertices"].items():
                vertices[name].update(counters)
        try:
            progress = ray.get(self.progress.stats.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            progress = None
        if progress is None:  # dead, or the job is torn down (its host's lease is over)
            progress = {"batches_applied": None, "pushes": None, "vertices": {}}
        fed = [epoch for epoch in self.inputs.open_inputs().values() if epoch is not None]
        data_batches = sum(s["vertices"][c.vertices[0]]["batches_in"] for s, c in zip(per_replica, (self.plan.chain(k[0]) for k in keys)))
        return {
            "parallelism": self.parallelism(),
            "vertices": {n: {**c, **self._progress_of(n, progress["vertices"], fed)} for n, c in vertices.items()},
            "replicas": {self._host_name(key): {"busy_s": stats["busy_s"], "blocked_s": stats["blocked_s"],
                                                "vertices": stats["vertices"]} for key, stats in alive.items()},
            "progress_batches": progress["batches_applied"],
            "progress_pushes": progress["pushes"],
            "data_messages": data_batches,
            "max_inflight_seen": max((s["max_inflight_seen"] for s in per_replica), default=0),
            "backpressure_waits": sum(s["backpressure_waits"] for s in per_replica),
            "local_sends": sum(s["local_sends"] for s in per_replica),
            "hosts": self.hosts(),
            "unreachable": [self._host_name(key) for key, answer in answers.items() if answer is None],
            **self._recovery_stats(),
        }

    @staticmethod
    def _progress_of(vertex: str, progress: dict[str, dict[str, int | None]], fed: list[int]) -> dict[str, int | None]:
        """``queued`` and ``frontier`` of ``vertex`` (from the progress tracker), and
        ``frontier_lag``: how many epochs its frontier trails the latest epoch an open input
        is at (``fed``; None once nothing more can arrive, or no input is open)."""
        if vertex not in progress:
            return {}
        frontier = progress[vertex]["frontier"]
        lag = max(fed) - frontier if fed and frontier is not None else None
        return {**progress[vertex], "frontier_lag": lag}

    def parallelism(self) -> dict[str, int]:
        """Each vertex's number of replicas: ``{vertex_name: n}``."""
        return {name: self.plan.width(name) for name in self.plan.vertices}

    def rescale(self, widths: dict[str, int], timeout: float = 120.0, oversubscribe: bool = False) -> dict[str, Any]:
        """Change the parallelism of vertices of the running job (``{vertex_name: n}``) and
        return once the new configuration runs: what the rescale did and how long each step
        took (also in ``job.stats()["rescales"]``).

        The job is not restarted and nothing is lost, redone or handed out twice: every
        replica holds at a cut taken now, the keyed state and pending notifications of the
        moving key groups go to their new owners through the object store (the rest stays
        where it is), new replicas start on warm hosts and retiring ones give theirs back (see
        :mod:`raytide.rescale.widths`). A vertex that reads another replica by replica (fused
        behind it) is rescaled with it. Needs a job started with ``recovery=``: its
        coordinator takes the cut, and a death during a rescale is recovered from its snapshots.

        ``oversubscribe``: as in :func:`run`, allow more replicas than the cluster can place.
        Rescales from several threads are made one after the other (each checked against
        the widths the one before left); meanwhile no other thread takes the job's events.

        Raises:
            ArgumentError: the job was started without ``recovery``, a width is not a
                positive integer, or is more than a keyed vertex's key groups or (without
                ``oversubscribe``) than the cluster can place.
            GraphError: a vertex the job does not have.
            RescaleError: an input's width would change, two vertices that must keep one
                width were given different ones, a vertex whose width changes keeps state it
                cannot split by key, the job has finished, or another thread's rescale did
                not end within ``timeout``.
            SnapshotError: no cut was complete within ``timeout`` seconds.
        """
        recovery = self._require_recovery("job.rescale()")
        if not self._driving.acquire(timeout=timeout):
            raise RescaleError(f"job {self.name!r}: the rescale to {widths} waited {timeout:g} s for another thread's "
                               f"rescale (or recovery) of the job to end, and was not made")
        try:
            check_widths(self.plan, new_widths(self.plan, widths), cluster_cpus(), self.num_cpus, oversubscribe)
            self._raise_if_failed()
            if self.outputs.finished or self._torn_down:
                raise RescaleError(f"job {self.name!r} has finished (or was cancelled): there is nothing to rescale")
            self._rescaling = True
            return rescale(recovery, self, widths, timeout)
        finally:
            self._rescaling = False
            self._driving.release()

    def hold_at_cut(self, deadline: float) -> tuple[int, dict[ReplicaKey, HeldReport]]:
        """A rescale's cut: every replica holds its state at a marker the coordinator injects
        (``hold_now``); returns the cut's id and the replicas' reports. Deaths meanwhile are
        noticed and recovered from, and the cut is taken again after the recovery; a cut that
        fails without one is let go by a recovery too (held replicas run nothing until
        restored).

        Raises:
            SnapshotError: no cut was complete by ``deadline`` (``time.monotonic()``).
        """
        recovery = self._require_recovery("a rescale")
        while True:
            incarnation = recovery.incarnation
            ref = recovery.coordinator.hold_now.remote(max(0.1, deadline - time.monotonic()), self.delivered())
            while not ray.wait([ref], timeout=self._poll_s)[0]:
                self._pump(0)
            try:
                cut_id, reports = ray.get(ref)
            except (SnapshotError, ray.exceptions.RayActorError) as error:
                self._pump(0)  # a death: recover from it
                if recovery.incarnation == incarnation:
                    self._recover(f"job {self.name!r}: a rescale cut was not complete: {error}")
                if time.monotonic() >= deadline:
                    raise SnapshotError(f"job {self.name!r}: no rescale cut was complete in time: {error}") from error
                continue
            if cut_id is None:  # nothing is held
                raise SnapshotError(f"job {self.name!r}: the snapshot in flight did not complete in time, so no "
                                    f"rescale cut could be taken")
            return cut_id, reports

    def _replica_stats(self) -> dict[ReplicaKey, dict[str, Any] | None]:
        """Every replica's counters; None for one whose actor is dead."""
        refs = {key: peer.stats.remote() for key, peer in self.peers.items()}
        answers: dict[ReplicaKey, dict[str, Any] | None] = {}
        for key, ref in refs.items():
            try:
                answers[key] = ray.get(ref, timeout=60)
            except ray.exceptions.RayActorError:
                answers[key] = None
        return answers

    def _recovery_stats(self) -> dict[str, Any]:
        """``snapshots`` (the coordinator's figures) and ``recoveries``, in a job with recovery."""
        if self._recovery is None:
            return {}
        try:
            snapshots = ray.get(self._recovery.coordinator.stats.remote(), timeout=60)
        except ray.exceptions.RayActorError as error:
            snapshots = {"coordinator": f"unreachable: {type(error).__name__}"}
        autoscaler: Any = None
        if self._autoscaler is not None:
            try:
                autoscaler = ray.get(self._autoscaler.timeline.remote(self.outputs.finished), timeout=60)
            except ray.exceptions.RayActorError as error:
                autoscaler = f"unreachable: {type(error).__name__}"
        return {"snapshots": snapshots, "recoveries": self._recovery.stats(), "rescales": self._recovery.rescale_stats(),
                "autoscaler": autoscaler}

    def cancel(self) -> None:
        """Stop the job and give its hosts back to the pool, which resets them for the next
        job (results already complete stay readable).

        Waiting for a job cancelled before it finished raises :class:`JobCancelled`, and so
        does feeding it; cancelling twice does nothing.
        """
        self._cancel("the driver (job.cancel() or the end of its with block)")

    def _cancel(self, by: str) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        if self._error is None and not self.outputs.finished:
            self._error = JobCancelled(f"job {self.name!r} was cancelled by {by} before it finished; it takes no more "
                                       f"input; the epochs completed before and not consumed by job.results() stay readable "
                                       f"with job.collect()")
        for name, epoch in self.outputs.keep_locally():
            logger.debug("could not keep output %s epoch %s", name, epoch)
        killed = self._pool.give_back([*self._leases.values(), *self._dead_leases])
        if self._recovery is not None and self._recovery.coordinator is not None:
            ray.kill(self._recovery.coordinator)
        if self._autoscaler is not None:
            ray.kill(self._autoscaler)
        # Hosts that reserved CPUs are killed, not kept; ray.kill returns at once: wait (a bounded
        # time) until their processes are gone, so that the next job finds the CPUs free.
        if killed:
            gone = [handle.ping.remote() for handle in killed]
            _, alive = ray.wait(gone, num_returns=len(gone), timeout=TEARDOWN_TIMEOUT)
            if alive:
                logger.warning("job %r: %d hosts still alive %.0f s after being killed", self.name, len(alive),
                               TEARDOWN_TIMEOUT)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()


_AUTOSCALER_CLASS: list[Any] = []


def _autoscaler_class() -> Any:
    """The autoscaler actor's Ray class (made once: ray.remote pickles the class)."""
    if not _AUTOSCALER_CLASS:
        _AUTOSCALER_CLASS.append(ray.remote(max_concurrency=3, concurrency_groups={"poll": 1})(AutoscalerActor))  # type: ignore[call-overload]
    return _AUTOSCALER_CLASS[0]


def _is_id(value: Any) -> bool:
    """Whether ``value`` can be a snapshot id (a non-negative int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
