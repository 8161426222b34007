"""The in-process runtime's executor of a rescale: the same machine the Ray driver runs
(:class:`~raytide.rescale.rescaling.Rescaling`), performed under the seeded scheduler.

The cut is the coordinator core's: its next trigger (at once, after the snapshot in flight)
is a hold marker, and the commit of that cut answers the machine (a cut the core abandons,
too). The hand-over is one replica's
part per scheduler step, in an order the runtime's seeded random draws, so that a crash
can strike between any two; the moving pieces are pickled on their way, as through Ray's
object store. Each recovery the machine asks for is a
:class:`~raytide.testing.recovery.SteppedRecovery`, whose end the runtime reports back
(:meth:`SteppedRescale.recovered`). A death noticed while the replicas hold or hand over
(:meth:`SteppedRescale.died`) drops the steps still queued: the machine recovers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

import cloudpickle

from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.layout import Piece
from raytide.rescale.rescaling import (
    Aborted,
    Adopt,
    CutMissed,
    HandedOver,
    HandOver,
    HandOverFailed,
    Held,
    HostsStarted,
    Recover,
    Recovered,
    Refused,
    Rescaled,
    RescaleEffect,
    RescaleEvent,
    RescalePhase,
    Rescaling,
    StartHosts,
    Switch,
    Switched,
)
from raytide.rescale.widths import width_groups
from raytide.snapshots.recovering import Recovering, RollBackOutputs
from raytide.snapshots.replica_state import HeldReport
from raytide.testing.outcome import LocalRun
from raytide.testing.stepped import SteppedMachine


class RescaleRuntime(Protocol):
    """What a rescale does to the in-process runtime (:class:`~raytide.testing.local.LocalJob`)."""

    def replica_keys(self) -> list[ReplicaKey]: ...

    def hand_over(self, key: ReplicaKey, effect: HandOver) -> dict[ReplicaKey, Piece] | None: ...

    def roll_back_outputs(self) -> None: ...

    def switch(self, plan: PhysicalPlan, incarnation: int) -> None: ...

    def run_recovery(self, machine: Recovering) -> None: ...

    def rescaled(self, widths: dict[str, int], cut_id: int) -> None: ...

    result: LocalRun


class SteppedRescale(SteppedMachine):
    """One rescale machine executed on ``runtime``; its hand-over a step per :meth:`step`. It
    is :attr:`over` once the rescale was made (or not made)."""

    ENDS = (RescalePhase.DONE, RescalePhase.FAILED)
    runtime: RescaleRuntime
    machine: Rescaling

    def held(self, cut_id: int, reports: dict[ReplicaKey, HeldReport], finished: bool) -> None:
        """Every replica holds at the cut ``cut_id`` the coordinator core committed (a job
        ``finished`` meanwhile is not rescaled: the rescale stops there)."""
        self._answer(Aborted("the job finished before its cut") if finished else Held(cut_id, reports))

    def cut_missed(self, reason: str) -> None:
        """The coordinator core abandoned the cut (``reason``)."""
        self._answer(CutMissed(reason))

    def recovered(self, incarnation: int) -> None:
        """The recovery the machine asked for ended: the job runs in ``incarnation``."""
        self._answer(Recovered(incarnation))

    def _act(self, effect: RescaleEffect) -> RescaleEvent | None:
        """Do ``effect`` at once (and return its answer), or start what answers it later."""
        runtime = self.runtime
        if isinstance(effect, StartHosts):
            return HostsStarted()  # one process: no hosts to start
        if isinstance(effect, HandOver):
            self._hand_over(effect)
        elif isinstance(effect, RollBackOutputs):
            runtime.roll_back_outputs()
        elif isinstance(effect, Switch):
            runtime.switch(effect.plan, effect.incarnation)
            return Switched()
        elif isinstance(effect, (Recover, Adopt)):
            runtime.run_recovery(effect.machine)
        elif isinstance(effect, Refused):  # as job.rescale raises it: the job goes on as it was
            runtime.result.refused.append((runtime.result.steps, effect.error))
        elif isinstance(effect, Rescaled):
            runtime.rescaled(self.machine.widths, effect.cut_id)
        # HoldAtCut: the runtime's coordinator triggers the cut next, at once (it reads the phase);
        # KeepOldWidths: no hosts to give back, and the coordinator triggers snapshots again.
        return None

    def _hand_over(self, effect: HandOver) -> None:
        """A step per held replica, in a seeded order; then the answer."""
        keys = self.runtime.replica_keys()
        handed: list[dict[ReplicaKey, Any]] = []
        for key in self.rng.sample(keys, len(keys)):
            self.steps.append(functools.partial(self._hand_over_one, key, effect, handed))
        self.steps.append(functools.partial(self._handed_over, handed, len(keys)))

    def _hand_over_one(self, key: ReplicaKey, effect: HandOver, handed: list[dict[ReplicaKey, Any]]) -> None:
        try:
            pieces = self.runtime.hand_over(key, effect)
        except Exception as error:  # a vertex's take_keys failed
            self.steps.clear()
            self._answer(HandOverFailed(error))
            return
        if pieces is not None:  # the moving pieces go through the object store: pickled
            handed.append({new: piece if new == key else cloudpickle.loads(cloudpickle.dumps(piece))
                           for new, piece in pieces.items()})

    def _handed_over(self, handed: list[dict[ReplicaKey, Any]], replicas: int) -> None:
        if len(handed) == replicas:  # else one died before its part: its death, noticed soon, answers
            self._answer(HandedOver(handed))


class RescaleAsks:
    """The rescales asked of the in-process runtime: per step, the widths asked then; and
    those asked and not started yet (a later request overrides an earlier one for the same
    vertices)."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, int]] = {}
        self.pending: dict[str, int] = {}

    def ask(self, widths: Mapping[str, int], at_step: int) -> None:
        self.at[at_step] = {**self.at.get(at_step, {}), **widths}

    def arrive(self, step: int, plan: PhysicalPlan) -> None:
        """The requests of ``step`` (if any) wait to start."""
        if step not in self.at:
            return
        widths, groups = self.at.pop(step), width_groups(plan)
        for name in widths:
            for member in groups[name]:
                self.pending.pop(member, None)
        self.pending.update(widths)

    def take(self) -> dict[str, int]:
        """The widths asked for, now that a rescale starts to them."""
        widths, self.pending = self.pending, {}
        return widths


def rescaling_in(rescaling: SteppedRescale | None, *phases: RescalePhase) -> bool:
    """Whether ``rescaling`` is under way, in one of ``phases``."""
    return rescaling is not None and rescaling.machine.phase in phases
