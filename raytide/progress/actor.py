"""The progress actor: a thin Ray shell around :class:`FrontierPublisher` and :class:`OutputLog`.

Message flow (the actor never waits for anyone; every call it makes is fire and forget):

* ``replica -> apply(batch, output records, interests)`` and ``replica -> declare(interests)``,
  numbered per replica and applied in that order (:class:`InOrder`);
* ``progress actor -> replica.on_progress(statuses)``: the pushes the publisher decides;
* ``replica -> fail(error)``;
* ``driver -> next_events(cursor)``: a long poll for an append-only log of events,
  ``("epoch", output, epoch, parts)`` in epoch order per output as the frontier at the
  output passes each epoch, ``("error", error)`` and ``("finished",)`` once no
  pointstamp is active.

Every call but the long poll runs on one thread, in turn; the long poll runs in a
concurrency group of its own, so that it waits without blocking progress, and shares
only the event log with the rest, under a lock. (A threaded actor answers calls as fast
as a plain one; an asyncio actor took half as long again per call.) Deciding output
completion here, where the frontier is known, saves the hops a sink would
need to learn that its epoch is complete and to report it somewhere else.
"""

from __future__ import annotations

import threading
from typing import Any, Hashable, Optional

import ray

from raytide.errors import ProgressError
from raytide.progress.graph import ProgressGraph
from raytide.progress.inorder import InOrder
from raytide.progress.outputs import NEVER, OutputLog
from raytide.progress.publisher import FrontierPublisher, Interests, Push
from raytide.progress.reachability import Location
from raytide.progress.tracker import Pointstamp, Tracker


class ProgressActor:
    """Owns the tracker; applies progress batches, pushes frontier changes, completes output epochs."""

    def __init__(self, graph: ProgressGraph, outputs: list[str], initial: list[tuple[Pointstamp, int]]) -> None:
        """``initial``: the pointstamps held before anything runs (the inputs' first epochs)."""
        self.publisher = FrontierPublisher(Tracker(graph))
        self.publisher.initialize(initial)
        self.outputs = OutputLog(outputs)
        self.in_order: InOrder[tuple[str, tuple]] = InOrder()
        self.handles: dict[Hashable, Any] = {}
        self.early: Optional[list[tuple[Hashable, int, str, tuple]]] = []  # calls that came before connect
        self.events: list[tuple] = []
        self.changed = threading.Condition()
        self.done = False

    def connect(self, replicas: dict[Hashable, tuple[Any, list[Location]]]) -> None:
        """Learn every replica's handle and locations, push their initial statuses, then apply
        what replicas sent before this call (the driver does not wait for this actor to start)."""
        for key, (handle, locations) in replicas.items():
            self.handles[key] = handle
            statuses, acked = self.publisher.subscribe(key, locations)
            handle.on_progress.remote(statuses, acked)
        early, self.early = self.early, None
        for call in early or ():
            self._offer(*call)
        self._after()

    def apply(self, sender: Hashable, sequence: int, changes: list[tuple[Pointstamp, int]], ack: bool,
              outputs: dict[str, dict[int, list]], interests: Optional[Interests] = None) -> None:
        """Batch number ``sequence`` of replica ``sender``: its deltas, the output records they
        retire and, if they changed, the timestamps it now waits on."""
        self._offer(sender, sequence, "apply", (changes, ack, outputs, interests))
        self._after()

    def declare(self, sender: Hashable, sequence: int, interests: Interests) -> None:
        """Replica ``sender`` now waits on ``interests``; push it what already answers them."""
        self._offer(sender, sequence, "declare", (interests,))
        self._after()

    def _offer(self, sender: Hashable, sequence: int, kind: str, args: tuple) -> None:
        if self.early is not None:  # not connected yet: no subscriptions to push to
            self.early.append((sender, sequence, kind, args))
            return
        for due_kind, due_args in self.in_order.offer(sender, sequence, (kind, args)):
            if due_kind == "apply":
                changes, ack, outputs, interests = due_args
                try:
                    for name, epochs in outputs.items():
                        self.outputs.add(name, sender, epochs)
                except ProgressError as error:
                    self._log(("error", error))
                self._push(self.publisher.apply(sender, changes, ack, interests))
            else:
                self._push(self.publisher.declare(sender, *due_args))

    def _push(self, pushes: dict[Hashable, Push]) -> None:
        for key, (statuses, acked) in pushes.items():
            self.handles[key].on_progress.remote(statuses, acked)

    def fail(self, error: Any) -> None:
        """A replica failed; the driver will tear the job down and raise ``error``."""
        self._log(("error", error))

    def _after(self) -> None:
        """Release the output epochs the frontier has passed; note the end; wake the driver."""
        tracker = self.publisher.tracker
        events = []
        for name in self.outputs.complete:
            low = min((f.epoch for f in tracker.frontier(Location.of_input(name, 0))), default=NEVER)
            events += [("epoch", *done) for done in self.outputs.advance(name, low)]
        if not self.done and self.publisher.is_idle() and self.outputs.finished():
            self.done = True
            events.append(("finished",))
        self._log(*events)

    def _log(self, *events: tuple) -> None:
        if events:
            with self.changed:
                self.events += events
                self.changed.notify_all()

    @ray.method(concurrency_group="poll")
    def next_events(self, cursor: int, timeout: float) -> tuple[list[tuple], int]:
        """Events after ``cursor``, waiting up to ``timeout`` seconds for one to arrive."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.events) > cursor, timeout)
            return self.events[cursor:], len(self.events)

    def frontier(self, location: Location) -> list:
        """The frontier at ``location`` (for probes)."""
        return self.publisher.tracker.frontier(location)

    def describe(self, limit: int = 20) -> dict[str, Any]:
        """What is still pending, for timeout messages: up to ``limit`` active pointstamps,
        the state of every output, and batches held back waiting for an earlier one."""
        active = sorted(self.publisher.tracker.active_pointstamps().items(), key=lambda kv: (kv[0][1], str(kv[0][0])))
        return {"pending work": [f"{count} x {time} at {location}" for (location, time), count in active[:limit]],
                "outputs": self.outputs.describe(),
                "batches waiting for an earlier one": {str(k): v for k, v in self.in_order.waiting().items()}}

    def ping(self) -> bool:
        """Liveness check for the driver."""
        return True

    def stats(self) -> dict[str, int]:
        """How many batches were applied and pushes sent."""
        return {"batches_applied": self.publisher.batches_applied, "pushes": self.publisher.pushes}
