"""A stepped rescale at the senders and at the replicas: routing by the time a group moves,
and each replica's side of a step (pure).

Given a :class:`~raytide.rescale.steps.StepPlan`, every sender to the vertex routes a record
by the table in force at its timestamp's epoch (:class:`TimedRouter`), and every replica of
the vertex keeps its part of each step (:class:`ReplicaSteps`)::

    old owner a of group g (step at epoch e):
        holds a capability at e (``capabilities``) until g's state has left, at the vertex's
        input port, as a message in flight would be (docs/rescaling.md, "Progress stays
        correct", says why a pointstamp at the vertex itself would not hold b back);
        once its frontier passes e (``due``): hands g over (take_keys, and g's
        notifications at e and after) to the new owner, and drops the capability
    new owner b:
        a record of g at epoch >= e before g's state came is kept (``receive`` says wait);
        g's state comes (``arrived``): put_keys, then the kept records of g, in their order

A record that reaches a replica that is not the owner in force at its time, or that reaches
the old owner after the group's state left, is refused with a :class:`RescaleError` naming
the vertex, the group, the epoch and the owner: the protocol was broken, and processing it
would lose or repeat it. Invariants (``tests/unit/test_rescale_steps.py`` checks them against
brute force, ``tests/sim/test_stepped_migration_sim.py`` the message flow under seeded
interleavings with crashes): each record is processed once, by the owner in force at its
time, after every earlier record of its key at that owner, and a group's state is at its new
owner before any record of the group at or after the step.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from raytide.core.keygroups import KeyGroupAssignment
from raytide.core.routing import ExchangeRouter, Routed
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp
from raytide.rescale.steps import StepPlan

__all__ = ["GroupHandoff", "ReplicaSteps", "TimedRouter", "frontier_passes"]


def frontier_passes(frontier: Iterable[Timestamp], epoch: int) -> bool:
    """Whether nothing at an epoch before ``epoch`` can still happen under ``frontier``
    (every element's epoch is ``>= epoch``, loop rounds whatever they are; an empty frontier
    passes every epoch)."""
    return all(time.epoch >= epoch for time in frontier)


class TimedRouter:
    """An exchange routed by the table in force at each batch's time (a sender's side).

    One :class:`~raytide.core.routing.ExchangeRouter` per distinct table of the plan, made
    when a batch first needs it, so a key's cached owner is that table's.
    """

    def __init__(self, key: Callable[[Any], Hashable] | str, plan: StepPlan) -> None:
        self._key, self._plan = key, plan
        self._routers: dict[tuple[int, ...], ExchangeRouter] = {}

    @property
    def after(self) -> KeyGroupAssignment:
        """The table once every step is done."""
        return self._plan.after

    def route(self, batch: Any, time: Timestamp) -> Routed:
        """``(replica, sub_batch)`` for ``batch`` sent at ``time``, by the owners at its epoch."""
        owners = self._plan.owners_at(time.epoch)
        router = self._routers.get(owners)
        if router is None:
            table = self._plan.table_at(time.epoch)
            router = self._routers[owners] = ExchangeRouter(self._key, table.parallelism, table.key_groups, table)
        return router.route(batch)


@dataclass(frozen=True)
class GroupHandoff:
    """Key groups whose state one replica sends another at a step's epoch."""

    epoch: int
    groups: tuple[int, ...]
    to_replica: int


class ReplicaSteps:
    """One replica's part in a stepped rescale of ``vertex``: what it must hand over and
    when, what it must wait for, and the records it keeps meanwhile."""

    def __init__(self, vertex: str, replica: int, plan: StepPlan) -> None:
        self.vertex, self.replica, self._plan = vertex, replica, plan
        moves = plan.moves_of(replica)
        self._leaving = {move.key_group: (epoch, move.to_replica) for epoch, move in moves
                         if move.from_replica == replica}
        self._coming = {move.key_group: epoch for epoch, move in moves if move.to_replica == replica}
        self._left: set[int] = set()
        self._arrived: set[int] = set()
        self._kept: list[tuple[int, Timestamp, Any]] = []

    @property
    def done(self) -> bool:
        """Whether every group leaving has left and every group coming has come."""
        return len(self._left) == len(self._leaving) and len(self._arrived) == len(self._coming)

    def capabilities(self) -> list[int]:
        """The epochs at which this replica still holds a capability: those of the steps
        whose groups it has yet to hand over (so no frontier passes them before it does)."""
        return sorted({epoch for group, (epoch, _) in self._leaving.items() if group not in self._left})

    def gone(self, epoch: int) -> set[int]:
        """The groups whose state has left this replica at a step after ``epoch``: a record of
        one of them at ``epoch`` reaching it now came too late (the protocol was broken)."""
        return {group for group in self._left if self._leaving[group][0] > epoch}

    def receive(self, group: int, time: Timestamp, record: Any) -> bool:
        """Whether a record of ``group`` at ``time`` may be processed now; if not, it is kept
        until the group's state comes (:meth:`arrived` returns it).

        Raises:
            RescaleError: this replica is not the owner in force at ``time``, or the group's
                state has left it already.
        """
        owner = self._plan.owner_at(group, time.epoch)
        if owner != self.replica:
            raise RescaleError(f"vertex {self.vertex!r}: a record of key group {group} at epoch {time.epoch} reached "
                               f"replica {self.replica}, but replica {owner} owns the group at that epoch")
        if group in self._left:
            raise RescaleError(f"vertex {self.vertex!r}: a record of key group {group} at epoch {time.epoch} reached "
                               f"replica {self.replica} after the group's state left it at epoch "
                               f"{self._leaving[group][0]}")
        if group in self._coming and group not in self._arrived:
            self._kept.append((group, time, record))
            return False
        return True

    def due(self, frontier: Iterable[Timestamp]) -> list[GroupHandoff]:
        """The hand-overs this replica must make now that its frontier is ``frontier``: the
        groups of every step whose epoch the frontier passes, not handed over yet (each
        once; the caller takes their keys, sends them, then drops the capability)."""
        frontier = list(frontier)
        ready: dict[tuple[int, int], list[int]] = {}
        for group, (epoch, to_replica) in sorted(self._leaving.items()):
            if group not in self._left and frontier_passes(frontier, epoch):
                ready.setdefault((epoch, to_replica), []).append(group)
                self._left.add(group)
        return [GroupHandoff(epoch, tuple(groups), to) for (epoch, to), groups in sorted(ready.items())]

    def arrived(self, groups: Iterable[int]) -> list[tuple[int, Timestamp, Any]]:
        """The state of ``groups`` has come (and was put): the records kept for them,
        ``(group, time, record)`` in the order they came, to be processed now.

        Raises:
            RescaleError: a group this replica does not receive in the plan, or received twice.
        """
        groups = set(groups)
        for group in sorted(groups):
            if group not in self._coming or group in self._arrived:
                why = "it had received already" if group in self._arrived else "it does not receive in the plan"
                raise RescaleError(f"vertex {self.vertex!r}: replica {self.replica} was handed key group {group}, "
                                   f"which {why}")
        self._arrived |= groups
        released = [kept for kept in self._kept if kept[0] in groups]
        self._kept = [kept for kept in self._kept if kept[0] not in groups]
        return released
