"""A stepped rescale's plan: which key groups move at which epoch (pure).

A stepped rescale (Megaphone, Hoffmann et al., VLDB 2019; ``docs/rescaling.md``, "Stepped
migration") does not hold the job while the state travels: the moves of
:meth:`~raytide.core.keygroups.KeyGroupAssignment.rescale` are cut into steps of a few key
groups each, and each step takes effect at an epoch: a record of a moving group whose
timestamp's epoch is before the step's goes to the old owner, one at or after it to the new.
So the owner of a group is a function of the record's time, not of the moment it is sent,
and every sender agrees on it without coordinating.

While the plan runs the vertex is ``max(p, q)`` replicas wide: growing, the new replicas
join owning nothing (:attr:`StepPlan.before`); shrinking, the retiring ones are emptied by
the steps and leave afterwards (:attr:`StepPlan.after` is ``q`` wide).

Example:
    >>> old = KeyGroupAssignment.contiguous(parallelism=2, key_groups=8)
    >>> plan = plan_steps(old, 3, first_epoch=10, groups_per_step=1)
    >>> [(step.epoch, [m.key_group for m in step.moves]) for step in plan.steps]
    [(10, [3]), (11, [7])]
    >>> plan.owner_at(3, 9), plan.owner_at(3, 10), plan.after.owners == old.rescale(3)[0].owners
    (0, 2, True)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

from raytide.core.keygroups import KeyGroupAssignment, KeyGroupMove
from raytide.errors import RescaleError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import StepPlanMessage

__all__ = ["MigrationStep", "StepPlan", "groups_per_step_at_pace", "plan_steps", "stepped_vertex"]


@dataclass(frozen=True)
class MigrationStep:
    """The key groups that change owner at ``epoch``: a record of one of them at a timestamp
    whose epoch is ``>= epoch`` goes to the move's new owner."""

    epoch: int
    moves: tuple[KeyGroupMove, ...]


@dataclass(frozen=True)
class StepPlan:
    """Every step of one stepped rescale of one vertex, in epoch order.

    Attributes:
        before: the table in force before the first step, ``max(p, q)`` wide (growing: the
            new replicas own nothing yet).
        steps: the steps, at strictly increasing epochs; each group moves at most once.
        after: the table once every step is done, ``q`` wide (shrinking: the emptied
            replicas retired).
    """

    before: KeyGroupAssignment
    steps: tuple[MigrationStep, ...]
    after: KeyGroupAssignment

    def __post_init__(self) -> None:
        epochs = [step.epoch for step in self.steps]
        if any(later <= earlier for earlier, later in zip(epochs, epochs[1:])):
            raise RescaleError(f"a stepped rescale's steps must be at increasing epochs, got {epochs}")
        moved = [move.key_group for step in self.steps for move in step.moves]
        if len(moved) != len(set(moved)):
            raise RescaleError(f"a stepped rescale moves each key group once; moved {sorted(moved)}")

    @classmethod
    def of_message(cls, message: StepPlanMessage) -> StepPlan:
        """The plan a :class:`~raytide.physical.protocol.StepPlanMessage` carries."""
        steps = tuple(MigrationStep(epoch, moves) for epoch, moves in message.steps)
        return cls(message.before, steps, message.after)

    def message(self, vertex: str) -> StepPlanMessage:
        """This plan of ``vertex`` as the driver sends it to the replicas."""
        return StepPlanMessage(vertex, self.before, tuple((step.epoch, step.moves) for step in self.steps), self.after)

    @property
    def first_epoch(self) -> int | None:
        """The first step's epoch (None: a plan that moves nothing)."""
        return self.steps[0].epoch if self.steps else None

    @cached_property
    def _tables(self) -> tuple[tuple[int, ...], ...]:
        """The owners in force from each step's epoch on (the ``before`` owners first)."""
        owners = list(self.before.owners)
        tables = [tuple(owners)]
        for step in self.steps:
            for move in step.moves:
                owners[move.key_group] = move.to_replica
            tables.append(tuple(owners))
        return tuple(tables)

    @cached_property
    def _epochs(self) -> list[int]:
        return [step.epoch for step in self.steps]

    @property
    def width(self) -> int:
        """How many replicas the vertex has while the plan runs."""
        return self.before.parallelism

    def owners_at(self, epoch: int) -> tuple[int, ...]:
        """The owner of every key group for records whose timestamp's epoch is ``epoch``."""
        return self._tables[bisect.bisect_right(self._epochs, epoch)]

    def table_at(self, epoch: int) -> KeyGroupAssignment:
        """The routing table in force at ``epoch`` (``max(p, q)`` wide)."""
        return KeyGroupAssignment(self.owners_at(epoch), self.width)

    def owner_at(self, group: int, epoch: int) -> int:
        """The replica that owns ``group`` for records at ``epoch``."""
        return self.owners_at(epoch)[group]

    def moves_of(self, replica: int) -> tuple[tuple[int, KeyGroupMove], ...]:
        """``(epoch, move)`` for every move into or out of ``replica``, in epoch order."""
        return tuple((step.epoch, move) for step in self.steps for move in step.moves
                     if replica in (move.from_replica, move.to_replica))


