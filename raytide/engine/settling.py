"""What a replica does after every event: delivers what it sent itself, then the
notifications that are due, then ships its held-back progress if it may matter and tells
the progress actor what it now waits on (Naiad's rule: one event's deltas travel together,
numbered per replica; :mod:`raytide.engine.holdback` says when they may wait).

A layer of :class:`~raytide.engine.replica.ReplicaCore` (see :mod:`raytide.engine.replica_vertices`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from raytide.engine.holdback import is_covered
from raytide.engine.modes import ReplicaMode
from raytide.engine.replica_barriers import BarrierHandling
from raytide.engine.riding import Rides
from raytide.physical.protocol import (
    ChannelId,
    Declaration,
    GroupState,
    HeldCause,
    ProgressBatch,
    ProgressMessage,
    ReplicaKey,
    Sequenced,
)
from raytide.progress.publisher import Interests, answers
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp, minimal_elements
from raytide.progress.tracker import Pointstamp

if TYPE_CHECKING:  # imported with a stepped rescale's plan (raytide.engine.replica)
    from raytide.engine.stepping import SteppedVertex
    from raytide.rescale.migration import GroupHandoff


class Settling(BarrierHandling):
    """The progress a replica ships and the notifications it delivers after each event."""

    def _settle(self) -> None:
        """After every event: deliver what this replica sent itself, then notifications, then
        ship progress if it may matter, and tell the progress actor what this replica now
        waits on (with the progress when both go).

        When what it waits on must be declared and would still be once its held-back
        progress were shipped (a new notification), the replica sends the progress actor a
        message anyway, so what it holds back goes along: the same number of messages, and
        the frontier does not wait a round trip (a status push, then this flush) for it. A
        wait of held-back progress alone is declared instead: shipping would only make it
        due again at the next message.
        """
        self._drain_local()
        self._deliver_notifications()
        self._hand_over()
        if self.token_sender.owed and self.mode is ReplicaMode.RUNNING:  # after what its notifications sent
            self.token_sender.close(self.transport, self.notifications.pending, self.input_epochs[self.chain.vertices[0]])
        ship = self._should_ship()  # first: it forgets causes whose deltas cancelled out
        interests = self._interests()
        if not ship and self._must_declare(interests):
            ship = self._must_declare(self._interests(held=False))
        if ship:
            changes, outputs = self._take_held()
            if changes or outputs:
                self._send_held(changes, outputs, ack=False)
                return
            interests = self._interests()  # what it held is no longer waited on
        if self._must_declare(interests):
            self.interests = interests
            self._to_progress(Declaration(interests))

    def _must_declare(self, interests: Interests) -> bool:
        """Whether the progress actor must learn ``interests`` now: they changed, and one of
        them could be answered before this replica ships progress anyway.

        An input this replica hosts holds its capability until it moves, which ships
        progress (and the interests with it); meanwhile no time it could still result in
        is ready or uncovered anywhere it can reach (a pointstamp at another location holds
        the frontier there), so a declaration of only such waits may wait for that batch.
        The waits of a vertex fused behind an input are such waits until the input moves on.
        """
        if interests == self.interests:
            return False
        return not interests or not all(self._held_here(location, time)
                                        for location, waits in interests.items() for time, _ in waits)

    def _held_here(self, location: Location, time: Timestamp) -> bool:
        """Whether an open input of this replica holds the frontier at ``location`` at or before ``time``."""
        return any(epoch is not None and self.plan.graph.could_result_in(Location.of_vertex(name), Timestamp(epoch),
                                                                        location, time)
                   for name, epoch in self.input_epochs.items())

    def _drain_local(self) -> None:
        """Deliver what this replica sent itself, in send order (each channel stays FIFO).

        Draining before progress is shipped lets the +1 of such a batch cancel its -1 in
        the same progress batch.
        """
        local = self.outbox.local
        while local:
            is_marker, arguments = local.popleft()
            if is_marker:
                self._receive_marker(*arguments)
            else:
                self._receive(*arguments)

    def _interests(self, held: bool = True) -> Interests:
        """What this replica waits on: pending notifications at their vertex's inputs (for
        their time to be ready) and, unless ``held`` is False (as once it is shipped),
        held-back progress at the location of its cause (for its time to be no longer
        covered); only the minimal times matter (a later one is answered no earlier)."""
        waits: dict[Location, dict[Timestamp, bool]] = {}
        for vertex, pending in self.notifications.pending.items():
            asked = [time for time in pending if not self.tokens.answers_alone(vertex, time)]  # tokens answer the rest
            if asked:
                for port in range(len(self.plan.vertex(vertex).inputs)):
                    waits[Location.of_input(vertex, port)] = dict.fromkeys(asked, False)
        for vertex, stepped in self.stepped.items():  # a hand-over waits for its input frontier too
            for time in stepped.waits():
                if not self.tokens.answers_alone(vertex, time):
                    for port in range(len(self.plan.vertex(vertex).inputs)):
                        waits.setdefault(Location.of_input(vertex, port), {})[time] = False
        shipping = self._shipped_at_tokens() if held else {}
        for location, time in self.held_back.waits() if held else ():
            if not any(due.less_equal(time) for due in shipping.get(location.vertex, ())):
                waits.setdefault(location, {})[time] = True
        return {loc: [(t, times[t]) for t in sorted(minimal_elements(times), key=Timestamp.sort_key)]
                for loc, times in waits.items()}

    def _shipped_at_tokens(self) -> dict[str, list[Timestamp]]:
        """Per vertex, the minimal times of its pending notifications that tokens alone make due:
        progress held back at an input of the vertex at a time at or after one of them will be
        shipped at that delivery (which ships all that is held), so no status need tell when it is
        no longer covered (nothing downstream can pass that time before the delivery). The minimal
        times alone, found once per look: a replica that fell behind its feed holds hundreds of
        epochs back and has as many notifications pending, and testing every held time against
        every pending one made each event quadratic in that backlog (a soak's keyed replicas 660
        epochs behind spent their events there, and fell further behind)."""
        return {vertex: minimal_elements(time for time in pending if self.tokens.answers_alone(vertex, time))
                for vertex, pending in self.notifications.pending.items()}

    def _ready(self, vertex: str, time: Timestamp) -> bool:
        if self.tokens.ready(vertex, time):
            return True
        for port in range(len(self.plan.vertex(vertex).inputs)):
            status = self.statuses.get(Location.of_input(vertex, port))
            if status is None or not answers(status, time)[0]:
                return False
        return True

    def _hand_over(self) -> None:
        """A stepped rescale's old owner: every step whose epoch nothing before can still
        reach here hands its groups over (:mod:`raytide.engine.stepping`)."""
        for vertex, stepped in self.stepped.items():
            for handoff in stepped.handoffs(functools.partial(self._passed, vertex)):
                self._send_groups(vertex, stepped, handoff)

    def _passed(self, vertex: str, epoch: int) -> bool:
        """Whether nothing before ``epoch`` can still reach ``vertex`` here: its input frontier
        (or its tokens) passed ``epoch - 1``, and none of its own notifications before is pending."""
        if any(time.epoch < epoch for time in self.notifications.of(vertex)):
            return False
        return epoch == 0 or self._ready(vertex, Timestamp(epoch - 1))

    def _send_groups(self, vertex: str, stepped: SteppedVertex, handoff: GroupHandoff) -> None:
        """``take_keys`` of the hand-over's groups, sent to the new owner as a data batch at the
        step's epoch (the hold the driver made, moved: no pointstamp changes here)."""
        taken: list[Any] = []
        self._run(vertex, None, self._take_keys, vertex, stepped.moving(handoff.groups), taken)
        channel = ChannelId(vertex, -1, self.replica, stepped.port)
        self.outbox.send(ReplicaKey(self.chain.name, handoff.to_replica), channel, vertex,
                         Timestamp(handoff.epoch), GroupState(handoff.epoch, handoff.groups, taken[0]))

    def _take_keys(self, vertex: str, moving: Callable[[Hashable], bool], into: list[Any]) -> None:
        into.append(self.vertices[vertex].take_keys(moving))

    def _deliver_notifications(self) -> None:
        if self.mode is ReplicaMode.HOLDING:
            return
        for vertex in self.chain.vertices:
            if not self.notifications.of(vertex):
                continue
            cyclic = self.plan.vertex(vertex).cyclic
            if cyclic and self.unacked:
                continue
            due = self.notifications.take_due(vertex, functools.partial(self._ready, vertex), one_round=cyclic)
            for time in due:
                self.stats[vertex].notifications += 1
                self._run(vertex, time, self.vertices[vertex].on_notify, time)
                self.held_back.update((Location.of_vertex(vertex), time), -1)
                self.held_back.force()
            self._drain_local()
            if cyclic and due:
                self._send_held(*self._take_held(), ack=True)

    def _should_ship(self) -> bool:
        def covered(cause: HeldCause) -> bool:
            return is_covered(cause, self.statuses, self.input_epochs)

        return self.held_back.should_ship(covered, self.in_cycle, has_outputs=any(self.outputs.values()))

    def riders_to_pass_on(self, rides: Rides) -> list[Sequenced]:
        """The batches that came with data to pass on now: while it runs, those that rode with tokens may wait."""
        if self.mode is not ReplicaMode.RUNNING or not self.tokens.keeps_riders():
            return rides.take_passing_on()
        rides.keep(self.tokens.latest)
        return rides.take_passing_on(self.tokens.closed_by_all)

    def _take_held(self) -> tuple[list[tuple[Pointstamp, int]], dict[str, dict[int, list]]]:
        """Everything held back: the progress deltas and the output records they retire."""
        outputs = {name: epochs for name, epochs in self.outputs.items() if epochs}
        for name in outputs:
            self.outputs[name] = {}
        return self.held_back.take(), outputs

    def _send_held(self, changes: list[tuple[Pointstamp, int]], outputs: dict[str, dict[int, list]], ack: bool) -> None:
        """Ship the progress with the output records it retires, and what the replica now waits
        on if that changed (a cyclic round's next notification goes along)."""
        previous, self.interests = self.interests, self._interests()
        self.flushes += 1
        if ack:
            self.unacked += 1
        parts = {name: {e: [records] for e, records in epochs.items()} for name, epochs in outputs.items()}
        self._to_progress(ProgressBatch(changes, ack, self.interests if self.interests != previous else None,
                                        parts or None, self.outbox.numbering.take_figures()))

    def _to_progress(self, message: ProgressMessage) -> None:
        self.transport.to_progress(Sequenced(self.outbox.key, next(self.sequence), message))
