"""A replica's numbered channels: what it sends numbered per output channel and kept in its
upstream log, what it receives admitted through its dedup, and what a snapshot records of
both, so that a replica recovered alone can be replayed what it had received and its
receivers can drop what it sends again (docs/recovery.md, "A replica recovered alone").

:class:`Numbering` joins the two pure halves (:class:`~raytide.engine.upstream_log.UpstreamLog`
for the sends, :class:`~raytide.engine.dedup.SequenceDedup` for the receipts) at the points
the engine meets them, and the protocol model (:mod:`raytide.testing.alone`) runs the same
object, so both number, mark, trim, admit and restore alike:

* a send to another replica takes the channel's next number (:meth:`Numbering.number`) and is
  kept; a send to itself is not numbered (it never leaves the replica);
* a received message is admitted by its number (:meth:`Numbering.admit`): a duplicate is
  dropped, a gap refused; messages without a number (a sender with numbering off) pass;
* a snapshot's barrier arriving on an input channel records where the receiver is in it
  (:meth:`Numbering.at_barrier`): on a FIFO channel that is the sender's mark, the number of
  the first message after the barrier; the local snapshot then records those positions and
  its own output channels' marks (:meth:`Numbering.take`, at the same point of the replica's
  events as its state, so nothing is sent between);
* a committed snapshot trims every log to its marks (:meth:`Numbering.commit`; the replicas
  learn of a commit with the next barrier, :attr:`~raytide.physical.protocol.Marker.committed`,
  so a log keeps at most about two snapshot intervals);
* a restore starts the receipts at the positions and the sends at the marks
  (:meth:`Numbering.restore`): in a whole-job recovery every sender restarts at the numbers
  its receivers expect, and a replica restored alone asks its senders to replay from its
  positions (:meth:`Numbering.replay`).

Back edges are not admitted by number: their records in flight at a snapshot are logged in
it and delivered again at resume, outside the channel; a loop is never recovered alone
(:mod:`raytide.supervisor.alone`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from raytide.engine.dedup import SequenceDedup
from raytide.engine.upstream_log import UpstreamLog
from raytide.snapshots.replica_state import Sequences


class Numbering:
    """One replica's numbered sends (its upstream log) and admitted receipts (its dedup)."""

    def __init__(self, name: str, enabled: bool = True, unchecked: Iterable[Hashable] = (),
                 dedup: bool = True) -> None:
        """Numbering for replica ``name`` (in errors); ``enabled=False``: nothing numbered or
        kept, every message admitted (the default on Ray until a recovery alone runs there);
        ``unchecked``: input channels admitted without their numbers (back edges);
        ``dedup=False`` takes duplicates too (a planted bug the trials catch)."""
        self.name, self.enabled = name, enabled
        self.unchecked = frozenset(unchecked)
        self.log = UpstreamLog(name)
        self.dedup = SequenceDedup(name, enabled=dedup)
        self._barriers: dict[int, dict[Hashable, int]] = {}

    def number(self, channel: Hashable, message: Any) -> int | None:
        """Keep ``message`` sent on output ``channel``; its number (None: numbering is off)."""
        return self.log.append(channel, message) if self.enabled else None

    def admit(self, channel: Hashable, sequence: int | None, epoch: Any = None) -> bool:
        """Whether the message numbered ``sequence`` on input ``channel`` (at ``epoch``, for the
        error) is new; False: a duplicate, dropped. Raises RecoveryError on a gap."""
        if not self.enabled or sequence is None or channel in self.unchecked:
            return True
        return self.dedup.admit(channel, sequence, epoch)

    def at_barrier(self, snapshot_id: int, channel: Hashable) -> None:
        """Snapshot ``snapshot_id``'s barrier came on input ``channel``: where the receiver is in it."""
        if self.enabled:
            self._barriers.setdefault(snapshot_id, {})[channel] = self.dedup.expected.get(channel, 0)

    def take(self, snapshot_id: int) -> Sequences | None:
        """The local snapshot ``snapshot_id`` is taken now: the positions at its barriers and
        this replica's marks (as the log marks them now; the barrier leaves next); None if
        numbering is off."""
        if not self.enabled:
            return None
        taken = {**self.dedup.positions(), **self._barriers.pop(snapshot_id, {})}
        for older in [known for known in self._barriers if known < snapshot_id]:
            del self._barriers[older]
        return Sequences(taken, self.log.mark(snapshot_id))

    def commit(self, snapshot_id: int) -> None:
        """Snapshot ``snapshot_id`` committed: the log forgets what went before its marks."""
        self.log.commit(snapshot_id)

    def restore(self, sequences: Sequences | None) -> None:
        """Start again where a snapshot recorded (None: a snapshot taken with numbering off, or
        a rescale's state: every channel from 0, as every other replica starts then)."""
        saved = sequences or Sequences()
        self.log = UpstreamLog(self.name, saved.sent)
        self.dedup = SequenceDedup(self.name, saved.taken, enabled=self.dedup.enabled)
        self._barriers.clear()

    def replay(self, channel: Hashable, position: int) -> list[tuple[int, Any]]:
        """What this replica sent on output ``channel`` from number ``position`` on, numbered."""
        return self.log.replay(channel, position)

    def kept(self) -> int:
        """How many sent messages the log keeps (for ``replica_stats()``)."""
        return self.log.size()
