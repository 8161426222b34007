"""What a job shows of itself besides its statistics: progress in the terminal, and its live web
view's entry points (:class:`JobViews`, which :class:`~raytide.driver.job.Job` extends).

``job.wait()`` and ``job.results()`` show a tqdm bar of the epochs completed when the driver's
stderr is a terminal and the job's number of epochs is known (its inputs all given to
``rt.run(inputs=...)`` as lists of per-epoch records, say); ``progress=False`` turns it off.
The bar is redrawn only when an epoch completes (tqdm limits it further)::

    >>> epochs_total({"a": [[1], [2], [3]], "b": [[4]]}, ["a", "b"])
    3
    >>> epochs_total({"a": [[1]]}, ["a", "b"]) is None, epochs_total({"a": iter([[1]])}, ["a"]) is None
    (True, True)
    >>> epochs_done({"x": 4, "y": 2}), epochs_done({"x": 4, "y": None}), epochs_done({})
    (3, 0, 0)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sized
from typing import Any

from raytide.sources.base import Source


def epochs_total(inputs: Mapping[str, Any] | None, names: list[str]) -> int | None:
    """How many epochs a job fed ``inputs`` has, if every one of its inputs ``names`` is a sized
    collection of per-epoch record lists given up front (None: unknown)."""
    given = inputs or {}
    if not names or any(name not in given or isinstance(given[name], Source) or not isinstance(given[name], Sized)
                        for name in names):
        return None
    return max(len(given[name]) for name in names)


def epochs_done(latest: Mapping[str, int | None]) -> int:
    """Epochs every output has completed (``latest``: each output's latest complete epoch, None: none)."""
    if not latest or None in latest.values():
        return 0
    return min(latest.values()) + 1  # type: ignore[type-var,operator]


class EpochBar:
    """A tqdm bar of completed epochs on stderr, or nothing (not a terminal, total unknown, turned off)."""

    def __init__(self, total: int | None, name: str, enabled: bool = True) -> None:
        self.bar: Any = None
        if enabled and total and sys.stderr.isatty():
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(total=total, desc=name, unit="epoch", file=sys.stderr, leave=False, dynamic_ncols=True)

    def show(self, latest: Mapping[str, int | None]) -> None:
        """Move the bar to the epochs completed by now."""
        if self.bar is not None and (done := min(epochs_done(latest), self.bar.total)) != self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class JobViews:
    """What a :class:`~raytide.driver.job.Job` shows of itself besides its statistics: its live web
    view (:mod:`raytide.driver.watch`, docs/ui.md) and the total of its progress bars."""

    #: How many epochs the job's inputs have, if known (``rt.run``'s ``inputs`` all lists): the progress bars' total.
    epochs_total: int | None = None

    def ui(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> str:
        """Start the job's live web view if it is not running and return its URL: on ``host`` (another
        than loopback: every request needs ``token``, random unless given, which the URL carries) and
        ``port`` (0: a free one; one server per host serves every job of this process)."""
        from raytide.driver.watch import serve

        return serve(self, host, port, token)

    def ui_snapshot(self, path: str) -> str:
        """Save the job's graph, with its latest figures, as SVG at ``path``; returns the path."""
        from raytide.driver.watch import save_graph

        return save_graph(self, path)
