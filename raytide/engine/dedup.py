"""Downstream deduplication by sequence numbers: a receiver takes each channel's messages
once, in order, whatever a sender recovered alone sends again (docs/recovery.md, "A replica
recovered alone").

A sender numbers each channel's messages 0, 1, ... (:class:`~raytide.engine.upstream_log.UpstreamLog`);
a receiver keeps per channel the number it expects next. A message below it was taken
already: a replacement sender, restored from a snapshot older than what it had sent, sends
the same messages under the same numbers again, and they are dropped. A message above it
means one was lost on a FIFO channel, which no replay can mend: it is refused with an error
naming the receiver, the channel, the epoch and the numbers. What the receiver expects is
also where it is in each channel: its snapshot records it, and a receiver restored alone
asks its senders to replay from there.

Sound only where the sender's replay sends the same messages in the same order under the same
numbers: :mod:`raytide.supervisor.alone` decides where that holds.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from raytide.errors import RecoveryError


class SequenceDedup:
    """Per input channel, the number of the message a receiver expects next."""

    def __init__(self, name: str, expected: Mapping[Hashable, int] | None = None, enabled: bool = True) -> None:
        """A receiver ``name`` (used in errors), at the positions ``expected`` (a restored
        snapshot's; none: every channel at 0). ``enabled=False`` takes every message (a
        planted bug the simulator's trials catch)."""
        self.name = name
        self.expected: dict[Hashable, int] = dict(expected or {})
        self.enabled = enabled
        self.dropped = 0

    def admit(self, channel: Hashable, sequence: int, epoch: Any = None) -> bool:
        """Whether the message numbered ``sequence`` on ``channel`` (of ``epoch``) is new: taken
        now; False: a duplicate, dropped. Raises :class:`RecoveryError` if one before it is missing."""
        expected = self.expected.get(channel, 0)
        if sequence < expected and self.enabled:
            self.dropped += 1
            return False
        if sequence > expected:
            raise RecoveryError(f"replica {self.name}: message {sequence} on channel {channel} at epoch {epoch} "
                                f"came before {expected}..{sequence - 1}: messages were lost on the channel "
                                f"(a replay that skipped some?)")
        self.expected[channel] = max(expected, sequence + 1)
        return True

    def positions(self) -> dict[Hashable, int]:
        """Where the receiver is in each channel: what its snapshot records."""
        return dict(self.expected)
