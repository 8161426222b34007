"""The driver's hold on a job's snapshots (``rt.run(..., recovery=rt.Recovery(...))``):
:class:`JobSnapshots`, the coordinator (started, synced, asked for a snapshot, replaced), what
the driver learns of committed snapshots (which let it forget the input calls they cover:
:class:`~raytide.supervisor.replay.ReplayLog`, and show output epochs held for a commit), the
record of what its consumers had, and what a recovery restores from. The recovery itself is
:mod:`raytide.driver.recovery` (:class:`~raytide.driver.recovery.JobRecovery`, which extends
this), carried out on Ray by :mod:`raytide.driver.recovery_runtime`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.driver.inputs import InputFeeds
from raytide.driver.outputs import POLL_SLACK, OutputCollector
from raytide.driver.placement import COORDINATOR, JobPlacement
from raytide.driver.snapshot_health import SILENT_AFTER, SnapshotHealth
from raytide.driver.store_lease import LeaseKeeper, keeper_of, release_store
from raytide.errors import ActorLost, RaytideError, SnapshotError, StoreFencedError
from raytide.rescale.reshard import latest_restore_point
from raytide.snapshots.config import Recovery
from raytide.snapshots.consumed import ConsumedRecord
from raytide.snapshots.incarnations import enter_incarnation
from raytide.snapshots.recovery import RestartBudget, RestorePoint
from raytide.snapshots.store import SnapshotStore, store_of
from raytide.supervisor.replay import input_positions

#: How long a recovery's calls may take.
RECOVERY_TIMEOUT = 120.0
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
    kind: str = "job"  # "job": every replica rolled back; "alone": the lost replica only (driver/alone_recovery.py)
    why: str = ""  # what raytide.supervisor.alone.decide found about the deaths


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
    mode: str = "whole job"  # "stepped": key groups moved in steps while the others flowed (driver/stepped.py)
    why: str = ""  # why a rescale asked to step held the whole job instead
    stepped: dict[str, Any] = field(default_factory=dict)  # the plan's vertex, epochs, steps and groups


@dataclass
class JobSnapshots:
    """Snapshot state of one job on the driver (see the module docstring), and the job's parts a
    recovery brings back: where its actors run, its inputs and its outputs."""

    recovery: Recovery
    placement: JobPlacement
    inputs: InputFeeds
    outputs: OutputCollector
    #: Whether what the consumers had is recorded in the store (False: a job without recovery,
    #: whose rescales alone use this, writes nothing there).
    durable: bool = True
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
    consumed: ConsumedRecord = field(init=False)
    records: list[RecoveryRecord] = field(default_factory=list)
    rescales: list[RescaleRecord] = field(default_factory=list)
    #: Why the last recovery alone gave up before the whole job rolled back (a sender's log could not replay).
    alone_refused: str | None = None
    #: Renews the store's lease (``rt.run`` took it: :mod:`raytide.driver.store_lease`).
    lease: LeaseKeeper | None = field(init=False)
    #: Whether snapshots commit, and the coordinator answers (:mod:`raytide.driver.snapshot_health`).
    health: SnapshotHealth = field(init=False)

    def __post_init__(self) -> None:
        self.budget = RestartBudget(self.recovery.max_restarts)
        self.store = store_of(self.recovery).at(self.incarnation)  # the driver's writes follow its incarnation
        self.lease = keeper_of(self.recovery)
        self.consumed = ConsumedRecord(self.store)
        if self.durable:
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
                self.inputs.commit(commit.snapshot_id, input_positions(commit.positions))
                self.outputs.release(commit.complete)
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

    def enter(self, incarnation: int) -> None:
        """A recovery starts ``incarnation``: record it in the store before any coordinator of it
        may commit (:func:`~raytide.snapshots.incarnations.enter_incarnation`: a coordinator of an
        earlier one, replaced but still running, is fenced); the driver's own writes (the consumed
        record, a snapshot rewritten for a rescaled job) follow it from now on."""
        self.store = self.consumed.store = enter_incarnation(self.store, incarnation, self.placement.name)

    def latest_point(self) -> RestorePoint:
        """Where a recovery restores the job from (:func:`~raytide.rescale.reshard.latest_restore_point`)."""
        return latest_restore_point(self.placement.plan, self.store, self.recovery.retain, self.first_id,
                                    self.started_from)

    def record_consumed(self, marks: dict[str, int]) -> None:
        """Write what the job's consumers have had (``OutputCollector.durable``) to the store
        (:mod:`raytide.snapshots.consumed`). Called before the consumer is handed its next
        epoch, so only the epoch in its hands can be handed out twice. A write that fails
        (the store cannot be written) is said and tried again at the next one; one another
        driver fenced fails the job. Nothing once the job has released its store's lease (at its
        teardown, or at its driver's exit): an iterator of ``job.results`` dropped after that (at
        the latest as the interpreter shuts down, when not even an import works) leaves the epoch
        in its consumer's hands undelivered, as a killed driver does."""
        if self.lease is not None and self.lease.released:
            return
        try:
            self.consumed.write(marks, self.first_id, self.started_from)
        except StoreFencedError:
            raise
        except (OSError, ValueError) as error:  # pyarrow's errors (ArrowInvalid is a ValueError)
            self.health.record_failed(error)
        else:
            self.health.record_written()

    def wait(self, refs: list, what: str) -> list:
        """``ray.get(refs)`` within :data:`RECOVERY_TIMEOUT`.

        Raises:
            JobTimeout: naming ``what`` took too long.
        """
        return self.placement.wait(refs, what, RECOVERY_TIMEOUT)

    def settle(self, ref: Any, what: str) -> None:
        """Wait for ``ref``, a call that changes whether or what the coordinator snapshots (``start``,
        ``restart``, ``widen``): it runs its calls on several threads, which Ray does not order, so the
        driver's next call (a stepped rescale's pause, a recovery's) could run first and be undone by it,
        or undo it. A dead coordinator is left to the liveness check, which recovers from it."""
        try:
            self.wait([ref], what)
        except ray.exceptions.RayActorError:
            pass

    def stats(self) -> dict[str, Any]:
        """Recoveries so far (the coordinator adds the snapshots): ``count`` restarts after a
        death (a death during a recovery starts it over: one record, one more restart)."""
        return {"count": sum(record.restarts for record in self.records), "incarnation": self.incarnation,
                "recoveries": [vars(record).copy() for record in self.records]}

    def rescale_stats(self) -> list[dict[str, Any]]:
        """Every rescale so far."""
        return [vars(record).copy() for record in self.rescales]
