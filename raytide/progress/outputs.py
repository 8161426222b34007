"""Which output epochs are complete, decided by the frontier at each output.

Sink replicas ship their records with the progress batch that retires the messages
which delivered them, so once the tracker's frontier at an output's input has passed an
epoch, every record of that epoch has arrived: the epoch is complete. The log keeps
the record parts (inline blobs or object refs) per output and epoch until then.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from raytide.errors import ProgressError
from raytide.progress.timestamps import Timestamp

NEVER = float("inf")


def earliest_epoch(frontier: Iterable[Timestamp]) -> float:
    """The earliest epoch that may still reach an output whose frontier is ``frontier``
    (:data:`NEVER` once none can): the epochs before it are complete."""
    return min((time.epoch for time in frontier), default=NEVER)

#: ``(output, epoch, parts)``: an output epoch that is complete, with its record parts.
CompleteEpoch = tuple[str, int, list]


class OutputLog:
    """Record parts per output and epoch, released in epoch order as the frontier passes."""

    def __init__(self, outputs: list[str], delivered: dict[str, int] | None = None) -> None:
        """``delivered``: per output, the last epoch an earlier incarnation of the job handed
        to the driver (after a recovery): records of those epochs are dropped, not released
        again."""
        self.parts: dict[str, dict[int, list]] = {name: {} for name in outputs}
        self.delivered = {name: (delivered or {}).get(name, -1) for name in outputs}
        #: Per output, every epoch before this one is complete (those delivered were).
        self.complete: dict[str, float] = {name: self.delivered[name] + 1 for name in outputs}

    def add(self, output: str, sender: Hashable, epochs: dict[int, list[Any]]) -> None:
        """Record parts of ``output`` from replica ``sender``, per epoch.

        Raises:
            ProgressError: an epoch that was already complete got more records (a broken
                progress protocol: the frontier passed records still in flight).
        """
        for epoch, parts in epochs.items():
            if epoch <= self.delivered[output]:
                continue  # replayed after a recovery: the driver has this epoch already
            if epoch < self.complete[output]:
                raise ProgressError(f"output {output!r} replica {sender} sent records of epoch {epoch} after every "
                                    f"epoch before {self.complete[output]} was complete")
            self.parts[output].setdefault(epoch, []).extend(parts)

    def advance(self, output: str, low: float) -> list[CompleteEpoch]:
        """No record before epoch ``low`` can still reach ``output``: release those epochs."""
        if low <= self.complete[output]:
            return []
        held = self.parts[output]
        done = [(output, epoch, held.pop(epoch)) for epoch in sorted(e for e in held if e < low)]
        self.complete[output] = low
        return done

    def finished(self) -> bool:
        """Every epoch of every output has been released."""
        return all(low == NEVER for low in self.complete.values())

    def describe(self) -> dict[str, Any]:
        """Per output, the first epoch not complete yet and the epochs holding records."""
        return {name: {"complete_before": self.complete[name], "epochs_with_records": sorted(self.parts[name])}
                for name in self.complete}
