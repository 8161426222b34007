"""The collector: where sinks report completed epochs and replicas report failures.

An output epoch is complete when every replica of the output has seen its input
frontier pass it. The driver long-polls :meth:`Collector.next_events` for an
append-only log of events: ``("epoch", output, epoch, refs)`` in epoch order per output,
``("error", error)`` and ``("finished",)`` once the whole dataflow has drained and
every output replica has reported its last epoch (the two signals race, so both count). Records
stay in the object store (``refs``, owned by the sink replicas) until the driver asks.

It runs as an async actor: the long poll waits on a condition without blocking reports.
Ray may run an async actor's calls out of order (a call whose argument is still being
fetched lets later ones pass), so each replica numbers its reports and the collector
applies them in that order.
"""

from __future__ import annotations

import asyncio
from typing import Any

NEVER = float("inf")


class Collector:
    """Collects output epochs, failures and the end of the dataflow; the driver polls it."""

    def __init__(self, outputs: dict[str, int]) -> None:
        self.through = {name: [0.0] * replicas for name, replicas in outputs.items()}
        self.complete = {name: 0.0 for name in outputs}
        self.data: dict[str, dict[int, list]] = {name: {} for name in outputs}
        self.events: list[tuple] = []
        self.changed = asyncio.Condition()
        self.drained = False
        self.next_report: dict[tuple[str, int], int] = {}
        self.early: dict[tuple[str, int], dict[int, tuple]] = {}

    async def report(self, output: str, replica: int, sequence: int, epochs: dict[int, list],
                     complete_through: float) -> None:
        """Report number ``sequence`` of replica ``replica`` of ``output``: it finished ``epochs``
        (record lists or refs to them) and every epoch before ``complete_through``."""
        key = (output, replica)
        self.early.setdefault(key, {})[sequence] = (epochs, complete_through)
        while self.next_report.get(key, 0) in self.early[key]:
            number = self.next_report.get(key, 0)
            self.next_report[key] = number + 1
            self._apply(output, replica, *self.early[key].pop(number))
        await self._wake()

    def _apply(self, output: str, replica: int, epochs: dict[int, list], complete_through: float) -> None:
        for epoch, refs in epochs.items():
            self.data[output].setdefault(epoch, []).extend(refs)
        self.through[output][replica] = complete_through
        low = min(self.through[output])
        if low > self.complete[output]:
            ready = sorted(e for e in self.data[output] if e < low)
            for epoch in ready:
                self.events.append(("epoch", output, epoch, self.data[output].pop(epoch)))
            self.complete[output] = low
            self._maybe_finish()

    async def describe(self) -> dict[str, Any]:
        """What the collector is waiting for (for timeout messages)."""
        return {"complete_through": self.through, "next_report": {f"{k}": n for k, n in self.next_report.items()},
                "reports_waiting_for_earlier": {f"{k}": sorted(v) for k, v in self.early.items() if v}}

    async def fail(self, error: Any) -> None:
        """A replica failed; the driver will tear the job down and raise ``error``."""
        self.events.append(("error", error))
        await self._wake()

    async def finished(self) -> None:
        """The progress actor saw the dataflow drain: no pointstamp is active anymore."""
        self.drained = True
        self._maybe_finish()
        await self._wake()

    def _maybe_finish(self) -> None:
        """The job is finished once drained and every output replica reported its last epoch."""
        if self.drained and all(c == NEVER for c in self.complete.values()):
            self.events.append(("finished",))
            self.drained = False

    async def next_events(self, cursor: int, timeout: float) -> tuple[list[tuple], int]:
        """Events after ``cursor``, waiting up to ``timeout`` seconds for one to arrive."""
        if len(self.events) <= cursor:
            async with self.changed:
                try:
                    await asyncio.wait_for(self.changed.wait_for(lambda: len(self.events) > cursor), timeout)
                except asyncio.TimeoutError:
                    pass
        return self.events[cursor:], len(self.events)

    async def _wake(self) -> None:
        async with self.changed:
            self.changed.notify_all()
