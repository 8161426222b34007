"""A live rescale as a pure state machine: the order of its steps, written once, for the Ray
driver (:mod:`raytide.driver.rescale`) and the in-process runtime
(:mod:`raytide.testing.rescaling`) to execute, as :mod:`raytide.snapshots.recovering` is
for a recovery.

The machine never waits and never talks to an actor. It returns *effects* and takes
*events*; an executor performs each effect its own way (the driver calls every actor at
once and waits, with the rescale's deadline; the simulator takes the cut through its
coordinator core and hands the state over one replica per scheduler step) and feeds the
answer back. One run of the machine takes the job from its old widths to ``plan``'s, or
leaves it in the old ones::

    start ─▶ STARTING      StartHosts(plan)
             │ HostsStarted
             ▼
             HOLDING       HoldAtCut(n, attempt)  ◀────────────────────────────┐
             │ Held(cut, reports)                                               │ Recovered
             │              CutMissed, Died ──▶ RECOVERING  Recover(old widths) ┘ (then the cut again)
             │              JobEnded ──▶ FAILED (refused: the job has finished)
             ▼
             HANDING_OVER  HandOver(n, n + 1, plan, old widths, tables)
             │ HandedOver(pieces)
             │              Died ──▶ RECOVERING, then the cut again
             │              HandOverFailed(error) ──▶ RECOVERING, then FAILED
             ▼
             SWITCHING     RollBackOutputs, Switch(plan, n + 1)
             │ Switched, or Died (the switch went on: a recovery in the new widths)
             ▼
             ADOPTING      Adopt(Recovering.adopting(n + 1, cut point, pieces) | .after_death)
             │ Recovered
             ▼
             DONE          Rescaled(n + 1, cut)

    FAILED   KeepOldWidths, Refused(error): no cut in time (TimedOut: the snapshot in flight
             did not end, or the cut is asked again past the deadline), a hand-over that
             failed, the job finished before its cut was held (JobEnded: a RescaleError, as
             ``job.rescale`` raises for a job that has finished); KeepOldWidths alone: the
             executor was interrupted (Aborted) before the switch; nothing: interrupted after it.

A rescale always ends: made (Rescaled) or refused (Refused), but for an interrupted executor.
A cut asked for again after a recovery near the job's end may come after the job's last
epoch completed: the executor, which knows the job finished (its driver took the job's
``JobFinished``), answers :class:`JobEnded` to that cut instead of what came of it, and the
rescale is refused: there is nothing left to rescale, and making it would restart a job that
is over.

Until the replicas have handed their state over, the job is in its old widths: a death (or
a cut that did not complete) is recovered from there, in a recovery machine of its own,
and the cut is taken again. From the hand-over on there is no way back: the job is in the
new widths, and a death is recovered from in them. Every recovery is a
:class:`~raytide.snapshots.recovering.Recovering` run to its end by the executor, which
fails the job if that machine fails (the restart budget spent): the rescale ends with it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from raytide.core.keygroups import KeyGroupAssignment
from raytide.errors import RescaleError, SnapshotError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.layout import check_splittable, cut_point, new_tables
from raytide.snapshots.recovering import Died, Pieces, Recovering, RollBackOutputs, TimedOut
from raytide.snapshots.recovery import RestartBudget
from raytide.snapshots.replica_state import HeldReport


class RescalePhase(enum.Enum):
    """Where a rescale is."""

    STARTING = "starting the new hosts"
    HOLDING = "holding the replicas at a cut"
    RECOVERING = "recovering in the old widths"
    HANDING_OVER = "handing the held state over"
    SWITCHING = "switching to the new widths"
    ADOPTING = "bringing the new widths up"
    DONE = "rescaled"
    FAILED = "not made"


# -- effects: what the executor does next ---------------------------------------------------


@dataclass(frozen=True)
class StartHosts:
    """Lease (and ping) the hosts ``plan`` needs besides the job's, before anything stops;
    answer :class:`HostsStarted`."""

    plan: PhysicalPlan


@dataclass(frozen=True)
class HoldAtCut:
    """The coordinator takes a rescale's cut in ``incarnation``: every replica aligns on a
    hold marker and holds its state there. Answer :class:`Held`, :class:`CutMissed` (no
    death noticed), :class:`~raytide.snapshots.recovering.Died`,
    :class:`~raytide.snapshots.recovering.TimedOut` (the snapshot in flight did not end in
    time, so no cut was started, or the cut is asked again, ``attempt`` > 1, once the
    rescale's deadline has passed), or :class:`JobEnded`: the driver knows the job finished
    (before the cut was asked for, or while it was taken)."""

    incarnation: int
    attempt: int


@dataclass(frozen=True)
class HandOver:
    """Every replica held at the cut in ``incarnation`` splits its state into a piece per
    replica of ``plan`` (``tables``: who owns each vertex's key groups there), for
    incarnation ``into``; answer :class:`HandedOver`, :class:`HandOverFailed` or
    :class:`~raytide.snapshots.recovering.Died`."""

    incarnation: int
    into: int
    plan: PhysicalPlan
    old_widths: dict[str, int]
    tables: dict[str, KeyGroupAssignment]


@dataclass(frozen=True)
class Switch:
    """Begin ``incarnation`` in ``plan``'s widths: the coordinator takes the new replica set,
    the hosts their new roles, the retired replicas go. A death does not stop it: answer
    :class:`Switched` or, once done, :class:`~raytide.snapshots.recovering.Died`."""

    plan: PhysicalPlan
    incarnation: int


@dataclass(frozen=True)
class Recover:
    """Recover the job in its old widths: run ``machine`` to its end (a recovery of the job
    like any other; the executor fails the job if it fails); answer :class:`Recovered`."""

    machine: Recovering


@dataclass(frozen=True)
class Adopt:
    """Bring the job up in its new widths: run ``machine`` (the new replicas adopt their
    pieces, or, after a death during the switch, restore the last snapshot laid out for
    them) to its end, as a step of the rescale; answer :class:`Recovered`."""

    machine: Recovering


@dataclass(frozen=True)
class KeepOldWidths:
    """The rescale is not made: the fresh hosts go back to the pool and the coordinator takes
    snapshots again; the job goes on in its old widths."""


@dataclass(frozen=True)
class Refused:
    """Tell the caller the rescale was not made, and why (``error``)."""

    error: BaseException


@dataclass(frozen=True)
class Rescaled:
    """The job runs in its new widths, switched to in ``incarnation`` at cut ``cut_id``."""

    incarnation: int
    cut_id: int


RescaleEffect = (StartHosts | HoldAtCut | HandOver | RollBackOutputs | Switch | Recover | Adopt | KeepOldWidths
                 | Refused | Rescaled)


# -- events: what came of an effect, or what happened meanwhile ------------------------------


@dataclass(frozen=True)
class HostsStarted:
    pass


@dataclass(frozen=True)
class Held:
    """Every replica holds at cut ``cut_id``; what each reported."""

    cut_id: int
    reports: dict[ReplicaKey, HeldReport]


@dataclass(frozen=True)
class CutMissed:
    """The cut was abandoned (it did not complete in time, say) and no death was noticed:
    replicas that held at it run nothing until a recovery lets them go."""

    reason: str


@dataclass(frozen=True)
class JobEnded:
    """The job finished (its driver took the job's last epoch) before its rescale's cut was
    held, ``what`` says when: there is nothing left to rescale. An answer to
    :class:`HoldAtCut` in place of what came of the cut (the replicas may hold at it: the job
    is over, nothing runs there any more)."""

    what: str


#: The answer to a cut not asked for: the driver had seen the job finish already.
ENDED_BEFORE_CUT = JobEnded("its last epoch completed before the rescale's cut was asked for")


def cut_answer(answer: RescaleEvent, finished: bool) -> RescaleEvent:
    """What answers :class:`HoldAtCut` once the cut was taken: ``answer`` (what came of the
    cut), or, if the driver saw the job finish meanwhile and ``answer`` is no death, a
    :class:`JobEnded` (a death is recovered from, as ever). One rule for both runtimes."""
    if finished and not isinstance(answer, Died):
        return JobEnded("its last epoch completed while the rescale's cut was taken")
    return answer


@dataclass(frozen=True)
class HandedOver:
    """Every held replica split its state: per old replica, its pieces (or their refs) by
    the replica of the new widths they go to."""

    pieces: list[dict[ReplicaKey, Any]]


@dataclass(frozen=True)
class HandOverFailed:
    """A replica could not split its state (a vertex's ``take_keys`` raised ``error``)."""

    error: BaseException


@dataclass(frozen=True)
class Switched:
    pass


@dataclass(frozen=True)
class Recovered:
    """The recovery machine of a :class:`Recover` or :class:`Adopt` ended: the job runs
    again, in ``incarnation``."""

    incarnation: int


@dataclass(frozen=True)
class Aborted:
    """The executor was interrupted by an error of its own (the job failed meanwhile, Ctrl-C)."""

    reason: str


RescaleEvent = (HostsStarted | Held | CutMissed | JobEnded | HandedOver | HandOverFailed | Switched | Recovered | Died
                | TimedOut | Aborted)


@dataclass
class Rescaling:
    """One rescale of a job to ``plan`` (see the module docstring for the steps).

    Build it with :meth:`between`, take the first effects from :meth:`start`, then feed
    every answer to :meth:`on`.
    """

    job: str
    budget: RestartBudget
    incarnation: int
    plan: PhysicalPlan
    old_widths: dict[str, int]
    phase: RescalePhase = RescalePhase.STARTING
    #: How many cuts were asked for.
    attempts: int = 0
    cut: Held | None = None
    tables: dict[str, KeyGroupAssignment] = field(default_factory=dict)
    handed: list[dict[ReplicaKey, Any]] = field(default_factory=list)
    #: The incarnation the job switched to the new widths in.
    switched: int | None = None
    #: Why the last cut or hand-over did not lead on: named if the deadline then passes.
    missed: str | None = None
    #: The hand-over's failure, raised once the job is recovered from it.
    error: BaseException | None = None
    #: The vertices whose owners the rescale keeps, only widened or narrowed (a stepped
    #: rescale's short switch: :func:`~raytide.rescale.layout.new_tables`).
    kept: frozenset[str] = frozenset()

    @classmethod
    def between(cls, job: str, budget: RestartBudget, incarnation: int, old: PhysicalPlan,
                new: PhysicalPlan, kept: frozenset[str] = frozenset()) -> Rescaling:
        """A rescale of a job running ``old`` in ``incarnation`` to ``new`` (``kept``: the
        vertices whose key groups stay with their owners, a stepped rescale's short switch).

        Raises:
            RescaleError: a vertex whose width changes keeps state it cannot split by key
                (refused before anything stops).
        """
        old_widths = {name: old.width(name) for name in old.vertices}
        check_splittable(new, old_widths)
        return cls(job, budget, incarnation, new, old_widths, kept=kept)

    @property
    def widths(self) -> dict[str, int]:
        """Every vertex's width after the rescale."""
        return {name: self.plan.width(name) for name in self.plan.vertices}

    def start(self) -> list[RescaleEffect]:
        """The first effects."""
        return [StartHosts(self.plan)]

    def on(self, event: RescaleEvent) -> list[RescaleEffect]:
        """The effects that follow ``event``."""
        if self.phase in (RescalePhase.DONE, RescalePhase.FAILED):
            return []
        if isinstance(event, Aborted):  # the fresh hosts go back only while the old widths may go on
            undo: list[RescaleEffect] = [KeepOldWidths()] if self.phase in _OLD_WIDTHS else []
            self.phase = RescalePhase.FAILED
            return undo
        expected = _ANSWERS[self.phase]
        if not isinstance(event, expected):
            raise AssertionError(f"rescale of job {self.job!r} in {self.phase.name} got {event!r}, not one of "
                                 f"{', '.join(kind.__name__ for kind in expected)}")
        if self.phase is RescalePhase.HOLDING:
            return self._on_cut(event)
        if self.phase is RescalePhase.HANDING_OVER:
            return self._on_hand_over(event)
        if self.phase is RescalePhase.SWITCHING:
            return self._adopt(event.cause if isinstance(event, Died) else None)
        if self.phase is RescalePhase.ADOPTING:
            assert self.cut is not None and self.switched is not None
            self.phase = RescalePhase.DONE
            return [Rescaled(self.switched, self.cut.cut_id)]
        if isinstance(event, Recovered):  # in the old widths
            self.incarnation = event.incarnation
            if self.error is not None:  # the hand-over failed: the job is recovered, the rescale not made
                return self._refuse(self.error)
        return self._hold()

    def _hold(self) -> list[RescaleEffect]:
        """Take the cut (again, after a recovery in the old widths)."""
        self.phase, self.attempts = RescalePhase.HOLDING, self.attempts + 1
        return [HoldAtCut(self.incarnation, self.attempts)]

    def _on_cut(self, event: RescaleEvent) -> list[RescaleEffect]:
        if isinstance(event, Held):
            self.cut, self.phase = event, RescalePhase.HANDING_OVER
            self.tables = new_tables(self.plan, self.old_widths, [report.tables for report in event.reports.values()],
                                     self.kept)
            return [HandOver(self.incarnation, self.incarnation + 1, self.plan, self.old_widths, self.tables)]
        if isinstance(event, TimedOut):
            why = event.what if self.missed is None else f"{event.what}: {self.missed}"
            return self._refuse(SnapshotError(f"job {self.job!r}: {why}"))
        if isinstance(event, CutMissed):
            return self._recover(f"job {self.job!r}: a rescale cut was not complete: {event.reason}")
        if isinstance(event, JobEnded):
            changed = {name: width for name, width in self.widths.items() if self.old_widths.get(name) != width}
            return self._refuse(RescaleError(f"job {self.job!r} has finished: {event.what}; there is nothing to "
                                             f"rescale, the rescale to {changed} was not made"))
        assert isinstance(event, Died)
        return self._recover(event.cause)

    def _on_hand_over(self, event: RescaleEvent) -> list[RescaleEffect]:
        if isinstance(event, HandedOver):  # no way back from here: the job is in the new widths
            self.phase, self.handed = RescalePhase.SWITCHING, event.pieces
            self.incarnation = self.switched = self.incarnation + 1
            return [RollBackOutputs(), Switch(self.plan, self.incarnation)]
        if isinstance(event, HandOverFailed):
            self.error = event.error
            return self._recover(f"job {self.job!r}: handing the state over for a rescale failed: {event.error}")
        assert isinstance(event, Died)
        return self._recover(event.cause)

    def _recover(self, cause: str) -> list[RescaleEffect]:
        """Recover in the old widths from ``cause``: replicas held at the cut run again."""
        self.phase, self.missed = RescalePhase.RECOVERING, cause
        return [Recover(Recovering.after_death(self.job, self.budget, self.incarnation, cause))]

    def _adopt(self, died: str | None) -> list[RescaleEffect]:
        """The new widths come up from the pieces handed over (or, after a death during the
        switch, from the last committed snapshot laid out for them)."""
        assert self.cut is not None
        self.phase = RescalePhase.ADOPTING
        if died is not None:
            return [Adopt(Recovering.after_death(self.job, self.budget, self.incarnation, died))]
        pieces = Pieces(by_new_owner(self.plan, self.handed), self.old_widths, self.tables)
        return [Adopt(Recovering.adopting(self.job, self.budget, cut_point(self.plan, self.cut.reports), pieces,
                                          self.incarnation))]

    def _refuse(self, error: BaseException) -> list[RescaleEffect]:
        self.phase = RescalePhase.FAILED
        return [KeepOldWidths(), Refused(error)]


def by_new_owner(plan: PhysicalPlan, handed: list[dict[ReplicaKey, Any]]) -> dict[ReplicaKey, list]:
    """The pieces (or refs) every old replica handed over, gathered per replica of ``plan``."""
    gathered: dict[ReplicaKey, list] = {key: [] for key in plan.replica_keys()}
    for pieces in handed:
        for key, piece in pieces.items():
            gathered[key].append(piece)
    return gathered


#: The phases after the new hosts started and before the state was handed over: the job can
#: still go on in its old widths.
_OLD_WIDTHS = (RescalePhase.HOLDING, RescalePhase.RECOVERING, RescalePhase.HANDING_OVER)

#: The answers each phase takes (besides :class:`Aborted`).
_ANSWERS: dict[RescalePhase, tuple[type, ...]] = {
    RescalePhase.STARTING: (HostsStarted,),
    RescalePhase.HOLDING: (Held, CutMissed, JobEnded, Died, TimedOut),
    RescalePhase.RECOVERING: (Recovered,),
    RescalePhase.HANDING_OVER: (HandedOver, HandOverFailed, Died),
    RescalePhase.SWITCHING: (Switched, Died),
    RescalePhase.ADOPTING: (Recovered,),
}
