"""The epoch gate of a columnar loop: epochs pipelined through it, processed one after another.

Inside a loop ``(e, (5,))`` and ``(e + 1, (0,))`` are incomparable, so the frontier lets
epoch ``e + 1`` in while ``e`` still iterates, and state that lives across epochs would mix
them. The loop's state vertex (:class:`~raytide.core.columnar.KeyedColumns` built by
``iterate_columns``) therefore keeps one epoch in the loop at a time, itself:

* every replica learns of every epoch: the entering stream sends a *tick* to every
  replica, so each is notified at ``(e, 0)`` (the entry) of each epoch with input;
* an epoch's entry that comes while an earlier epoch is still in the loop is *parked*;
* every round, each replica tells every replica (a broadcast round the loop) how many rows
  it sent to the next round, so at the next round all replicas know, alike, whether the
  loop has anything left of the epoch: if not, the epoch *concludes* at that counter ``c``;
* those tokens also say how many of the rows went to each key group, so a replica that
  holds a token from every replica and every row they announce has the whole round: it
  runs it at once (:func:`round_complete`), one Ray hop after the round before, instead of
  waiting for the progress actor to notify it (three hops). Rounds that straddle a
  rescale or a restore (``slow``), and the rounds after them at that replica, wait for
  the notification, as every round used to;
* the next epoch then starts at counter ``c + 1`` at every replica: its parked entry is
  processed as its first round, its rows sent at ``(e + 1, c + 1)``. That send is allowed
  from the notification of ``(e, c)`` (``(e + 1, c + 1)`` is later in the product order),
  and the progress tracker holds the output of ``e + 1`` back until it is done, as always.

So each epoch sees exactly the state the epochs before it left, whatever the driver pushes
when; an epoch's rounds just carry higher loop counters (the step sees ``iteration``
counted from the epoch's start). This module is the bookkeeping, pure; see docs/iteration.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytide.core.arrangement import Rows
from raytide.core.epochs import Phase, phase_of
from raytide.progress.timestamps import Timestamp

#: The column tokens are exchanged by: a key of each key group, so a token row reaches each replica.
TOKEN_KEY = "token_key"


@dataclass
class EpochGate:
    """What one replica knows of the epochs through the loop; facts only, so replicas' gates merge.

    Attributes:
        started: epoch -> the loop counter its first round ran at.
        concluded: epoch -> the counter at which it was found to have nothing left.
        parked: epoch -> its entry (the inbox of ``(epoch, 0)``), waiting for its turn.
        awaiting: the round notifications this replica asked for (they move with its state).
        slow: rounds that were pending or awaited at a rescale or a restore: their tokens may
            come from replicas of another width or routing table, so they run only when notified.
        went_on: epoch -> the latest counter at which a replica ran a round of it (rather than
            finding it had nothing left). After a rescale a replica may hold keys whose round
            ``c`` their old replica ran before the cut: that round's tokens were consumed there,
            so no tokens for it is no evidence that the epoch ended at ``c``; this fact is.
    """

    started: dict[Phase, int] = field(default_factory=dict)
    concluded: dict[Phase, int] = field(default_factory=dict)
    parked: dict[Phase, Any] = field(default_factory=dict)
    awaiting: set[Timestamp] = field(default_factory=set)
    slow: set[Timestamp] = field(default_factory=set)
    went_on: dict[Phase, int] = field(default_factory=dict)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle a gate, also one a snapshot holds from before ``slow`` and ``went_on``."""
        self.__dict__.update({"slow": set(), "went_on": {}, **state})

    def live(self) -> Phase | None:
        """The epoch in the loop now (started, not concluded), if any."""
        return min((e for e in self.started if e not in self.concluded), default=None)

    def start_counter(self, epoch: Phase) -> int | None:
        """Where ``epoch``, entering now, starts: None if an earlier epoch is still in the loop
        (then it is parked), else where it started already (another replica's state that
        moved here knew) or after the latest conclusion."""
        live = self.live()
        if (live is not None and live < epoch) or self.behind(epoch):
            return None
        if epoch in self.started:
            return self.started[epoch]
        return max(self.concluded.values(), default=-1) + 1

    def behind(self, epoch: Phase) -> bool:
        """Whether a round of an epoch before ``epoch`` is still awaited here. A replica that
        took keys after it concluded that epoch itself has the keys' old replica's request
        for its last round, and runs the epoch's ``finish`` again for them there: ``epoch``'s
        entry (incomparable with that round in the product order, so it may be notified
        first) waits for it, or its first round would change the keys' state (a new label
        overwriting the mark of the one not sent yet) before the epoch before is sent."""
        return any(phase < epoch for phase in map(phase_of, self.awaiting) if phase is not None)

    def waits_before(self, time: Timestamp) -> bool:
        """Whether a slow round at or before ``time`` has not run here yet: then ``time`` waits
        for its notification too, so that rounds run here in the order their times allow (a
        replica that took keys concludes an epoch again, at its slow notification, before it
        runs a round of the next)."""
        return any(slow.less_equal(time) for slow in self.slow)

    def ends_at(self, epoch: Phase, counter: int, tokens: int) -> bool:
        """Whether round ``counter`` of ``epoch``, notified with ``tokens`` rows announced to
        it in all, finds the epoch over: it concluded already, or nothing was sent to the round
        and no replica ran the round (the tokens it consumed then said something was)."""
        return epoch in self.concluded or (tokens == 0 and self.went_on.get(epoch, -1) < counter)

    def went_on_at(self, epoch: Phase, counter: int) -> None:
        """A replica ran round ``counter`` of ``epoch``."""
        self.went_on[epoch] = max(counter, self.went_on.get(epoch, counter))

    def conclude(self, epoch: Phase, counter: int) -> tuple[Phase, int, Any] | None:
        """``epoch`` has nothing left at ``counter``: the next parked epoch, its start counter
        and its entry, if one waits and may start. A replica that took keys concludes an epoch
        again (see :class:`~raytide.core.gated.GatedColumns`); by then a later epoch may be in
        the loop, and only that epoch's own parked rows (keys whose replica had parked it) may
        join it, at its start; the others wait for it to conclude."""
        self.concluded[epoch] = min(counter, self.concluded.get(epoch, counter))  # the same at every replica
        if not self.parked:
            return None
        following, live = min(self.parked), self.live()
        if (live is not None and live != following) or self.behind(following):
            return None
        start = self.started.get(following, max(self.concluded.values()) + 1)
        return following, start, self.parked.pop(following)

    def entry(self, epoch: Phase, inbox: dict[int, list]) -> dict[int, list]:
        """``epoch``'s entry: ``inbox`` with anything already parked for it, taken out of the
        parking. Both may hold rows: a replica that parked an entry and then took keys in a
        rescale gets the moving keys' parked rows and, if their replica had not been notified
        at the entry yet, their rows of the entry's time."""
        return _joined(self.parked.pop(epoch, {}), inbox)

    def merge(self, other: EpochGate) -> None:
        """Take in another replica's gate (its keys moved here): its facts and its requests."""
        self.started.update(other.started)
        self.concluded.update(other.concluded)
        self.awaiting |= other.awaiting
        for epoch, counter in other.went_on.items():
            self.went_on_at(epoch, counter)
        for epoch, entry in other.parked.items():
            self.parked[epoch] = _joined(self.parked.get(epoch, {}), entry)


