"""Finding a death nobody announced, written once for the Ray driver
(:mod:`raytide.driver.stall_ping`) and the simulator (:mod:`raytide.testing.world`): once the
job has stalled long enough with work pending, ping every actor; an actor that does not answer
within a bound is declared failed and named (as Flink fails a task over when its heartbeat
times out).

A death is usually announced: on Ray a pending call fails the moment the actor's process
dies (the driver's ``Liveness`` watch, a long poll), in the simulator a notice comes some steps
after the crash. Some never are: a process stopped by ``SIGSTOP`` or swapped out, a host on
the far side of a partition Ray has not given up on, a notice the simulator drops. Such an
actor holds the job up without failing anything, and all a driver would see is work that
never completes. The rule::

    moving (or nothing pending) ──────────────────────▶ calm: the stall clock restarts
    no movement for ``stall`` with work pending ──────▶ ping every actor   (:meth:`StallWatch.look`)
    an answer ────────────────────────────────────────▶ that actor is alive (:meth:`StallWatch.answered`)
    ``answer`` after the ping, actors that did not ───▶ declared failed     (:meth:`StallWatch.silent`);
                                                        the next round waits for another stall

An actor that is merely busy answers, as long as its world answers a ping beside the work in
hand (Ray: a host's ``ping`` on a thread of its own). Movement ends a round early: the job
went on, so whoever was slow to answer was not holding it up.

>>> watch = StallWatch(stall=5.0, answer=2.0)
>>> watch.look(now=3.0, moved=False, pending=True)   # stalled 3 s: not yet
False
>>> watch.look(now=6.0, moved=False, pending=True)   # 6 s: ping everyone
True
>>> watch.pinging(6.0, ["a", "b", "c"]); watch.answered("a"); watch.answered("c")
>>> watch.silent(7.0), watch.silent(8.5)
([], ['b'])
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

#: What the rule pings: an actor's key in its world.
Actor = TypeVar("Actor", bound=Hashable)


class StallWatch(Generic[Actor]):
    """The rule above for one job: ``stall`` and ``answer`` in the world's units of time
    (seconds on Ray, scheduler steps in the simulator), watched from ``now``."""

    def __init__(self, stall: float, answer: float, now: float = 0.0) -> None:
        if stall < 0 or answer < 0:
            raise ValueError(f"stall and answer bounds must be 0 or more, not {stall!r} and {answer!r}")
        self.stall, self.answer = stall, answer
        self.since = now  # when the job last moved
        self.pinged_at: float | None = None  # when the round under way pinged (None: no round)
        self.waiting: set[Actor] = set()  # pinged, not answered yet
        self.rounds = 0  # ping rounds started, for the job's statistics and the tests

    def look(self, now: float, moved: bool, pending: bool) -> bool:
        """What the world saw at ``now``: whether the job ``moved`` since its last look, whether
        work is ``pending``. Returns whether to ping every actor now (then call :meth:`pinging`)."""
        if moved or not pending:
            self.since, self.pinged_at = now, None
            self.waiting.clear()
            return False
        return self.pinged_at is None and now - self.since >= self.stall

    def pinging(self, now: float, actors: Iterable[Actor]) -> None:
        """Every actor in ``actors`` was pinged at ``now``."""
        self.pinged_at, self.waiting = now, set(actors)
        self.rounds += 1

    def answered(self, actor: Actor) -> None:
        """``actor`` answered the ping: it is alive."""
        self.waiting.discard(actor)

    def silent(self, now: float) -> list[Actor]:
        """Once ``answer`` has passed since the ping, the actors that did not answer (declared
        failed), in a stable order; the round ends, and the next waits for another stall."""
        if self.pinged_at is None or now - self.pinged_at < self.answer:
            return []
        silent = sorted(self.waiting, key=repr)
        self.since, self.pinged_at = now, None
        self.waiting.clear()
        return silent
