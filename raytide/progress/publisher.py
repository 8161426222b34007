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

A location's status depends on its own counts and implications only, so it is computed
once per change of them (:attr:`Tracker.touched`), and a batch looks only at the
locations whose status it moved, plus every location of the subscriber that declared new
interests or asked for an acknowledgement: the other answers cannot have changed. Most
batches of a wide stage move no status (one replica of many retires its count at an
epoch that others still hold), so they cost no look at the location's many readers.

Skipping pushes is safe: a frontier only ever moves up (a new frontier timestamp is
implied by the pointstamp that caused it, which implied something at or below it), so a
subscriber's older status is conservative. A subscriber that asks for an
acknowledgement (a round of a cycle, which runs no other round until it has one) gets
it with every status it has not seen, in the first push it gets after its batch: at
once if it may then deliver a notification, else with the status that makes one ready.
An acknowledgement alone would only wake a replica that has nothing to run; one push
then answers both, and a loop's round costs each replica one push instead of two.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp, Tracker

Status = list[tuple[Timestamp, bool]]
#: The statuses a subscriber has not seen, and how many of its acknowledged batches they answer.
Push = tuple[dict[Location, Status], int]
#: Per location, the times a subscriber waits on, each with whether its coverage matters too.
Interests = dict[Location, list[tuple[Timestamp, bool]]]


class Update(NamedTuple):
    """What one message of a subscriber changes: pointstamp ``changes`` (None: a declaration,
    which is not a batch), how many acknowledgements it asks for (a batch asks for one; a
    relay's merged run, for those of its batches), its new ``interests``, and how many
    batches it stands for."""

    sender: Hashable
    changes: list[tuple[Pointstamp, int]] | None
    ack: int
    interests: Interests | None
    batches: int = 1


