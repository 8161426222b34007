"""A recovery as a pure state machine: the order of its steps, written once, for the Ray
driver (:mod:`raytide.driver.recovery`) and the in-process runtime
(:mod:`raytide.testing.local`) to execute.

The machine never waits and never talks to an actor. It returns *effects* (what to do
next) and takes *events* (what came of them); an executor performs each effect its own
way (the driver calls every replica at once and waits, with a timeout; the simulator
performs one replica's part per scheduler step, in a seeded order) and feeds the answer
back. One run of the machine brings the job back in one new incarnation::

    start ──▶ REPLACING   RollBackOutputs, PauseCoordinator(n),  ◀──────────────┐
                          ReplaceDead(n)                                         │
              │ Replaced                                                         │
              ▼                                                                  │
              READING     ReadPoint                                              │
              │ PointRead(point)                                                 │
              ▼                                                                  │  Died
   restore= ─▶ RESTORING  RestoreReplicas(n, point | pieces)                     │  (budget spent,
   rescale ─▶ │ Restored(subscriptions, held pointstamps)                        │   n + 1)
              ▼                                                                  │
              RESTARTING  RestartProgress(n, pointstamps, kept, subscriptions)   │
              │ ProgressRestarted                                                │
              ▼                                                                  │
              RESUMING    ResumeReplicas(n)                                      │
              │ Resumed                                                          │
              ▼                                                                  │
              REPLAYING   ReplayInputs(n, point) ───────────────────────────────┘
              │ Replayed
              ▼
              DONE        ResetCoordinator(n), Finished

A death noticed in any phase (:class:`Died`) starts over in the next incarnation, from
the last committed snapshot, once the restart budget allows it; a step that does not
finish in time (:class:`TimedOut`) fails the job, and so does a replica whose part of a
step raised (:class:`Raised`: user code's ``restore()``, a part that does not verify), at
once and naming the step (:mod:`raytide.snapshots.blame`): a restart would raise again. A
job started from a savepoint (``restore=``) and a rescale's switch (the replicas adopt the
pieces handed over to them) enter at RESTORING: a death there is recovered from like any other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from raytide.errors import JobTimeout, RaytideError
from raytide.physical.protocol import ReplicaKey
from raytide.progress.tracker import Pointstamp
from raytide.snapshots.blame import Replaying, raised_in
from raytide.snapshots.recovery import RestartBudget, RestorePoint


class RecoveryPhase(enum.Enum):
    """Where a recovery is."""

    REPLACING = "finding the dead and replacing them"
    READING = "reading the restore point"
    RESTORING = "restoring the replicas"
    RESTARTING = "restarting the progress actor"
    RESUMING = "resuming the replicas"
    REPLAYING = "replaying the inputs"
    DONE = "running again"
    FAILED = "failed"


@dataclass(frozen=True)
class Pieces:
    """What the replicas of a rescaled job start from instead of a snapshot: per replica
    the pieces (or their refs) handed over to it, the widths before, and the routing
    tables after."""

    refs: dict[ReplicaKey, list]
    old_widths: dict[str, int]
    tables: dict[str, Any]


# -- effects: what the executor does next ---------------------------------------------------


@dataclass(frozen=True)
class RollBackOutputs:
    """Drop the output epochs the driver holds for a commit: the restored job computes them again."""


@dataclass(frozen=True)
class PauseCoordinator:
    """Record ``incarnation`` in the store first (a coordinator of an earlier one, declared dead
    but running, is fenced: :func:`~raytide.snapshots.incarnations.enter_incarnation`); the
    coordinator abandons the snapshot in flight and takes none until :class:`ResetCoordinator`:
    no snapshot of the lost incarnation may commit while the replicas are restored from an older
    one (its retention could delete the files they read)."""

    incarnation: int


@dataclass(frozen=True)
class ReplaceDead:
    """Find the job's dead actors and give their roles to fresh hosts (a dead coordinator:
    a new one, paused until :class:`ResetCoordinator`); answer :class:`Replaced`."""

    incarnation: int


@dataclass(frozen=True)
class ReadPoint:
    """Read where to restore from: the run's latest intact snapshot, laid out for the job's
    widths; answer :class:`PointRead`."""


@dataclass(frozen=True)
class RestoreReplicas:
    """Reset every replica into ``incarnation`` from ``point`` (or, with ``pieces``, from
    the pieces handed over to it); answer :class:`Restored`."""

    incarnation: int
    point: RestorePoint
    pieces: Pieces | None = None


@dataclass(frozen=True)
class RestartProgress:
    """A new progress actor state in ``incarnation``: the restored pointstamps, the kept
    output records, the replicas' subscriptions; answer :class:`ProgressRestarted`."""

    incarnation: int
    pointstamps: list[tuple[Pointstamp, int]]
    kept: dict[str, dict[int, list]]
    subscriptions: dict[ReplicaKey, Any]


