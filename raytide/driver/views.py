"""What a job shows of itself besides its statistics: progress in the terminal, its live web
view's entry points, and its pictures in a notebook (:class:`JobViews`, which
:class:`~raytide.driver.job.Job` extends).

``job.wait()`` and ``job.results()`` show a tqdm bar of the epochs completed when the driver's
stderr is a terminal and the job's number of epochs is known; ``progress=False`` turns it off.
The total (:func:`bar_total`) comes from each input: the size of what ``rt.run(inputs=...)``
gave it, where that says how many epochs it has (:func:`epochs_total`: a list of per-epoch
record lists, text files or Parquet files at one epoch per file, Parquet rows over
``rows_per_epoch``: ``Source.epochs_known``), or, for an input the driver feeds (``job.push``
and ``job.advance``, a stream), the epochs pushed so far and the batches a stream has
available (a Spark stream: those whose offsets Spark has logged), a total that grows as they
come. An input read in the replicas from a source of unknown size (an epoch column, event
time) leaves the total unknown, and no bar is shown. The bar is redrawn only when an epoch
completes (tqdm limits it further), its total read at most once a second::

    >>> epochs_total({"a": [[1], [2], [3]], "b": [[4]]}, ["a", "b"])
    3
    >>> epochs_total({"a": [[1]]}, ["a", "b"]) is None, epochs_total({"a": iter([[1]])}, ["a"]) is None
    (True, True)
    >>> epochs_done({"x": 4, "y": 2}), epochs_done({"x": 4, "y": None}), epochs_done({})
    (3, 0, 0)
    >>> bar_total({"a": 3, "b": 5}, driver_fed=[], pushed=0, available=None)  # sizes known
    5
    >>> bar_total({"a": None, "b": 5}, driver_fed=[], pushed=0, available=None) is None  # a source of unknown size
    True
    >>> bar_total({"p": None}, driver_fed=["p"], pushed=7, available=None)  # 7 epochs pushed so far
    7
    >>> bar_total({"s": None}, driver_fed=["s"], pushed=4, available=6)  # a stream with 6 batches planned
    6
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sized
from typing import Any

from raytide.sources.base import Source

logger = logging.getLogger(__name__)

#: Seconds between two readings of a bar's total (a stream's reads Spark's checkpoint).
TOTAL_EVERY_S = 1.0


def input_epochs(given: Any) -> int | None:
    """How many epochs ``given`` (what ``rt.run(inputs=...)`` gave an input) has, if its size says:
    a source's :meth:`~raytide.sources.base.Source.epochs_known`, a sized collection's length."""
    if isinstance(given, Source):
        return given.epochs_known()
    if isinstance(given, Sized) and not isinstance(given, (str, bytes, Mapping)):
        return len(given)
    return None


def epochs_total(inputs: Mapping[str, Any] | None, names: list[str]) -> int | None:
    """How many epochs a job fed ``inputs`` has, if every one of its inputs ``names`` is given
    something whose size says (:func:`input_epochs`; None: unknown)."""
    given = inputs or {}
    if not names or any(name not in given for name in names):
        return None
    counts = [input_epochs(given[name]) for name in names]
    return None if None in counts else max(counts)  # type: ignore[type-var]


def bar_total(counts: Mapping[str, int | None], driver_fed: Collection[str], pushed: int, available: int | None) -> int | None:
    """The progress bar's total: per input, ``counts`` is its number of epochs if known; one that is not
    must be fed by the driver (``driver_fed``: pushed, or a stream), whose epochs count as they are
    ``pushed`` (the epochs opened so far) or made ``available`` by a stream; None: unknown."""
    if any(count is None and name not in driver_fed for name, count in counts.items()):
        return None
    known = [count for count in counts.values() if count is not None]
    return max([*known, pushed, available or 0]) or None


def epochs_done(latest: Mapping[str, int | None]) -> int:
    """Epochs every output has completed (``latest``: each output's latest complete epoch, None: none)."""
    if not latest or None in latest.values():
        return 0
    return min(latest.values()) + 1  # type: ignore[type-var,operator]


class EpochBar:
    """A tqdm bar of completed epochs on stderr, or nothing (not a terminal, total unknown, turned off).

    ``total``: the number of epochs, or a function giving it now (None: not known yet), read at most
    once every :data:`TOTAL_EVERY_S`; the bar appears once it is known."""

    def __init__(self, total: int | None | Callable[[], int | None], name: str, enabled: bool = True) -> None:
        self.bar: Any = None
        self.name, self.read_at = name, 0.0
        self.total_of = (lambda: total) if total is None or isinstance(total, int) else total
        if not (enabled and sys.stderr.isatty()):
            self.total_of = lambda: None  # never shown: the total is never read
        self._refresh()

    def _refresh(self) -> None:
        """Read the total (if a second has passed) and make the bar or move its end."""
        if time.monotonic() - self.read_at < TOTAL_EVERY_S:
            return
        self.read_at = time.monotonic()
        try:
            total = self.total_of()
        except Exception as error:  # a stream's checkpoint that cannot be read now: keep the bar as it is
            logger.debug("the progress bar's total of %r could not be read: %r", self.name, error)
            return
        if total and self.bar is None:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(total=total, desc=self.name, unit="epoch", file=sys.stderr, leave=False, dynamic_ncols=True)
        elif total and total != self.bar.total:
            self.bar.total = total
            self.bar.refresh()

    def show(self, latest: Mapping[str, int | None]) -> None:
        """Move the bar to the epochs completed by now."""
        self._refresh()
        if self.bar is not None and (done := min(epochs_done(latest), self.bar.total)) != self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class JobViews:
    """What a :class:`~raytide.driver.job.Job` shows of itself besides its statistics: its live web
    view (:mod:`raytide.driver.watch`, docs/ui.md), the total of its progress bars, and its graph
    and frontier in a notebook."""

    #: What ``rt.run(inputs=...)`` gave each input: what the progress bars' total is counted from.
    _given_inputs: Mapping[str, Any] = {}
    _input_counts: dict[str, int | None] | None = None  # per input, its epochs if its size says: counted once
    _epochs_total: int | None = None
    _total_counted = False

    @property
    def epochs_total(self) -> int | None:
        """How many epochs the job's inputs have, if the size of what each was given says (as :func:`epochs_total`),
        counted on first use (a Parquet dataset's files are listed then); None: not known."""
        if not self._total_counted:
            counts = self._counts()
            self._epochs_total = None if not counts or None in counts.values() else max(counts.values())  # type: ignore[type-var]
            self._total_counted = True
        return self._epochs_total

    @epochs_total.setter
    def epochs_total(self, value: int | None) -> None:
        self._epochs_total, self._total_counted = value, True

    def progress_total(self) -> int | None:
        """The total of the progress bars now (:func:`bar_total`): the inputs' epochs if their sizes say,
        else the epochs the driver has pushed and the batches its streams have available."""
        total = self.epochs_total
        if total is not None:
            return total
        job: Any = self
        driver_fed = [name for name in job.plan.inputs if name not in job._inputs.readers]
        return bar_total(self._counts(), driver_fed, job._outputs.most_opened + 1, _stream_batches(job))

    def _counts(self) -> dict[str, int | None]:
        if self._input_counts is None:
            self._input_counts = _counted(self)
        return self._input_counts

    def ui(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> str:
        """Start the job's live web view if it is not running and return its URL: on ``host`` (another
        than loopback: every request needs ``token``, random unless given, which the URL carries) and
        ``port`` (0: a free one; one server per host serves every job of this process)."""
        from raytide.driver.watch import serve

        return serve(self, host, port, token)

    def ui_snapshot(self, path: str) -> str:
        """Save the job's graph, with its latest figures, at ``path``: SVG if it ends in ``.svg``, PNG (drawn by
        matplotlib, which must be installed) if in ``.png``; returns the path."""
        from raytide.driver.watch import save_graph

        return save_graph(self, path)

    def _repr_svg_(self) -> str:
        """The job's graph with its latest figures, as SVG: how a notebook shows a job (a cell ending in ``job``)."""
        from raytide.driver.watch import graph_now
        from raytide.ui.svg import render

        return render(*graph_now(self))

    def plot_frontier(self, ax: Any = None) -> Any:
        """Plot each output's frontier (its epochs completed) over the seconds since the job started, as the
        driver saw them complete (the latest 10,000 per output), with matplotlib: on ``ax`` if given, else
        on a new figure; returns the figure (a notebook shows it inline)."""
        from raytide.ui.figures import frontier_figure

        job: Any = self
        series = {name: list(points) for name, points in job._outputs.completions.items()}
        return frontier_figure(series, f"frontier of job {job.name!r}", ax)


def _counted(job: Any) -> dict[str, int | None]:
    """Per input of ``job``, its epochs if what ``rt.run`` gave it says (:func:`input_epochs`); None if it
    was given nothing, or its source cannot say now (a dataset that cannot be listed: the job reads it, or
    says why)."""
    counts: dict[str, int | None] = {}
    for name in job.plan.inputs:
        try:
            counts[name] = input_epochs(job._given_inputs[name]) if name in job._given_inputs else None
        except Exception as error:
            logger.debug("job %r: the epochs of input %r could not be counted: %r", job.name, name, error)
            counts[name] = None
    return counts


def _stream_batches(job: Any) -> int | None:
    """The most batches one of ``job``'s streams (those whose batches are its epochs) has available; None if
    none says (or cannot now: a checkpoint on a store that does not answer)."""
    available = []
    for name, feed in list(job._feeders.streams.items()):
        try:
            available.append(None if job._inputs.event_time(name) else feed.reader.available())
        except Exception as error:
            logger.debug("job %r: stream %r's available batches could not be read: %r", job.name, name, error)
    return max(filter(None, available), default=None)
