"""The snapshot coordinator's and the writers' actions in the simulated world
(:class:`~raytide.testing.world.World`): the coordinator core's clock and triggers, a rescale's
cut asked of it as a message, the replicas' writers storing and acknowledging their local
snapshots, and the commit (the manifest written into a real store, what the driver learns of
it). :class:`SnapshotTaking` is a part of ``World``, apart by purpose: it reads and changes the
world's state, declared below for the type checker.
"""

from __future__ import annotations

import collections
import functools
import random
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import Marker, MarkerKind, ReplicaKey
from raytide.rescale.rescaling import CutMissed, Held, RescalePhase, cut_answer
from raytide.snapshots.coordinator import Acknowledgement, CoordinatorCore
from raytide.snapshots.recovery import commit_snapshot, part_name
from raytide.snapshots.replica_state import LocalSnapshot
from raytide.supervisor.execution import Execution
from raytide.supervisor.replay import InputReplica, ReplayLog, input_positions
from raytide.testing.consumer import LocalOutputs
from raytide.testing.mailboxes import Mailboxes
from raytide.testing.outcome import COORDINATOR, WRITERS, LocalRecovery, LocalRun, Target

if TYPE_CHECKING:
    from raytide.testing.zombies import ActorZombie


def rescaling_in(rescaling: Execution | None, *phases: RescalePhase) -> bool:
    """Whether ``rescaling`` (a rescale's execution) is under way, in one of ``phases``."""
    return rescaling is not None and rescaling.machine.phase in phases


def taken_by(action: Callable[[], None], to: Target) -> None:
    """``action``, taken by actor ``to`` (which paces it: :meth:`World._pace`)."""
    action()