@dataclass(frozen=True)
class ResumeReplicas:
    """Let every restored replica run (its logged back-edge batches first); answer :class:`Resumed`."""

    incarnation: int


@dataclass(frozen=True)
class ReplayInputs:
    """Send every input replica the calls after its position in ``point`` (and restart the
    readers of sources read in the replicas); answer :class:`Replayed`."""

    incarnation: int
    point: RestorePoint


@dataclass(frozen=True)
class ResetCoordinator:
    """The coordinator goes on in ``incarnation``: snapshots again, of the restored job.
    ``how`` the job got there: ``"recovered"`` from a death (which a tuned interval counts),
    ``"restored"`` from a savepoint, or ``"rescaled"`` (the coordinator was reconfigured for
    the new widths already)."""

    incarnation: int
    how: Literal["recovered", "restored", "rescaled"]


@dataclass(frozen=True)
class Finished:
    """The job runs again in ``incarnation``, restored from ``snapshot_id`` (None: the start)."""

    incarnation: int
    snapshot_id: int | None
    causes: list[str]


@dataclass(frozen=True)
class Failed:
    """The job cannot be brought back: fail it with ``error``."""

    error: RaytideError


RecoveryEffect = (RollBackOutputs | PauseCoordinator | ReplaceDead | ReadPoint | RestoreReplicas | RestartProgress | ResumeReplicas
          | ReplayInputs | ResetCoordinator | Finished | Failed)


# -- events: what came of an effect, or what happened meanwhile ------------------------------


@dataclass(frozen=True)
class Replaced:
    names: list[str]


@dataclass(frozen=True)
class PointRead:
    point: RestorePoint


@dataclass(frozen=True)
class Restored:
    """Every replica restored: the locations each subscribes to, and (when restored from
    pieces) the pointstamps they hold, which replace the point's."""

    subscriptions: dict[ReplicaKey, Any]
    held: list[tuple[Pointstamp, int]] | None = None


@dataclass(frozen=True)
class ProgressRestarted:
    pass


@dataclass(frozen=True)
class Resumed:
    pass


@dataclass(frozen=True)
class Replayed:
    pass


@dataclass(frozen=True)
class Died:
    """An actor of the job died (or could not be reached) during the recovery (or during a
    rescale: :mod:`raytide.rescale.rescaling` takes it too)."""

    cause: str


@dataclass(frozen=True)
class TimedOut:
    """A step (``what``) did not finish within the recovery's timeout (or a rescale's
    deadline: :mod:`raytide.rescale.rescaling`)."""

    what: str


@dataclass(frozen=True)
class Raised:
    """A replica's part of a step raised ``error`` (user code's ``restore()``, a part of the
    snapshot that does not verify): the job fails with it, naming the step."""

    error: BaseException


RecoveryEvent = Replaced | PointRead | Restored | ProgressRestarted | Resumed | Replayed | Died | TimedOut | Raised


