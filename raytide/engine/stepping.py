"""A stepped rescale in a replica: its plan installed, and what reaches a replica of the
stepped vertex checked against the owner in force at the record's time (pure).

The driver sends every replica that sends to a keyed vertex, and every replica of it, the
plan (:class:`~raytide.physical.protocol.StepPlanMessage`) before any input closes the first
step's epoch (docs/rescaling.md, "Stepped migration"). A sender then routes each batch by
the owners in force at its epoch (:meth:`~raytide.engine.outbox.Outbox.install_plan`); a
replica of the vertex refuses a batch whose records' owner at their epoch is another
replica (:class:`SteppedVertex`): the protocol was broken (a sender routing by another
table), and processing the records would lose or repeat them.
"""

from __future__ import annotations

from typing import Any

from raytide.core.routing import non_empty
from raytide.errors import RescaleError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import StepPlanMessage
from raytide.progress.timestamps import Timestamp
from raytide.rescale.migration import TimedRouter
from raytide.rescale.steps import StepPlan

__all__ = ["SteppedVertex", "check_in_time"]


class SteppedVertex:
    """Replica ``replica`` of the vertex a stepped rescale's plan moves: the owners its
    exchange inputs must agree with, at each record's epoch."""

    def __init__(self, plan: PhysicalPlan, message: StepPlanMessage, replica: int) -> None:
        self.vertex, self.replica = message.vertex, replica
        self.steps = StepPlan.of_message(message)
        self._routers: dict[int, TimedRouter] = {}
        for port, edges in enumerate(plan.vertex(self.vertex).inputs):
            for edge in edges:
                if edge.channel.kind == "exchange" and edge.channel.key is not None:
                    self._routers[port] = TimedRouter(edge.channel.key, self.steps)

    def admit(self, port: int, time: Timestamp, batch: Any) -> None:
        """Check that every record of ``batch`` (at ``time``, on input ``port``) is this
        replica's at ``time``'s epoch.

        Raises:
            RescaleError: naming the vertex, the epoch, this replica and the owner in force.
        """
        router = self._routers.get(port)
        if router is None:
            return
        for owner, part in non_empty(router.route(batch, time)):
            if owner != self.replica:
                raise RescaleError(
                    f"vertex {self.vertex!r}: {len(part)} records at {time} (epoch {time.epoch}) reached replica "
                    f"{self.replica} on input {port}, but replica {owner} owns their key groups at that epoch in the "
                    f"stepped rescale's plan: a sender routed them by another table")


def check_in_time(message: StepPlanMessage, input_epochs: dict[str, int | None], where: str) -> None:
    """Refuse a plan that reaches ``where`` after one of its inputs closed the first step's
    epoch (``input_epochs``: each hosted input's current epoch, None once closed): records
    of that epoch may have gone out by the old table already.

    Raises:
        RescaleError: naming the vertex, the input, its epoch and the step's.
    """
    first = StepPlan.of_message(message).first_epoch
    if first is None:
        return
    for name, epoch in input_epochs.items():
        if epoch is None or epoch > first:
            state = "is closed" if epoch is None else f"is at epoch {epoch}"
            raise RescaleError(f"vertex {message.vertex!r}: a stepped rescale's plan reached {where} too late: its "
                               f"first step is at epoch {first}, but input {name!r} {state}, past it; the plan must "
                               f"be installed before any input closes its first epoch")
