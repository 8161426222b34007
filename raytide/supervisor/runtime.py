"""The runtime interface of each machine: how a world carries out the effects of a recovery
(:class:`RecoveryRuntime`) and of a rescale (:class:`RescaleRuntime`), one method per effect,
beside the tables that name each effect's method. The Ray driver implements both
(:mod:`raytide.driver.recovery_runtime`, :mod:`raytide.driver.rescale`), the simulator too
(:mod:`raytide.testing.runtime`); :class:`~raytide.supervisor.execution.Execution` is the one
loop that runs a machine on either, and ``tests/unit/test_runtimes.py`` checks that both worlds
implement every effect of both machines.

Each method takes the effect and the :class:`~raytide.supervisor.execution.Execution` it is
part of, and returns the machine's answer now, or None: no answer follows (an effect the
machine does not wait on), or it comes later (``execution.answer``, from a queued step). A
death, a timeout or what a replica's part raised is an answer too
(:class:`~raytide.snapshots.recovering.Died`, ``TimedOut``, ``Raised``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, Protocol, get_args

from raytide.rescale.rescaling import (
    Adopt,
    HandOver,
    HoldAtCut,
    KeepOldWidths,
    Recover,
    Refused,
    Rescaled,
    RescaleEffect,
    RescaleEvent,
    StartHosts,
    Switch,
)
from raytide.snapshots.recovering import (
    Failed,
    Finished,
    PauseCoordinator,
    ReadPoint,
    RecoveryEffect,
    RecoveryEvent,
    ReplaceDead,
    ReplayInputs,
    ResetCoordinator,
    RestartProgress,
    RestoreReplicas,
    ResumeReplicas,
    RollBackOutputs,
)


class RunningMachine(Protocol):
    """What a runtime may do with the execution it carries an effect out for
    (:class:`raytide.supervisor.execution.Execution`): read its machine, queue steps that
    answer later, answer it."""

    machine: Any
    steps: collections.deque[Callable[[], None]]

    def answer(self, event: Any) -> None: ...

    def queue(self, steps: list[Callable[[], None]], answer: Any) -> None: ...


class RecoveryRuntime(Protocol):
    """A world's way of carrying out a recovery's effects (:mod:`raytide.snapshots.recovering`)."""

    def roll_back_outputs(self, effect: RollBackOutputs, run: RunningMachine) -> None:
        """Drop the output epochs held for a commit: the restored job computes them again."""

    def pause_coordinator(self, effect: PauseCoordinator, run: RunningMachine) -> None:
        """The coordinator takes no snapshot (a dead one is replaced later)."""

    def replace_dead(self, effect: ReplaceDead, run: RunningMachine) -> RecoveryEvent | None:
        """Find the dead actors and lease (or reset) hosts for their roles; answer ``Replaced``."""

    def read_point(self, effect: ReadPoint, run: RunningMachine) -> RecoveryEvent | None:
        """Read where to restore from; answer ``PointRead``."""

    def restore_replicas(self, effect: RestoreReplicas, run: RunningMachine) -> RecoveryEvent | None:
        """Every replica from the point, or from its pieces; answer ``Restored`` (or ``Raised``)."""

    def restart_progress(self, effect: RestartProgress, run: RunningMachine) -> RecoveryEvent | None:
        """A progress actor state of the restored job; answer ``ProgressRestarted``."""

    def resume_replicas(self, effect: ResumeReplicas, run: RunningMachine) -> RecoveryEvent | None:
        """Every replica runs again (what it computes again is named in a user error); answer ``Resumed``."""

    def replay_inputs(self, effect: ReplayInputs, run: RunningMachine) -> RecoveryEvent | None:
        """Send the input calls after each position again (:mod:`raytide.supervisor.replay`); answer ``Replayed``."""

    def reset_coordinator(self, effect: ResetCoordinator, run: RunningMachine) -> None:
        """The coordinator snapshots the restored job."""

    def finished(self, effect: Finished, run: RunningMachine) -> None:
        """The job runs again: record it."""

    def failed(self, effect: Failed, run: RunningMachine) -> None:
        """The job cannot be brought back: fail it with ``effect.error``."""


class RescaleRuntime(Protocol):
    """A world's way of carrying out a rescale's effects (:mod:`raytide.rescale.rescaling`)."""

    def start_hosts(self, effect: StartHosts, run: RunningMachine) -> RescaleEvent | None:
        """Lease the hosts of the new replicas; answer ``HostsStarted``."""

    def hold_at_cut(self, effect: HoldAtCut, run: RunningMachine) -> RescaleEvent | None:
        """Every replica holds at a cut the coordinator takes; answer ``Held`` (or ``CutMissed``, ``Died``, ``TimedOut``)."""

    def hand_over(self, effect: HandOver, run: RunningMachine) -> RescaleEvent | None:
        """Every held replica splits its state; answer ``HandedOver`` (or ``HandOverFailed``, ``Died``)."""

    def roll_back_outputs(self, effect: RollBackOutputs, run: RunningMachine) -> None:
        """Drop the output epochs held for a commit: they come again from the kept records."""

    def switch(self, effect: Switch, run: RunningMachine) -> RescaleEvent | None:
        """The coordinator, then the hosts, take the new widths; answer ``Switched`` (or ``Died``)."""

    def recover(self, effect: Recover, run: RunningMachine) -> RescaleEvent | None:
        """Run a recovery in the old widths to its end; answer ``Recovered``."""

    def adopt(self, effect: Adopt, run: RunningMachine) -> RescaleEvent | None:
        """Run the recovery that brings the new widths up to its end; answer ``Recovered``."""

    def keep_old_widths(self, effect: KeepOldWidths, run: RunningMachine) -> None:
        """The rescale is not made: give the new hosts back, snapshots go on."""

    def refused(self, effect: Refused, run: RunningMachine) -> None:
        """Say why the rescale was not made (``effect.error``), as ``job.rescale`` raises it."""

    def rescaled(self, effect: Rescaled, run: RunningMachine) -> None:
        """The rescale was made: record it."""


#: The :class:`RecoveryRuntime` method that carries out each recovery effect.
RECOVERY_EFFECTS: dict[type, str] = {
    RollBackOutputs: "roll_back_outputs", PauseCoordinator: "pause_coordinator", ReplaceDead: "replace_dead",
    ReadPoint: "read_point", RestoreReplicas: "restore_replicas", RestartProgress: "restart_progress",
    ResumeReplicas: "resume_replicas", ReplayInputs: "replay_inputs", ResetCoordinator: "reset_coordinator",
    Finished: "finished", Failed: "failed",
}
#: The :class:`RescaleRuntime` method that carries out each rescale effect.
RESCALE_EFFECTS: dict[type, str] = {
    StartHosts: "start_hosts", HoldAtCut: "hold_at_cut", HandOver: "hand_over", RollBackOutputs: "roll_back_outputs",
    Switch: "switch", Recover: "recover", Adopt: "adopt", KeepOldWidths: "keep_old_widths", Refused: "refused",
    Rescaled: "rescaled",
}


def effects_of(union: Any) -> set[type]:
    """The effect classes of a machine's effect union (``RecoveryEffect``, ``RescaleEffect``)."""
    return set(get_args(union))


#: Each machine's effect union and the runtime interface and method table that carry it out.
INTERFACES: list[tuple[Any, type, dict[type, str]]] = [
    (RecoveryEffect, RecoveryRuntime, RECOVERY_EFFECTS),
    (RescaleEffect, RescaleRuntime, RESCALE_EFFECTS),
]
