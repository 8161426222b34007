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

A log is capped (``Recovery.upstream_log_cap`` messages over its channels, :data:`CAP` unless
given, so that a job far behind its feed, whose snapshots commit late, does not keep
everything since the last commit): past the cap it
drops all it keeps (each channel's ``base`` moves to its next number; it goes on numbering and
keeping from there) and counts the drop (:attr:`UpstreamLog.dropped`, in ``job.stats()``). A
replay from before a drop is refused (:class:`ReplayRefused`, naming the channel, the position
and the cap), never answered with less: the replica is then not recovered alone, and the whole
job rolls back.

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

#: The most messages one replica's log keeps over its channels before it drops them all, unless
#: its job's ``Recovery.upstream_log_cap`` says otherwise.
CAP = 65_536


class ReplayRefused(RecoveryError):
    """A replay this log cannot give (trimmed, dropped past its cap, or never kept): the
    receiver cannot be recovered alone, and the whole job rolls back instead."""


@dataclass
class _Channel:
    """One output channel's kept messages: ``base`` is the number of ``kept[0]``; a channel
    that does not ``keep`` only counts (``kept`` stays empty, ``base`` is the next number)."""

    base: int = 0
    kept: collections.deque[Any] = field(default_factory=collections.deque)
    keep: bool = True
    dropped_to: int = 0  # ``base`` after the last drop past the cap (0: none)

    @property
    def next(self) -> int:
        return self.base + len(self.kept)


class UpstreamLog:
    """The messages one sender replica sent on its output channels, kept from the last
    committed snapshot's marks on (see the module docstring)."""

    def __init__(self, name: str, positions: Mapping[Hashable, int] | None = None,
                 keeps: Callable[[Hashable], bool] | None = None, cap: int | None = None) -> None:
        """A log for sender ``name`` (used in errors), its channels numbered from
        ``positions`` (a restored sender's marks at its snapshot; none: from 0); ``keeps``:
        whether a channel's messages are kept for a replay (none: every channel's); ``cap``:
        the most messages kept before all are dropped (none: :data:`CAP`)."""
        self.name = name
        self.keeps = keeps or _every
        self.cap = CAP if cap is None else cap
        #: Messages dropped past the cap, and how many times (``job.stats()``' replicas' ``log_dropped``).
        self.dropped, self.drops = 0, 0
        self._size = 0
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
        self._size += 1
        if self._size > self.cap:
            self._drop()
        return kept.next - 1

    def _drop(self) -> None:
        """Past the cap: forget every kept message (numbering goes on), and say so."""
        for kept in self._channels.values():
            kept.base, kept.dropped_to = kept.next, kept.next
            kept.kept.clear()
        self.dropped, self.drops, self._size = self.dropped + self._size, self.drops + 1, 0

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
                self._size -= 1

    def replay(self, channel: Hashable, position: int) -> list[tuple[int, Any]]:
        """The messages sent on ``channel`` from number ``position`` on, with their numbers.

        A position past the last message is not an error: a sender that was itself restored
        alone numbers again from its snapshot's marks, so a receiver that took more of its
        earlier incarnation is ahead of it; nothing is replayed, and the receiver drops what
        the sender sends again below its position (the same messages: see :mod:`raytide.supervisor.alone`).

        Raises:
            ReplayRefused: :meth:`refusal` says why not.
        """
        refused = self.refusal(channel, position)
        if refused is not None:
            raise ReplayRefused(refused)
        kept = self._channel(channel)
        return [(kept.base + offset, kept.kept[offset]) for offset in range(position - kept.base, len(kept.kept))]

    def refusal(self, channel: Hashable, position: int) -> str | None:
        """Why a replay of ``channel`` from ``position`` cannot be given (None: it can): its
        messages from there were dropped past the cap, only numbered, or trimmed at a commit."""
        kept = self._channel(channel)
        where = f"replica {self.name}: cannot replay channel {channel} from message {position}"
        if position < kept.dropped_to:
            return (f"{where}: its log dropped messages up to {kept.dropped_to - 1} past its cap of {self.cap} "
                    f"messages (the last committed snapshot is too far behind)")
        if not kept.keep and position < kept.next:
            return (f"{where}: it keeps nothing (its receiver is never recovered alone, so its messages "
                    f"{position}..{kept.next - 1} were only numbered)")
        if position < kept.base:
            return (f"{where}: it keeps messages {kept.base}..{kept.next - 1} (trimmed at the last committed "
                    f"snapshot); a receiver restored from it asks from its mark or later")
        return None

    def size(self) -> int:
        """How many messages the log keeps, over all channels."""
        return self._size


def _every(channel: Hashable) -> bool:
    """Every channel's messages are kept (a log without ``keeps``)."""
    return True
