"""When a completed output epoch may be shown to the user: at once, or once a snapshot has it.

With ``rt.Recovery(output_commit="epoch")`` (the default) an epoch is handed out when it
completes. That is exactly-once only for a dataflow that computes an epoch the same way
every time: after a recovery the epochs completed since the snapshot are computed again,
and those the driver already has are dropped, so a dataflow whose output depends on
arrival order (or the clock, or a random draw) could show output that the restored
state no longer agrees with.

With ``output_commit="snapshot"`` a completed epoch is held until a committed snapshot
holds it complete (:func:`~raytide.snapshots.recovery.complete_at_cut`): a recovery
restores at least that snapshot, so the epoch is never computed again, and what was held
but not yet committed is dropped and computed again by the restored job. The cost is
latency: an epoch waits for the next snapshot to commit. When the job finishes, nothing
can roll back any more and everything held is released.

:class:`OutputGate` is that rule as pure logic, used by the driver of a Ray job
(:class:`~raytide.driver.outputs.OutputCollector`) and by the in-process runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytide.snapshots.config import OutputCommit


class OutputGate:
    """Holds each output's completed epochs until they may be released.

    Epochs of an output complete in order, so what is held is always the epochs after the
    output's watermark (the last epoch a committed snapshot holds complete), in order.
    """

    def __init__(self, outputs: list[str], commit: OutputCommit = "epoch") -> None:
        self.holds = commit == "snapshot"
        #: Per output: epochs up to this one may pass (None: all; -1: none yet).
        self.watermark: dict[str, int | None] = {name: -1 if self.holds else None for name in outputs}
        self.held: dict[str, dict[int, Any]] = {name: {} for name in outputs}

    def offer(self, name: str, epoch: int, payload: Any) -> list[tuple[int, Any]]:
        """Output ``name``'s ``epoch`` completed with ``payload``: what may pass now (it, or nothing)."""
        if self._passes(name, epoch):
            return [(epoch, payload)]
        self.held[name][epoch] = payload
        return []

    def release(self, complete: Mapping[str, int | None]) -> list[tuple[str, int, Any]]:
        """A snapshot holding ``complete`` (per output, its last complete epoch) was committed:
        raise the watermarks and return the held epochs they now let pass, in order."""
        released: list[tuple[str, int, Any]] = []
        for name, epoch in complete.items():
            if name not in self.watermark:
                continue
            current = self.watermark[name]
            if current is not None and (epoch is None or epoch > current):
                self.watermark[name] = epoch
            held = self.held[name]
            for ready in sorted(e for e in held if self._passes(name, e)):
                released.append((name, ready, held.pop(ready)))
        return released

    def finish(self) -> list[tuple[str, int, Any]]:
        """The job finished (no recovery can come any more): release everything held."""
        return self.release(dict.fromkeys(self.watermark))

    def rollback(self) -> None:
        """A recovery: drop what is held; the restored job computes those epochs again."""
        for held in self.held.values():
            held.clear()

    def _passes(self, name: str, epoch: int) -> bool:
        watermark = self.watermark[name]
        return watermark is None or epoch <= watermark
