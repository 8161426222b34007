"""The driver's side of snapshots and recovery on Ray (``rt.run(..., recovery=rt.Recovery(...))``).

The driver supervises: it notices a death (a host that no longer answers its pings, the
progress actor's long poll failing, a replica reporting a dead peer) and recovers, in
the steps of :mod:`raytide.snapshots.recovery`, with the calls below; each waits, with a
timeout, for every actor it addresses, and no actor waits for the driver::

    driver ──take + connect──▶ a warm host, for each dead replica / the progress actor
    driver ──restore(n, snapshot k, peers)──▶ every replica       (*waits*; survivors reset in place)
    driver ──restore(n, pointstamps, kept outputs)──▶ progress actor   (*waits*)
    driver ──resume(n)──▶ every replica                          (*waits*)
    driver ──the logged calls after each position──▶ input replicas
    driver ──reset(n)──▶ coordinator (a new one if it died)

Meanwhile it keeps the coordinator informed of the epochs it has been handed (so output
replicas drop them) and learns of committed snapshots, which let it forget the input
calls they cover (:class:`~raytide.driver.inputs.CallLog`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray

from raytide.actors.coordinator_actor import CoordinatorActor
from raytide.core.keygroups import KeyGroupAssignment
from raytide.errors import JobTimeout
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.reshard import reshard_snapshot
from raytide.snapshots.config import Recovery
from raytide.snapshots.recovery import RestartBudget, RestorePoint, restore_point
from raytide.snapshots.replica_state import summed
from raytide.snapshots.store import SnapshotStore

if TYPE_CHECKING:
    from raytide.driver.job import Job

logger = logging.getLogger(__name__)

#: The coordinator's key among the actors the driver watches.
COORDINATOR = "the snapshot coordinator"
#: How long a recovery's calls may take.
RECOVERY_TIMEOUT = 120.0
#: How long the driver waits for a host's ping when it looks for the dead ones (a dead
#: host's ping fails at once; one that does not answer in time is busy, so alive).
PING_TIMEOUT = 0.3
#: The longest the driver waits for job events between two liveness checks, with recovery.
RECOVERY_POLL = 0.1

_COORDINATOR_CLASS: list[Any] = []


def _coordinator_class() -> Any:
    if not _COORDINATOR_CLASS:  # made once: ray.remote pickles the class
        _COORDINATOR_CLASS.append(ray.remote(max_concurrency=4, concurrency_groups={"watch": 1})(CoordinatorActor))  # type: ignore[call-overload]
    return _COORDINATOR_CLASS[0]


@dataclass
class Steps:
    """How long each step of a recovery took."""

    seconds: dict[str, float] = field(default_factory=dict)

    def time(self, step: str, function: Any, *args: Any) -> Any:
        started = time.monotonic()
        try:
            return function(*args)
        finally:
            self.seconds[step] = self.seconds.get(step, 0.0) + time.monotonic() - started


@dataclass
class RecoveryRecord:
    """One recovery, for ``job.stats()``."""

    incarnation: int
    cause: str
    snapshot_id: int | None
    replaced: list[str]
    seconds: float  # from noticing the failure to running again
    finished_at: float  # wall-clock time (``time.time()``) it was running again
    steps: dict[str, float]  # seconds of each step (finding the dead, replacing them, reading the snapshot, ...)


@dataclass
class RescaleRecord:
    """One rescale, for ``job.stats()``."""

    incarnation: int
    before: dict[str, int]  # the widths that changed, before
    after: dict[str, int]  # and after
    cut_id: int | None  # the id of the cut the replicas held at (None: nothing changed, so none was taken)
    seconds: float  # the whole call
    cut_s: float  # from asking for the cut to every replica holding (each runs what came before it, then holds)
    pause_s: float  # from every replica holding at the cut to every replica running again: nothing runs
    finished_at: float  # wall-clock time it was running again
    hosts: dict[str, int]  # kept, added from the pool, returned to it
    steps: dict[str, float]


@dataclass(frozen=True)
class Adoption:
    """What the replicas of a rescaled job start from: per replica the refs of the pieces
    handed over to it, the widths before, and the routing tables after."""

    refs: dict[ReplicaKey, list]
    old_widths: dict[str, int]
    tables: dict[str, KeyGroupAssignment]


@dataclass
class JobRecovery:
    """Snapshot and recovery state of one job on the driver."""

    recovery: Recovery
    budget: RestartBudget = field(init=False)
    store: SnapshotStore = field(init=False)
    #: The snapshots this run may recover from, in a store other runs may have used too: its
    #: own (ids from ``first_id`` on) and the one it was started from (``restore=``), never
    #: another run's.
    first_id: int = 1
    started_from: int | None = None
    incarnation: int = 0
    coordinator: Any = None
    sync_ref: Any = None
    commits_seen: int = 0
    retained: list[dict[tuple[str, int], int]] = field(default_factory=list)
    records: list[RecoveryRecord] = field(default_factory=list)
    rescales: list[RescaleRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.budget = RestartBudget(self.recovery.max_restarts)
        self.store = SnapshotStore(self.recovery.store, self.recovery.signing_key)

    # -- the coordinator -------------------------------------------------------------------

    def start_run(self, job: Job) -> None:
        """The run's first coordinator; its snapshots, and only those (with the one a
        ``restore=`` starts from), are the ones the run recovers from."""
        self.first_id = self.store.next_id()
        self.start_coordinator(job, self.first_id)

    def start_coordinator(self, job: Job, first_id: int = 1) -> None:
        """A coordinator for ``job``'s replicas, started without waiting for it; it takes no
        periodic snapshot before it is told to start (or reset by a recovery)."""
        self.coordinator = _coordinator_class().options(num_cpus=0, max_restarts=0).remote(
            job.plan, self.recovery, input_replicas(job), self.incarnation, first_id)

    def sync(self, job: Job) -> str | None:
        """Without waiting: tell the coordinator what the driver was handed, learn new commits
        and forget the input calls that the oldest retained snapshot covers. Returns what
        happened if the coordinator died."""
        if self.sync_ref is not None:
            ready, _ = ray.wait([self.sync_ref], timeout=0)
            if not ready:
                return None
            try:
                commits = ray.get(self.sync_ref)
            except ray.exceptions.RayActorError as error:
                self.sync_ref = None
                return f"job {job.name!r}: {COORDINATOR} died: {type(error).__name__}"
            self.commits_seen += len(commits)
            for commit in commits:
                self.retained.append(input_positions(job, commit.positions))
                job.outputs.release(commit.complete)
            self.retained = self.retained[-self.recovery.retain:]
            if self.retained:
                job.inputs.trim(self.retained[0])
        self.sync_ref = self.coordinator.sync.remote(job.delivered(), self.commits_seen)
        return None

    # -- recovery --------------------------------------------------------------------------

    def recover(self, job: Job, cause: str) -> None:
        """Bring ``job`` back from its last committed snapshot in a new incarnation.

        Raises:
            RecoveryError: more failures than ``max_restarts`` allow, or an input cannot
                go back to where the snapshot left it.
            JobTimeout: a step of the recovery did not finish in time.
        """
        started = time.monotonic()
        while True:
            self.budget.spend(cause)
            self.incarnation += 1
            incarnation = self.incarnation
            job.outputs.rollback()  # epochs no committed snapshot holds are computed again
            logger.warning("job %r: %s; recovering (incarnation %d)", job.name, cause, incarnation)
            steps = Steps()
            dead = steps.time("find the dead", self._dead, job)
            replaced = steps.time("replace them", job.replace_dead_hosts, dead)
            point = steps.time("read the snapshot", self.latest_point, job)
            if self.coordinator is None:
                # paused until the reset below: a barrier must not reach a replica before it is restored
                self.start_coordinator(job, point.snapshot_id + 1 if point.snapshot_id is not None else 1)
            job._watch()  # the replaced actors and coordinator
            self.sync_ref = None
            try:
                self.restore(job, point, incarnation, steps)
                break
            except ray.exceptions.RayActorError as error:  # another death during the recovery: start over
                cause = f"an actor died during recovery {incarnation}: {type(error).__name__}"
        seconds = time.monotonic() - started
        self.coordinator.reset.remote(incarnation, input_replicas(job), seconds)
        self.records.append(RecoveryRecord(incarnation, cause, point.snapshot_id, replaced, seconds, time.time(),
                                           steps.seconds))
        logger.warning("job %r recovered from snapshot %s in %.2f s", job.name, point.snapshot_id, seconds)

    def latest_point(self, job: Job) -> RestorePoint:
        """Where a recovery restores ``job`` from: the run's latest intact snapshot, else the
        snapshot it was started from, else the start; laid out for the job's widths first if
        it was taken at others (a rescale since)."""
        snapshot_id = reshard_snapshot(job.plan, self.store, None, self.recovery.retain, since=self.first_id)
        if snapshot_id is None and self.started_from is not None:
            snapshot_id = reshard_snapshot(job.plan, self.store, self.started_from, self.recovery.retain)
        return restore_point(job.plan, self.store if snapshot_id is not None else None, snapshot_id)

    def start_from(self, job: Job, point: RestorePoint) -> None:
        """A new job starts where snapshot ``point`` of an earlier run left off (``restore=``):
        incarnation 1, the epochs that run handed out are not handed out again, and each
        input replica skips the calls the snapshot had consumed."""
        self.started_from = point.snapshot_id
        self.incarnation = 1
        job.skip_inputs(point)
        self.restore(job, point, self.incarnation, Steps())
        self.coordinator.reset.remote(self.incarnation, input_replicas(job), None)

    def restore(self, job: Job, point: RestorePoint, incarnation: int, steps: Steps,
                adoption: Adoption | None = None) -> float:
        """Restore every replica and the progress actor at ``point``, resume, rewind the inputs;
        with ``adoption`` (a rescale), the replicas start from the pieces handed over instead
        of a snapshot, and their pointstamps are what they hold then. Returns when every
        replica ran again (``time.monotonic()``; the inputs' replay goes on while they run)."""
        keys = list(job.peers)
        pointstamps = point.pointstamps
        if adoption is None:
            subscriptions = steps.time("restore the replicas", self.wait, job, [
                job.peers[key].restore.remote(incarnation, point.snapshot_id, job.peers, job.progress,
                                              self.coordinator) for key in keys], "restoring the replicas")
        else:
            answers = steps.time("adopt the state", self.wait, job, [
                job.peers[key].adopt.remote(incarnation, adoption.refs[key], adoption.old_widths, adoption.tables,
                                            job.peers, job.progress, self.coordinator) for key in keys],
                "the replicas adopting the state handed over")
            subscriptions = [locations for locations, _ in answers]
            pointstamps = summed(pair for _, held in answers for pair in held)
        steps.time("restore the progress actor", self.wait, job, [job.progress.restore.remote(
            incarnation, pointstamps, job.delivered(), point.kept,
            {key: (job.peers[key], locations) for key, locations in zip(keys, subscriptions)},
            job.outputs.cursor)], "restoring the progress actor")
        steps.time("resume", self.wait, job, [job.peers[key].resume.remote(incarnation) for key in keys],
                   "resuming the replicas")
        resumed = time.monotonic()
        positions = {(vertex, key.replica): point.position(key, vertex)
                     for key in keys for vertex in job.plan.chain(key.chain).vertices if vertex in job.plan.inputs}
        steps.time("rewind the inputs", job.inputs.rewind, incarnation, input_handles(job), positions)
        for name in job.replica_readers:
            steps.time("restart the readers", job.start_readers, name, incarnation)
        return resumed

    def _dead(self, job: Job) -> list[Any]:
        """The keys of the job's actors that are dead (a ping that fails; a busy one is alive)."""
        actors = {**job.liveness.actors}
        pings = {key: actor.ping.remote() for key, actor in actors.items()}
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=PING_TIMEOUT)
        dead = []
        for key, ref in pings.items():
            if ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError:
                    dead.append(key)
        if COORDINATOR in dead:
            self.coordinator = None
        return [key for key in dead if key != COORDINATOR]

    def wait(self, job: Job, refs: list, what: str) -> list:
        try:
            return ray.get(refs, timeout=RECOVERY_TIMEOUT)
        except ray.exceptions.GetTimeoutError as error:
            raise JobTimeout(f"job {job.name!r}: {what} took longer than {RECOVERY_TIMEOUT:.0f} s") from error

    def stats(self) -> dict[str, Any]:
        """Recoveries so far (the coordinator adds the snapshots)."""
        return {"count": len(self.records), "incarnation": self.incarnation,
                "recoveries": [vars(record).copy() for record in self.records]}

    def rescale_stats(self) -> list[dict[str, Any]]:
        """Every rescale so far."""
        return [vars(record).copy() for record in self.rescales]


def input_replicas(job: Job) -> dict[ReplicaKey, Any]:
    """The replicas that host an input (where barriers are injected)."""
    return {key: peer for key, peer in job.peers.items()
            if any(vertex in job.plan.inputs for vertex in job.plan.chain(key.chain).vertices)}


def input_handles(job: Job) -> dict[str, list[Any]]:
    """Per input, its replicas' handles in replica order."""
    return {name: [job.peers[ReplicaKey(job.plan.chain_of(name).name, r)] for r in range(job.plan.width(name))]
            for name in job.plan.inputs}


def input_positions(job: Job, positions: dict[ReplicaKey, dict[str, int]]) -> dict[tuple[str, int], int]:
    """A snapshot's positions per ``(input, replica)``."""
    return {(vertex, key.replica): position for key, per_vertex in positions.items()
            for vertex, position in per_vertex.items()}
