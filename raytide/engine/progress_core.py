"""What the progress actor does, as pure logic: messages in, status pushes and job events out.

The core owns the pointstamp tracker (through a :class:`FrontierPublisher`), the
:class:`OutputLog` that decides when an output epoch is complete, and the per-replica
ordering of numbered messages (:class:`InOrder`). Messages that arrive before the
replicas' subscriptions are known (the driver does not wait for the progress actor to
start) are kept and applied, in order, at :meth:`ProgressCore.connect`.

The Ray shell (:mod:`raytide.actors.progress_actor`) and the in-process runtime
(:mod:`raytide.testing.local`) both drive this class, so the protocol is the same in
both; deciding output completion here, where the frontier is known, saves the hops a
sink would need to learn that its epoch is complete and to report it elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from raytide.engine.progress_runs import last_number
from raytide.errors import ProgressError
from raytide.physical.protocol import (
    Declaration,
    EpochComplete,
    Figures,
    JobEvent,
    JobFailed,
    JobFinished,
    OutputFrontier,
    ProgressBatch,
    ProgressMessage,
    ProgressRun,
    ReplicaKey,
    Sequenced,
    StatusPush,
)
from raytide.progress.graph import ProgressGraph
from raytide.progress.inorder import InOrder
from raytide.progress.outputs import OutputLog, earliest_epoch
from raytide.progress.publisher import FrontierPublisher, Update, declaration
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp, Tracker


@dataclass
class ProgressEffects:
    """What the shell must do after a message: push statuses (in this order) and log events."""

    pushes: list[tuple[ReplicaKey, StatusPush]] = field(default_factory=list)
    events: list[JobEvent] = field(default_factory=list)

    def extend(self, other: ProgressEffects) -> None:
        """Append ``other``'s effects after these."""
        self.pushes += other.pushes
        self.events += other.events


def _update(sender: ReplicaKey, message: ProgressMessage) -> Update:
    """What ``message`` of ``sender`` changes in the publisher."""
    if isinstance(message, ProgressBatch):
        return Update(sender, message.changes, message.ack, message.interests)
    if isinstance(message, ProgressRun):
        return Update(sender, message.changes, message.acks, message.interests, message.batches)
    if isinstance(message, Declaration):
        return declaration(sender, message.interests)
    raise TypeError(f"not a progress message: {message!r}")


