"""One replica of a chain of fused vertices, as pure logic: events in, sends and progress out.

A shell (the Ray actor in ``vertex_actor.py``, or the in-process runtime in ``local.py``) feeds a :class:`ReplicaCore` its events: data
batches (those another replica sent in one event, together) or a marker from another replica, a status push from the progress actor, and,
for input vertices, records and epoch advances. The core runs the user's callbacks, routes what they send
(:class:`~raytide.engine.outbox.Outbox`: to fused vertices by a direct call, to itself through a queue it drains before shipping progress,
to other replicas through the transport), and keeps the pointstamp deltas of everything it did.

Progress accounting follows Naiad's rule: the deltas of one event (the ``-1`` of the consumed message and the ``+1``
of everything it caused) are shipped together, and a replica's messages to the progress actor are numbered and applied
in that order. Deltas are held back while they cannot matter (:mod:`raytide.engine.holdback`), so the number of
progress messages does not grow with the number of data batches. Notifications are delivered when no timestamp at or
before them may still arrive (:mod:`raytide.engine.notifications`); a vertex on a cycle gets one round at a time,
each once the tracker has absorbed the last (an acknowledged flush).
"""

from __future__ import annotations

import itertools
from typing import Any, cast

from raytide.core.batches import batch_length
from raytide.engine import epoch_tokens
from raytide.engine.modes import ReplicaMode
from raytide.engine.replica_vertices import MARKERS_KEPT
from raytide.engine.settling import Settling
from raytide.errors import ProgressError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import Cause, ChannelId, Figures, HeldCause, Marker, ReplicaKey, StepPlanMessage
from raytide.progress.publisher import Status
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp

__all__ = ["MARKERS_KEPT", "AloneRestored", "ReplicaCore", "ReplicaMode"]

#: A batch another replica sent: ``(channel, vertex, time, batch)``, or with its number on the
#: channel as a fifth item (:mod:`raytide.engine.numbered_channels`).
Received = tuple[ChannelId, str, Timestamp, Any] | tuple[ChannelId, str, Timestamp, Any, int | None]


#: What a replica recovered alone hands on, restored (:meth:`ReplicaCore.alone_restored`).
AloneRestored = tuple[list[Location], Figures, dict[ChannelId, int]]


