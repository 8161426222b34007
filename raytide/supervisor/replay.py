"""The calls a driver made to each input replica, kept until committed snapshots cover them,
and sent again after a recovery: the Ray driver's inputs (:mod:`raytide.driver.inputs`) and
the simulator's (:mod:`raytide.testing.local`) keep them here, so a simulation replays what
Ray replays.

A replica records its position as the number of driver commands it has consumed: a push and
an advance count one each, a push that carries its advance two, object refs one per ref.
A call of weight 0 (a marker the simulator injects between commands) is sent again with the
calls around it and counts nothing. A recovery restores each input replica at the position
its snapshot recorded and sends it the calls after that position (:meth:`CallLog.after`);
a committed snapshot lets the log forget the calls before the oldest snapshot a recovery may
still restore (:meth:`ReplayLog.committed`: the last ``retain`` committed). A job started
from an earlier run's snapshot (``restore=``) is fed again by its user: :class:`Resume` tells
the replays of what that snapshot consumed (not sent again) from new calls::

    base ─────────────── position ──────────── end
         │ calls kept: the oldest retained     │
         │ snapshot's position is ≥ base       │
                         └── after(position): sent again ──┘
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from raytide.errors import RecoveryError
from raytide.physical.protocol import ReplicaKey

#: One input replica: ``(input name, replica index)``.
InputReplica = tuple[str, int]


class CallLog:
    """The calls made to one input replica since the oldest snapshot that may be restored.

    Each call counts as many commands as the replica's core consumes for it (a push or an
    advance: one; object refs: one per ref), which is how the replica records its position.
    """

    def __init__(self) -> None:
        self.base = 0  # commands before the first kept call
        self.end = 0  # commands up to the last call: where the replica will be once it takes them
        self.calls: collections.deque[tuple[int, str, tuple]] = collections.deque()

    def append(self, weight: int, method: str, args: tuple) -> None:
        self.calls.append((weight, method, args))
        self.end += weight

    def skip_to(self, position: int) -> None:
        """Start counting at ``position``: the commands a restored snapshot had consumed."""
        self.base = self.end = position

    def trim(self, position: int) -> None:
        """Forget the calls before ``position`` (a committed snapshot covers them); a call of
        weight 0 at ``position`` itself is after it, and kept (as :meth:`after` sends it)."""
        while self.calls and self.base + (weight := self.calls[0][0]) <= position and (weight or self.base < position):
            self.base += self.calls.popleft()[0]

    def after(self, position: int, what: str) -> list[tuple[str, tuple]]:
        """The calls after ``position``, to send again; a RecoveryError if they are forgotten."""
        if position < self.base:
            raise RecoveryError(f"{what} cannot go back to command {position}: the driver kept its calls from "
                                f"command {self.base} on only (a newer snapshot was damaged?)")
        skipped, first = self.base, 0
        while first < len(self.calls) and skipped < position:
            skipped += self.calls[first][0]
            first += 1
        return [(method, args) for _, method, args in itertools.islice(self.calls, first, None)]


class ReplayLog:
    """A :class:`CallLog` per input replica, and the positions of the snapshots a recovery
    may restore (the last ``retain`` committed), whose oldest bounds what is kept."""

    def __init__(self, replicas: Iterable[InputReplica], retain: int) -> None:
        self.logs = {replica: CallLog() for replica in replicas}
        self.retain = retain
        #: Per committed snapshot still retained, oldest first: each input replica's position.
        self.retained: list[dict[InputReplica, int]] = []

    def __getitem__(self, replica: InputReplica) -> CallLog:
        return self.logs[replica]

    def committed(self, positions: dict[InputReplica, int]) -> dict[InputReplica, int]:
        """A snapshot committed with each input replica at ``positions``; returns the positions
        of the oldest snapshot retained now, to :meth:`trim` the logs to (the caller holds the
        inputs' locks while it trims: a feeder may be appending)."""
        self.retained = [*self.retained, positions][-self.retain:]
        return self.retained[0]

    def forget_covered(self, positions: dict[InputReplica, int]) -> None:
        """:meth:`committed`, and every log trimmed at once (a caller whose logs no other thread appends to)."""
        for replica, position in self.committed(positions).items():
            self.trim(replica, position)

    def trim(self, replica: InputReplica, position: int) -> None:
        """Forget replica ``replica``'s calls before ``position``."""
        self.logs[replica].trim(position)

    def after(self, replica: InputReplica, position: int) -> list[tuple[str, tuple]]:
        """Replica ``replica``'s calls after ``position``, to send again after a recovery that restored it there.

        Raises:
            RecoveryError: the calls after ``position`` were forgotten (naming the input and replica).
        """
        name, index = replica
        return self.logs[replica].after(position, f"input {name!r} replica {index}")


@dataclass
class Resume:
    """Where the restored snapshot left one input replica: ``consumed`` commands, the input
    at ``epoch`` (None: closed); ``left`` of the consumed commands not replayed yet."""

    name: str
    replica: int
    consumed: int
    epoch: int | None
    left: int

    def replayed(self, at: int | None, weight: int) -> bool:
        """Whether a call of ``weight`` commands at epoch ``at`` (an advance's target, None
        to close) replays what the snapshot consumed, so it is not sent again.

        Raises:
            RecoveryError: a replay that ends inside a call, or one cut short by a call past
                the restored epoch (the message says what to push).
        """
        if not self.left:
            return False
        if self.epoch is None or (at is not None and at <= self.epoch):
            if weight > self.left:
                raise RecoveryError(f"input {self.name!r} replica {self.replica}: the restored snapshot had consumed "
                                    f"{self.left} more commands, which end inside a call of {weight}: feed the input as "
                                    f"the earlier run did (the same batches, batch_size and parallelism)")
            self.left -= weight
            return True
        if self.left < self.consumed:
            raise RecoveryError(f"input {self.name!r} replica {self.replica}: the restored snapshot had consumed "
                                f"{self.consumed} commands, up to epoch {self.epoch}; this feed replayed only "
                                f"{self.consumed - self.left} of them before moving on to epoch {at}: either feed the "
                                f"input again from its start as the earlier run did, or push only epochs after "
                                f"{self.epoch} (a call at epoch {self.epoch} or before counts as a replay)")
        self.left = 0  # nothing replayed: the input continues where the snapshot left it
        return False


def input_positions(positions: dict[ReplicaKey, dict[str, int]]) -> dict[InputReplica, int]:
    """A snapshot's positions per ``(input, replica)``, from its positions per replica and input vertex."""
    return {(vertex, key.replica): position for key, per_vertex in positions.items()
            for vertex, position in per_vertex.items()}
