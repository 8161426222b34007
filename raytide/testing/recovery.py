"""The in-process runtime's executor of a recovery: the same machine the Ray driver runs
(:class:`~raytide.snapshots.recovering.Recovering`), performed one scheduler step at a time.

Where the driver calls every replica at once and waits, this executor queues one step per
replica, in an order the runtime's seeded random draws, so that the scheduler interleaves
them with everything else in flight and a crash can strike between any two. What only the
driver does (rolling outputs back, reading the restore point, resetting the coordinator)
happens at once, inside the step whose answer led to it. A death noticed meanwhile
(:meth:`SteppedRecovery.died`) drops the steps still queued: the machine starts over. A
replica's restore that raises (user code's ``restore()``, a part that does not verify) drops
them too, and the machine fails the job with its error (as the driver's ``wait`` raises it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from raytide.errors import RaytideError
from raytide.physical.protocol import ReplicaKey
from raytide.progress.tracker import Pointstamp
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
    RecoveryEffect,
    RecoveryEvent,
    RecoveryPhase,
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
from raytide.snapshots.recovery import RestorePoint
from raytide.snapshots.replica_state import summed
from raytide.testing.outcome import LocalRun
from raytide.testing.stepped import SteppedMachine


class RecoveryRuntime(Protocol):
    """What a recovery does to the in-process runtime (:class:`~raytide.testing.local.LocalJob`)."""

    result: LocalRun
    planned: dict[tuple[str, int], list[Any]]

    def replica_keys(self) -> list[ReplicaKey]: ...

    def roll_back_outputs(self) -> None: ...

    def pause_coordinator(self, incarnation: int) -> None: ...

    def begin_incarnation(self, incarnation: int) -> None: ...

    def latest_point(self) -> RestorePoint: ...

    def restore_replica(self, key: ReplicaKey, point: RestorePoint) -> None: ...

    def adopt_pieces(self, key: ReplicaKey, pieces: Pieces, held: list[tuple[Pointstamp, int]]) -> None: ...

    def subscriptions(self) -> dict[ReplicaKey, list]: ...

    def restart_progress(self, effect: RestartProgress) -> None: ...

    def resume_replica(self, key: ReplicaKey) -> None: ...

    def replay_inputs(self, point: RestorePoint) -> None: ...

    def reset_coordinator(self, effect: ResetCoordinator) -> None: ...

    def recovered(self, effect: Finished) -> None: ...

    def fail(self, error: RaytideError) -> None: ...


class SteppedRecovery(SteppedMachine):
    """One recovery machine executed on ``runtime``, a step per :meth:`step`; it is
    :attr:`over` once the job runs again (or failed)."""

    ENDS = (RecoveryPhase.DONE, RecoveryPhase.FAILED)
    runtime: RecoveryRuntime
    machine: Recovering

    def _act(self, effect: RecoveryEffect) -> RecoveryEvent | None:
        """Do ``effect`` at once (and return its answer) or queue its steps (the last answers)."""
        runtime = self.runtime
        if isinstance(effect, RollBackOutputs):
            runtime.roll_back_outputs()
        elif isinstance(effect, PauseCoordinator):
            runtime.pause_coordinator(effect.incarnation)
        elif isinstance(effect, ReplaceDead):
            runtime.begin_incarnation(effect.incarnation)  # the dead come back fresh when restored
            return Replaced([])
        elif isinstance(effect, ReadPoint):
            return PointRead(runtime.latest_point())
        elif isinstance(effect, RestoreReplicas):
            self._restore(effect)
        elif isinstance(effect, RestartProgress):
            self._queue([functools.partial(runtime.restart_progress, effect)], ProgressRestarted())
        elif isinstance(effect, ResumeReplicas):
            runtime.result.replaying = self.machine.replaying(fed_epoch(runtime.planned))
            self._queue([functools.partial(runtime.resume_replica, key) for key in self._shuffled()], Resumed())
        elif isinstance(effect, ReplayInputs):
            self._queue([functools.partial(runtime.replay_inputs, effect.point)], Replayed())
        elif isinstance(effect, ResetCoordinator):
            runtime.reset_coordinator(effect)
        elif isinstance(effect, Finished):
            runtime.recovered(effect)
        elif isinstance(effect, Failed):
            runtime.fail(effect.error)
        return None

    def _restore(self, effect: RestoreReplicas) -> None:
        """Every replica from the snapshot, or from its pieces: a step each; then the answer."""
        runtime, pieces = self.runtime, effect.pieces
        if pieces is None:
            self._queue([functools.partial(self._raising, runtime.restore_replica, key, effect.point)
                         for key in self._shuffled()], lambda: Restored(runtime.subscriptions()))
            return
        held: list[tuple[Pointstamp, int]] = []
        self._queue([functools.partial(self._raising, runtime.adopt_pieces, key, pieces, held)
                     for key in self._shuffled()], lambda: Restored(runtime.subscriptions(), summed(held)))

    def _raising(self, restore: Callable[..., None], *args: Any) -> None:
        """A replica's restore; what it raises drops the steps queued and fails the recovery (:class:`Raised`)."""
        try:
            restore(*args)
        except Exception as error:
            self.steps.clear()
            self._answer(Raised(error))

    def _queue(self, steps: list[Callable[[], None]], answer: RecoveryEvent | Callable[[], RecoveryEvent]) -> None:
        """``steps``, then a step that answers the machine (``answer``, or what it makes then)."""
        made = answer if callable(answer) else (lambda: answer)
        self.steps.extend(steps)
        self.steps.append(lambda: self._answer(made()))

    def _shuffled(self) -> list[ReplicaKey]:
        keys = self.runtime.replica_keys()
        return self.rng.sample(keys, len(keys))


def fed_epoch(planned: dict[tuple[str, int], list[Any]]) -> int | None:
    """The latest epoch the simulated driver pushes records at (it plans every command at the start)."""
    return max((command[3] for commands in planned.values() for command in commands if command[0] == "push"),
               default=None)