def _joined(entry: dict[int, list], more: dict[int, list]) -> dict[int, list]:
    """``entry`` (an inbox: per port, batches) with the batches of ``more`` added, port by port."""
    for port, batches in more.items():
        entry.setdefault(port, []).extend(batches)
    return entry


def round_time(phase: Phase, counter: int) -> Timestamp:
    """The timestamp of round ``counter`` of ``phase`` (an epoch, inside outer loops at their counters)."""
    return Timestamp(phase[0], phase[1] + (counter,))


def round_complete(tokens: list[Rows], updates: list[Rows], width: int) -> bool:
    """Whether a replica of width ``width`` has all of a round: ``tokens`` (the token rows that
    reached it, one per key group it owns from each sender) from each of the ``width``
    replicas, all sent at that width, no (sender, group) twice, every sender naming the same
    groups, and exactly the rows they say went to those groups among ``updates``.

    It may say no when the round is complete (then the notification runs it); it says yes
    only when nothing more can come for the round under one routing table: rows and tokens
    from one round of one sender travel together, and a rescale or a restore marks the rounds
    it touches ``slow``. A round with more rows than announced is left to the notification too.
    """
    if len(tokens) < width:  # a token from each sender, one batch each (merged ones are left to the notification)
        return False
    senders = np.concatenate([batch["sender"] for batch in tokens])
    groups = np.concatenate([batch[TOKEN_KEY] for batch in tokens])
    if (np.concatenate([batch["width"] for batch in tokens]) != width).any() or senders.max() >= width:
        return False
    span = int(groups.max()) + 1  # named[s, g]: how often sender s named group g
    named = np.bincount(senders * span + groups, minlength=width * span).reshape(width, span)
    if named.max() > 1 or not named[0].any() or (named != named[0]).any():  # a pair twice, or senders differ
        return False
    announced = sum(int(batch["rows"].sum()) for batch in tokens)
    return announced == sum(len(next(iter(batch.values()), ())) for batch in updates)
