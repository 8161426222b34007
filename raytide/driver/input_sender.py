"""The driver's calls into its input replicas (:class:`InputSender`): per replica a window of
at most ``max_inflight`` calls unanswered, which a call waits on before it is sent
(backpressure from the job to the driver), by Ray call or, on this node, by socket
(:mod:`raytide.driver.input_links`); what the calls are and in which order is
:mod:`raytide.driver.inputs`'s.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import ray

from raytide.driver.connected import ray_calls, ray_get, ray_wait, require_ray
from raytide.driver.input_links import InputLinks
from raytide.errors import JobTimeout

#: How long one wait for a full window lasts before the job's failure is checked again.
WINDOW_POLL = 1.0


class InputSender:
    """The windows of calls in flight to a job's input replicas, and the calls counted.

    ``raise_if_failed`` raises the job's failure between waits; ``recovers``: a job with
    recovery, where a dead replica's call is not an error (a recovery sends it again).
    """

    def __init__(self, max_inflight: int, raise_if_failed: Callable[[], None], recovers: bool, sockets: bool) -> None:
        self.max_inflight, self.raise_if_failed, self.recovers = max_inflight, raise_if_failed, recovers
        self.windows: dict[Any, collections.deque] = collections.defaultdict(collections.deque)
        self.links = InputLinks(sockets)
        self.incarnation = 0
        #: Per input and method, the calls made to its replicas (``job.stats()["input_calls"]``
        #: and ``["input_quiet_moves"]``; under the input's lock).
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def send(self, actor: Any, method: str, args: tuple) -> Any:
        """Call ``method(incarnation, *args)`` on ``actor`` once its window has room; its object
        ref (None: sent by socket, a call whose answer nobody reads). ``args[0]`` is the input's name."""
        window, what = self.windows[actor], f"{method} into input {args[0]!r}"
        with ray_calls(what):  # a feeder thread must not start a new Ray after ray.shutdown() (driver/connected.py)
            return self._send(actor, method, args, window, what)

    def _send(self, actor: Any, method: str, args: tuple, window: collections.deque, what: str) -> Any:
        if self.links.sent(actor, method, (self.incarnation, *args), window, self.max_inflight, self.answered,
                           self.raise_if_failed):
            self.calls[(args[0], method)] += 1
            return None
        if len(window) >= self.max_inflight:  # what answered goes at once: one look per window, not one per call
            self.answered(window, ray_wait(list(window), num_returns=len(window), timeout=0)[0])
        while len(window) >= self.max_inflight:
            self.raise_if_failed()
            require_ray(what)
            self.answered(window, ray_wait([window[0]], timeout=WINDOW_POLL)[0])
        ref = getattr(actor, method).remote(self.incarnation, *args)
        window.append(ref)
        self.calls[(args[0], method)] += 1
        return ref

    def answered(self, window: collections.deque, ready: list) -> None:
        """Forget the calls of ``window`` that are ``ready``, keeping the order of the rest; the
        error of one that failed is raised, but a dead replica's in a job with recovery (a
        recovery will replace the replica and send the logged calls again)."""
        if ready:
            done = set(ready)
            kept = [ref for ref in window if ref not in done]
            window.clear()
            window.extend(kept)
            try:
                ray_get(ready)
            except ray.exceptions.RayActorError:
                if not self.recovers:
                    raise

    def run_out(self, timeout: float) -> None:
        """Wait until every call in flight by Ray has answered (run at its replica, or failed
        with it: a recovery sends it again), checking the job's failure between waits.

        Raises:
            JobTimeout: some were not answered within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        for window in self.windows.values():
            while window:
                self.raise_if_failed()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobTimeout(f"{len(window)} calls into the job's inputs not answered within {timeout:g} s")
                self.answered(window, ray_wait(list(window), num_returns=len(window), timeout=min(WINDOW_POLL, left))[0])

    def reset(self, incarnation: int, old: list[Any]) -> None:
        """A recovery or a rescale to ``incarnation``: the calls in flight to the ``old``
        handles are of the incarnation before, and every socket closes."""
        self.incarnation = incarnation
        self.links.reset()
        for actor in old:
            self.windows.pop(actor, None)
