"""A stepped rescale in a replica: its plan installed, and what reaches a replica of the
stepped vertex checked against the owner in force at the record's time (pure).

The driver sends every replica that sends to a keyed vertex, and every replica of it, the
plan (:class:`~raytide.physical.protocol.StepPlanMessage`) before any input closes the first
step's epoch (docs/rescaling.md, "Stepped migration"). A sender then routes each batch by
the owners in force at its epoch (:meth:`~raytide.engine.outbox.Outbox.install_plan`); a
replica of the vertex refuses a batch whose records' owner at their epoch is another
replica (:class:`SteppedVertex`): the protocol was broken (a sender routing by another
table), and processing the records would lose or repeat them.

Each step, moving groups ``G`` from old owner ``a`` to new owner ``b`` at epoch ``e``::

    driver: a +1 at (the vertex's input port, e) for (a, e, b), made with the plan (:func:`holds`),
        while every input is still before e: the frontier at the vertex's input cannot pass e
    a: once nothing before e can reach it (its input frontier, or its epoch tokens, and none
        of its own notifications before e pending): take_keys(G), and send GroupState(e, G, state)
        to b as a data batch at e: that message is the hold, moved (no new +1, no -1)
    b: a record of G at an epoch >= e before the state came is kept (its pointstamp with it);
        its epoch tokens count the step as one more channel, at e, until the state comes
    b: GroupState comes: put_keys (which asks for G's notifications), the kept records
        processed in their order, the hold's -1
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, key_group
from raytide.core.routing import ExchangeRouter, column_key_groups, non_empty
from raytide.errors import RescaleError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ChannelId, GroupState, StepPlanMessage
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp
from raytide.rescale.migration import GroupHandoff, ReplicaSteps, TimedRouter
from raytide.rescale.steps import StepPlan

__all__ = ["SteppedVertex", "check_in_time", "holds", "step_channel"]

#: A record batch a new owner keeps until its groups' state comes: ``(channel, vertex, time, batch)``.
Kept = tuple[ChannelId, str, Timestamp, Any]


class SteppedVertex:
    """Replica ``replica`` of the vertex a stepped rescale's plan moves: the owners its
    exchange inputs must agree with, at each record's epoch."""

    def __init__(self, plan: PhysicalPlan, message: StepPlanMessage, replica: int) -> None:
        self.vertex, self.replica = message.vertex, replica
        self.steps = StepPlan.of_message(message)
        self.moves = ReplicaSteps(self.vertex, replica, self.steps)
        self.last = self.steps.steps[-1].epoch if self.steps.steps else -1  # the last step's epoch
        self.port = hold_port(plan, self.vertex)
        self._routers: dict[int, TimedRouter] = {}
        self._keys: dict[int, Callable[[Any], Hashable] | str] = {}
        for port, edges in enumerate(plan.vertex(self.vertex).inputs):
            for edge in edges:
                if edge.channel.kind == "exchange" and edge.channel.key is not None:
                    self._routers[port] = TimedRouter(edge.channel.key, self.steps)
                    self._keys[port] = edge.channel.key
        #: Groups coming here, by step epoch, whose state has not come yet.
        self.waiting: dict[int, set[int]] = {}
        for epoch, move in self.steps.moves_of(replica):
            if move.to_replica == replica:
                self.waiting.setdefault(epoch, set()).add(move.key_group)
        self.kept: list[Kept] = []
        self._groups: dict[Hashable, int] = {}  # the key groups of the keys tested so far (moving)

    def group_of(self) -> Callable[[Hashable], int]:
        """How the vertex's keys map to key groups (as its first exchange input hashes them)."""
        if any(isinstance(key, str) for key in self._keys.values()):
            return lambda key: int(column_key_groups(np.asarray([key]), DEFAULT_KEY_GROUPS)[0])
        return lambda key: key_group(key, DEFAULT_KEY_GROUPS)

    def moving(self, groups: tuple[int, ...]) -> Callable[[Hashable], bool]:
        """``take_keys``'s test of a key: whether it is in one of ``groups``. Each hand-over's
        ``take_keys`` tests every key the replica holds, so each key's group is hashed once per plan,
        not once per step (1,000 keys: about 11 ms of a step's hand-over, the replica's other groups
        waiting meanwhile); the memo goes with the replica's last hand-over."""
        group_of, chosen, memo = self.group_of(), set(groups), self._groups
        if not self.moves.capabilities():  # no hand-over left from here after this one
            self._groups = {}

        def test(key: Hashable) -> bool:
            group = memo.get(key)
            if group is None:
                group = memo[key] = group_of(key)
            return group in chosen
        return test

    def handoffs(self, ready: Callable[[int], bool]) -> list[GroupHandoff]:
        """The hand-overs due now: those of every step at an epoch ``e`` this replica still
        holds for and ``ready(e)`` (nothing before ``e`` can reach it any more)."""
        passed = [epoch for epoch in self.moves.capabilities() if ready(epoch)]
        return self.moves.due([Timestamp(max(passed))]) if passed else []

    def waits(self) -> list[Timestamp]:
        """What this replica waits on for its hand-overs: the epoch before its first step's."""
        held = self.moves.capabilities()
        return [Timestamp(held[0] - 1)] if held and held[0] > 0 else []

    def split(self, channel: ChannelId, time: Timestamp, batch: Any) -> tuple[Any, Any]:
        """``(now, kept)``: the records of ``batch`` this replica may process now, and those
        of groups whose state has not come (each None if there are none)."""
        waiting = {group for epoch, groups in self.waiting.items() if epoch <= time.epoch for group in groups}
        if not waiting or channel.port not in self._keys:
            return batch, None
        return self._partition(channel.port, waiting, batch)

    def _partition(self, port: int, groups: set[int], batch: Any) -> tuple[Any, Any]:
        """``(others, of groups)``: ``batch``'s records split by whether their key group (by
        input ``port``'s key) is one of ``groups`` (each None if empty)."""
        owners = tuple(int(group in groups) for group in range(DEFAULT_KEY_GROUPS))
        router = ExchangeRouter(self._keys[port], 2, DEFAULT_KEY_GROUPS, KeyGroupAssignment(owners, 2))
        parts = dict(non_empty(router.route(batch)))
        return parts.get(0), parts.get(1)

    def arrived(self, state: GroupState) -> list[Kept]:
        """``state``'s groups came: the records kept until now, to be processed again in order."""
        self.moves.arrived(state.groups)
        self.waiting[state.epoch] -= set(state.groups)
        if not self.waiting[state.epoch]:
            del self.waiting[state.epoch]
        kept, self.kept = self.kept, []
        return kept

    def admit(self, port: int, time: Timestamp, batch: Any) -> None:
        """Check that every record of ``batch`` (at ``time``, on input ``port``) is this
        replica's at ``time``'s epoch.

        Raises:
            RescaleError: naming the vertex, the epoch, this replica and the owner in force.
        """
        router = self._routers.get(port)
        if router is None or (self.moves.done and time.epoch > self.last):
            return  # after the plan's last step every sender routes by its final table: no batch routed again here
        for owner, part in non_empty(router.route(batch, time)):
            if owner != self.replica:
                raise RescaleError(
                    f"vertex {self.vertex!r}: {len(part)} records at {time} (epoch {time.epoch}) reached replica "
                    f"{self.replica} on input {port}, but replica {owner} owns their key groups at that epoch in the "
                    f"stepped rescale's plan: a sender routed them by another table")
        gone = self.moves.gone(time.epoch)
        if gone and self._partition(port, gone, batch)[1] is not None:
            raise RescaleError(
                f"vertex {self.vertex!r}: records at {time} (epoch {time.epoch}) reached replica {self.replica} on "
                f"input {port} after their key groups' state left it for a later step (groups "
                f"{sorted(gone)[:8]}): it handed them over before its frontier passed their epoch")


