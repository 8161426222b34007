"""What the progress actor does, as pure logic: apply progress batches, publish frontier changes.

Each subscriber (a vertex replica) names the locations it cares about (its inputs).
After a batch is applied, every subscriber whose locations' *status* changed gets the
new status: the frontier there, and for each frontier timestamp whether some pointstamp
other than the ones at that location holds it (which tells the replica whether its own
held-back deltas can matter). A subscriber that asked for an acknowledgement gets a
push even when nothing changed, so it knows its last batch was absorbed.
"""

from __future__ import annotations

from typing import Hashable

from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp, Tracker

Status = list[tuple[Timestamp, bool]]
Push = tuple[dict[Location, Status], bool]


class FrontierPublisher:
    """A tracker plus subscriptions; turns applied batches into per-subscriber pushes."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.subscriptions: dict[Hashable, list[Location]] = {}
        self._published: dict[Location, Status] = {}
        self.batches_applied = 0
        self.pushes = 0

    def status(self, location: Location) -> Status:
        """The frontier at ``location`` and, per timestamp, whether it is held from elsewhere."""
        tracker = self.tracker
        return sorted(((f, tracker.is_blocked(location, f)) for f in tracker.frontier(location)), key=lambda s: tuple(s[0]))

    def subscribe(self, subscriber: Hashable, locations: list[Location]) -> Push:
        """Register ``subscriber``; returns its initial push (the current statuses)."""
        self.subscriptions[subscriber] = locations
        statuses = {loc: self.status(loc) for loc in locations}
        self._published.update(statuses)
        self.pushes += 1
        return statuses, False

    def initialize(self, pointstamps: list[tuple[Pointstamp, int]]) -> None:
        """Apply the pointstamps held before anything runs (the inputs' first epochs)."""
        self.tracker.update_all(pointstamps)
        self.tracker.propagate()

    def apply(self, sender: Hashable, changes: list[tuple[Pointstamp, int]], ack: bool) -> dict[Hashable, Push]:
        """Apply one batch from ``sender``; return the pushes it causes."""
        self.tracker.update_all(changes)
        self.tracker.propagate()
        self.batches_applied += 1
        changed: dict[Location, Status] = {}
        for location in {loc for locs in self.subscriptions.values() for loc in locs}:
            status = self.status(location)
            if self._published.get(location) != status:
                changed[location] = status
                self._published[location] = status
        pushes: dict[Hashable, Push] = {}
        for subscriber, locations in self.subscriptions.items():
            mine = {loc: changed[loc] for loc in locations if loc in changed}
            acked = ack and subscriber == sender
            if mine or acked:
                pushes[subscriber] = (mine, acked)
        self.pushes += len(pushes)
        return pushes

    def is_idle(self) -> bool:
        """True when no pointstamp is active: the dataflow has finished."""
        return self.tracker.is_idle()
