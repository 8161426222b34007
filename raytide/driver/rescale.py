"""The driver's side of a live rescale (``job.rescale``): the rescale runtime on Ray
(:class:`RayRescale`, a :class:`~raytide.supervisor.runtime.RescaleRuntime`) for the rescale
machine (:class:`~raytide.rescale.rescaling.Rescaling`, whose steps
:mod:`raytide.rescale.widths` draws as messages), run by the loop the simulator runs too
(:class:`~raytide.supervisor.execution.Execution`).

It runs on the driver, with the job's recovery state (:class:`~raytide.driver.recovery.JobRecovery`:
the incarnation, the coordinator, the job's placement, inputs and outputs, the executor of
recovery machines), performs each effect on every actor it addresses at once and waits,
with a timeout (the cut: the rescale's deadline); no actor waits for the driver. The job's
supervisor lends it what it does itself (:class:`Supervision`): taking the job's events while
the cut is taken (which notices deaths), running a recovery of the job, and failing it.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.driver.inputs import InputFeeds
from raytide.driver.outputs import POLL_SLACK, OutputCollector
from raytide.driver.placement import COORDINATOR, JobPlacement
from raytide.driver.recovery import RECOVERY_POLL, JobRecovery, RescaleRecord, Steps
from raytide.errors import RaytideError
from raytide.physical.plan import PhysicalPlan
from raytide.rescale.rescaling import (
    ENDED_BEFORE_CUT,
    Aborted,
    Adopt,
    CutMissed,
    HandedOver,
    HandOver,
    HandOverFailed,
    Held,
    HoldAtCut,
    HostsStarted,
    KeepOldWidths,
    Recover,
    Recovered,
    Refused,
    Rescaled,
    RescaleEvent,
    Rescaling,
    StartHosts,
    Switch,
    Switched,
    cut_answer,
)
from raytide.rescale.widths import new_widths
from raytide.snapshots.config import Recovery
from raytide.snapshots.recovering import Died, Recovering, RollBackOutputs, TimedOut
from raytide.snapshots.recovery import RestartBudget
from raytide.snapshots.replica_state import CutAnswer
from raytide.supervisor.execution import Execution

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Supervision:
    """What a rescale needs of the job's handle besides its recovery state.

    Attributes:
        recompile: the plan of the job's dataflow at other widths.
        watch: take the job's events, waiting at most the given seconds; returns the deaths
            noticed there (not recovered from: the rescale decides how), None if none.
        recover: run a recovery machine of the job to its end (the job fails if it does).
        fail: fail the job with the error given (and raise it).
    """

    recompile: Callable[[dict[str, int]], PhysicalPlan]
    watch: Callable[[float], str | None]
    recover: Callable[[Recovering], None]
    fail: Callable[[BaseException], None]


@dataclass
class _RescaleRun:
    """One execution of a rescale machine on Ray: its deadline, the step timings, the fresh
    hosts, when the last cut was asked for and held, when the replicas ran again, the hosts
    kept, added and returned, and how it ended."""

    deadline: float
    steps: Steps = field(default_factory=Steps)
    fresh: list = field(default_factory=list)
    asked_at: float = 0.0
    held_at: float = 0.0
    resumed: float = 0.0
    hosts: dict[str, int] = field(default_factory=dict)
    done: Rescaled | None = None


def rescale(recovery: JobRecovery, supervision: Supervision, asked: dict[str, int], timeout: float,
            made_s: float = 0.0, why: str = "") -> dict[str, Any]:
    """Rescale the job to the widths ``asked`` for, in the steps of the rescale machine;
    returns its :class:`~raytide.driver.recovery.RescaleRecord` as a dict. ``made_s``: the
    seconds just spent making what a job without recovery needs for its rescales (its first:
    :func:`cuts_without_recovery`), counted in the record as a step and in the rescale's time;
    ``why``: why a rescale asked to step holds the whole job (in the record).

    Raises:
        RescaleError: a vertex whose width changes keeps state it cannot split by key, or
            the job finished before the rescale's cut was held.
        SnapshotError: no cut was complete within ``timeout`` seconds.
        RaytideError: a vertex's ``take_keys`` failed (the job recovered and goes on), or
            the job failed meanwhile.
    """
    record = switch(recovery, supervision, asked, timeout, made_s)
    if record.cut_id is None:
        return vars(record).copy()  # the same keys as a rescale's; not one of job.stats()'s
    record.why = why
    recovery.rescales.append(record)
    logger.info("job %r rescaled %s -> %s in %.2f s (paused %.2f s)%s", recovery.placement.name, record.before,
                record.after, record.seconds, record.pause_s, f", {why}" if why else "")
    return vars(record).copy()


def switch(recovery: JobRecovery, supervision: Supervision, asked: dict[str, int], timeout: float,
           made_s: float = 0.0, kept: frozenset[str] = frozenset()) -> RescaleRecord:
    """The job held at a cut and switched to the widths ``asked`` for (:func:`rescale`; a
    stepped rescale's short switch, whose vertices of ``kept`` keep their key groups' owners);
    its record (not kept: a cut_id of None if no width changed)."""
    placement = recovery.placement
    widths = new_widths(placement.plan, asked)
    before = {name: placement.plan.width(name) for name in placement.plan.vertices
              if placement.plan.width(name) != widths[name]}
    if not before:
        return RescaleRecord(recovery.incarnation, {}, {}, None, 0.0, 0.0, 0.0, time.time(), {}, {})
    machine = Rescaling.between(placement.name, recovery.budget, recovery.incarnation, placement.plan,
                                supervision.recompile(widths), kept)
    started = time.monotonic() - made_s
    run = _RescaleRun(started + timeout)
    if made_s:
        run.steps.seconds["lease the coordinator of the cuts"] = made_s
    try:
        recovery.inputs.keep_calls(timeout)  # without recovery: kept for this rescale only
        RayRescale(recovery, supervision, run).execute(machine)
    finally:
        recovery.inputs.forget_calls()
    assert run.done is not None
    now = time.monotonic()
    return RescaleRecord(run.done.incarnation, before, {name: widths[name] for name in before}, run.done.cut_id,
                         now - started, run.held_at - run.asked_at, run.resumed - run.held_at,
                         time.time() - (now - run.resumed), run.hosts, run.steps.seconds)


def cuts_without_recovery(placement: JobPlacement, inputs: InputFeeds, outputs: OutputCollector) -> JobRecovery:
    """What a rescale needs of a job started without ``recovery=``, made at its first rescale
    and kept for the next: a snapshot coordinator to take the cuts (it takes no snapshot: no
    interval, and a store, a directory of its own the driver removes at the job's end, where
    nothing is written), which every replica learns of, and no restart (a death, or a cut not
    complete in time, fails the job: nothing could bring it back). The output replicas keep
    their records until the driver has them, as in a job with recovery (the driver tells them,
    ``forget_delivered``), and the input calls are kept while a rescale runs."""
    settings = Recovery(tempfile.mkdtemp(prefix=f"raytide-{placement.name}-cuts-"), interval=None, max_restarts=0)
    cuts = JobRecovery(settings, placement, inputs, outputs, durable=False)  # what the consumers had: written nowhere
    cuts.budget = RestartBudget.none(placement.name)  # a death met by a rescale fails the job, saying why
    cuts.start_coordinator()
    placement.wait([placement.peers[key].connect.remote(placement.peers_of(key), placement.unbounded,
                                                        placement.route(key), cuts.coordinator)
                    for key in placement.peers], "telling the replicas of the coordinator of rescale cuts")
    cuts.watch()
    return cuts


@dataclass
class RayRescale:
    """The rescale runtime on Ray (a :class:`~raytide.supervisor.runtime.RescaleRuntime`): one
    execution's effects on the job's actors, for its recovery state."""

    recovery: JobRecovery
    supervision: Supervision
    run: _RescaleRun

    def execute(self, machine: Rescaling) -> None:
        """Carry out the machine's effects until it is done (the loop the simulator runs too,
        :class:`~raytide.supervisor.execution.Execution`); an error of the driver's own
        meanwhile (the job failed, Ctrl-C) ends it as the machine says (:class:`Aborted`)."""
        execution = Execution(machine, self)
        try:
            execution.start()
        except BaseException as error:
            execution.answer(Aborted(repr(error)))
            raise

    def start_hosts(self, effect: StartHosts, run: Execution) -> RescaleEvent:
        self.run.fresh = self.run.steps.time("start the new hosts", self.recovery.placement.add_hosts, effect.plan)
        return HostsStarted()

    def hold_at_cut(self, effect: HoldAtCut, run: Execution) -> RescaleEvent:
        """The cut (:meth:`_hold`), unless the job has finished: before it is asked for (after a
        recovery near the job's end), or while it is taken (the driver took the job's events
        meanwhile). Then the answer is :class:`JobEnded` whatever came of the cut but a death:
        the rescale is refused, as ``job.rescale`` refuses a job that has finished."""
        if self.recovery.outputs.finished:
            return ENDED_BEFORE_CUT
        return cut_answer(self.run.steps.time("hold at a cut", self._hold, effect), self.recovery.outputs.finished)

    def recover(self, effect: Recover, run: Execution) -> RescaleEvent:
        """In the old widths: a recovery of the job like any other."""
        self.supervision.recover(effect.machine)
        return Recovered(effect.machine.incarnation)

    def roll_back_outputs(self, effect: RollBackOutputs, run: Execution) -> None:
        self.recovery.outputs.rollback()  # what the driver held for a commit comes again from the kept records

    def keep_old_widths(self, effect: KeepOldWidths, run: Execution) -> None:
        self.recovery.placement.give_back(self.run.fresh)
        if self.recovery.coordinator is not None:  # the cut paused it
            self.recovery.settle(self.recovery.coordinator.start.remote(), "the snapshot coordinator starting again")

    def refused(self, effect: Refused, run: Execution) -> None:
        """``job.rescale`` raises why the rescale was not made."""
        raise effect.error

    def rescaled(self, effect: Rescaled, run: Execution) -> None:
        self.run.done = effect

    def _hold(self, effect: HoldAtCut) -> RescaleEvent:
        """Every replica holds at a cut the coordinator takes (``hold_now``), while the driver
        takes the job's events: a death noticed there answers at once, and the cut of the
        incarnation it ended is left to the coordinator, which abandons it when the recovery
        pauses it (or never takes it, if the recovery came first); nobody reads that answer."""
        recovery, run = self.recovery, self.run
        if effect.attempt > 1 and time.monotonic() >= run.deadline:
            return TimedOut("no rescale cut was complete in time")
        run.asked_at = time.monotonic()
        ref = recovery.coordinator.hold_now.remote(effect.incarnation, max(0.1, run.deadline - run.asked_at),
                                                   recovery.outputs.durable())
        while not ray.wait([ref], timeout=RECOVERY_POLL)[0]:
            died = self.supervision.watch(0)
            if died is not None:
                return Died(died)
            if time.monotonic() > run.deadline + POLL_SLACK:  # it gives up at the deadline itself, if it runs
                return CutMissed(f"{recovery.coordinator_name()} did not answer the rescale's cut within "
                                 f"{POLL_SLACK:g} s of its deadline")
        try:
            answer: CutAnswer = ray.get(ref)
        except ray.exceptions.RayActorError as error:
            answer = CutAnswer(missed=str(error))
        if answer.missed is not None:
            died = self.supervision.watch(0)
            return CutMissed(answer.missed) if died is None else Died(died)
        if answer.cut_id is None:
            return TimedOut("the snapshot in flight did not complete in time, so no rescale cut could be taken")
        run.held_at = time.monotonic()
        return Held(answer.cut_id, answer.reports)

    def hand_over(self, effect: HandOver, run: Execution) -> RescaleEvent:
        """Every held replica splits its state; the refs of the pieces it put in the object store."""
        peers = self.recovery.placement.peers
        try:
            handed = self.run.steps.time("hand the state over", self.recovery.wait, [
                peers[key].hand_over.remote(effect.incarnation, effect.into, effect.plan, effect.old_widths,
                                            effect.tables) for key in peers], "handing the held state over")
        except ray.exceptions.RayActorError as error:
            return Died(f"job {self.recovery.placement.name!r}: an actor died while the replicas handed their state "
                        f"over for a rescale: {type(error).__name__}")
        except Exception as error:  # a vertex's take_keys failed, or the hand-over took too long
            return HandOverFailed(error)
        return HandedOver(handed)

    def switch(self, effect: Switch, run: Execution) -> RescaleEvent:
        """The coordinator, then the hosts, take the new configuration; a death does not stop
        the switch (the recovery after it is in the new widths)."""
        recovery, placement, incarnation = self.recovery, self.recovery.placement, effect.incarnation
        recovery.incarnation = incarnation
        died: str | None = None
        try:
            recovery.wait([recovery.coordinator.reconfigure.remote(effect.plan, incarnation)],
                          "reconfiguring the coordinator")
        except ray.exceptions.RayActorError as error:  # the recovery starts a new one
            died = f"job {placement.name!r}: {COORDINATOR} died during the rescale to incarnation {incarnation}: " \
                   f"{type(error).__name__}"
        recovery.drop_sync()
        try:
            try:
                self.run.hosts = self.run.steps.time("give the hosts their replicas", placement.reconfigure, effect.plan,
                                                     incarnation, self.run.fresh, recovery.coordinator)
            finally:
                recovery.watch()  # the new configuration's actors, whatever happened
        except ray.exceptions.RayActorError as error:
            died = died or (f"job {placement.name!r}: an actor died during the rescale to incarnation {incarnation}: "
                            f"{type(error).__name__}")
        return Switched() if died is None else Died(died)

    def adopt(self, effect: Adopt, run: Execution) -> RescaleEvent:
        """The recovery machine that brings the new widths up, timed as the rescale's steps;
        the job fails if it does."""
        try:
            self.run.resumed = self.recovery.execute(effect.machine, self.run.steps)
        except RaytideError as error:
            self.supervision.fail(error)
            raise
        return Recovered(effect.machine.incarnation)
