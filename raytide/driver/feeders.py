"""The driver's threads that feed inputs from driver-side sources: one per input, pushing
what its reader yields (:mod:`raytide.sources.base`), or feeding a stream batch by batch
(:class:`~raytide.driver.streams.StreamFeed`). A feed that fails fails the job (the error
surfaces in ``wait``/``results``); one whose source ends closes its input."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from raytide.driver.event_inputs import EventTimeInputs
from raytide.driver.streams import StreamFeed
from raytide.errors import JobTimeout
from raytide.sources.base import BlockRefs, Reader
from raytide.sources.stream import StreamSource


class Feeders:
    """The feeding threads of one job."""

    def __init__(self, job: Any, inputs: EventTimeInputs, failed: Callable[[str, BaseException], None]) -> None:
        """``job``: the :class:`~raytide.driver.job.Job` (its ``push``, ``push_refs`` and
        ``close`` check that it has not failed); ``failed(input, error)``: a feed failed."""
        self.job, self.inputs, self.failed = job, inputs, failed
        self.threads: list[threading.Thread] = []
        self.streams: dict[str, StreamFeed] = {}

    def driver_source(self, name: str, reader: Reader[Any]) -> None:
        """Push what ``reader`` yields into input ``name``, then close it."""
        self._start(name, lambda: self._read(name, reader))

    def stream(self, name: str, source: StreamSource, snapshot: Callable[[float], int],
               pump: Callable[[float], None]) -> None:
        """Feed stream input ``name`` from ``source`` (see :class:`~raytide.driver.streams.StreamFeed`), with
        event time through its replicas' clocks if it has any (checked first, before the stream starts)."""
        self.inputs.clock_stream(name, source)
        feed = self.streams[name] = StreamFeed(name, source.reader(), self.inputs, snapshot, pump, source.hold_timeout)
        self._start(name, feed.run)

    def stop_streams(self, timeout: float | None) -> None:
        """Stop the streams' producers; with a ``timeout``, wait that long for their feeds to
        end (the batch in hand held first), so that a snapshot taken next is at a batch boundary.

        Raises:
            JobTimeout: a feed did not end in time.
        """
        for feed in self.streams.values():
            feed.stop()
        if timeout is None:
            return
        deadline = time.monotonic() + timeout
        for feed in self.streams.values():
            if not feed.ended.wait(max(0.0, deadline - time.monotonic())):
                raise JobTimeout(f"the feed of stream input {feed.name!r} did not end within {timeout:g} s")

    def describe(self) -> dict[str, str]:
        """Per stream input, what its feed is doing (for a timeout's message)."""
        return {name: feed.describe() for name, feed in self.streams.items()}

    def _start(self, name: str, body: Callable[[], bool]) -> None:
        thread = threading.Thread(target=self._run, args=(name, body), name=f"raytide-feed-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _run(self, name: str, body: Callable[[], bool]) -> None:
        try:
            if body():
                self.job.close(name)
        except BaseException as error:  # surfaced by wait()/results()
            self.failed(name, error)

    def _read(self, name: str, reader: Reader[Any]) -> bool:
        for epoch, batch in reader:
            if isinstance(batch, BlockRefs):
                self.job.push_refs(name, list(batch.refs), epoch)
            else:  # an event-time input's records carry their time: the reader's epochs are only its batches
                self.job.push(name, batch, None if self.inputs.event_time(name) else epoch)
        return True
