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
    driver ──restart(n)──▶ coordinator (a new one if it died)

Meanwhile it keeps the coordinator informed of the epochs it has been handed (so output
replicas drop them) and learns of committed snapshots, which let it forget the input
calls they cover (:class:`~raytide.driver.inputs.CallLog`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.driver.inputs import InputFeeds
from raytide.driver.outputs import POLL_SLACK, OutputCollector
from raytide.driver.placement import COORDINATOR, JobPlacement
from raytide.driver.snapshot_health import SILENT_AFTER, SnapshotHealth
from raytide.driver.store_lease import LeaseKeeper, keeper_of, release_store
from raytide.errors import ActorLost, JobTimeout, RaytideError, SnapshotError, StoreFencedError
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.reshard import latest_restore_point
from raytide.snapshots.config import Recovery
from raytide.snapshots.consumed import ConsumedRecord, continue_from, starting_point
from raytide.snapshots.recovering import (
    Died,
    Failed,
    Finished,
    PauseCoordinator,
    PointRead,
    ProgressRestarted,
    Raised,
    ReadPoint,
    Recovering,
    RecoveryEffect,
    RecoveryEvent,
    Replaced,
    ReplaceDead,
    Replayed,
    ReplayInputs,
    ResetCoordinator,
    RestartProgress,
    Restored,
    RestoreReplicas,
    Resumed,
    ResumeReplicas,
    RollBackOutputs,
    TimedOut,
)
from raytide.snapshots.recovery import RestartBudget, RestorePoint
from raytide.snapshots.replica_state import summed
from raytide.snapshots.store import SnapshotStore, store_of

logger = logging.getLogger(__name__)

#: How long a recovery's calls may take.
RECOVERY_TIMEOUT = 120.0
#: How long the driver waits for a host's ping when it looks for the dead ones (a dead
#: host's ping fails at once; one that does not answer in time is busy, so alive).
PING_TIMEOUT = 0.3
#: The longest the driver waits for job events between two liveness checks, with recovery.
RECOVERY_POLL = 0.1

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
class _Execution:
    """One execution of a recovery machine on Ray: when it started, the step timings, the
    hosts it replaced and when the replicas ran again."""

    started: float
    steps: Steps
    replaced: list[str] = field(default_factory=list)
    resumed: float = 0.0


@dataclass
class RecoveryRecord:
    """One recovery, for ``job.stats()``."""

    incarnation: int
    cause: str
    restarts: int  # the incarnations it started: one, and one more for each death during it
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


@dataclass
class JobRecovery:
    """Snapshot and recovery state of one job on the driver, and the job's parts a recovery
    brings back: where its actors run, its inputs and its outputs."""

    recovery: Recovery
    placement: JobPlacement
    inputs: InputFeeds
    outputs: OutputCollector
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
    consumed: ConsumedRecord = field(init=False)
    records: list[RecoveryRecord] = field(default_factory=list)
    rescales: list[RescaleRecord] = field(default_factory=list)
    #: Renews the store's lease (``rt.run`` took it: :mod:`raytide.driver.store_lease`).
    lease: LeaseKeeper | None = field(init=False)
    #: Whether snapshots commit, and the coordinator answers (:mod:`raytide.driver.snapshot_health`).
    health: SnapshotHealth = field(init=False)

    def __post_init__(self) -> None:
        self.budget = RestartBudget(self.recovery.max_restarts)
        self.store = store_of(self.recovery)
        self.lease = keeper_of(self.recovery)
        self.consumed = ConsumedRecord(self.store)
        self.outputs.on_consumed = self.record_consumed
        self.health = SnapshotHealth(self.placement.name, self.recovery)

    # -- the coordinator -------------------------------------------------------------------

    def start_run(self) -> None:
        """The run's first coordinator; its snapshots, and only those (with the one a
        ``restore=`` starts from), are the ones the run recovers from."""
        self.first_id = self.store.next_id()
        self.start_coordinator(self.first_id)

    def start_coordinator(self, first_id: int = 1) -> None:
        """A coordinator for the job's replicas on a warm host; it takes no periodic snapshot
        before it is told to start (or restarted by a recovery)."""
        self.coordinator = self.placement.lease_coordinator(self.recovery, self.incarnation, first_id)
        self.commits_seen = 0  # a new coordinator's commits start afresh: counting the old one's would drop them

    def watch(self) -> None:
        """Watch the job's actors, the coordinator included, for their deaths."""
        self.placement.watch(self.coordinator)

    def sync(self) -> RaytideError | None:
        """Without waiting: tell the coordinator what the driver was handed, learn new commits
        and forget the input calls that the oldest retained snapshot covers. Returns what
        failed: the coordinator died (:class:`ActorLost`), or another driver took the store
        over (a :class:`~raytide.errors.StoreFencedError`: the job cannot go on), or its
        snapshots failed too long for its output to wait (:mod:`raytide.driver.snapshot_health`)."""
        if self.lease is not None and self.lease.fenced is not None:
            return self.lease.fenced
        if self.sync_ref is not None:
            ready, _ = ray.wait([self.sync_ref], timeout=0)
            if not ready:
                self.health.waiting(time.monotonic(), self.coordinator_name())
                return None
            try:
                commits, failing = ray.get(self.sync_ref)
            except ray.exceptions.RayActorError as error:
                self.drop_sync()
                return ActorLost(f"job {self.placement.name!r}: {COORDINATOR} died: {type(error).__name__}")
            failure = self.health.answered(failing, time.monotonic())
            if failure is not None:
                return failure
            self.commits_seen += len(commits)
            for commit in commits:
                self.retained.append(input_positions(commit.positions))
                self.inputs.commit(commit.snapshot_id, self.retained[-1])
                self.outputs.release(commit.complete)
            self.retained = self.retained[-self.recovery.retain:]
            if self.retained:
                self.inputs.trim(self.retained[0])
        self.sync_ref = self.coordinator.sync.remote(self.outputs.durable(), self.commits_seen)
        self.health.sent(time.monotonic())
        return None

    def drop_sync(self) -> None:
        """Forget the ``sync`` call in flight (the coordinator was replaced or reconfigured)."""
        self.sync_ref = None
        self.health.sent(None)

    def coordinator_name(self) -> str:
        """``the snapshot coordinator job/coordinator (process 123)``, for messages."""
        pid = self.placement.pid_of(f"{self.placement.name}/coordinator")
        return f"{COORDINATOR} {self.placement.name}/coordinator" + (f" (process {pid})" if pid is not None else "")

    def snapshot_now(self, timeout: float, delivered: dict[str, int], at: dict[str, int]) -> int:
        """Take a snapshot now and wait until it is committed (``job.snapshot()``); its id.
        ``at``: the inputs' epochs, for the message.

        Raises:
            SnapshotError: it was abandoned, or not committed within ``timeout`` (the
                coordinator's reason, or that it does not answer).
        """
        ref, deadline = self.coordinator.snapshot_now.remote(timeout, delivered), time.monotonic() + timeout
        while not ray.wait([ref], timeout=RECOVERY_POLL)[0]:
            now = time.monotonic()
            silent = self.health.is_silent(now)
            # The coordinator answers by the deadline itself (its wait is timed): one silent
            # past it by SILENT_AFTER more is stopped or starved, and is named.
            if now > deadline + POLL_SLACK or (now > deadline + SILENT_AFTER and silent):
                named = f"; {self.coordinator_name()} has not answered for {self.health.silent_for(now):.1f} s" \
                    if silent else ""
                raise SnapshotError(f"job {self.placement.name!r}: no snapshot committed within {timeout:g} s{named}")
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:  # the coordinator's own error, without Ray's banner
            raise SnapshotError(f"job {self.placement.name!r} (inputs at epochs {at}): {error.cause}") from None

    def release(self) -> None:
        """The job is over: give its hosts back to the pool, then its store's lease (the next
        driver takes the store at once; a late write of this job's actors is refused)."""
        self.placement.release()
        release_store(self.recovery)

    # -- recovery --------------------------------------------------------------------------

    def after_death(self, cause: str) -> Recovering:
        """The recovery (:meth:`execute` it) that brings the job back from its last committed
        snapshot in a new incarnation, after ``cause``."""
        return Recovering.after_death(self.placement.name, self.budget, self.incarnation, cause)

    def latest_point(self) -> RestorePoint:
        """Where a recovery restores the job from (:func:`~raytide.rescale.reshard.latest_restore_point`)."""
        return latest_restore_point(self.placement.plan, self.store, self.recovery.retain, self.first_id,
                                    self.started_from)

    def start_from(self, snapshot_id: int | str) -> None:
        """A new job starts where committed snapshot ``snapshot_id`` of an earlier run (laid
        out for this job) left off (``restore=``), or at the very start after a run that
        committed none (:data:`~raytide.snapshots.consumed.START`): incarnation 1, the epochs
        that run handed out are not handed out again (what it holds complete is final: it is
        never computed again), and each input replica skips the calls the snapshot had consumed."""
        point = starting_point(self.placement.plan, self.store, snapshot_id)
        continue_from(self.outputs, self.consumed, point, self.first_id)
        self.started_from = point.snapshot_id
        self.inputs.skip(input_positions(point.positions), point.input_epochs)
        self.execute(Recovering.from_point(self.placement.name, self.budget, point))

    def start_fresh(self) -> None:
        """A run from the start (no ``restore=``): nothing is consumed yet, whatever an
        earlier run's record says; the coordinator starts taking snapshots."""
        self.record_consumed({})
        self.coordinator.start.remote()

    def record_consumed(self, marks: dict[str, int]) -> None:
        """Write what the job's consumers have had (``OutputCollector.durable``) to the store
        (:mod:`raytide.snapshots.consumed`). Called before the consumer is handed its next
        epoch, so only the epoch in its hands can be handed out twice. A write that fails
        (the store cannot be written) is said and tried again at the next one; one another
        driver fenced fails the job."""
        try:
            self.consumed.write(marks, self.first_id, self.started_from)
        except StoreFencedError:
            raise
        except (OSError, ValueError) as error:  # pyarrow's errors (ArrowInvalid is a ValueError)
            self.health.record_failed(error)
        else:
            self.health.record_written()

    def execute(self, machine: Recovering, steps: Steps | None = None) -> float:
        """Perform the effects of recovery ``machine`` (:mod:`raytide.snapshots.recovering`),
        each on every actor it addresses at once, until the job runs again; returns when its
        replicas ran again (``time.monotonic()``; the inputs' replay goes on while they run).

        Raises:
            RaytideError: the machine failed the job (the restart budget is spent, a step
                took too long, an input cannot go back to where its snapshot left it).
        """
        run = _Execution(time.monotonic(), steps or Steps())
        effects = machine.start()
        while effects:
            answers = [self._perform(effect, run, machine) for effect in effects]
            effects = [effect for answer in answers if answer is not None for effect in machine.on(answer)]
        return run.resumed

    def _perform(self, effect: RecoveryEffect, run: _Execution, machine: Recovering) -> RecoveryEvent | None:
        """Perform one effect; its answer, a death (:class:`Died`), a timeout (:class:`TimedOut`)
        or what a replica's part raised (:class:`Raised`: user code's ``restore()``)."""
        if isinstance(effect, Failed):  # outside the try: a failure that is a JobTimeout is no answer
            raise effect.error
        if isinstance(effect, ResumeReplicas):  # a user error from now on may be raised in the replay: say so
            self.outputs.replaying = machine.replaying(self.outputs.most_opened)
        try:
            return self._act(effect, run)
        except ray.exceptions.RayTaskError as error:  # the actor lives: its call raised
            # what it raised may be a death it met (a handed-over piece whose owner died)
            return self._died(error.cause, machine) if isinstance(error.cause, DEATHS) else Raised(error.cause)
        except DEATHS as error:
            return self._died(error, machine)
        except JobTimeout as error:
            return TimedOut(str(error))

    def _died(self, error: BaseException, machine: Recovering) -> Died:
        """An actor's death, or an object lost with its owner: a rescale's pieces, put by a
        replica that died before the new replicas fetched them (Ray's OwnerDiedError)."""
        during = f"the rescale to incarnation {self.incarnation}" if machine.pieces is not None \
            else f"recovery {self.incarnation}"
        what = "an actor died" if isinstance(error, ray.exceptions.RayActorError) else \
            "an object whose owner died was lost"
        return Died(f"job {self.placement.name!r}: {what} during {during}: {type(error).__name__}")

    def _act(self, effect: RecoveryEffect, run: _Execution) -> RecoveryEvent | None:
        steps, placement = run.steps, self.placement
        if isinstance(effect, RollBackOutputs):
            self.outputs.rollback()  # epochs no committed snapshot holds are computed again
        elif isinstance(effect, PauseCoordinator):
            self._pause_coordinator(effect.incarnation)
        elif isinstance(effect, ReplaceDead):
            return self._replace_dead(effect, run)
        elif isinstance(effect, ReadPoint):
            return self._read_point(steps)
        elif isinstance(effect, RestoreReplicas):
            self.incarnation = effect.incarnation
            return self._restore_replicas(effect, steps)
        elif isinstance(effect, RestartProgress):
            progress = placement.progress
            # Every recovery and rescale passes here, under the job's lock: a poll made before it
            # (of a replaced progress actor, or of the rolled-back run) is never taken in.
            self.outputs.drop_poll()
            steps.time("restore the progress actor", self.wait, [progress.restore.remote(
                effect.incarnation, effect.pointstamps, self.outputs.delivered(), effect.kept,
                placement.progress_replicas(effect.subscriptions),
                self.outputs.cursor)], "restoring the progress actor")
            return ProgressRestarted()
        elif isinstance(effect, ResumeReplicas):
            steps.time("resume", self.wait, [peer.resume.remote(effect.incarnation) for peer in placement.peers.values()],
                       "resuming the replicas")
            run.resumed = time.monotonic()
            return Resumed()
        elif isinstance(effect, ReplayInputs):
            self._replay(effect, steps)
            return Replayed()
        elif isinstance(effect, ResetCoordinator):
            self._reset_coordinator(effect, time.monotonic() - run.started)
        elif isinstance(effect, Finished):
            self._finished(effect, run)
        return None

    def _replace_dead(self, effect: ReplaceDead, run: _Execution) -> Replaced:
        """Find the dead actors and lease warm hosts for their roles."""
        self.incarnation = effect.incarnation
        logger.warning("job %r: recovering (incarnation %d)", self.placement.name, effect.incarnation)
        steps = run.steps
        run.replaced = steps.time("replace them", self.placement.replace_dead, steps.time("find the dead", self._dead),
                                  self.coordinator)
        self.outputs.progress = self.placement.progress
        return Replaced(run.replaced)

    def _read_point(self, steps: Steps) -> PointRead:
        """Where to restore from; a new coordinator if the old one died (paused until the reset:
        a barrier must not reach a replica before it is restored)."""
        point = steps.time("read the snapshot", self.latest_point)
        if self.coordinator is None:
            self.start_coordinator(point.snapshot_id + 1 if point.snapshot_id is not None else 1)
        self.watch()  # the replaced actors and coordinator
        self.drop_sync()
        return PointRead(point)

    def _pause_coordinator(self, incarnation: int) -> None:
        """Pause the coordinator (and wait: no snapshot may commit after this); a dead one is replaced later."""
        if self.coordinator is None:
            return
        try:
            self.wait([self.coordinator.pause.remote(incarnation)], "pausing the snapshot coordinator")
        except ray.exceptions.RayActorError:
            self.coordinator = None

    def _restore_replicas(self, effect: RestoreReplicas, steps: Steps) -> Restored | Raised:
        """Every replica from its part of the snapshot, or from the pieces handed over to it; or
        what a replica's restore raised (it answers with the error, :class:`Raised`)."""
        placement, pieces = self.placement, effect.pieces
        peers = placement.peers
        keys = list(peers)
        if pieces is None:
            answers = steps.time("restore the replicas", self.wait, [
                peers[key].restore.remote(effect.incarnation, effect.point.snapshot_id, placement.peers_of(key),
                                          placement.route(key), self.coordinator) for key in keys], "restoring the replicas")
            return _raised(answers) or Restored(dict(zip(keys, answers)))
        adopted = steps.time("adopt the state", self.wait, [
            peers[key].adopt.remote(effect.incarnation, pieces.refs[key], pieces.old_widths, pieces.tables,
                                    placement.peers_of(key), placement.route(key), self.coordinator) for key in keys],
            "the replicas adopting the state handed over")
        return _raised([locations for locations, _ in adopted]) or Restored(
            {key: locations for key, (locations, _) in zip(keys, adopted)}, summed(pair for _, held in adopted for pair in held))

    def _replay(self, effect: ReplayInputs, steps: Steps) -> None:
        """The calls after each input replica's position, and the readers of sources read in the replicas."""
        plan, point = self.placement.plan, effect.point
        positions = {(vertex, key.replica): point.position(key, vertex) for key in self.placement.peers
                     for vertex in plan.chain(key.chain).vertices if vertex in plan.inputs}
        steps.time("rewind the inputs", self.inputs.rewind, effect.incarnation, self.placement.input_handles(), positions, plan)
        steps.time("restart the readers", self.inputs.start_readers, effect.incarnation)

    def _reset_coordinator(self, effect: ResetCoordinator, seconds: float) -> None:
        inputs = self.placement.input_replicas()
        if effect.how == "rescaled":  # reconfigured for the new widths before the replicas adopted
            self.coordinator.start.remote(inputs)
        else:
            self.coordinator.restart.remote(effect.incarnation, inputs, seconds if effect.how == "recovered" else None)

    def _finished(self, effect: Finished, run: _Execution) -> None:
        if not effect.causes:  # a start from a savepoint, or a rescale's switch, that nothing interrupted
            return
        seconds = time.monotonic() - run.started
        self.records.append(RecoveryRecord(effect.incarnation, "; ".join(effect.causes), len(effect.causes),
                                           effect.snapshot_id, run.replaced, seconds, time.time(), run.steps.seconds))
        logger.warning("job %r recovered from snapshot %s in %.2f s", self.placement.name, effect.snapshot_id, seconds)

    def _dead(self) -> list[Any]:
        """The keys of the job's actors that are dead (a ping that fails; a busy one is alive)."""
        actors = {**self.placement.liveness.actors}
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

    def wait(self, refs: list, what: str) -> list:
        """``ray.get(refs)`` within :data:`RECOVERY_TIMEOUT`.

        Raises:
            JobTimeout: naming ``what`` took too long.
        """
        return self.placement.wait(refs, what, RECOVERY_TIMEOUT)

    def stats(self) -> dict[str, Any]:
        """Recoveries so far (the coordinator adds the snapshots): ``count`` restarts after a
        death (a death during a recovery starts it over: one record, one more restart)."""
        return {"count": sum(record.restarts for record in self.records), "incarnation": self.incarnation,
                "recoveries": [vars(record).copy() for record in self.records]}

    def rescale_stats(self) -> list[dict[str, Any]]:
        """Every rescale so far."""
        return [vars(record).copy() for record in self.rescales]


#: What a call meets when a process of the job died: recovered from, not user code's failure.
DEATHS = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)


def _raised(answers: list) -> Raised | None:
    """The first error among the replicas' answers to a restore (user code's ``restore()`` raised there), if any."""
    return next((Raised(answer) for answer in answers if isinstance(answer, BaseException)), None)


def input_positions(positions: dict[ReplicaKey, dict[str, int]]) -> dict[tuple[str, int], int]:
    """A snapshot's positions per ``(input, replica)``."""
    return {(vertex, key.replica): position for key, per_vertex in positions.items()
            for vertex, position in per_vertex.items()}
