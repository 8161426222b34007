"""The recovery runtime on Ray (:class:`RayRecovery`, a
:class:`~raytide.supervisor.runtime.RecoveryRuntime`): the effects of the recovery machine
(:mod:`raytide.snapshots.recovering`) carried out on the job's actors, each on every actor it
addresses at once, waiting with a timeout (:data:`~raytide.driver.coordination.RECOVERY_TIMEOUT`);
no actor waits for the driver. The loop that runs the machine on it is the simulator's too
(:class:`~raytide.supervisor.execution.Execution`)::

    driver ──take + connect──▶ a warm host, for each dead replica / the progress actor
    driver ──restore(n, snapshot k, peers)──▶ every replica       (*waits*; survivors reset in place)
    driver ──restore(n, pointstamps, kept outputs)──▶ progress actor   (*waits*)
    driver ──resume(n)──▶ every replica                          (*waits*)
    driver ──the logged calls after each position──▶ input replicas
    driver ──restart(n)──▶ coordinator (a new one if it died)

A call's failure is an answer to the machine: an actor's death (or an object lost with its
owner) :class:`~raytide.snapshots.recovering.Died`, a wait past its timeout ``TimedOut``,
what a replica's part raised ``Raised``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.driver.coordination import JobSnapshots, RecoveryRecord, Steps
from raytide.driver.placement import COORDINATOR
from raytide.errors import JobTimeout
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.recovering import (
    Died,
    Failed,
    Finished,
    PauseCoordinator,
    PointRead,
    ProgressRestarted,
    Raised,
    ReadPoint,
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
from raytide.snapshots.replica_state import summed
from raytide.supervisor.alone import RecoveryKind, recovered_how
from raytide.supervisor.execution import Execution

logger = logging.getLogger(__name__)

#: How long the driver waits for a host's ping when it looks for the dead ones (a dead
#: host's ping fails at once; one that does not answer in time is busy, so alive).
PING_TIMEOUT = 0.3
#: What a call meets when a process of the job died: recovered from, not user code's failure.
DEATHS = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)


Act = Callable[[Any, Any, Execution], RecoveryEvent | None]


def answering(act: Act) -> Act:
    """An effect's method whose call's failure answers the machine: a death (:class:`Died`),
    a timeout (:class:`TimedOut`) or what a replica's part raised (:class:`Raised`: user code's ``restore()``)."""

    @functools.wraps(act)
    def answered(self: RayRecovery, effect: Any, run: Execution) -> RecoveryEvent | None:
        try:
            return act(self, effect, run)
        except ray.exceptions.RayTaskError as error:  # the actor lives: its call raised
            # what it raised may be a death it met (a handed-over piece whose owner died)
            return self.died(error.cause, run) if isinstance(error.cause, DEATHS) else Raised(error.cause)
        except DEATHS as error:
            return self.died(error, run)
        except JobTimeout as error:
            return TimedOut(str(error))

    return answered


@dataclass
class RayRecovery:
    """One execution's carrying out of a recovery machine on Ray, for the job's ``snapshots``
    state: when it started, the step timings, the hosts it replaced and when the replicas ran again."""

    snapshots: JobSnapshots
    steps: Steps = field(default_factory=Steps)
    started: float = field(default_factory=time.monotonic)
    replaced: list[str] = field(default_factory=list)
    resumed: float = 0.0
    kind: RecoveryKind = RecoveryKind("job", "no actor was found dead")

    def roll_back_outputs(self, effect: RollBackOutputs, run: Execution) -> None:
        self.snapshots.outputs.rollback()  # epochs no committed snapshot holds are computed again

    @answering
    def pause_coordinator(self, effect: PauseCoordinator, run: Execution) -> None:
        """Record the new incarnation in the store (a coordinator of an earlier one, declared dead
        but running, can commit no more), then pause the coordinator (and wait: no snapshot may
        commit after this); a dead one is replaced later."""
        snapshots = self.snapshots
        snapshots.enter(effect.incarnation)
        if snapshots.coordinator is None:
            return
        try:
            snapshots.wait([snapshots.coordinator.pause.remote(effect.incarnation)], "pausing the snapshot coordinator")
        except ray.exceptions.RayActorError:
            snapshots.coordinator = None

    @answering
    def replace_dead(self, effect: ReplaceDead, run: Execution) -> RecoveryEvent:
        """Find the dead actors and lease warm hosts for their roles."""
        snapshots, steps = self.snapshots, self.steps
        snapshots.incarnation = effect.incarnation
        logger.warning("job %r: recovering (incarnation %d)", snapshots.placement.name, effect.incarnation)
        dead = steps.time("find the dead", self.find_dead)
        self.kind = self._kind(dead, run)
        self.replaced = steps.time("replace them", snapshots.placement.replace_dead, dead, snapshots.coordinator)
        snapshots.outputs.progress = snapshots.placement.progress
        return Replaced(self.replaced)

    @answering
    def read_point(self, effect: ReadPoint, run: Execution) -> RecoveryEvent:
        """Where to restore from; a new coordinator if the old one died (paused until the reset:
        a barrier must not reach a replica before it is restored)."""
        snapshots = self.snapshots
        point = self.steps.time("read the snapshot", snapshots.latest_point)
        if snapshots.coordinator is None:
            snapshots.start_coordinator(point.snapshot_id + 1 if point.snapshot_id is not None else 1)
        snapshots.watch()  # the replaced actors and coordinator
        snapshots.drop_sync()
        return PointRead(point)

    @answering
    def restore_replicas(self, effect: RestoreReplicas, run: Execution) -> RecoveryEvent:
        """Every replica from its part of the snapshot, or from the pieces handed over to it; or
        what a replica's restore raised (it answers with the error, :class:`Raised`)."""
        snapshots, pieces = self.snapshots, effect.pieces
        snapshots.incarnation = effect.incarnation
        placement, coordinator = snapshots.placement, snapshots.coordinator
        peers = placement.peers
        keys = list(peers)
        if pieces is None:
            answers = self.steps.time("restore the replicas", snapshots.wait, [
                peers[key].restore.remote(effect.incarnation, effect.point.snapshot_id, placement.peers_of(key),
                                          placement.route(key), coordinator) for key in keys], "restoring the replicas")
            return _raised(answers) or Restored(dict(zip(keys, answers)))
        adopted = self.steps.time("adopt the state", snapshots.wait, [
            peers[key].adopt.remote(effect.incarnation, pieces.refs[key], pieces.old_widths, pieces.tables,
                                    placement.peers_of(key), placement.route(key), coordinator) for key in keys],
            "the replicas adopting the state handed over")
        return _raised([locations for locations, _ in adopted]) or Restored(
            {key: locations for key, (locations, _) in zip(keys, adopted)}, summed(pair for _, held in adopted for pair in held))

    @answering
    def restart_progress(self, effect: RestartProgress, run: Execution) -> RecoveryEvent:
        snapshots = self.snapshots
        placement, outputs = snapshots.placement, snapshots.outputs
        # Every recovery and rescale passes here, under the job's lock: a poll made before it
        # (of a replaced progress actor, or of the rolled-back run) is never taken in.
        outputs.drop_poll()
        self.steps.time("restore the progress actor", snapshots.wait, [placement.progress.restore.remote(
            effect.incarnation, effect.pointstamps, outputs.delivered(), effect.kept,
            placement.progress_replicas(effect.subscriptions), outputs.cursor)], "restoring the progress actor")
        return ProgressRestarted()

    @answering
    def resume_replicas(self, effect: ResumeReplicas, run: Execution) -> RecoveryEvent:
        snapshots = self.snapshots
        snapshots.outputs.replaying = run.machine.replaying(snapshots.outputs.most_opened)  # a user error names it
        self.steps.time("resume", snapshots.wait, [peer.resume.remote(effect.incarnation)
                                                   for peer in snapshots.placement.peers.values()], "resuming the replicas")
        self.resumed = time.monotonic()
        return Resumed()

    @answering
    def replay_inputs(self, effect: ReplayInputs, run: Execution) -> RecoveryEvent:
        """The calls after each input replica's position, and the readers of sources read in the replicas."""
        snapshots = self.snapshots
        plan, point, placement = snapshots.placement.plan, effect.point, snapshots.placement
        positions = {(vertex, key.replica): point.position(key, vertex) for key in placement.peers
                     for vertex in plan.chain(key.chain).vertices if vertex in plan.inputs}
        self.steps.time("rewind the inputs", snapshots.inputs.rewind, effect.incarnation, placement.input_handles(),
                        positions, plan)
        self.steps.time("restart the readers", snapshots.inputs.start_readers, effect.incarnation)
        return Replayed()

    def reset_coordinator(self, effect: ResetCoordinator, run: Execution) -> None:
        """The coordinator takes snapshots again, at the restored (or rescaled) input replicas; waited
        for (:meth:`JobSnapshots.settle`): a stepped rescale pauses them right after its short switch,
        and a pause run first would be undone (snapshots taken through the steps)."""
        snapshots = self.snapshots
        inputs = snapshots.placement.input_replicas()
        if effect.how == "rescaled":  # reconfigured for the new widths before the replicas adopted
            started = snapshots.coordinator.start.remote(inputs)
        else:
            seconds = time.monotonic() - self.started
            started = snapshots.coordinator.restart.remote(effect.incarnation, inputs, seconds if effect.how == "recovered"
                                                           else None, snapshots.placement.plan)
        snapshots.settle(started, "the snapshot coordinator starting again")

    def finished(self, effect: Finished, run: Execution) -> None:
        if not effect.causes:  # a start from a savepoint, or a rescale's switch, that nothing interrupted
            return
        seconds, name = time.monotonic() - self.started, self.snapshots.placement.name
        self.snapshots.records.append(RecoveryRecord(effect.incarnation, "; ".join(effect.causes), len(effect.causes),
                                                     effect.snapshot_id, self.replaced, seconds, time.time(),
                                                     self.steps.seconds, self.kind.kind, self.kind.why))
        logger.warning("job %r recovered from snapshot %s in %.2f s", name, effect.snapshot_id, seconds)

    def failed(self, effect: Failed, run: Execution) -> None:
        """The machine failed the job: raised to the job's supervisor, which fails the job with it."""
        raise effect.error

    def died(self, error: BaseException, run: Execution) -> Died:
        """An actor's death, or an object lost with its owner: a rescale's pieces, put by a
        replica that died before the new replicas fetched them (Ray's OwnerDiedError)."""
        snapshots = self.snapshots
        during = f"the rescale to incarnation {snapshots.incarnation}" if run.machine.pieces is not None \
            else f"recovery {snapshots.incarnation}"
        what = "an actor died" if isinstance(error, ray.exceptions.RayActorError) else \
            "an object whose owner died was lost"
        return Died(f"job {snapshots.placement.name!r}: {what} during {during}: {type(error).__name__}")

    def _kind(self, dead: list[Any], run: Execution) -> RecoveryKind:
        """What this whole-job recovery records of ``dead`` (:func:`ray_kind`): where the rule would
        have recovered one alone, that its recovery alone did not finish (a death or a timeout during it, or a
        sender's log that could not replay: :attr:`JobSnapshots.alone_refused`)."""
        refused, self.snapshots.alone_refused = self.snapshots.alone_refused, None
        if refused is not None:
            return RecoveryKind("job", f"its recovery alone gave up ({refused}), so the whole job rolled back")
        found = ray_kind(self.snapshots, dead, rescaling=run.machine.pieces is not None)
        if found.kind == "job":
            return found
        return RecoveryKind("job", f"{found.why}; its recovery alone did not finish, so the whole job rolled back")

    def find_dead(self) -> list[Any]:
        """The keys of the job's actors that are dead (a ping that fails; a busy one is alive)."""
        liveness = self.snapshots.placement.liveness
        actors = {key: actor for key, actor in liveness.actors.items() if key not in liveness.declared}
        pings = {key: actor.ping.remote() for key, actor in actors.items()}
        ready = ray.wait(list(pings.values()), num_returns=len(pings), timeout=PING_TIMEOUT)[0] if pings else []
        dead = list(liveness.declared)  # killed by the supervisor's ping of a stalled job
        for key, ref in pings.items():
            if ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError:
                    dead.append(key)
        if COORDINATOR in dead:
            self.snapshots.coordinator = None
        return [key for key in dead if key != COORDINATOR]