class SnapshotTaking:
    """The snapshot actions of :class:`~raytide.testing.world.World` (see the module docstring)."""

    plan: PhysicalPlan
    rng: random.Random
    mail: Mailboxes
    recovery: LocalRecovery | None
    coordinator: CoordinatorCore | None
    incarnation: int
    last_snapshot_id: int
    result: LocalRun
    outputs: LocalOutputs
    calls: ReplayLog
    rescaling: Execution | None
    recovering: Execution | None
    #: The driver's requests for a rescale's cut on their way to the coordinator, as
    #: ``(incarnation, attempt)``, and the attempt whose cut is in flight (None: no cut is).
    cut_asks: collections.deque[tuple[int, int]]
    cut_of: int | None

    if TYPE_CHECKING:  # the world's own, used here
        def replica_keys(self) -> list[ReplicaKey]: ...
        def _stepping(self) -> bool: ...
        @property
        def recovery_steps(self) -> collections.deque[Callable[[], None]]: ...
        def _input_replicas(self, name: str) -> list[ReplicaKey]: ...
        def _pace(self, actor: Hashable) -> float: ...
        def _tell(self, learn: Callable[[], None]) -> None: ...
        def _current(self, key: ReplicaKey, incarnation: int) -> bool: ...
        def _found(self, target: Target, how: str) -> None: ...
        def _undead(self, role: str) -> ActorZombie | None: ...

    def _new_coordinator(self) -> CoordinatorCore:
        """A coordinator whose ids follow every id used before (even of abandoned snapshots);
        without recovery, one that takes a rescale's cuts only (no interval), as on Ray."""
        recovery, first = self.recovery, self.last_snapshot_id + 1
        interval, timeout = (None, LocalRecovery.timeout) if recovery is None else (recovery.interval, recovery.timeout)
        if recovery is not None:
            first = max(recovery.store.next_id(), first)
        core = CoordinatorCore(list(self.replica_keys()), first, interval, timeout, self.incarnation)
        core.last_end = self.result.steps
        return core

    def _tick_coordinator(self) -> None:
        """The coordinator's clock: it abandons a snapshot (or rescale cut) that took too long (not while frozen)."""
        if self.coordinator is None or not self._pace(COORDINATOR):
            return
        flight = self.coordinator.in_flight
        abandoned = self.coordinator.tick(self.result.steps)
        if abandoned is not None and flight is not None and flight.hold:
            self.result.cut_timeouts.append(self.result.steps)
            self._answer_cut(CutMissed(abandoned.reason))

    def _answer_cut(self, answer: Held | CutMissed) -> None:
        """Answer the rescale's cut, if the rescale still waits for the one in flight (not after a
        death it recovers from: the driver stopped waiting, as on Ray nobody reads that answer).
        The coordinator is done with the cut at once; the driver learns of it when awake (:meth:`_tell`)."""
        attempt, self.cut_of = self.cut_of, None
        self._tell(lambda: self._answered(attempt, answer))

    def _answered(self, attempt: int | None, answer: Held | CutMissed) -> None:
        """The driver learns the answer to the cut of rescale attempt ``attempt``; if it has seen the
        job finish by then, it answers that instead (as the Ray driver does): the rescale is refused."""
        if rescaling_in(self.rescaling, RescalePhase.HOLDING) and self.rescaling.machine.attempts == attempt:  # type: ignore[union-attr]
            self.rescaling.answer(cut_answer(answer, self.result.finished))  # type: ignore[union-attr]

    def _snapshot_actions(self) -> list[Callable[[], None]]:
        actions: list[Callable[[], None]] = []
        coordinator, recovering = self.coordinator, self.recovering is not None and self.recovering.steps
        if (coordinator is not None and not recovering and not self.result.finished and not self.cut_asks
                and not rescaling_in(self.rescaling, RescalePhase.HOLDING, RescalePhase.HANDING_OVER)
                and coordinator.due(self.result.steps) and not self._stepping()):
            actions.append(functools.partial(taken_by, self._trigger, to=COORDINATOR))
        if coordinator is not None and self.cut_asks and (coordinator.in_flight is None
                                                          or coordinator.cut_refused(self.cut_asks[0][0])):
            actions.append(functools.partial(taken_by, self._take_cut_ask, to=COORDINATOR))
        if self.mail.writes:
            actions.append(functools.partial(self._write, to=WRITERS))
        zombie = self._undead(COORDINATOR) if self.mail.acks and coordinator is None else None
        if zombie is not None:  # some writers call the zombie, some wait
            knew = [self.rng.random() < 0.5 for _ in self.mail.acks]  # for the coordinator a recovery brings
            zombie.inbox += [ack for (_, ack), old in zip(self.mail.acks, knew) if old]
            self.mail.acks[:] = [entry for entry, old in zip(self.mail.acks, knew) if not old]
        if self.mail.acks and coordinator is None:
            self._found(COORDINATOR, "a writer's acknowledgement failed")
        if self.mail.acks and coordinator is not None:
            actions.append(functools.partial(taken_by, self._acknowledge, to=COORDINATOR))
        if self.mail.commits and coordinator is not None:
            actions.append(functools.partial(taken_by, self._commit, to=COORDINATOR))
        return actions

    def _take_cut_ask(self) -> None:
        """The coordinator takes the driver's oldest request for a cut (``hold_now``): refused if
        the job has left its incarnation, else the cut is triggered (nothing is in flight)."""
        assert self.coordinator is not None
        incarnation, attempt = self.cut_asks.popleft()
        stale = self.coordinator.cut_refused(incarnation)
        if stale is not None:
            self.cut_of = attempt
            self._answer_cut(CutMissed(f"rescale cut not taken: {stale}"))
            return
        self.cut_of = attempt
        self._trigger(hold=True)

    def _trigger(self, hold: bool = False) -> None:
        """The coordinator starts a snapshot (a rescale's cut, with ``hold``): a barrier for every input replica."""
        assert self.coordinator is not None
        trigger = self.coordinator.trigger(self.result.steps, self.outputs.durable(), hold=hold)
        if trigger is None:
            return
        self.last_snapshot_id = trigger.snapshot_id
        marker = Marker(trigger.snapshot_id, MarkerKind.HOLD if trigger.hold else MarkerKind.SNAPSHOT, trigger.delivered,
                        trigger.committed)
        for name in self.plan.inputs:
            for key in self._input_replicas(name):
                self.mail.injects[key].append((trigger.incarnation, marker))

    def _write(self, to: Target = WRITERS) -> None:
        """A replica's writer stores one local snapshot, then acknowledges it."""
        assert self.recovery is not None
        incarnation, snapshot = self.mail.writes.pop(self.rng.randrange(len(self.mail.writes)))
        if self._current(snapshot.key, incarnation):
            self._store(incarnation, snapshot)

    def _store(self, incarnation: int, snapshot: LocalSnapshot) -> None:
        """A writer (a live replica's, or a zombie's) stores a local snapshot, then acknowledges it."""
        assert self.recovery is not None
        try:
            part = self.recovery.store.write_part(snapshot.snapshot_id, part_name(snapshot.key), snapshot.data)
        except OSError as error:  # as the replica's writer thread does: the snapshot cannot complete
            if self.coordinator is not None:
                self.coordinator.write_failed(snapshot.key, incarnation, snapshot.snapshot_id, repr(error), self.result.steps)
            return
        self.mail.acks.append((incarnation, Acknowledgement(snapshot.key, snapshot.snapshot_id, incarnation, (part,),
                                                       snapshot.summary)))

    def _acknowledge(self) -> None:
        assert self.coordinator is not None
        _, ack = self.mail.acks.pop(self.rng.randrange(len(self.mail.acks)))
        commit = self.coordinator.acknowledge(ack, self.result.steps)
        if commit is not None:
            self.mail.commits.append((commit.incarnation, commit))

    def _commit(self) -> None:
        """The coordinator writes the job part and the manifest, then applies retention."""
        assert self.coordinator is not None
        incarnation, commit = self.mail.commits.popleft()
        if incarnation != self.coordinator.incarnation:
            return
        if commit.hold:
            self.coordinator.held(commit.snapshot_id, self.result.steps)
            self._answer_cut(Held(commit.snapshot_id, dict(commit.summaries)))  # type: ignore[arg-type]
            return
        assert self.recovery is not None  # a snapshot: without recovery, the coordinator takes cuts only
        try:
            complete = commit_snapshot(self.recovery.store, self.plan, commit, commit.delivered, self.recovery.retain)
        except OSError as error:  # as the coordinator actor does: this snapshot is lost, the job goes on
            self.coordinator.fail(f"committing it failed: {error!r}", self.result.steps)
            return
        self.coordinator.committed(commit.snapshot_id, self.result.steps)
        self.result.snapshots.append(commit.snapshot_id)
        positions = input_positions({key: summary.positions for key, summary in commit.summaries.items()
                                     if isinstance(key, ReplicaKey)})
        self._tell(functools.partial(self._committed, positions, complete))

    def _committed(self, positions: dict[InputReplica, int], complete: dict[str, int | None]) -> None:
        """The driver learns of a commit (as the Ray driver's sync does): the calls it covers
        are not replayed again, and the outputs complete in it are released."""
        self.calls.forget_covered(positions)
        self.outputs.release(complete)
