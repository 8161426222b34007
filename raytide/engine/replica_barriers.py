"""A replica's side of snapshots and rescale cuts: records and markers aligned at the
chain's head (:class:`~raytide.snapshots.barriers.BarrierAligner`), local snapshots taken
and completed, a rescale's cut held and reported, and the state restored from a snapshot,
adopted from a rescale's pieces or handed over to them.

A layer of :class:`~raytide.engine.replica.ReplicaCore` (see :mod:`raytide.engine.replica_vertices`).

What a replica saves (:mod:`raytide.snapshots.replica_state`), a rescale's pieces
(:mod:`raytide.rescale.layout`) and a stepped rescale's steps (:mod:`raytide.engine.stepping`)
are imported by the methods that take, hand over, restore or step a replica's state, at its
first snapshot, cut, restore or stepped hand-over: a first job without recovery or rescale
never does any of these, and its hosts start without them (issue 76: about a third of a
vertex host's imports).
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING, Any

from raytide.core.keygroups import KeyGroupAssignment
from raytide.engine.modes import HeldCut, ReplicaMode
from raytide.engine.replica_vertices import HostedVertices
from raytide.errors import RescaleError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import (
    Cause,
    ChannelId,
    EpochClosed,
    GroupState,
    HeldCause,
    Marker,
    MarkerKind,
    MarkerRecord,
    ReplicaKey,
)
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp
from raytide.snapshots.barriers import Decision, ForwardBarrier, Release, SnapshotComplete, TakeSnapshot

if TYPE_CHECKING:
    from raytide.rescale.layout import Piece
    from raytide.snapshots.replica_state import LoggedBatch, ReplicaState, TakenState


class BarrierHandling(HostedVertices):
    """Barriers, snapshots and restores of one replica (its state: :class:`HostedVertices`)."""

    def _receive(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any, sequence: int | None = None) -> None:
        """A batch from another replica, numbered ``sequence`` on ``channel`` (a duplicate is dropped)."""
        if not self.outbox.numbering.admit(channel, sequence, time.epoch):
            return
        if isinstance(batch, GroupState):
            self._put_groups(vertex, batch)
        elif self.aligner.on_record(channel, (channel, vertex, time, batch)) is not Decision.BUFFER:
            self._consume(channel, vertex, time, batch)

    def _consume(self, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        if self.mode is ReplicaMode.HOLDING:
            return  # after a rescale's cut: the rescaled job gets it again (the inputs replay their calls)
        if isinstance(batch, EpochClosed):
            self.tokens.record(channel, batch)
            return
        location = Location.of_input(vertex, channel.port)
        stepped = self.stepped.get(vertex)
        if stepped is not None:
            stepped.admit(channel.port, time, batch)
            batch, kept = stepped.split(channel, time, batch)
            if kept is not None:  # groups whose state has not come: kept, with a pointstamp of their own
                stepped.kept.append((channel, vertex, time, kept))
                if batch is None:
                    return  # the message's pointstamp is theirs
                self.held_back.update((location, time), 1)
        self.held_back.update((location, time), -1)
        self.held_back.caused_by(HeldCause(Cause.MESSAGE, location, time))
        if channel.sender != self.replica or channel.source not in self.chain.vertices:  # not sent to itself
            self.outbox.numbering.count(False, location, time, self.outbox.key, channel)
        self.deliver(vertex, channel.port, time, batch)
    def _put_groups(self, vertex: str, state: GroupState) -> None:
        """A stepped rescale's hand-over came: put the groups' keys, process the records kept
        for them (in their order; those of groups still to come are kept again), and retire
        the hold it carried (:mod:`raytide.engine.stepping`)."""
        stepped = self.stepped[vertex]
        self._run(vertex, None, self.vertices[vertex].put_keys, state.state)
        for channel, name, time, batch in stepped.arrived(state):
            self._consume(channel, name, time, batch)
        if state.epoch not in stepped.waiting:
            from raytide.engine.stepping import step_channel

            self.tokens.release(step_channel(vertex, state.epoch, stepped.port))
        location, time = Location.of_input(vertex, stepped.port), Timestamp(state.epoch)
        self.held_back.update((location, time), -1)
        self.held_back.caused_by(HeldCause(Cause.MESSAGE, location, time))

    def _receive_marker(self, channel: ChannelId, marker: Marker) -> None:
        if not self.outbox.numbering.admit_marker(channel, marker.marker_id):
            return  # replayed by a sender to a replica recovered alone, which had it
        self.aligning.setdefault(marker.marker_id, monotonic())
        self.markers.setdefault(marker.marker_id, marker)
        self.outbox.numbering.at_barrier(marker.marker_id, channel)
        self._learn_commit(marker)
        self._apply_barrier_effects(self.aligner.on_barrier(channel, marker.marker_id))

    def _learn_commit(self, marker: Marker) -> None:
        """A marker says which snapshot committed last: the upstream log forgets what is before its marks."""
        if marker.committed is not None:
            self.outbox.numbering.commit(marker.committed)

    def _apply_barrier_effects(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, TakeSnapshot):
                marker = self.markers[effect.snapshot_id]
                self.marker_log.append(MarkerRecord(marker.marker_id, {v: s.records_in for v, s in self.stats.items()}))
                first = self.aligning.pop(marker.marker_id, None)
                alignment_s = 0.0 if first is None else monotonic() - first
                if marker.kind is MarkerKind.SNAPSHOT and marker.marker_id > self.quiet_through:
                    self.taken[marker.marker_id] = self._take(marker, alignment_s)
                elif marker.kind is MarkerKind.HOLD:  # nothing runs here from now on: the state stays as it is, uncopied
                    self.mode, self.cut = ReplicaMode.HOLDING, HeldCut(marker.marker_id, alignment_s, self._state(marker))
            elif isinstance(effect, SnapshotComplete):
                taken = self.taken.pop(effect.snapshot_id, None)
                if self.cut is not None and self.cut.marker_id == effect.snapshot_id:
                    self._report_held([batch for records in effect.logged.values() for batch in records])
                elif taken is not None:
                    from raytide.snapshots.replica_state import complete

                    self.transport.local_snapshot(complete(effect.snapshot_id, self.outbox.key, taken, effect.logged))
            elif isinstance(effect, ForwardBarrier):
                self.outbox.forward_marker(self.markers.pop(effect.snapshot_id))
            elif isinstance(effect, Release):
                for channel, vertex, time, batch in effect.records:
                    self._consume(channel, vertex, time, batch)

    # -- snapshots and restore ----------------------------------------------------------

    def forget_delivered(self, delivered: dict[str, int]) -> None:
        """Drop the kept output records of the epochs the driver has (``delivered``: per
        output, its last epoch handed to the driver): no recovery or rescale hands them out again."""
        for name, epochs in self.kept.items():
            done = delivered.get(name, -1)
            for epoch in [e for e in epochs if e <= done]:
                del epochs[epoch]

    def _state(self, marker: Marker) -> ReplicaState:
        """The replica's state at ``marker`` (the chain is aligned on it), by reference, after
        dropping the kept output records of epochs the driver already has."""
        from raytide.snapshots.replica_state import ReplicaState

        self.forget_delivered(marker.delivered)
        user = {name: vertex.snapshot() for name, vertex in self.vertices.items()}
        sequences = self.outbox.numbering.take(marker.marker_id) if marker.kind is MarkerKind.SNAPSHOT else None
        return ReplicaState(user, self.notifications.pending, self.input_epochs, self.positions, self.kept,
                            self.outbox.tables(), {**self.restored_sources, **self.source_positions()}, sequences)

    def _take(self, marker: Marker, alignment_s: float) -> TakenState:
        """The local snapshot at ``marker``, taken ``alignment_s`` seconds after its first
        barrier came: the state, copied by pickling (processing goes on)."""
        from raytide.snapshots.replica_state import take, unpicklable_state

        state = self._state(marker)
        try:
            taken, self.kept_pickles = take(state, alignment_s, self.kept_pickles)
        except Exception as error:  # user state that does not pickle: say whose, where and which snapshot
            raise unpicklable_state(state, error, f"{self.chain.name}/{self.replica}", marker.marker_id) from error
        return taken

    def _report_held(self, logged: list[LoggedBatch]) -> None:
        """The cut is complete here (``logged``: the back-edge batches in flight in it): tell the coordinator."""
        from raytide.snapshots.replica_state import HeldReport, ReplicaSummary, capabilities, pickle_outputs

        cut = self.cut
        assert cut is not None
        cut.logged = logged
        outputs, self.kept_pickles = pickle_outputs(cut.state.kept, self.kept_pickles)
        summary = ReplicaSummary(capabilities(cut.state, logged), dict(cut.state.positions), outputs, cut.alignment_s)
        self.transport.held(cut.marker_id, HeldReport(summary, dict(cut.state.tables)))

    def hand_over(self, plan: PhysicalPlan, old_widths: dict[str, int],
                  tables: dict[str, KeyGroupAssignment]) -> dict[ReplicaKey, Piece]:
        """A rescale to ``plan`` (``tables``: who owns each vertex's key groups there): this
        held replica's state cut into a piece per replica of ``plan`` that gets any of it
        (:func:`~raytide.rescale.layout.split`). Uses the state up: the core is done.

        Raises:
            RescaleError: the replica is not held at a rescale's cut.
        """
        if self.cut is None or self.taken:
            raise RescaleError(f"replica {self.outbox.key} was asked for its state for a rescale, but it is not "
                               f"held at a complete rescale cut")
        from raytide.rescale.layout import split

        return split(plan, old_widths, tables, self.replica, self.cut.state, self.cut.logged)

    def adopt(self, old_widths: dict[str, int], tables: dict[str, KeyGroupAssignment],
              pieces: list[Piece]) -> list[tuple[Pointstamp, int]]:
        """Become this replica of a rescaled job from the ``pieces`` the held replicas handed
        over (a fresh core, before any event; :func:`~raytide.rescale.layout.merge`); returns
        the pointstamps it holds now. Its logged back-edge batches go at :meth:`resume`."""
        from raytide.rescale.layout import merge
        from raytide.snapshots.replica_state import capabilities

        state, logged = merge(self.plan, old_widths, tables, self.outbox.key, pieces)
        self._restore(state, logged)
        return capabilities(state, logged)

    def restore(self, data: bytes, figures: bool = False) -> None:
        """Become the replica whose local snapshot is ``data`` (a fresh core, before any event),
        with its progress figures if ``figures`` (restored alone, in the snapshot's incarnation).

        Its back-edge batches logged in the snapshot are delivered by :meth:`resume`, once
        every replica of the job is restored.
        """
        from raytide.snapshots.replica_state import load

        self._restore(*load(data), figures=figures)

    def _restore(self, state: ReplicaState, logged: list[LoggedBatch], figures: bool = False) -> None:
        self.mode, self.replay = ReplicaMode.RESTORED, logged
        for name, saved in state.user.items():
            self._run(name, None, self.vertices[name].restore, saved)
        self.notifications.pending.update(state.notifications)
        self.input_epochs.update(state.input_epochs)
        self.positions.update(state.positions)
        self.kept.update(state.kept)
        self.outbox.restore_tables(state.tables)
        self.restored_sources = state.sources
        self.outbox.numbering.restore(state.sequences, figures)