def ray_kind(snapshots: JobSnapshots, dead: list[Any], rescaling: bool = False) -> RecoveryKind:
    """Which recovery the deaths of ``dead`` (the keys :meth:`RayRecovery.find_dead` found; a dead
    coordinator is ``snapshots.coordinator`` None) call for on Ray
    (:func:`~raytide.supervisor.alone.recovered_how`, the simulator's rule too), and where Ray
    does not carry that out alone: ``Recovery(alone=False)``; a job that relays progress per
    node (:meth:`~raytide.driver.placement.JobPlacement.place_relays` may choose them again);
    a job rescaled live (a snapshot of the widths before would be laid out anew, and an adopted
    state has no figures)."""
    others = [str(key) for key in dead if not isinstance(key, ReplicaKey)]
    others += [COORDINATOR] if snapshots.coordinator is None else []
    lost = [key for key in dead if isinstance(key, ReplicaKey)]
    found = recovered_how(snapshots.placement.plan, lost, others, rescaling)
    if found.kind == "job":
        return found
    why = ("the job was rescaled live (not recovered alone on Ray)" if snapshots.rescales else
           "Recovery(alone=False) was asked for" if not snapshots.recovery.alone else
           "the job relays progress per node (not recovered alone on Ray)" if snapshots.placement.relay_of else None)
    return found if why is None else RecoveryKind("job", f"{found.why}; but {why}, so the whole job rolls back")


def _raised(answers: list) -> Raised | None:
    """The first error among the replicas' answers to a restore (user code's ``restore()`` raised there), if any."""
    return next((Raised(answer) for answer in answers if isinstance(answer, BaseException)), None)
