"""What a replica does with the events it gets, and the cut it holds at during a rescale."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a replica imports them at its first cut (raytide.engine.replica_barriers)
    from raytide.snapshots.replica_state import LoggedBatch, ReplicaState


class ReplicaMode(enum.Enum):
    """What a replica does with the events it gets."""

    RUNNING = "running"
    RESTORED = "restored, waiting to resume once every replica is"
    HOLDING = "holding at a rescale's cut: nothing runs, the state waits to be handed over"


@dataclass
class HeldCut:
    """A replica held at a rescale's cut: the cut (its marker), how long the replica aligned on
    it, its state there (by reference: nothing runs to change it) and, once the cut is
    complete here, the back-edge batches that were in flight in it."""

    marker_id: int
    alignment_s: float
    state: ReplicaState
    logged: list[LoggedBatch] = field(default_factory=list)
