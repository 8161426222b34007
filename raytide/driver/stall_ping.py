"""The supervisor's stall rule on Ray (:mod:`raytide.supervisor.stalls`): a job with recovery
that has not moved for ``Recovery.stall_timeout`` seconds with work pending pings every actor it
watches; one that does not answer within ``Recovery.ping_timeout`` is declared failed, killed
(``ray.kill``) and recovered from, named as the supervisor's ping found it.

It finds what Ray never reports: a host whose process was stopped (``SIGSTOP``), or is cut off
while Ray still counts it alive. A busy replica answers (a vertex host's ``answer`` runs on its
``inspect`` thread, beside the event in hand; its ``ping`` waits behind the event, which is how
``JobTimeout`` names the busy replicas). Nothing here waits: the pings are sent at one
pump and looked at, without waiting, at the next ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from typing import Any

import ray

from raytide.driver.outputs import Liveness
from raytide.supervisor.stalls import StallWatch

logger = logging.getLogger(__name__)


class StallPing:
    """The stall rule of one job, run by its :class:`~raytide.driver.supervisor.JobSupervisor`
    at each pump (see the module docstring)."""

    def __init__(self, stall: float, answer: float) -> None:
        self.watch: StallWatch[Hashable] = StallWatch(stall, answer, time.monotonic())
        self.pings: dict[Hashable, Any] = {}  # the round under way: per actor, its ping not looked at yet
        self.seen = 0  # the job events taken in by the last look

    def moved(self) -> None:
        """The job moved without an event (a recovery or a rescale just ran): the stall clock restarts."""
        self.watch.look(time.monotonic(), moved=True, pending=True)
        self.pings = {}

    def check(self, liveness: Liveness, events: int, pending: bool) -> list[tuple[Hashable, str]]:
        """One look: ``events`` taken in so far (more than last time: the job moved), work
        ``pending`` (the job has not finished). Pings every actor ``liveness`` watches once the
        job has stalled; returns those that did not answer in time, each killed, with why."""
        now = time.monotonic()
        moved, self.seen = events != self.seen, events
        if self.watch.look(now, moved, pending):
            self.pings = {key: actor.answer.remote() for key, actor in liveness.actors.items()}
            self.watch.pinging(now, self.pings)
            logger.info("the job has not moved for %.1f s: pinging its %d actors", now - self.watch.since, len(self.pings))
        if self.watch.pinged_at is None:
            self.pings = {}
        elif self.pings:
            ready, _ = ray.wait(list(self.pings.values()), num_returns=len(self.pings), timeout=0)
            for key in [key for key, ref in self.pings.items() if ref in ready]:
                self.watch.answered(key)  # alive, or dead and failing: the liveness watch reports that
                del self.pings[key]
        silent = self.watch.silent(now)
        for key in silent:
            ray.kill(liveness.actors[key].handle)
            liveness.declared.add(key)
            liveness.watches.pop(key, None)  # its death is reported here, not again by the watch
        why = (f"it did not answer the supervisor's ping within {self.watch.answer:g} s, after the job had not moved "
               f"for {self.watch.stall:g} s (stopped or cut off); it was killed")
        return [(key, why) for key in silent]
