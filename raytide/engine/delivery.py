"""What a driver has handed over of each output, and what of it counts as delivered.

The driver shows each output's completed epochs once, in order (after its
:class:`~raytide.engine.output_gate.OutputGate` lets them pass). An epoch shown at or
before the last one shown, or before what an earlier run this one continues had handed
over, is a broken exactly-once promise: :meth:`Deliveries.expect` raises it as an
:class:`~raytide.errors.InternalError`, never overwrites in silence.

What counts as *delivered* is what a new driver, restored from a snapshot of this run
(``restore=``), must not hand out again (:meth:`Deliveries.durable`). For an output read
by a consumer (``job.results``), an epoch is delivered once the consumer has it: it asked
for the next one. So a driver that dies with epochs shown and not handed out yet, or with
one in its consumer's hands, loses none of them: the restored job hands them out again,
and only the one in hand can be seen twice (as an at-least-once consumer expects). An
output only collected counts every epoch shown.

:class:`Deliveries` is that book as pure logic, kept by the Ray driver's
:class:`~raytide.driver.outputs.OutputCollector` and by the in-process runtime (whose
simulated consumer and driver crashes run this very code).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raytide.errors import InternalError


class Deliveries:
    """Per output: the last epoch shown, what an earlier run had handed over, and the epochs
    a consumer has in hand (handed, not yet acknowledged)."""

    def __init__(self, outputs: list[str]) -> None:
        self.shown: dict[str, int | None] = dict.fromkeys(outputs)  # the last epoch shown by this run
        self.handed_before: dict[str, int] = dict.fromkeys(outputs, -1)  # by a run this one continues
        self.in_hand: dict[str, set[int]] = {name: set() for name in outputs}
        self.streamed: set[str] = set()  # outputs read by a consumer (job.results)

    def resume_after(self, delivered: Mapping[str, int]) -> None:
        """This run continues one that had handed over, per output, the epochs up to
        ``delivered``: those must not be shown again."""
        for name, epoch in delivered.items():
            if name in self.handed_before:
                self.handed_before[name] = max(self.handed_before[name], epoch)

    def last(self, name: str) -> int:
        """The last epoch of output ``name`` shown by this run or handed over before it (-1: none)."""
        shown = self.shown[name]
        return max(self.handed_before[name], -1 if shown is None else shown)

    def expect(self, name: str, epoch: int) -> None:
        """Output ``name``'s ``epoch`` is about to be shown.

        Raises:
            InternalError: it is not after the last one shown or handed over: it would be
                delivered twice, or out of order.
        """
        last = self.last(name)
        if epoch <= last:
            raise InternalError(f"output {name!r} epoch {epoch} was completed again after epoch {last} had been "
                                f"handed over: it would be delivered twice (or out of order); the job is failed "
                                f"rather than give output that may be wrong")

    def show(self, name: str, epoch: int) -> None:
        """Output ``name``'s ``epoch`` is shown (after :meth:`expect` allowed it)."""
        self.shown[name] = epoch

    def hand(self, name: str, epoch: int) -> None:
        """A consumer of output ``name`` has been handed ``epoch``; it is delivered once acknowledged."""
        self.in_hand[name].add(epoch)

    def acknowledge(self, name: str, epoch: int) -> None:
        """The consumer of output ``name`` has ``epoch`` (it asked for the next one)."""
        self.in_hand[name].discard(epoch)

    def delivered(self) -> dict[str, int]:
        """Per output, the last epoch the driver has been shown (-1: none yet; in a run that
        continues an earlier one, what that run had handed over counts)."""
        return {name: self.last(name) for name in self.shown}

    def durable(self, first_pending: Callable[[str], int | None]) -> dict[str, int]:
        """Per output, the last epoch that counts as delivered (-1: none): what a new driver
        restored from a snapshot of this run does not hand out again.

        ``first_pending(name)``: the earliest shown epoch of output ``name`` not handed out
        yet (None: none). For an output read by a consumer, the epochs before the first one
        pending or in hand count; for an output only collected, every epoch shown does (a
        batch job keeps nothing twice for its snapshots).
        """
        marks = self.delivered()
        for name in self.streamed:
            pending = [*self.in_hand[name]]
            first = first_pending(name)
            if first is not None:
                pending.append(first)
            if pending:
                marks[name] = max(self.handed_before[name], min(pending) - 1)
        return marks
