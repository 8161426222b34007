"""The simulator's runtime of a rescale (:class:`SimRescale`, a
:class:`~raytide.supervisor.runtime.RescaleRuntime`): the Ray driver's machine
(:class:`~raytide.rescale.rescaling.Rescaling`) in the Ray driver's loop
(:class:`~raytide.supervisor.execution.Execution`), its effects carried out on the simulated
world (:class:`~raytide.testing.world.World`) under the seeded scheduler.

The cut is the coordinator core's: the request for it travels to the coordinator as Ray's
``hold_now`` call does, and may be taken after a recovery the driver ran meanwhile (then it is
refused: :meth:`~raytide.snapshots.coordinator.CoordinatorCore.cut_refused`); taken, it is a
hold marker after the snapshot in flight, and the commit of that cut answers the machine (a
cut the core abandons, too: the world answers ``Held`` or ``CutMissed``), if the machine still
waits for it; once the driver has seen the job finish, ``JobEnded`` instead (as the Ray driver). The hand-over is one replica's part per
scheduler step, in an order the world's seeded random draws, so that a crash can strike
between any two; the moving pieces are pickled on their way, as through Ray's object store.
Each recovery the machine asks for runs in an execution of its own
(:func:`~raytide.testing.recovery.start_recovery`), whose end answers the rescale
(``SimRecovery.finished``). A death noticed while the replicas hold or hand over
(``Execution.died``) drops the steps still queued: the machine recovers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import cloudpickle

from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.rescaling import (
    ENDED_BEFORE_CUT,
    Adopt,
    HandedOver,
    HandOver,
    HandOverFailed,
    HoldAtCut,
    HostsStarted,
    KeepOldWidths,
    Recover,
    Refused,
    Rescaled,
    RescaleEvent,
    StartHosts,
    Switch,
    Switched,
)
from raytide.rescale.widths import width_groups
from raytide.snapshots.recovering import RollBackOutputs
from raytide.supervisor.execution import Execution
from raytide.testing.recovery import start_recovery
from raytide.testing.world import World


class SimRescale:
    """The rescale's effects on the simulated ``world`` (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def start_hosts(self, effect: StartHosts, run: Execution) -> RescaleEvent:
        return HostsStarted()  # one process: no hosts to start

    def hold_at_cut(self, effect: HoldAtCut, run: Execution) -> RescaleEvent | None:
        """The request goes to the world's coordinator, which takes it as one of its actions
        (after the snapshot in flight; refused if the job has left the incarnation by then);
        the cut's commit (or its abandonment) answers. Not asked once the job has finished:
        that answers at once (the rescale is refused)."""
        if self.world.result.finished:
            return ENDED_BEFORE_CUT
        self.world.cut_asks.append((effect.incarnation, effect.attempt))
        return None

    def hand_over(self, effect: HandOver, run: Execution) -> None:
        """A step per held replica, in a seeded order; then the answer."""
        keys = self.world.replica_keys()
        handed: list[dict[ReplicaKey, Any]] = []
        for key in self.world.rng.sample(keys, len(keys)):
            run.steps.append(functools.partial(self._hand_over_one, run, key, effect, handed))
        run.steps.append(functools.partial(self._handed_over, run, handed, len(keys)))

    def roll_back_outputs(self, effect: RollBackOutputs, run: Execution) -> None:
        self.world.outputs.rollback()

    def switch(self, effect: Switch, run: Execution) -> RescaleEvent:
        """Incarnation ``effect.incarnation`` begins in the new widths: the retired replicas go (their
        cores, their mailboxes and what was sent to them), the coordinator (if alive) takes the
        new replica set."""
        world, plan = self.world, effect.plan
        for key in set(world.replica_keys()) - set(plan.replica_keys()):
            for mapping in (world.replicas, world.incarnations):
                mapping.pop(key, None)
            world.dead.discard(key)
            world.waiting.discard(key)
            world.mail.drop_replica(key)
        world.plan, world.incarnation = plan, effect.incarnation
        if world.coordinator is not None:
            written = world.recovery.store.next_id() if world.recovery is not None else world.coordinator.next_id
            world.coordinator.reconfigure(world.replica_keys(), effect.incarnation, written, world.result.steps)
        return Switched()

    def recover(self, effect: Recover, run: Execution) -> None:
        start_recovery(self.world, effect.machine)  # its end answers (SimRecovery.finished)

    def adopt(self, effect: Adopt, run: Execution) -> None:
        start_recovery(self.world, effect.machine)

    def keep_old_widths(self, effect: KeepOldWidths, run: Execution) -> None:
        """No hosts to give back, and the coordinator triggers snapshots again (it reads the phase)."""

    def refused(self, effect: Refused, run: Execution) -> None:
        """As ``job.rescale`` raises it: the job goes on as it was."""
        self.world.result.refused.append((self.world.result.steps, effect.error))

    def rescaled(self, effect: Rescaled, run: Execution) -> None:
        self.world.result.rescales.append((self.world.result.steps, run.machine.widths, effect.cut_id))

    def _hand_over_one(self, run: Execution, key: ReplicaKey, effect: HandOver, handed: list[dict[ReplicaKey, Any]]) -> None:
        """Replica ``key``, held at the cut, splits its state (nothing if it died)."""
        if key in self.world.dead:
            return
        try:
            pieces = self.world.replicas[key].hand_over(effect.plan, effect.old_widths, effect.tables)
        except Exception as error:  # a vertex's take_keys failed
            run.steps.clear()
            run.answer(HandOverFailed(error))
            return
        # the moving pieces go through the object store: pickled
        handed.append({new: piece if new == key else cloudpickle.loads(cloudpickle.dumps(piece))
                       for new, piece in pieces.items()})

    def _handed_over(self, run: Execution, handed: list[dict[ReplicaKey, Any]], replicas: int) -> None:
        if len(handed) == replicas:  # else one died before its part: its death, noticed soon, answers
            run.answer(HandedOver(handed))


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