class ReplicaCore(Settling):
    """Replica ``replica`` of chain ``chain`` of ``plan``: runs its vertices, accounts progress.

    With ``keep_outputs`` (every job on Ray) its output vertices keep the records they received until a snapshot
    barrier or a rescale's cut says the driver has them (:attr:`Marker.delivered`), or the driver does
    (:meth:`~raytide.engine.replica_barriers.BarrierHandling.forget_delivered`, in a job without snapshots): a recovery
    or a rescale hands them to the new progress actor.
    The events from outside are here; the layers below keep the state and run the vertices
    (:class:`~raytide.engine.replica_vertices.HostedVertices`), handle barriers, snapshots and restores
    (:class:`~raytide.engine.replica_barriers.BarrierHandling`) and ship progress after each event
    (:class:`~raytide.engine.settling.Settling`).
    """

    # -- events from outside -------------------------------------------------------------

    def on_messages(self, messages: list[Received]) -> None:
        """Batches ``(channel, vertex, time, batch)`` that arrived together from another replica, in order, for
        ``vertex`` (the chain head) on ``channel``, each with its number on the channel if the sender numbers
        them (a fifth item: a duplicate is dropped): each received, then one settle (one progress message)."""
        for message in messages:
            self._receive(*message)
        self._settle()

    def on_marker(self, channel: ChannelId, marker: Marker) -> None:
        """A control marker arrived on ``channel``: align, then act on it and forward it."""
        self._receive_marker(channel, marker)
        self._settle()

    def inject_marker(self, marker: Marker) -> None:
        """At an input replica: start ``marker`` here (the driver injects it at every input)."""
        self.markers.setdefault(marker.marker_id, marker)
        self._learn_commit(marker)
        self._apply_barrier_effects(self.aligner.inject(marker.marker_id))
        self._settle()

    # -- after a restore, and from the progress actor and the driver ------------------------

    def resume(self) -> None:
        """Deliver the restored back-edge batches (ahead of any new traffic), then run as usual."""
        self.mode = ReplicaMode.RUNNING
        replay, self.replay = self.replay, []
        for channel, vertex, time, batch in replay:
            self._consume(channel, vertex, time, batch)
        self._settle()

    def replace_alone(self, data: bytes | None, figures: bool, first: int, quiet_through: int) -> None:
        """Become, as a fresh core, the lost replica recovered alone (:mod:`raytide.supervisor.alone`):
        its part of the last committed snapshot (``data``; None: none committed yet, from the
        start), its progress figures kept if ``figures`` (the snapshot is of the job's
        incarnation), its messages to the progress actor numbered from ``first`` on (past the
        lost replica's: :meth:`~raytide.engine.progress_core.ProgressCore.replace`), the
        snapshots up to ``quiet_through`` (abandoned) passed on but not taken. It runs at
        :meth:`resume`, once the progress actor counts on from its figures (nothing it sends
        the progress actor before may arrive there first)."""
        if data is not None:
            self.restore(data, figures)
        self.sequence = itertools.count(first)
        self.quiet_through = quiet_through

    def alone_restored(self) -> AloneRestored:
        """What the replacement :meth:`replace_alone` made hands on: the locations it reads (to the
        progress actor), its restored figures (:meth:`ProgressCore.replace`) and its input
        channels' positions (its senders replay from there, :meth:`replay_to`)."""
        numbering = self.outbox.numbering
        return self.subscriptions(), dict(numbering.figures), cast(dict[ChannelId, int], numbering.dedup.positions())

    def replay_to(self, to: ReplicaKey, positions: dict[ChannelId, int], after: int) -> None:
        """Replica ``to`` was recovered alone at ``positions`` from snapshot ``after``: send it
        again what this replica sent it from there on, numbered as before, and the markers
        after that snapshot (no progress: it was counted when first sent)."""
        self.outbox.replay(to, positions, after)

    def refusal(self, to: ReplicaKey, positions: dict[ChannelId, int]) -> str | None:
        """Why :meth:`replay_to` ``to`` from ``positions`` cannot be given (None: it can): the
        replacement is then not recovered alone, and the whole job rolls back."""
        return self.outbox.refusal(to, positions)

    def on_progress(self, statuses: dict[Location, Status], acked: int) -> None:
        """The progress actor pushed new frontiers (and absorbed ``acked`` more of our acknowledged flushes)."""
        self.statuses.update(statuses)
        self.unacked = max(0, self.unacked - acked)
        self._settle()

    def widen(self, plan: PhysicalPlan) -> None:
        """Play ``plan`` from now: this replica's plan with one keyed vertex wider, whose
        joined replicas own no key group yet (a growing stepped rescale's join,
        docs/rescaling.md; the driver joins only where nothing else reads that width:
        :func:`raytide.engine.joining.join_refusal`), or narrower, its retiring replicas
        emptied by the plan's steps (a shrink's retiring switch: ``retire_refusal``). The
        markers and epoch tokens this replica sends reach the new width's replicas; the data
        keeps its routes' owners (:meth:`Outbox.follow`), and the hosted vertices see the width."""
        self.plan = plan
        self.outbox.follow(plan)
        self.chain = self.outbox.chain = plan.chain(self.chain.name)
        for name, context in self.contexts.items():
            context.parallelism = plan.width(name)
        self.token_sender.channels = epoch_tokens.sent_on(plan, self.outbox)

    def retire(self) -> tuple[str | None, int]:
        """A shrink's retiring switch asks this replica, emptied by the plan's steps, to leave the
        running job (docs/rescaling.md, "The retiring switch on Ray"): why it cannot yet (a step
        left, a notification pending, records kept or queued), or None once everything it held back
        for the progress actor is shipped; with how many of its messages the progress actor must
        have applied before it stops counting this replica (nothing it did is then lost with it)."""
        left = sorted(name for name, steps in self.stepped.items() if not steps.moves.done or steps.kept)
        pending = sorted(name for name, times in self.notifications.pending.items() if times)
        why = (f"steps left at {left}" if left else f"notifications pending at {pending}" if pending
               else "messages to itself queued" if self.outbox.local else None)
        if why is None:
            self._send_held(*self._take_held(), ack=False)
        sent = next(self.sequence)
        self.sequence = itertools.count(sent)
        return why, sent

    def install_plan(self, message: StepPlanMessage) -> None:
        """The driver's plan of a stepped rescale (before any input reached its first step's
        epoch, or took records at it, or :func:`~raytide.engine.stepping.check_in_time` refuses it): route every
        exchange into its vertex by the owners at a batch's epoch, and, at a replica of that
        vertex, refuse records whose owner at their epoch is another replica. The rescale's
        modules come with the first plan: a job that never rescales never imports them."""
        from raytide.engine import stepping
        from raytide.rescale.steps import StepPlan

        stepping.check_in_time(message, self.input_epochs, f"replica {self.replica} of {self.chain.name!r}", self.fed)
        self.outbox.install_plan(message.vertex, StepPlan.of_message(message))
        if message.vertex in self.chain.vertices:
            stepped = self.stepped[message.vertex] = stepping.SteppedVertex(self.plan, message, self.replica)
            for epoch in stepped.waiting:  # its tokens answer nothing at or after a step before its state came
                self.tokens.hold(stepping.step_channel(message.vertex, epoch, stepped.port), epoch)
        self._settle()  # a step at the inputs' own epoch is due now: no later event need come to make it

    def push_input(self, vertex: str, batch: Any, epoch: int) -> None:
        """The driver (or a source) delivers records of ``epoch`` to input ``vertex``."""
        if self.mode is ReplicaMode.HOLDING:
            return
        self.positions[vertex] += 1
        current = self.input_epochs[vertex]
        if current is None or epoch != current:
            raise ProgressError(f"input {vertex!r} replica {self.replica} got records for epoch {epoch} "
                                f"but is at epoch {current}: advance the input first")
        time = Timestamp(epoch)
        self.fed[vertex] = epoch
        self.held_back.caused_by(HeldCause(Cause.CAPABILITY, Location.of_vertex(vertex), time))
        self.stats[vertex].records_in += batch_length(batch)
        self.stats[vertex].batches_in += 1
        context = self.contexts[vertex]
        context.current = time
        self.send(context, 0, batch, time)
        context.current = None
        self._settle()

    def advance_input(self, vertex: str, epoch: int | None, quiet: bool = False, proxies: epoch_tokens.Proxies = ()) -> None:
        """Move input ``vertex``'s capability to ``epoch`` (None: close); ``quiet``, ``proxies``: ``epoch_tokens.ProxyPlan``."""
        if self.mode is ReplicaMode.HOLDING:
            return
        self.positions[vertex] += 1
        current = self.input_epochs[vertex]
        if current is None:
            raise ProgressError(f"input {vertex!r} is closed; it cannot move to epoch {epoch}")
        if epoch is not None and epoch < current:
            raise ProgressError(f"input {vertex!r} is at epoch {current}; it cannot go back to epoch {epoch}")
        if epoch == current:
            return
        location = Location.of_vertex(vertex)
        self.held_back.update((location, Timestamp(current)), -1)
        if epoch is not None:
            self.held_back.update((location, Timestamp(epoch)), 1)
        self.input_epochs[vertex] = epoch
        self.held_back.force()
        for name in self.chain.vertices[1:]:  # an input heads its chain: the rest get nothing more from it before epoch
            if name in self.vertices:
                self._run(name, None, self.vertices[name].on_input_epoch, epoch)
            for time in self.notifications.take_before(name, epoch) if self.plan.vertex(name).settles_with_input else ():
                self.held_back.update((Location.of_vertex(name), time), -1)  # it is done with those times (LogicalVertex)
        self.token_sender.close(self.transport, self.notifications.pending, epoch, proxies, quiet)
        self._settle()

