"""The simulator's runtime of a recovery (:class:`SimRecovery`, a
:class:`~raytide.supervisor.runtime.RecoveryRuntime`): the Ray driver's machine
(:class:`~raytide.snapshots.recovering.Recovering`) in the Ray driver's loop
(:class:`~raytide.supervisor.execution.Execution`), its effects carried out on the simulated
world (:class:`~raytide.testing.world.World`) one scheduler step at a time.

Where the driver calls every replica at once and waits, this runtime queues one step per
replica, in an order the world's seeded random draws, so that the scheduler interleaves them
with everything else in flight and a crash can strike between any two. What only the driver
does (rolling outputs back, reading the restore point, resetting the coordinator) happens at
once. A death noticed meanwhile (``Execution.died``) drops the steps still queued: the
machine starts over. A replica's restore that raises (user code's ``restore()``, a part that
does not verify) drops them too, and the machine fails the job with its error (as the
driver's ``wait`` raises it). The inputs are replayed from the world's
:class:`~raytide.supervisor.replay.ReplayLog`, the Ray driver's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from raytide.engine.progress_core import ProgressCore
from raytide.errors import RecoveryError
from raytide.physical.protocol import JobFailed, ReplicaKey
from raytide.progress.tracker import Pointstamp
from raytide.rescale.rescaling import Recovered, RescalePhase
from raytide.rescale.reshard import latest_restore_point
from raytide.snapshots.incarnations import enter_incarnation
from raytide.snapshots.recovering import (
    Failed,
    Finished,
    PauseCoordinator,
    Pieces,
    PointRead,
    ProgressRestarted,
    Raised,
    ReadPoint,
    Recovering,
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
)
from raytide.snapshots.recovery import RestorePoint, part_name
from raytide.snapshots.replica_state import summed
from raytide.supervisor.execution import Execution
from raytide.testing.mailboxes import replayed
from raytide.testing.snapshotting import rescaling_in
from raytide.testing.world import World


def start_recovery(world: World, machine: Recovering) -> None:
    """Run recovery ``machine`` on ``world`` (its :attr:`~raytide.testing.world.World.recovering`)."""
    world.recovering = Execution(machine, SimRecovery(world))
    world.recovering.start()


class SimRecovery:
    """The recovery's effects on the simulated ``world`` (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def roll_back_outputs(self, effect: RollBackOutputs, run: Execution) -> None:
        self.world.outputs.rollback()

    def pause_coordinator(self, effect: PauseCoordinator, run: Execution) -> None:
        """The new incarnation is recorded in the store, as on Ray (a fenced store: a coordinator's
        zombie can commit no more); the coordinator abandons the snapshot in flight (triggers
        wait while a recovery runs)."""
        world = self.world
        assert world.recovery is not None, "only a job with recovery recovers"
        enter_incarnation(world.recovery.store, effect.incarnation, world.plan.name)
        if world.coordinator is not None and world.coordinator.incarnation < effect.incarnation:
            world.coordinator.reset(effect.incarnation, world.result.steps)

    def replace_dead(self, effect: ReplaceDead, run: Execution) -> RecoveryEvent:
        self.world.incarnation = effect.incarnation  # the dead come back fresh when restored
        return Replaced([])

    def read_point(self, effect: ReadPoint, run: Execution) -> RecoveryEvent:
        world = self.world
        assert world.recovery is not None
        store = world.recovery.store.at(world.incarnation)  # the driver's writes (a rewrite for a rescaled job), as on Ray
        return PointRead(latest_restore_point(world.plan, store, world.recovery.retain, world.first_id,
                                              world.started_from))

    def restore_replicas(self, effect: RestoreReplicas, run: Execution) -> None:
        """Every replica from the snapshot, or from its pieces: a step each; then the answer."""
        pieces, subscriptions = effect.pieces, self._subscriptions
        self.world.result.replacements.base_snapshot = effect.point.snapshot_id if pieces is None else None  # figures start at 0 there
        if pieces is None:
            run.queue([functools.partial(self._raising, run, self._restore, key, effect.point) for key in self._shuffled()],
                      lambda: Restored(subscriptions()))
            return
        held: list[tuple[Pointstamp, int]] = []
        run.queue([functools.partial(self._raising, run, self._adopt, key, pieces, held) for key in self._shuffled()],
                  lambda: Restored(subscriptions(), summed(held)))

    def restart_progress(self, effect: RestartProgress, run: Execution) -> None:
        run.queue([functools.partial(self._restart_progress, effect)], ProgressRestarted())

    def resume_replicas(self, effect: ResumeReplicas, run: Execution) -> None:
        self.world.result.replaying = run.machine.replaying(fed_epoch(self.world.planned))
        run.queue([functools.partial(self._resume, key) for key in self._shuffled()], Resumed())

    def replay_inputs(self, effect: ReplayInputs, run: Execution) -> None:
        run.queue([functools.partial(self._replay, effect.point, run)], Replayed())

    def reset_coordinator(self, effect: ResetCoordinator, run: Execution) -> None:
        """The coordinator snapshots the restored job (a new one if it died); without recovery
        (a rescale's adoption), it takes the next rescale's cut."""
        world = self.world
        if world.coordinator is None:
            world.coordinator = world._new_coordinator()
        elif world.coordinator.incarnation < effect.incarnation:
            world.coordinator.reset(effect.incarnation, world.result.steps)
        if world.recovery is not None:
            world.coordinator.follow(world.recovery.store.next_id())  # as on Ray: after a snapshot the recovery wrote
        world.coordinator.last_end = world.result.steps

    def finished(self, effect: Finished, run: Execution) -> None:
        """The job runs again (nothing to record: ``LocalRun.recoveries`` has every cause);
        a rescale waiting for the recovery goes on."""
        if rescaling_in(self.world.rescaling, RescalePhase.RECOVERING, RescalePhase.ADOPTING):
            self.world.rescaling.answer(Recovered(effect.incarnation))  # type: ignore[union-attr]

    def failed(self, effect: Failed, run: Execution) -> None:
        self.world._record([JobFailed(effect.error)])

    # -- the steps ------------------------------------------------------------------------

    def _restore(self, key: ReplicaKey, point: RestorePoint) -> None:
        """Replica ``key``, fresh (reset in place, or replaced if it died), from its part of ``point``."""
        world = self.world
        assert world.recovery is not None
        core = world._fresh(key)
        if point.snapshot_id is not None:
            core.restore(world.recovery.store.read_part(point.snapshot_id, part_name(key)))  # may raise: _raising

    def _adopt(self, key: ReplicaKey, pieces: Pieces, held: list[tuple[Pointstamp, int]]) -> None:
        """Replica ``key`` of the rescaled job, fresh, from the pieces handed over to it."""
        core = self.world._fresh(key)
        held.extend(core.adopt(pieces.old_widths, pieces.tables, pieces.refs[key]))  # may raise: _raising

    def _raising(self, run: Execution, restore: Callable[..., None], *args: Any) -> None:
        """A replica's restore; what it raises drops the steps queued and fails the recovery (:class:`Raised`)."""
        try:
            restore(*args)
        except Exception as error:
            run.steps.clear()
            run.answer(Raised(error))

    def _subscriptions(self) -> dict[ReplicaKey, list]:
        return {key: core.subscriptions() for key, core in self.world.replicas.items()}

    def _restart_progress(self, effect: RestartProgress) -> None:
        """A new progress core from the restored replicas' pointstamps and kept output records."""
        world = self.world
        world._orphaned_progress_calls()
        world.progress = ProgressCore(world.plan.graph, world.plan.outputs, effect.pointstamps,
                                      delivered=world.outputs.book.delivered(), kept=effect.kept)
        world.progress_incarnation = effect.incarnation
        world.connected = True
        world._perform(world.progress.connect(effect.subscriptions))

    def _resume(self, key: ReplicaKey) -> None:
        """Replica ``key`` runs again: its logged back-edge batches first."""
        self.world.waiting.discard(key)
        self.world._guard(key, self.world.replicas[key].resume)

    def _replay(self, point: RestorePoint, run: Execution) -> None:
        """Every input replica gets the driver's calls after its position in ``point``, as on
        Ray; calls forgotten fail the job, as the Ray driver's rewind does."""
        try:
            self.world.mail.commands.update(replayed(self.world.calls, self.world.plan, point))
        except RecoveryError as error:
            run.steps.clear()
            self.world._record([JobFailed(error)])

    def _shuffled(self) -> list[ReplicaKey]:
        keys = self.world.replica_keys()
        return self.world.rng.sample(keys, len(keys))


def fed_epoch(planned: dict[tuple[str, int], list[Any]]) -> int | None:
    """The latest epoch the simulated driver pushes records at (it plans every command at the start)."""
    return max((command[3] for commands in planned.values() for command in commands if command[0] == "push"),
               default=None)
