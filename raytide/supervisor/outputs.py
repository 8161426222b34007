"""What a driver shows of a job's outputs, written once for the Ray driver
(:class:`~raytide.driver.outputs.OutputCollector`) and the simulator
(:class:`~raytide.testing.consumer.LocalOutputs`): each completed epoch offered to the
:class:`~raytide.engine.output_gate.OutputGate` (at once, or held until a committed snapshot
holds it), and each epoch it lets pass checked and recorded in the
:class:`~raytide.engine.delivery.Deliveries` book (every epoch at most once, in order, or an
:class:`~raytide.errors.InternalError`) around its world's keeping of it::

    EpochComplete ──offer──▶ gate ──passes──▶ book.expect ──▶ _keep (the world's) ──▶ book.show
    a commit ──────release──▶ gate ─┘                          │ False: not kept (its parts lost):
    the job's end ──finish──▶ gate ─┘                          │ not shown, computed again
    a recovery ───rollback──▶ gate drops what it holds
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from raytide.engine.delivery import Deliveries
from raytide.engine.output_gate import OutputGate
from raytide.snapshots.config import OutputCommit


class ShownOutputs(abc.ABC):
    """The gate and the book of a driver's outputs, and the order in which an epoch passes
    them (see the module docstring); a world says how it keeps an epoch (:meth:`_keep`)."""

    def __init__(self, outputs: list[str], commit: OutputCommit) -> None:
        self.gate = OutputGate(outputs, commit)
        self.book = Deliveries(outputs)

    def offer(self, name: str, epoch: int, parts: list) -> None:
        """Output ``name``'s ``epoch`` completed with ``parts``: shown if the gate lets it pass."""
        for passed, passed_parts in self.gate.offer(name, epoch, parts):
            self._show(name, passed, passed_parts)

    def release(self, complete: Mapping[str, int | None]) -> None:
        """A snapshot holding ``complete`` (per output, its last complete epoch) was committed:
        show the epochs it releases."""
        self._show_all(self.gate.release(complete))

    def finish(self) -> None:
        """The job finished: show everything held."""
        self._show_all(self.gate.finish())

    def rollback(self) -> None:
        """A recovery: forget the completed epochs not shown yet (the restored job computes them again)."""
        self.gate.rollback()

    def resume_after(self, delivered: Mapping[str, int]) -> None:
        """This job continues a run that had handed over, per output, the epochs up to
        ``delivered``: those must not be shown again."""
        self.book.resume_after(delivered)

    def delivered(self) -> dict[str, int]:
        """Per output, the last epoch the driver has been handed (-1: none yet; in a job
        restored from an earlier run's snapshot, what that run had been handed counts)."""
        return self.book.delivered()

    def _show_all(self, released: list[tuple[str, int, Any]]) -> None:
        for name, epoch, parts in released:
            self._show(name, epoch, parts)

    def _show(self, name: str, epoch: int, parts: list) -> None:
        self.book.expect(name, epoch)
        if self._keep(name, epoch, parts):
            self.book.show(name, epoch)

    @abc.abstractmethod
    def _keep(self, name: str, epoch: int, parts: list) -> bool:
        """Keep output ``name``'s ``epoch`` (its record ``parts``) for the user; False if it
        cannot be kept (its parts were lost with their owner: the recovery computes it again)."""
