"""Holding progress back while it cannot matter: the rule, and the deltas a replica holds.

Naiad ships the deltas of one event (the ``-1`` of a consumed message and the ``+1`` of
everything it caused) together. Shipping them after every event would cost one progress
message per data message; most of them change nothing the tracker reports. A replica
may hold deltas back while each event that caused them is *covered*:

* a consumed message at input location ``l`` and time ``t`` is covered when the
  frontier at ``l`` is held strictly below ``t``, or at ``t`` by some other pointstamp
  (the status's ``held`` flag), so the tracker's frontier cannot move past anything
  the held deltas would retire;
* records pushed at an input's epoch are covered while the input still holds its
  capability at that epoch.

Holding back never advances a frontier early: an unshipped ``-1`` only keeps a count
up, and an unshipped ``+1`` is always paired with an unshipped ``-1`` of its cause at
a time that could result in it. Deltas go at once when a replica sits on a cycle
(every iteration waits on them), when something forces them (a notification was
delivered, an input moved), or when too many distinct pointstamps are held.

>>> from raytide.progress import Location, Timestamp
>>> held = HeldProgress()
>>> where, t0 = Location.of_input("count", 0), Timestamp(0)
>>> held.update((where, t0), -1); held.caused_by(HeldCause(Cause.MESSAGE, where, t0))
>>> frontier_held_elsewhere = {where: [(t0, True)]}
>>> held.should_ship(lambda c: is_covered(c, frontier_held_elsewhere, {}), in_cycle=False)
False
>>> frontier_only_here = {where: [(t0, False)]}
>>> held.should_ship(lambda c: is_covered(c, frontier_only_here, {}), in_cycle=False)
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from raytide.physical.protocol import Cause, HeldCause
from raytide.progress.change_batch import ChangeBatch
from raytide.progress.publisher import Status, answers
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp

#: Ship held-back progress anyway once it has this many distinct pointstamps.
MAX_HELD_PROGRESS = 4096


def is_covered(cause: HeldCause, statuses: Mapping[Location, Status], input_epochs: Mapping[str, int | None]) -> bool:
    """Whether the frontier still covers ``cause`` (see the module docstring).

    Args:
        statuses: the latest status pushed for each location the replica reads.
        input_epochs: the current epoch of each input the replica hosts (None: closed).
    """
    if cause.kind is Cause.CAPABILITY:
        return input_epochs.get(cause.location.vertex) == cause.time.epoch
    status = statuses.get(cause.location)
    return status is not None and answers(status, cause.time)[1]


class HeldProgress:
    """The deltas one replica has not shipped yet, and the events that caused them."""

    def __init__(self, limit: int = MAX_HELD_PROGRESS) -> None:
        self.changes: ChangeBatch[Pointstamp] = ChangeBatch()
        self.causes: set[HeldCause] = set()
        self.forced = False
        self.limit = limit

    def update(self, pointstamp: Pointstamp, delta: int) -> None:
        """Count ``delta`` at ``pointstamp``."""
        self.changes.update(pointstamp, delta)

    def caused_by(self, cause: HeldCause) -> None:
        """The deltas counted now come from ``cause``, which must stay covered while they are held."""
        self.causes.add(cause)

    def force(self) -> None:
        """Ship at the next chance whatever the frontier says (a notification ran, an input moved)."""
        self.forced = True

    def should_ship(self, covered: Callable[[HeldCause], bool], in_cycle: bool, has_outputs: bool = False) -> bool:
        """Whether to ship now: something is held and it may matter (or it forgets causes
        whose deltas cancelled out, which hold nothing)."""
        if self.changes.is_empty() and not has_outputs:
            self.causes.clear()
            self.forced = False
            return False
        return self.forced or in_cycle or len(self.changes) > self.limit or not all(map(covered, self.causes))

    def take(self) -> list[tuple[Pointstamp, int]]:
        """Everything held, to ship; the replica holds nothing afterwards."""
        self.causes.clear()
        self.forced = False
        return self.changes.drain()

    def waits(self) -> Iterator[tuple[Location, Timestamp]]:
        """Where and at what time the held messages were consumed: whose status the replica needs."""
        return ((c.location, c.time) for c in self.causes if c.kind is Cause.MESSAGE)
