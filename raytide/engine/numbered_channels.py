"""A replica's numbered channels: what it sends numbered per output channel and kept in its
upstream log, what it receives admitted through its dedup, and what a snapshot records of
both, so that a replica recovered alone can be replayed what it had received and its
receivers can drop what it sends again (docs/recovery.md, "A replica recovered alone").

:class:`Numbering` joins the two pure halves (:class:`~raytide.engine.upstream_log.UpstreamLog`
for the sends, :class:`~raytide.engine.dedup.SequenceDedup` for the receipts) at the points
the engine meets them, and the protocol model (:mod:`raytide.testing.alone`) runs the same
object, so both number, mark, trim, admit and restore alike:

* a send to another replica takes the channel's next number (:meth:`Numbering.number`) and is
  kept if its receiver may be recovered alone (``keeps``; a receiver that never is, such as
  a sink fed by several channels, needs the numbers for its dedup but never a replay); a
  send to itself is not numbered (it never leaves the replica);
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

Progress figures (:data:`~raytide.physical.protocol.Figures`): where the replica counts a
``+1`` for a numbered send or a ``-1`` for a numbered message it consumes, it also counts the
channel's figure (:meth:`Numbering.count`), and each progress batch carries the figures that
changed since the last (:meth:`Numbering.take_figures`), so the progress actor knows exactly
what of a replica's numbered traffic its tracker counts, and can set it to what a replacement
restored from a snapshot will count on from (:meth:`~raytide.engine.progress_core.ProgressCore.replace`).
Figures start at 0 with every incarnation of the job (a whole-job restore rebuilds the tracker
from the cut, where no regular channel holds a message).

Markers go in the log too, at their place among the messages (:meth:`Numbering.note_marker`),
so a replay carries the barriers the lost replica had taken after its snapshot: the receivers
downstream of it may be aligning on one. A receiver drops a marker it had on that channel
(:meth:`Numbering.admit_marker`: ids increase on a channel).

Back edges are not admitted by number: their records in flight at a snapshot are logged in
it and delivered again at resume, outside the channel; a loop is never recovered alone
(:mod:`raytide.supervisor.alone`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from raytide.engine.dedup import SequenceDedup
from raytide.engine.upstream_log import UpstreamLog
from raytide.physical.protocol import ChannelId, Figures, Marker, ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp

if TYPE_CHECKING:  # imported at a replica's first snapshot or restore, which a first job may never have
    from raytide.snapshots.replica_state import Sequences


class Numbering:
    """One replica's numbered sends (its upstream log) and admitted receipts (its dedup)."""

    def __init__(self, name: str, enabled: bool = True, unchecked: Iterable[Hashable] = (),
                 dedup: bool = True, keeps: Callable[[Hashable], bool] | None = None, cap: int | None = None) -> None:
        """Numbering for replica ``name`` (in errors); ``enabled=False``: nothing numbered or
        kept, every message admitted (the default on Ray until a recovery alone runs there);
        ``unchecked``: input channels admitted without their numbers (back edges);
        ``dedup=False`` takes duplicates too (a planted bug the trials catch); ``keeps``: whether
        an output channel's sends are kept for a replay (none: every one's); ``cap``: the most
        messages its log keeps (``Recovery.upstream_log_cap``; none: :data:`~raytide.engine.upstream_log.CAP`)."""
        self.name, self.enabled = name, enabled
        self.unchecked = frozenset(unchecked)
        self.log = UpstreamLog(name, keeps=keeps, cap=cap)
        self.dedup = SequenceDedup(name, enabled=dedup)
        self._barriers: dict[int, dict[Hashable, int]] = {}
        self.figures: Figures = {}
        self._changed: Figures = {}
        self._markers: dict[Hashable, list[tuple[int, Marker]]] = {}  # per output channel: (position, marker)
        self._last_marker: dict[Hashable, int] = {}  # per input channel, the latest marker id taken
        self._restored_at = 0  # the snapshot restored: every marker up to it came on every channel

    def number(self, channel: Hashable, message: Any) -> int | None:
        """Keep ``message`` sent on output ``channel``; its number (None: numbering is off)."""
        return self.log.append(channel, message) if self.enabled else None

    def admit(self, channel: Hashable, sequence: int | None, epoch: Any = None) -> bool:
        """Whether the message numbered ``sequence`` on input ``channel`` (at ``epoch``, for the
        error) is new; False: a duplicate, dropped. Raises RecoveryError on a gap."""
        if not self.enabled or sequence is None or channel in self.unchecked:
            return True
        return self.dedup.admit(channel, sequence, epoch)

    def count(self, sent: bool, location: Location, time: Timestamp, receiver: ReplicaKey, channel: ChannelId) -> None:
        """One more message sent (``sent``) or taken on numbered ``channel`` into ``receiver``'s
        ``location`` at ``time``: the figure the ``+1`` or ``-1`` counted now goes with."""
        if self.enabled:
            key = (sent, location, time, receiver, channel)
            self.figures[key] = self._changed[key] = self.figures.get(key, 0) + 1

    def take_figures(self) -> Figures | None:
        """The figures changed since the last call, for the progress batch shipped now (None: none)."""
        changed, self._changed = self._changed, {}
        return changed or None

    def note_marker(self, channel: Hashable, marker: Marker) -> None:
        """``marker`` leaves on output ``channel`` now, after the messages sent on it so far."""
        if self.enabled and self.log.keeps(channel):
            self._markers.setdefault(channel, []).append((self.log.next(channel), marker))

    def admit_marker(self, channel: Hashable, marker_id: int) -> bool:
        """Whether marker ``marker_id`` on input ``channel`` is new (a replay may send one again)."""
        if not self.enabled or channel in self.unchecked:
            return True
        if marker_id <= self._last_marker.get(channel, self._restored_at):
            return False
        self._last_marker[channel] = marker_id
        return True

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
        from raytide.snapshots.replica_state import Sequences

        taken = {**self.dedup.positions(), **self._barriers.pop(snapshot_id, {})}
        for older in [known for known in self._barriers if known < snapshot_id]:
            del self._barriers[older]
        return Sequences(taken, self.log.mark(snapshot_id), dict(self.figures), snapshot_id)

    def commit(self, snapshot_id: int) -> None:
        """Snapshot ``snapshot_id`` committed: the log forgets what went before its marks, and
        the markers up to it (a receiver restored from it or later had them)."""
        self.log.commit(snapshot_id)
        for channel, markers in self._markers.items():
            self._markers[channel] = [(at, marker) for at, marker in markers if marker.marker_id > snapshot_id]

    def restore(self, sequences: Sequences | None, figures: bool = False) -> None:
        """Start again where a snapshot recorded (None: a snapshot taken with numbering off, or
        a rescale's state: every channel from 0, as every other replica starts then); its
        figures too if ``figures`` (a replica restored alone from a snapshot of the job's
        incarnation), else from 0 (a whole-job restore starts a new incarnation)."""
        from raytide.snapshots.replica_state import Sequences

        saved = sequences or Sequences()
        dropped = self.log.dropped, self.log.drops  # what its lives dropped past the cap stays said
        self.log = UpstreamLog(self.name, saved.sent, self.log.keeps, self.log.cap)
        self.log.dropped, self.log.drops = dropped
        self.dedup = SequenceDedup(self.name, saved.taken, enabled=self.dedup.enabled)
        self._barriers.clear()
        self.figures = dict(saved.figures) if figures else {}
        self._changed = {}
        self._markers, self._last_marker, self._restored_at = {}, {}, saved.snapshot_id

    def replay(self, channel: Hashable, position: int, after: int = 0) -> list[tuple[int, Any]]:
        """What this replica sent on output ``channel`` from number ``position`` on, numbered;
        with the markers after snapshot ``after`` in their places (as ``(None, marker)``)."""
        messages = self.log.replay(channel, position)
        markers = [(at, marker) for at, marker in self._markers.get(channel, []) if marker.marker_id > after]
        out: list[tuple[int | None, Any]] = []
        for sequence, message in messages:
            while markers and markers[0][0] <= sequence:
                out.append((None, markers.pop(0)[1]))
            out.append((sequence, message))
        out += [(None, marker) for _, marker in markers]
        return out  # type: ignore[return-value]

    def kept(self) -> int:
        """How many sent messages the log keeps (for ``replica_stats()``)."""
        return self.log.size()


def kept_into(chains: Collection[str] | None) -> Callable[[Hashable], bool] | None:
    """``keeps`` for a replica core's :class:`Numbering`, whose channels are ``(to, channel)``:
    a send is kept when its receiver ``to`` is a replica of one of ``chains`` (the chains the
    rule may recover a replica of alone: :func:`~raytide.supervisor.alone.logged_chains`);
    None: every send."""
    return None if chains is None else functools.partial(_into, frozenset(chains))


def _into(chains: frozenset[str], channel: Hashable) -> bool:
    to = channel[0]  # type: ignore[index]
    return isinstance(to, ReplicaKey) and to.chain in chains