def step_channel(vertex: str, epoch: int, port: int) -> ChannelId:
    """The channel a new owner's epoch tokens count for its hand-overs at ``epoch`` (no
    sender's: output -1, the epoch in the sender's place)."""
    return ChannelId(vertex, -1, epoch, port)


def hold_port(plan: PhysicalPlan, vertex: str) -> int:
    """The input port of ``vertex`` where a step's hold is (its first exchange input)."""
    return next(port for port, edges in enumerate(plan.vertex(vertex).inputs)
                if any(edge.channel.kind == "exchange" for edge in edges))


def holds(plan: PhysicalPlan, message: StepPlanMessage) -> list[tuple[Pointstamp, int]]:
    """The pointstamps the driver makes with a plan, while every input is before its first
    epoch: a ``+1`` at the vertex's input port at each step's epoch, per (old owner, new
    owner) pair of the step, which the hand-over's :class:`GroupState` then carries."""
    location = Location.of_input(message.vertex, hold_port(plan, message.vertex))
    pairs = {(epoch, move.from_replica, move.to_replica) for epoch, moves in message.steps for move in moves}
    counts: dict[Timestamp, int] = {}
    for epoch, _, _ in pairs:
        counts[Timestamp(epoch)] = counts.get(Timestamp(epoch), 0) + 1
    return [((location, time), count) for time, count in sorted(counts.items(), key=lambda item: item[0].epoch)]


def check_in_time(message: StepPlanMessage, input_epochs: dict[str, int | None], where: str,
                  fed: dict[str, int] | None = None) -> None:
    """Refuse a plan that reaches ``where`` after one of its inputs went past the first step's
    epoch, or took records at it (``input_epochs``: each hosted input's current epoch, None once
    closed; ``fed``: each one's latest epoch records were pushed at): records of that epoch may
    have gone out by the old table already. An input at the first step's epoch that has taken
    nothing at it has sent nothing of it (a plan cut at the inputs' own epoch: the driver's
    :meth:`~raytide.driver.plan_gate.PlanGate.close_at_frontier`).

    Raises:
        RescaleError: naming the vertex, the input, its epoch and the step's.
    """
    first = StepPlan.of_message(message).first_epoch
    if first is None:
        return
    for name, epoch in input_epochs.items():
        if epoch is None or epoch > first or (epoch == first and (fed or {}).get(name) == first):
            state = "is closed" if epoch is None else f"is at epoch {epoch}" + (" and took records at it" if epoch == first else "")
            raise RescaleError(f"vertex {message.vertex!r}: a stepped rescale's plan reached {where} too late: its "
                               f"first step is at epoch {first}, but input {name!r} {state}, and may have sent "
                               f"records of that epoch by the old table; the plan must be installed before any "
                               f"input reaches its first epoch, or takes records at it")