class ProgressCore:
    """The tracker, the output log and the message ordering of one job."""

    def __init__(self, graph: ProgressGraph, outputs: list[str], initial: list[tuple[Pointstamp, int]],
                 delivered: dict[str, int] | None = None, kept: dict[str, dict[int, list]] | None = None) -> None:
        """Args:
            initial: the pointstamps held before anything runs (the inputs' first epochs,
                or after a recovery what the restored replicas hold).
            delivered: after a recovery, per output the last epoch the driver already has.
            kept: after a recovery, the output parts of each epoch the restored output
                replicas had received (they are not shipped again).
        """
        self.publisher = FrontierPublisher(Tracker(graph))
        self.publisher.initialize(initial)
        self.outputs = OutputLog(outputs, delivered)
        #: Where each output's frontier is read: its completions move only when that place was touched.
        self._output_places = {name: Location.of_input(name, 0) for name in outputs}
        for name, epochs in (kept or {}).items():
            self.outputs.add(name, "the restored snapshot", epochs)
        self.in_order: InOrder[ProgressMessage] = InOrder()
        self.early: list[Sequenced] | None = []
        self.done = False
        #: Per replica, the progress figures its applied batches carried (:meth:`replace`).
        self.figures: dict[ReplicaKey, Figures] = {}
        #: Per replica recovered alone, the number its replacement's messages start at: an
        #: earlier one is its lost incarnation's, arriving late, and is dropped.
        self.fenced: dict[ReplicaKey, int] = {}

    def connect(self, subscriptions: dict[ReplicaKey, list[Location]]) -> ProgressEffects:
        """Learn which locations each replica reads; push their initial statuses, then apply
        what arrived before this call."""
        effects = ProgressEffects()
        for key, locations in subscriptions.items():
            effects.pushes.append((key, StatusPush(*self.publisher.subscribe(key, locations))))
        early, self.early = self.early or [], None
        effects.extend(self._offer(early))
        effects.events += self._completions(list(self._output_places))  # every output: a restored log may be ahead
        return effects

    def join(self, key: ReplicaKey, locations: list[Location]) -> ProgressEffects:
        """Replica ``key`` joins the job (a growing stepped rescale's new replica, owning no key
        group yet): it reads ``locations``, is pushed their statuses now, and its numbered
        messages are counted from its first on, as any replica's. It holds no pointstamp yet,
        so nothing it does not hold can complete meanwhile (docs/rescaling.md)."""
        return ProgressEffects(pushes=[(key, StatusPush(*self.publisher.subscribe(key, locations)))])

    def leave(self, key: ReplicaKey, through: int) -> bool:
        """Replica ``key`` leaves the job (a shrink's retiring switch, the mirror of :meth:`join`),
        once its first ``through`` messages are applied (whether they were: the driver asks again
        if not): it is pushed nothing more. It holds no pointstamp then (it owns no key group,
        and its last message shipped all it held back: ``ReplicaCore.retire``); a replica of its key
        that joins later is counted afresh."""
        if self.in_order.applied(key) < through:
            return False
        self.publisher.unsubscribe(key)
        self.in_order.restart(key, 0)  # a replica of its key joined later numbers its messages from 0
        self.figures.pop(key, None)
        return True

    def hold(self, changes: list[tuple[Pointstamp, int]]) -> ProgressEffects:
        """Pointstamps the driver makes, applied at once: a stepped rescale's holds at its
        vertex's input, made while every input is before their epochs
        (:func:`raytide.engine.stepping.holds`), so no frontier has passed them."""
        pushes = self.publisher.apply_all([Update("driver", changes, 0, None, 0)])
        return ProgressEffects(pushes=[(cast(ReplicaKey, key), StatusPush(*push)) for key, push in pushes.items()])

    def receive(self, call: Sequenced) -> ProgressEffects:
        """A numbered message from a replica; applied once every earlier one of that replica was."""
        return self.receive_all([call])

    def receive_all(self, calls: Sequence[Sequenced]) -> ProgressEffects:
        """Numbered messages (one Ray call's, of one or more replicas), each applied once every
        earlier one of its replica was. Their progress is applied as one update
        (:meth:`FrontierPublisher.apply_all`): one propagation, at most one push per replica."""
        if self.early is not None:
            self.early.extend(calls)
            return ProgressEffects()
        return self._offer(calls)

    def _offer(self, calls: Sequence[Sequenced]) -> ProgressEffects:
        """A batch's output records go to the log at once; the progress of every message now in
        order is applied together after them, and then the outputs whose frontier's place it
        touched release what it completed (:meth:`_completions`). A record that comes after
        its epoch was completed is refused (``OutputLog.add``)."""
        effects, updates = ProgressEffects(), []
        for call in calls:
            if call.sequence < self.fenced.get(call.sender, 0):
                continue  # sent by a replica recovered alone before it died: its replacement accounts for it
            span = last_number(call) - call.sequence + 1
            for message in self.in_order.offer(call.sender, call.sequence, call.message, span):
                if isinstance(message, (ProgressBatch, ProgressRun)) and message.outputs:
                    effects.events += self._add_outputs(call.sender, message.outputs)
                if isinstance(message, (ProgressBatch, ProgressRun)) and message.figures:
                    self.figures.setdefault(call.sender, {}).update(message.figures)
                updates.append(_update(call.sender, message))
        if updates:
            pushes = self.publisher.apply_all(updates)
            effects.pushes += [(cast(ReplicaKey, key), StatusPush(*push)) for key, push in pushes.items()]
            touched = self.publisher.tracker.touched
            effects.events += self._completions([name for name, place in self._output_places.items() if place in touched])
        return effects

    def replace(self, key: ReplicaKey, restored: Figures, first: int, locations: list[Location]) -> ProgressEffects:
        """Replica ``key`` is recovered alone: its replacement restored a snapshot where its
        progress figures were ``restored``, numbers its messages from ``first`` on (higher than
        any of the lost replica's) and reads ``locations``.

        The tracker counts, of ``key``'s numbered traffic, exactly what its applied batches'
        figures say (each batch carries the totals its deltas made); the replacement counts on
        from ``restored``. So the difference is applied now, per figure (a send ``+1`` at the
        receiver's location, a message taken ``-1`` at its own), as if the lost replica had
        shipped exactly what it did up to the snapshot: what it did after is counted again by
        the replacement, which does it again, and what it had not shipped dies with it. Its
        lost incarnation's messages still on their way are dropped (:attr:`fenced`), and it
        gets the statuses of ``locations`` as a new subscriber."""
        applied = self.figures.get(key, {})
        changes: dict[Pointstamp, int] = {}
        for figure in set(applied) | set(restored):
            sent, location, time = figure[:3]
            delta = (restored.get(figure, 0) - applied.get(figure, 0)) * (1 if sent else -1)
            if delta:
                changes[(location, time)] = changes.get((location, time), 0) + delta
        self.figures[key] = dict(restored)
        self.fenced[key] = first
        self.in_order.restart(key, first)
        effects = ProgressEffects(pushes=[(key, StatusPush(*self.publisher.subscribe(key, locations)))])
        update = Update(key, [(pointstamp, delta) for pointstamp, delta in changes.items() if delta], 0, None)
        pushes = self.publisher.apply_all([update])
        effects.pushes += [(cast(ReplicaKey, other), StatusPush(*push)) for other, push in pushes.items()]
        touched = self.publisher.tracker.touched
        effects.events += self._completions([name for name, place in self._output_places.items() if place in touched])
        return effects

    def _add_outputs(self, sender: ReplicaKey, outputs: dict[str, dict[int, list]]) -> list[JobEvent]:
        try:
            for name, epochs in outputs.items():
                self.outputs.add(name, sender, epochs)
        except ProgressError as error:
            return [JobFailed(error)]
        return []

    def _completions(self, names: list[str]) -> list[JobEvent]:
        """The epochs of outputs ``names`` that the frontier has passed (each with records,
        then how far every epoch is complete), and the end once nothing is active."""
        tracker = self.publisher.tracker
        events: list[JobEvent] = []
        for name in names:
            before = self.outputs.complete[name]
            low = earliest_epoch(tracker.frontier(self._output_places[name]))
            events += [EpochComplete(*done) for done in self.outputs.advance(name, low)]
            if low > before:
                events.append(OutputFrontier(name, low))
        if not self.done and self.publisher.is_idle() and self.outputs.finished():
            self.done = True
            events.append(JobFinished())
        return events

    def frontier(self, location: Location) -> list[Timestamp]:
        """The frontier at ``location`` (for probes)."""
        return self.publisher.tracker.frontier(location)

    def describe(self, limit: int = 20) -> dict[str, Any]:
        """What is still pending, for timeout messages: the vertex holding the earliest pending
        work (:meth:`_slowest`), up to ``limit`` active pointstamps, the state of every output,
        and messages held back waiting for an earlier one."""
        active = sorted(self.publisher.tracker.active_pointstamps().items(),
                        key=lambda kv: (kv[0][1].sort_key(), str(kv[0][0])))
        return {"slowest (the earliest pending work)": self._slowest(active),
                "pending work": [f"{count} x {time} at {location}" for (location, time), count in active[:limit]],
                "outputs": self.outputs.describe(),
                "messages waiting for an earlier one": {str(k): v for k, v in self.in_order.waiting().items()}}

    def _slowest(self, active: list[tuple[Pointstamp, int]]) -> str | None:
        """Where the earliest pending work waits: among the locations holding the earliest
        time, one that reaches none of the others (work upstream of it waits on it, through
        backpressure), the one with the most pointstamps if several do."""
        if not active:
            return None
        first = active[0][0][1]
        tied = [(location, count) for (location, time), count in active if time == first]
        graph = self.publisher.tracker.graph
        last = [(location, count) for location, count in tied
                if not any(other != location and graph.summaries(location, other) for other, _ in tied)] or tied
        location, count = max(last, key=lambda pair: pair[1])
        return f"vertex {location.vertex!r} ({count} x {first} at {location})"

    def stats(self) -> dict[str, int]:
        """How many batches were applied and pushes sent."""
        return {"batches_applied": self.publisher.batches_applied, "pushes": self.publisher.pushes}

    def vertex_progress(self) -> dict[str, dict[str, int | None]]:
        """Per vertex with inputs: ``queued``, the messages on their way to it or waiting in
        its replicas (the tracker's counts at its input ports), and ``frontier``, the
        earliest epoch that may still arrive at it (None: none can)."""
        tracker = self.publisher.tracker
        queued: dict[str, int] = {}
        for (location, _), count in tracker.active_pointstamps().items():
            if location.port is not None:
                queued[location.vertex] = queued.get(location.vertex, 0) + count
        progress: dict[str, dict[str, int | None]] = {}
        for name, shape in tracker.graph.vertices.items():
            if shape.inputs:
                epochs = [time.epoch for port in range(shape.inputs) for time in tracker.frontier(Location.of_input(name, port))]
                progress[name] = {"queued": queued.get(name, 0), "frontier": min(epochs, default=None)}
        return progress