@dataclass
class Recovering:
    """One recovery of a job (see the module docstring for the steps).

    Build it with :meth:`after_death`, :meth:`from_point` or :meth:`adopting`, take the
    first effects from :meth:`start`, then feed every answer to :meth:`on`.
    """

    job: str
    budget: RestartBudget
    incarnation: int
    phase: RecoveryPhase = RecoveryPhase.REPLACING
    point: RestorePoint | None = None
    pieces: Pieces | None = None
    causes: list[str] = field(default_factory=list)

    @classmethod
    def after_death(cls, job: str, budget: RestartBudget, incarnation: int, cause: str) -> Recovering:
        """A recovery of a job whose ``incarnation`` lost an actor (``cause``)."""
        return cls(job, budget, incarnation, causes=[cause])

    @classmethod
    def from_point(cls, job: str, budget: RestartBudget, point: RestorePoint, incarnation: int = 1) -> Recovering:
        """A job's start from ``point`` of an earlier run (``restore=``), in ``incarnation``."""
        return cls(job, budget, incarnation, RecoveryPhase.RESTORING, point)

    @classmethod
    def adopting(cls, job: str, budget: RestartBudget, point: RestorePoint, pieces: Pieces,
                 incarnation: int) -> Recovering:
        """A rescale's switch: the replicas of the new widths start from ``pieces`` at ``point``."""
        return cls(job, budget, incarnation, RecoveryPhase.RESTORING, point, pieces)

    def start(self) -> list[RecoveryEffect]:
        """The first effects."""
        if self.phase is RecoveryPhase.RESTORING:
            assert self.point is not None
            return [RestoreReplicas(self.incarnation, self.point, self.pieces)]
        return self._begin(self.causes[-1])

    def on(self, event: RecoveryEvent) -> list[RecoveryEffect]:
        """The effects that follow ``event``."""
        if self.phase in (RecoveryPhase.DONE, RecoveryPhase.FAILED):
            return []
        if isinstance(event, Died):
            self.causes.append(event.cause)
            return self._begin(event.cause)
        if isinstance(event, TimedOut):
            return self._fail(JobTimeout(f"job {self.job!r}: {event.what} took too long in recovery "
                                         f"{self.incarnation} ({self.phase.value})"))
        if isinstance(event, Raised):
            restoring = None if self.point is None else self.point.snapshot_id
            return self._fail(raised_in(event.error, self.job, self.incarnation, restoring, self.pieces is not None,
                                        self.causes, self.phase.value))
        return self._next(event)

    def replaying(self, fed: int | None) -> Replaying | None:
        """What this recovery computes again once its replicas are restored, the driver having
        fed the job up to epoch ``fed`` (:mod:`raytide.snapshots.blame`); None for a start
        from ``restore=`` or a rescale's switch."""
        if self.point is None or self.pieces is not None:
            return None
        return Replaying.of(self.job, self.incarnation, self.point.snapshot_id, self.causes, self.point.pointstamps, fed)

    def _begin(self, cause: str) -> list[RecoveryEffect]:
        """Start over in the next incarnation, if the budget allows another restart."""
        try:
            self.budget.spend(cause)
        except RaytideError as error:
            return self._fail(error)
        self.incarnation += 1
        self.phase, self.point, self.pieces = RecoveryPhase.REPLACING, None, None
        return [RollBackOutputs(), PauseCoordinator(self.incarnation), ReplaceDead(self.incarnation)]

    def _next(self, event: RecoveryEvent) -> list[RecoveryEffect]:
        expected = _ANSWERS[self.phase]
        if not isinstance(event, expected):
            raise AssertionError(f"recovery of job {self.job!r} in {self.phase.name} got {event!r}, "
                                 f"not a {expected.__name__}")
        if isinstance(event, Replaced):
            self.phase = RecoveryPhase.READING
            return [ReadPoint()]
        if isinstance(event, PointRead):
            self.phase, self.point = RecoveryPhase.RESTORING, event.point
            return [RestoreReplicas(self.incarnation, event.point)]
        assert self.point is not None
        if isinstance(event, Restored):
            self.phase = RecoveryPhase.RESTARTING
            point = self.point if event.held is None else replace(self.point, pointstamps=event.held)
            return [RestartProgress(self.incarnation, point.pointstamps, point.kept, event.subscriptions)]
        if isinstance(event, ProgressRestarted):
            self.phase = RecoveryPhase.RESUMING
            return [ResumeReplicas(self.incarnation)]
        if isinstance(event, Resumed):
            self.phase = RecoveryPhase.REPLAYING
            return [ReplayInputs(self.incarnation, self.point)]
        self.phase = RecoveryPhase.DONE
        how: Literal["recovered", "restored", "rescaled"] = \
            "recovered" if self.causes else "rescaled" if self.pieces is not None else "restored"
        return [ResetCoordinator(self.incarnation, how), Finished(self.incarnation, self.point.snapshot_id, self.causes)]

    def _fail(self, error: RaytideError) -> list[RecoveryEffect]:
        self.phase = RecoveryPhase.FAILED
        return [Failed(error)]


#: The answer each phase waits for.
_ANSWERS: dict[RecoveryPhase, type] = {
    RecoveryPhase.REPLACING: Replaced,
    RecoveryPhase.READING: PointRead,
    RecoveryPhase.RESTORING: Restored,
    RecoveryPhase.RESTARTING: ProgressRestarted,
    RecoveryPhase.RESUMING: Resumed,
    RecoveryPhase.REPLAYING: Replayed,
}