def _dealt(moves: tuple[KeyGroupMove, ...]) -> list[KeyGroupMove]:
    """The moves round robin over their (old owner, new owner) pairs, each pair's in group
    order, so that consecutive steps spread over the replicas rather than empty one at a time."""
    pairs: dict[tuple[int, int], list[KeyGroupMove]] = {}
    for move in moves:
        pairs.setdefault((move.from_replica, move.to_replica), []).append(move)
    queues = [pairs[pair] for pair in sorted(pairs)]
    dealt: list[KeyGroupMove] = []
    for rank in range(max((len(queue) for queue in queues), default=0)):
        dealt.extend(queue[rank] for queue in queues if rank < len(queue))
    return dealt


def plan_steps(old: KeyGroupAssignment, parallelism: int, first_epoch: int, groups_per_step: int,
               epochs_per_step: int = 1) -> StepPlan:
    """The stepped rescale of a vertex routed by ``old`` to ``parallelism`` replicas.

    The moves are ``old.rescale(parallelism)``'s (the fewest), dealt round robin over
    their (old owner, new owner) pairs and cut into steps of at most ``groups_per_step``;
    step ``i`` takes effect at epoch ``first_epoch + i * epochs_per_step``.

    Raises:
        RescaleError: ``parallelism`` is not in ``[1, K]``, or ``first_epoch``,
            ``groups_per_step`` or ``epochs_per_step`` is out of range (names which).
    """
    if first_epoch < 0:
        raise RescaleError(f"a stepped rescale's first epoch must be >= 0, got {first_epoch}")
    if groups_per_step < 1 or epochs_per_step < 1:
        raise RescaleError(f"a stepped rescale needs groups_per_step >= 1 and epochs_per_step >= 1, got "
                           f"{groups_per_step} and {epochs_per_step}")
    new, moves = old.rescale(parallelism)
    width = max(old.parallelism, parallelism)
    dealt = _dealt(moves)
    steps = tuple(
        MigrationStep(first_epoch + index * epochs_per_step, tuple(dealt[start:start + groups_per_step]))
        for index, start in enumerate(range(0, len(dealt), groups_per_step))
    )
    return StepPlan(KeyGroupAssignment(old.owners, width), steps, new)


def groups_per_step_at_pace(moves: int, epochs: int | None, most: int) -> int:
    """How many key groups a step moves so that ``moves`` moves take about ``epochs`` steps
    (the epochs the inputs pass in the time a plan may take; None: their pace is not known),
    from 1 to ``most``.

    A step's hand-over stalls every other group of its old owner while it packs and sends the
    step's state, so smaller steps stall less (``bench rescale --param stepped=1``: at 100 MB
    and a 20-ms feed, 2 groups a step left the unmoved groups' gaps 5-18 ms beyond the feed's
    own, 8 groups 16-46 ms); but a step takes an epoch, so at a slow pace they would stretch
    the plan (and a shrink's call) over many seconds: ``most`` is taken then.
    """
    if moves < 1 or most < 1:
        raise RescaleError(f"moves and most must be >= 1, got {moves} and {most}")
    if epochs is None or epochs < 1:
        return most
    return max(1, min(most, -(-moves // epochs)))


def stepped_vertex(old: PhysicalPlan, new: PhysicalPlan) -> tuple[str | None, str]:
    """The keyed vertex whose key groups a rescale from ``old``'s widths to ``new``'s can move
    in steps (``job.rescale`` on Ray, docs/rescaling.md, "Stepped migration"), or None and why
    not: the rescale then holds the whole job, as before, and its record says why.

    Steps serve one chain whose width changes, headed by a vertex that reads one input, an
    exchange by key, followed by outputs only (their records need no state moved), and in no
    loop (the hand-over's condition on a loop's rounds is not built).
    """
    changed = sorted({old.vertex(name).chain for name in old.vertices if old.width(name) != new.width(name)})
    if len(changed) != 1:
        return None, f"the widths of {len(changed)} chains change ({', '.join(changed)}): steps move one keyed vertex"
    chain = old.chain(changed[0])
    head = old.vertex(chain.vertices[0])
    if any(old.vertex(name).cyclic for name in chain.vertices):
        return None, f"vertex {head.name!r} is in a loop: stepping through a loop's rounds is not built"
    if len(head.inputs) != 1 or any(edge.channel.kind != "exchange" or edge.channel.key is None
                                    for edge in head.inputs[0]):
        return None, f"vertex {head.name!r} does not read one input exchanged by key"
    fused = [name for name in chain.vertices[1:] if old.vertex(name).role != "output"]
    if fused:
        return None, f"vertices {fused} are fused behind {head.name!r}: only its state moves in steps"
    return head.name, ""
