"""What the progress actor does, as pure logic: apply progress batches, publish what matters.

Each subscriber (a vertex replica) names the locations it reads (its inputs) and, as it
runs, its *interests*: per location the timestamps it waits on (pending notifications,
held-back progress). A location's *status* is its frontier and,
per frontier timestamp, whether some pointstamp other than the ones at that very place
holds it. A subscriber is pushed a location's status only when the answer to one of its
questions changed there: is interest ``t`` now *ready* (nothing at or before ``t`` may
still arrive), and, if it asks, is it still *covered* (something strictly before ``t``, or
another pointstamp at ``t``, holds it)? A notification waits only for readiness; held-back
progress waits for coverage to end. So pushes follow what replicas wait for, not every
move of a frontier.

Skipping pushes is safe: a frontier only ever moves up (a new frontier timestamp is
implied by the pointstamp that caused it, which implied something at or below it), so a
subscriber's older status is conservative. A subscriber that asks for an
acknowledgement gets, after its batch, every status it has not seen.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp, Tracker

Status = list[tuple[Timestamp, bool]]
Push = tuple[dict[Location, Status], bool]
#: Per location, the times a subscriber waits on, each with whether its coverage matters too.
Interests = dict[Location, list[tuple[Timestamp, bool]]]


def answers(status: Status, time: Timestamp) -> tuple[bool, bool]:
    """For a waiting timestamp: (is it ready, is it covered) under ``status``."""
    ready = not any(f.less_equal(time) for f, _ in status)
    covered = any(f.less_than(time) or (f == time and held) for f, held in status)
    return ready, covered


class FrontierPublisher:
    """A tracker plus subscriptions; turns applied batches into the pushes that matter."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.subscriptions: dict[Hashable, list[Location]] = {}
        self.interests: dict[Hashable, Interests] = {}
        self._seen: dict[Hashable, dict[Location, Status]] = {}
        self.batches_applied = 0
        self.pushes = 0

    def status(self, location: Location) -> Status:
        """The frontier at ``location`` and, per timestamp, whether it is held from elsewhere."""
        tracker = self.tracker
        return sorted(((f, tracker.is_blocked(location, f)) for f in tracker.frontier(location)), key=lambda s: tuple(s[0]))

    def subscribe(self, subscriber: Hashable, locations: list[Location]) -> Push:
        """Register ``subscriber``; returns its initial push (every status)."""
        self.subscriptions[subscriber] = locations
        self.interests[subscriber] = {}
        statuses = {loc: self.status(loc) for loc in locations}
        self._seen[subscriber] = dict(statuses)
        self.pushes += 1
        return statuses, False

    def initialize(self, pointstamps: list[tuple[Pointstamp, int]]) -> None:
        """Apply the pointstamps held before anything runs (the inputs' first epochs)."""
        self.tracker.update_all(pointstamps)
        self.tracker.propagate()

    def apply(self, sender: Hashable, changes: list[tuple[Pointstamp, int]], ack: bool,
              interests: Interests | None = None) -> dict[Hashable, Push]:
        """Apply one batch from ``sender`` (which may also declare new ``interests``); return the pushes it causes."""
        if interests is not None:
            self.interests[sender] = interests
        self.tracker.update_all(changes)
        self.tracker.propagate()
        self.batches_applied += 1
        return self._pushes(acked=sender if ack else None)

    def declare(self, subscriber: Hashable, interests: Interests) -> dict[Hashable, Push]:
        """``subscriber`` now waits on ``interests``; push it whatever already answers them."""
        self.interests[subscriber] = interests
        return self._pushes(only=[subscriber])

    def _pushes(self, acked: Hashable = None, only: Iterable[Hashable] = ()) -> dict[Hashable, Push]:
        current: dict[Location, Status] = {}
        pushes: dict[Hashable, Push] = {}
        for subscriber in list(only) or list(self.subscriptions):
            seen = self._seen[subscriber]
            changed = {}
            for location in self.subscriptions[subscriber]:
                if location not in current:
                    current[location] = self.status(location)
                new, old = current[location], seen[location]
                if new != old and (subscriber == acked or self._matters(subscriber, location, old, new)):
                    changed[location] = new
            if changed or subscriber == acked:
                seen.update(changed)
                pushes[subscriber] = (changed, subscriber == acked)
        self.pushes += len(pushes)
        return pushes

    def _matters(self, subscriber: Hashable, location: Location, old: Status, new: Status) -> bool:
        for time, covered in self.interests[subscriber].get(location, ()):
            (was_ready, was_covered), (ready, now_covered) = answers(old, time), answers(new, time)
            if was_ready != ready or (covered and was_covered != now_covered):
                return True
        return False

    def is_idle(self) -> bool:
        """True when no pointstamp is active: the dataflow has finished."""
        return self.tracker.is_idle()
