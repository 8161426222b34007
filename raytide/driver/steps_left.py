"""The steps of a stepped rescale left after ``job.rescale`` returned (issue 74; docs/rescaling.md,
"On Ray"), and who finishes them.

A growing stepped rescale returns once its plan is installed: its new replicas run, and the key
groups reach them as the inputs pass the plan's epochs, whichever thread feeds the job (the
caller's included). What is left for the driver is to notice the last step and let the
snapshots run again; the job's pump does it, between its other work, without waiting::

    job.rescale (growing): join or short switch; snapshots paused; the plan installed
        └─ StepsLeft.start(the plan, the vertex's replicas, the record) ─▶ returns
    the caller (or any thread) feeds: inputs pass the steps' epochs; the replicas hand over
    each pump (job.wait, results, collect; rescale's own waits):
        StepsLeft.poll: ask every replica of the vertex its steps left (VertexActor.stepping),
        without blocking (the answers are read at a later pump once all are in)
        none left ─▶ the record's window and steps' time filled; the snapshots resumed
    a death first ─▶ the pump's recovery (of the whole job: the last snapshot, from before the
        plan, laid out for the new widths) ends the plan: StepsLeft.abandon names it in the record
    the next job.rescale ─▶ StepsLeft.wait: takes the job's events until the steps are done
        (or a death, recovered from), within its timeout, before anything else is planned

Every wait here has the rescale's deadline and says what it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raytide.driver.connected import ray_get, ray_wait
from raytide.driver.coordination import RescaleRecord
from raytide.driver.inputs import InputFeeds
from raytide.errors import RescaleError
from raytide.physical.protocol import StepPlanMessage

__all__ = ["MOVE_STEP", "STEP_POLL", "PendingPlan", "StepsLeft", "died_in_steps"]

#: How long a wait for the steps takes the job's events between two looks at the steps left.
STEP_POLL = 0.02
#: The record's step for the time from the plan's install to its last step seen done.
MOVE_STEP = "move the groups in steps"


def died_in_steps(died: str) -> str:
    """How a plan ended, or why its rescale holds the whole job, after death ``died`` met its steps."""
    return f"a death during the steps ({died}): the job recovered from its last snapshot"


class PendingPlan:
    """One installed plan whose steps may be left: the vertex's replicas, the plan's epochs and
    the rescale's record (filled in when the steps end)."""

    def __init__(self, job: str, vertex: str, replicas: list[Any], message: StepPlanMessage,
                 resume: Callable[[], None], record: RescaleRecord | None, outputs: frozenset[str],
                 redo: Callable[[str], Any] | None = None) -> None:
        """``resume``: what follows the last step (the snapshots let run again; a shrink left to the pumps
        retires its emptied replicas first); ``record``: the rescale's (None: its caller waits and fills
        it); ``outputs``: the job's outputs fused behind the vertex (their epochs wait for its steps);
        ``redo``: what follows the recovery of a death that ended the plan, given the death (a shrink left
        to the pumps is made again, holding the whole job: the recovery put the job back in its old widths)."""
        self.job, self.vertex, self.replicas, self.message, self.resume = job, vertex, replicas, message, resume
        self.outputs, self.redo = outputs, redo
        self.installed, self.installed_wall = time.monotonic(), time.time()
        self.record = record
        self._asked: list[Any] = []

    @property
    def epochs(self) -> tuple[int, int]:
        """The plan's first and last steps' epochs."""
        return self.message.steps[0][0], self.message.steps[-1][0]

    def done(self, shown: dict[str, int | None]) -> bool:
        """Whether no replica of the vertex has a step left, without waiting: an output behind the
        vertex has shown the last step's epoch (its holds kept that epoch open until the state had
        come), or the replicas say so (asked, and the answers read once all have come, at a later
        call); a replica's death is left to the liveness watch."""
        reached = [shown.get(name) for name in self.outputs]
        if reached and all(at is not None and at >= self.epochs[1] for at in reached):
            return True
        if not self._asked:
            self._asked = [peer.stepping.remote() for peer in self.replicas]
        if len(ray_wait(self._asked, num_returns=len(self._asked), timeout=0)[0]) < len(self._asked):
            return False
        asked, self._asked = self._asked, []
        try:
            return not any(names for _, names in ray_get(asked, timeout=0))
        except ray.exceptions.RayActorError:
            return False

    def finish(self, ended: str) -> None:
        """The record's window and steps' time, and how the plan ended."""
        if self.record is not None:
            self.record.steps[MOVE_STEP] = time.monotonic() - self.installed
            self.record.stepped["window"] = (self.installed_wall, time.time())
            self.record.stepped["ended"] = ended


def _nothing() -> None:
    """Nothing follows the recovery: the plan's rescale stands (a growth's widths are the recovery's)."""


class StepsLeft:
    """The job's plan whose steps may be left (at most one: a rescale waits for the one before)."""

    def __init__(self) -> None:
        self.plan: PendingPlan | None = None
        self._lock = threading.Lock()

    def start(self, plan: PendingPlan) -> None:
        """``plan`` installed; its steps run on without the caller."""
        self.plan = plan

    def poll(self, finished: bool = False, shown: dict[str, int | None] | None = None) -> bool:
        """At a pump: if the plan's steps are done, finish it and resume the snapshots; whether
        none is left (True also with no plan). ``finished``: the job's last epoch completed, which
        the plan's holds allowed only once every step was made (nothing to resume then); ``shown``:
        the latest epoch each output has shown (``OutputCollector.latest``)."""
        with self._lock:
            plan = self.plan
            if plan is None:
                return True
            if not finished and not plan.done(shown or {}):
                return False
            self.plan = None
        plan.finish("done")
        if finished:
            return True
        try:
            plan.resume()
        except ray.exceptions.RayActorError:  # the coordinator died: its recovery starts the snapshots
            pass
        return True

    def abandon(self, why: str) -> Callable[[], None]:
        """A death ended the plan: the recovery starts the replicas without it (and the snapshots). Returns
        what the caller runs once it has recovered the job (the plan's ``redo``, if any)."""
        with self._lock:
            plan, self.plan = self.plan, None
        if plan is not None:
            plan.finish(died_in_steps(why))
        redo = plan.redo if plan is not None else None
        return (lambda: redo(why)) if redo is not None else _nothing

    def wait(self, watch: Callable[[float], str | None], inputs: InputFeeds, deadline: float) -> str | None:
        """Take the job's events (``watch``) until no step is left; a death's cause if one came
        first (not recovered from here).

        Raises:
            RescaleError: the steps were not done by ``deadline`` (naming their epochs and the inputs').
        """
        while not self.poll():
            died = watch(STEP_POLL)
            if died is not None:
                return died
            plan = self.plan
            if plan is not None and time.monotonic() > deadline:
                first, last = plan.epochs
                raise RescaleError(
                    f"job {plan.job!r}: the stepped rescale of {plan.vertex!r} has steps left at epochs {first}..{last}, "
                    f"and the inputs are at {inputs.epochs}: its steps are made as the inputs pass their epochs "
                    f"(advance them past {last}, or feed the job from another thread while job.rescale runs); the "
                    f"plan goes on, and snapshots stay paused until it ends")
        return None
