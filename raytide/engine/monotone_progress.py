"""Progress that survives a replica recovered alone: what each replica reports is a monotone
fact, merged by maximum, so a replacement that reports again what its earlier incarnation did
changes nothing, and what the lost replica still owes stays held (docs/recovery.md, "A
replica recovered alone").

The progress actor's tracker counts deltas: a ``+1`` when a message is sent, a ``-1`` when it
is taken. A replica recovered alone breaks that sum. It restores an older state and takes
again (from its senders' upstream logs) messages whose ``-1`` the tracker had already counted,
sends again messages its receivers drop, and its deltas not yet shipped when it died are lost
with it: the counts drift, and an epoch is notified early or never. Here instead each channel
reports cumulative counts per epoch, numbered as the upstream log numbers them:

* a sender: ``sent(channel, epoch, n)``, it has sent ``n`` messages of ``epoch`` on the channel
  since the job started (a restored sender counts on from its snapshot's figure);
* a receiver: ``taken(channel, epoch, n)``, it has taken ``n`` of them (duplicates dropped by
  :class:`~raytide.engine.dedup.SequenceDedup` are not taken again);
* an input replica: ``reached(epoch)``, it will send nothing earlier.

Each figure is merged by maximum, so a report that repeats or lags a figure already merged
does nothing. Messages a lost replica had not taken (in flight to it, or sent while it was
dead) stay counted as sent and not taken until its replacement takes them from the replay, so
nothing downstream is complete past them. An epoch ``e`` is complete once every input replica
reached past it and, on every channel, every epoch up to ``e`` has as many taken as sent
(property-tested against the sets of messages, reports repeated, stale and out of order:
``tests/unit/test_monotone_progress.py``).

As with the tracker's deltas, the figures of one event go together (Naiad's rule): a
replica's ``taken`` of what it took and the ``sent`` of what that made it send in one report,
and an input's ``sent`` before its ``reached`` past them; otherwise a message whose ``sent`` is
still on its way is seen by nobody, and its epoch completes early. Merging by maximum makes
the order of different senders' reports, and stale ones, not matter.

For an acyclic job whose replicas hold no capability of their own (they only answer what they
take): a vertex that asks for notifications, or a loop, needs its capabilities reported as
figures too, which this does not do (:mod:`raytide.supervisor.alone` sends those deaths to a
whole-job recovery).
"""

from __future__ import annotations

from collections.abc import Hashable


class MonotoneProgress:
    """The progress actor's figures for a recovery alone: per ``(channel, epoch)`` the most sent
    and the most taken ever reported, and the furthest epoch each input replica reached."""

    def __init__(self, inputs: int = 1, merge: str = "max") -> None:
        """Figures of a job with ``inputs`` input replicas; ``merge="sum"`` adds reports up
        instead (a planted bug the simulator's trials catch)."""
        self.sent: dict[tuple[Hashable, int], int] = {}
        self.taken: dict[tuple[Hashable, int], int] = {}
        self.input_at = [0] * inputs
        self.merge = merge

    def _merge(self, figures: dict[tuple[Hashable, int], int], key: tuple[Hashable, int], count: int) -> None:
        figures[key] = max(figures.get(key, 0), count) if self.merge == "max" else figures.get(key, 0) + count

    def report_sent(self, channel: Hashable, epoch: int, count: int) -> None:
        """A sender has sent ``count`` messages of ``epoch`` on ``channel`` in all."""
        self._merge(self.sent, (channel, epoch), count)

    def report_taken(self, channel: Hashable, epoch: int, count: int) -> None:
        """A receiver has taken ``count`` messages of ``epoch`` from ``channel`` in all."""
        self._merge(self.taken, (channel, epoch), count)

    def reached(self, epoch: int, replica: int = 0) -> None:
        """Input replica ``replica`` will send nothing before ``epoch``."""
        self.input_at[replica] = max(self.input_at[replica], epoch)

    def complete(self, epoch: int) -> bool:
        """Whether nothing at or before ``epoch`` can still arrive anywhere."""
        return min(self.input_at) > epoch and all(self.taken.get(key, 0) == count
                                             for key, count in self.sent.items() if key[1] <= epoch)

    def owed(self, epoch: int) -> dict[Hashable, int]:
        """Per channel, the messages at or before ``epoch`` sent and not yet taken (for a timeout's message)."""
        owing: dict[Hashable, int] = {}
        for (channel, at), count in self.sent.items():
            if at <= epoch and count > self.taken.get((channel, at), 0):
                owing[channel] = owing.get(channel, 0) + count - self.taken.get((channel, at), 0)
        return owing
