"""The driver's side of recovery on Ray (``rt.run(..., recovery=rt.Recovery(...))``):
:class:`JobRecovery`, the job's snapshot state (:class:`~raytide.driver.coordination.JobSnapshots`)
and the recoveries it runs.

The driver supervises (:mod:`raytide.driver.supervisor`): it notices a death (a host that no
longer answers its pings, the progress actor's long poll failing, a replica reporting a dead
peer) and recovers, in the steps of the recovery machine
(:class:`~raytide.snapshots.recovering.Recovering`), run by the loop the simulator runs too
(:class:`~raytide.supervisor.execution.Execution`) on the Ray runtime
(:class:`~raytide.driver.recovery_runtime.RayRecovery`: each effect on every actor at once,
with a timeout; no actor waits for the driver). A job started from a savepoint
(``restore=``) is brought up by the same machine.
"""

from __future__ import annotations

from raytide.driver.coordination import RECOVERY_POLL as RECOVERY_POLL
from raytide.driver.coordination import RECOVERY_TIMEOUT as RECOVERY_TIMEOUT
from raytide.driver.coordination import JobSnapshots, Steps
from raytide.driver.coordination import RecoveryRecord as RecoveryRecord
from raytide.driver.coordination import RescaleRecord as RescaleRecord
from raytide.driver.recovery_runtime import RayRecovery
from raytide.snapshots.consumed import continue_from, starting_point
from raytide.snapshots.recovering import Recovering
from raytide.supervisor.execution import Execution
from raytide.supervisor.replay import input_positions


class JobRecovery(JobSnapshots):
    """Snapshot and recovery state of one job on the driver: :class:`JobSnapshots`, and the
    recoveries it runs on Ray (:meth:`execute`)."""

    def after_death(self, cause: str) -> Recovering:
        """The recovery (:meth:`execute` it) that brings the job back from its last committed
        snapshot in a new incarnation, after ``cause``."""
        return Recovering.after_death(self.placement.name, self.budget, self.incarnation, cause)

    def start_from(self, snapshot_id: int | str) -> None:
        """A new job starts where committed snapshot ``snapshot_id`` of an earlier run (laid
        out for this job) left off (``restore=``), or at the very start after a run that
        committed none (:data:`~raytide.snapshots.consumed.START`): incarnation 1, the epochs
        that run handed out are not handed out again (what it holds complete is final: it is
        never computed again), and each input replica skips the calls the snapshot had consumed."""
        point = starting_point(self.placement.plan, self.store, snapshot_id)
        continue_from(self.outputs, self.consumed, point, self.first_id)
        self.started_from = point.snapshot_id
        self.inputs.skip(input_positions(point.positions), point.input_epochs)
        self.execute(Recovering.from_point(self.placement.name, self.budget, point))

    def start_fresh(self) -> None:
        """A run from the start (no ``restore=``): nothing is consumed yet, whatever an
        earlier run's record says; the coordinator starts taking snapshots (waited for: a stepped
        rescale's pause asked for next must not run before it, :meth:`settle`)."""
        self.record_consumed({})
        self.settle(self.coordinator.start.remote(), "the snapshot coordinator starting")

    def execute(self, machine: Recovering, steps: Steps | None = None) -> float:
        """Carry out recovery ``machine`` (:mod:`raytide.snapshots.recovering`) on Ray
        (:class:`~raytide.driver.recovery_runtime.RayRecovery`), until the job runs again;
        returns when its replicas ran again (``time.monotonic()``; the inputs' replay goes on
        while they run).

        Raises:
            RaytideError: the machine failed the job (the restart budget is spent, a step
                took too long, an input cannot go back to where its snapshot left it).
        """
        on_ray = RayRecovery(self, steps or Steps())
        Execution(machine, on_ray).start()
        return on_ray.resumed