def declaration(subscriber: Hashable, interests: Interests) -> Update:
    """The update of a subscriber that only says what it now waits on."""
    return Update(subscriber, None, 0, interests)


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
        self.subscribers_of: dict[Location, list[Hashable]] = {}
        self.interests: dict[Hashable, Interests] = {}
        self._seen: dict[Hashable, dict[Location, Status]] = {}
        self._statuses: dict[Location, Status] = {}
        self._owed: dict[Hashable, int] = {}  # per subscriber, acknowledgements not pushed yet
        self.batches_applied = 0
        self.pushes = 0

    def status(self, location: Location) -> Status:
        """The frontier at ``location`` and, per timestamp, whether it is held from elsewhere."""
        status = self._statuses.get(location)
        if status is None:
            tracker = self.tracker
            status = sorted(((f, tracker.is_blocked(location, f)) for f in tracker.frontier(location)),
                            key=lambda s: tuple(s[0]))
            self._statuses[location] = status
        return status

    def _propagate(self) -> list[Location]:
        """Apply the tracker's buffered changes; the locations whose status they moved.

        A touched location whose status comes out as it was (a count at a frontier time
        went down but not to zero, as most deltas of a wide stage do) has no new answer for
        any subscriber: each was judged there when the status last moved, and one whose
        interests changed since is looked at everywhere (``asking``). Only a location
        whose status was not computed before counts as moved without comparing."""
        self.tracker.propagate()
        moved = []
        for location in self.tracker.touched:
            old = self._statuses.pop(location, None)
            if old is None or self.status(location) != old:
                moved.append(location)
        return moved

    def subscribe(self, subscriber: Hashable, locations: list[Location]) -> Push:
        """Register ``subscriber``; returns its initial push (every status)."""
        if subscriber in self.subscriptions:
            for location in self.subscriptions[subscriber]:
                self.subscribers_of[location].remove(subscriber)
        self.subscriptions[subscriber] = locations
        for location in locations:
            self.subscribers_of.setdefault(location, []).append(subscriber)
        self.interests[subscriber] = {}
        self._owed[subscriber] = 0
        statuses = {loc: self.status(loc) for loc in locations}
        self._seen[subscriber] = dict(statuses)
        self.pushes += 1
        return statuses, 0

    def unsubscribe(self, subscriber: Hashable) -> None:
        """``subscriber`` left the job (a retiring replica): no push, no interest of it from now on."""
        for location in self.subscriptions.pop(subscriber, []):
            self.subscribers_of[location].remove(subscriber)
        for kept in (self.interests, self._seen, self._owed):
            kept.pop(subscriber, None)

    def initialize(self, pointstamps: list[tuple[Pointstamp, int]]) -> None:
        """Apply the pointstamps held before anything runs (the inputs' first epochs)."""
        self.tracker.update_all(pointstamps)
        self._propagate()

    def apply(self, sender: Hashable, changes: list[tuple[Pointstamp, int]], ack: int,
              interests: Interests | None = None) -> dict[Hashable, Push]:
        """Apply one batch from ``sender`` (which may also declare new ``interests``); return the pushes it causes."""
        return self.apply_all([Update(sender, changes, ack, interests)])

    def apply_all(self, updates: list[Update]) -> dict[Hashable, Push]:
        """Apply several updates (each sender's in its order) as one: the tracker propagates
        once, and each subscriber gets at most one push, judged after all of them. That is
        what pushing after each would tell it, less the statuses a later update of the same
        call had already moved on from (a frontier only moves up), and an acknowledgement of
        several of its batches at once."""
        asking: dict[Hashable, None] = {}  # senders that declared interests or asked for an acknowledgement
        for sender, changes, ack, interests, batches in updates:
            if interests is not None:
                self.interests[sender] = interests
            if changes is not None:
                self.tracker.update_all(changes)
                self.batches_applied += batches
            if (interests is not None or ack) and sender in self.subscriptions:
                self._owed[sender] += ack
                asking[sender] = None
        moved = self._propagate()
        # who may have a new answer: the subscribers of a location whose status moved (there), and
        # the senders that declared interests or want every status they have not seen (everywhere)
        look: dict[Hashable, list[Location]] = {}
        for location in moved:
            for subscriber in self.subscribers_of.get(location, ()):
                look.setdefault(subscriber, []).append(location)
        for sender in asking:
            look[sender] = list(self.subscriptions[sender])
        return self._pushes(look)

    def declare(self, subscriber: Hashable, interests: Interests) -> dict[Hashable, Push]:
        """``subscriber`` now waits on ``interests``; push it whatever already answers them."""
        return self.apply_all([declaration(subscriber, interests)])

    def _pushes(self, look: dict[Hashable, list[Location]]) -> dict[Hashable, Push]:
        """The pushes owed to the subscribers in ``look``, each judged at the locations given
        (at all of its locations if it is owed an acknowledgement, which carries them all)."""
        pushes: dict[Hashable, Push] = {}
        for subscriber, locations in look.items():
            seen, owed = self._seen[subscriber], self._owed.get(subscriber, 0)
            statuses = {location: self.status(location) for location in (self.subscriptions[subscriber] if owed else locations)}
            changed = {location: new for location, new in statuses.items() if new != seen[location]}
            told = {location: new for location, new in changed.items()
                    if self._matters(subscriber, location, seen[location], new)}
            if owed:
                if not told and not self._may_deliver(subscriber, changed):
                    continue  # nothing it could run yet: the acknowledgement waits for a push that matters
                told = changed
            if told or owed:
                seen.update(told)
                self._owed[subscriber] = 0
                pushes[subscriber] = (told, owed)
        self.pushes += len(pushes)
        return pushes

    def _may_deliver(self, subscriber: Hashable, changed: dict[Location, Status]) -> bool:
        """Whether, once it has ``changed``, ``subscriber`` may find a notification it waits on
        ready: some time it waits on at every input of a vertex is ready at each of them
        (or it waits on coverage somewhere, which this does not judge: then yes)."""
        seen, by_vertex = self._seen[subscriber], dict[str, set[Timestamp]]()
        for location, waits in self.interests[subscriber].items():
            if any(covered for _, covered in waits):
                return True
            status = changed.get(location, seen.get(location))
            if status is None:
                return True
            ready = {time for time, _ in waits if answers(status, time)[0]}
            by_vertex[location.vertex] = by_vertex.get(location.vertex, ready) & ready
        return any(by_vertex.values())

    def _matters(self, subscriber: Hashable, location: Location, old: Status, new: Status) -> bool:
        for time, covered in self.interests[subscriber].get(location, ()):
            (was_ready, was_covered), (ready, now_covered) = answers(old, time), answers(new, time)
            if was_ready != ready or (covered and was_covered != now_covered):
                return True
        return False

    def is_idle(self) -> bool:
        """True when no pointstamp is active: the dataflow has finished."""
        return self.tracker.is_idle()
