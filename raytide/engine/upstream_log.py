"""Upstream backup: what a replica sent on each of its output channels since the last
committed snapshot, numbered, so that a replica recovered alone is sent again what it had
received since that snapshot (docs/recovery.md, "A replica recovered alone").

Each message a sender puts on a channel takes the channel's next sequence number (0, 1, ...;
a restored sender goes on from the numbers its snapshot recorded). At a snapshot's barrier
the sender marks, per channel, the number of the next message (:meth:`UpstreamLog.mark`):
everything before the mark went before the barrier, so the receiver's snapshot holds it.
When that snapshot commits (:meth:`UpstreamLog.commit`) the log forgets what is before its
marks; so the log holds at most what was sent in one snapshot interval (plus the snapshot's
own duration). A receiver restored from the committed snapshot asks for the messages from
the position its snapshot recorded (:meth:`UpstreamLog.replay`), which is the sender's mark::

    trimmed ──────── mark(committed) ─────────────── next
                     │ kept: replayed from any position ≥ the mark │

A channel into a receiver that is never recovered alone (``keeps`` says no: a sink fed by
several channels, an output, ...; :func:`~raytide.supervisor.alone.logged_chains`) is numbered
but keeps nothing: its receiver's dedup needs the numbers, and no replay will ever ask for
its messages. A replay asked of it anyway is refused, never answered with less.

Invariants (property-tested against a list of every message, ``tests/unit/test_upstream_log.py``):
the messages replayed from a position are exactly those sent on the channel from it on, in
order, with their numbers; a position before what was trimmed, or on a channel that keeps
nothing, is refused, never answered with less.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raytide.errors import RecoveryError


@dataclass
class _Channel:
    """One output channel's kept messages: ``base`` is the number of ``kept[0]``; a channel
    that does not ``keep`` only counts (``kept`` stays empty, ``base`` is the next number)."""

    base: int = 0
    kept: collections.deque[Any] = field(default_factory=collections.deque)
    keep: bool = True

    @property
    def next(self) -> int:
        return self.base + len(self.kept)


class UpstreamLog:
    """The messages one sender replica sent on its output channels, kept from the last
    committed snapshot's marks on (see the module docstring)."""

    def __init__(self, name: str, positions: Mapping[Hashable, int] | None = None,
                 keeps: Callable[[Hashable], bool] | None = None) -> None:
        """A log for sender ``name`` (used in errors), its channels numbered from
        ``positions`` (a restored sender's marks at its snapshot; none: from 0); ``keeps``:
        whether a channel's messages are kept for a replay (none: every channel's)."""
        self.name = name
        self.keeps = keeps or _every
        self._channels: dict[Hashable, _Channel] = {}
        self._marks: dict[int, dict[Hashable, int]] = {}
        for channel, position in (positions or {}).items():
            self._channels[channel] = _Channel(base=position, keep=self.keeps(channel))

    def _channel(self, channel: Hashable) -> _Channel:
        found = self._channels.get(channel)
        if found is None:
            found = self._channels[channel] = _Channel(keep=self.keeps(channel))
        return found

    def append(self, channel: Hashable, message: Any) -> int:
        """Number ``message`` sent on ``channel``, kept if the channel keeps; returns its number."""
        kept = self._channel(channel)
        if not kept.keep:
            kept.base += 1
            return kept.base - 1
        kept.kept.append(message)
        return kept.next - 1

    def next(self, channel: Hashable) -> int:
        """The number the next message on ``channel`` takes."""
        return self._channel(channel).next

    def positions(self) -> dict[Hashable, int]:
        """The number of the next message on each channel: what a snapshot records."""
        return {channel: kept.next for channel, kept in self._channels.items()}

    def mark(self, snapshot_id: int) -> dict[Hashable, int]:
        """Snapshot ``snapshot_id``'s barrier leaves now: remember where on each channel."""
        self._marks[snapshot_id] = marks = self.positions()
        return marks

    def commit(self, snapshot_id: int) -> None:
        """Snapshot ``snapshot_id`` committed: forget what went before its marks, and the marks
        of older snapshots (a snapshot this sender never marked trims nothing)."""
        marks = self._marks.pop(snapshot_id, None)
        for older in [mark for mark in self._marks if mark < snapshot_id]:
            del self._marks[older]
        for channel, position in (marks or {}).items():
            kept = self._channels[channel]
            while kept.base < position:
                kept.kept.popleft()
                kept.base += 1

    def replay(self, channel: Hashable, position: int) -> list[tuple[int, Any]]:
        """The messages sent on ``channel`` from number ``position`` on, with their numbers.

        A position past the last message is not an error: a sender that was itself restored
        alone numbers again from its snapshot's marks, so a receiver that took more of its
        earlier incarnation is ahead of it; nothing is replayed, and the receiver drops what
        the sender sends again below its position (the same messages: see :mod:`raytide.supervisor.alone`)."""
        kept = self._channel(channel)
        if not kept.keep and position < kept.next:
            raise RecoveryError(f"replica {self.name}: cannot replay channel {channel} from message {position}: "
                                f"it keeps nothing (its receiver is never recovered alone, so its messages "
                                f"{position}..{kept.next - 1} were only numbered)")
        if position < kept.base:
            raise RecoveryError(f"replica {self.name}: cannot replay channel {channel} from message {position}: "
                                f"it keeps messages {kept.base}..{kept.next - 1} (trimmed at the last committed "
                                f"snapshot); a receiver restored from it asks from its mark or later")
        return [(kept.base + offset, kept.kept[offset]) for offset in range(position - kept.base, len(kept.kept))]

    def size(self) -> int:
        """How many messages the log keeps, over all channels (safe from a stats thread: the
        channels are copied in one step)."""
        return sum(len(kept.kept) for kept in list(self._channels.values()))


def _every(channel: Hashable) -> bool:
    """Every channel's messages are kept (a log without ``keeps``)."""
    return True
