"""The gate a stepped rescale's plan closes on the driver's inputs (issue 74;
docs/rescaling.md, "Stepped migration", "On Ray").

A plan's first step is at epoch ``first``; every replica must have the plan before any input
reaches ``first`` (an input at ``first`` may send records of it by the old table). The driver
used to hold every input's lock while it installed the plan (35-53 ms, the whole job's inputs
stopped). Instead it closes this gate at an epoch a margin ahead of the inputs
(:meth:`PlanGate.close_ahead`), installs the plan while the inputs go on pushing and
advancing below it, and opens the gate once every replica has the plan (:meth:`PlanGate.open`).
Only an input that reaches ``first`` meanwhile waits, for the rest of the install; the wait is
measured (the record's ``inputs held at the plan's first epoch``). Every move of an input's
epoch (an advance, a push at a later epoch, a close) goes through :meth:`PlanGate.move` under
that input's lock, so a move either was counted when the gate chose ``first`` or sees the gate.

The margin is a time (:data:`AHEAD_S`) turned into epochs at the rate the inputs have been
moving (:meth:`PlanGate.margin`), so that an install of about that time holds no input.

A shrink called from the thread that feeds the job cannot wait for an epoch after the inputs'
(that thread is in ``job.rescale``). Its one step may be cut at the inputs' own epoch instead,
if no record of it has been pushed (:meth:`PlanGate.close_at_frontier`): every push passes
:meth:`PlanGate.feed` under its input's lock, which records it and, while the gate is closed at
its epoch, waits; a replica's own check refuses a plan at an epoch its input took records at.
Once a record of it has been pushed, the step goes after it and the shrink returns before its
retirement, which the job's pumps make (:mod:`raytide.driver.stepped`).
"""

from __future__ import annotations

import collections
import math
import threading
import time

from raytide.errors import RescaleError

__all__ = ["AHEAD_S", "PlanGate"]

#: How far ahead of the inputs (in seconds at their recent rate) a plan's first epoch is put:
#: an install on a loaded machine takes 20-60 ms (two Ray calls' round trips, in parallel).
AHEAD_S = 0.15
#: The fewest and the most epochs the first epoch is put ahead (the epoch after the latest at least).
MARGINS = (1, 64)
#: How many recent moves the rate is taken from.
RECENT = 16


class PlanGate:
    """Each input's latest epoch let through, and (while a plan is installed) the epoch no input
    may reach until it is open again."""

    def __init__(self, job: str) -> None:
        self.job = job
        self._cond = threading.Condition()
        self._at: dict[str, float] = {}  # each input's latest epoch let through (inf: closed)
        self._moves: collections.deque[float] = collections.deque(maxlen=RECENT)  # when epochs moved
        self._limit: int | None = None
        self._deadline = 0.0
        self._held_since = math.inf  # when the first move waited at the gate closed now
        self._last: tuple[float, int | None] = (-math.inf, None)  # when an input's epoch moved last, and by which thread
        self._fed: dict[str, float] = {}  # each input's latest epoch records were pushed at

    def move(self, name: str, epoch: int | None) -> None:
        """Input ``name`` moves to ``epoch`` (None: closes), under its lock: waits while the gate
        is closed at or before it.

        Raises:
            RescaleError: the gate was not opened by the deadline of the rescale that closed it.
        """
        to = math.inf if epoch is None else epoch
        with self._cond:
            self._wait_below(name, to, "move to epoch")
            self._at[name] = max(self._at.get(name, -math.inf), to)
            self._moves.append(time.monotonic())
            self._last = (self._moves[-1], threading.get_ident())

    def feed(self, name: str, epoch: int) -> None:
        """Input ``name`` takes records at ``epoch``, under its lock: waits while the gate is closed
        at or before it (a plan cut at the inputs' own epoch is being installed: :meth:`close_at_frontier`).

        Raises:
            RescaleError: the gate was not opened by the deadline of the rescale that closed it.
        """
        with self._cond:
            self._wait_below(name, epoch, "push records at")
            self._fed[name] = max(self._fed.get(name, -math.inf), epoch)

    def frontier(self, epochs: dict[str, int | None]) -> int | None:
        """The latest epoch the inputs (``epochs``, the driver's) are at, if no record of it has been pushed
        yet: a plan's first step may be there (nothing of that epoch went out by the old table, and no
        input needs to move for the step to be made). None if an input took records at it, or is closed,
        or is at an epoch this gate did not let it move to (a restored one: what was pushed at it before
        is not known here)."""
        with self._cond:
            if not epochs or any(self._at.get(name) != epoch for name, epoch in epochs.items()):
                return None
            frontier = max(self._at[name] for name in epochs)
            unfed = max((self._fed.get(name, -math.inf) for name in epochs), default=-math.inf) < frontier
            return int(frontier) if frontier != math.inf and unfed else None

    def close_at_frontier(self, epochs: dict[str, int | None], deadline: float) -> int | None:
        """Close the gate at :meth:`frontier` and return it (None: the gate is left open). Pushes at
        it and moves past it wait until :meth:`open`, or ``deadline`` (``time.monotonic()``)."""
        with self._cond:
            first = self.frontier(epochs)
            if first is not None:
                self._limit, self._deadline, self._held_since = first, deadline, math.inf
            return first

    def last_move(self) -> tuple[float, int | None]:
        """When (``time.monotonic()``) an input's epoch moved last, and the thread that moved it (None: none has)."""
        with self._cond:
            return self._last

    def _wait_below(self, name: str, to: float, what: str) -> None:
        """Wait, the condition held, while the gate is closed at or before ``to`` (input ``name``'s ``what`` it).

        Raises:
            RescaleError: the gate was not opened by the deadline of the rescale that closed it.
        """
        if self._limit is not None and to >= self._limit:
            started, limit = time.monotonic(), self._limit
            self._held_since = min(self._held_since, started)
            if not self._cond.wait_for(lambda: self._limit is None or to < self._limit, max(0.0, self._deadline - started)):
                raise RescaleError(f"job {self.job!r}: input {name!r} waited {time.monotonic() - started:.1f} s to {what} "
                                   f"{None if to == math.inf else int(to)} for a stepped rescale's plan (first step at "
                                   f"epoch {limit}) to reach every replica, past the rescale's deadline")

    def margin(self) -> int:
        """How many epochs past the latest an input is at the first step goes: :data:`AHEAD_S` at
        the rate of the recent moves (counted over every input), within :data:`MARGINS`."""
        ahead = self.epochs_within(AHEAD_S)
        return MARGINS[0] + 1 if ahead is None else max(MARGINS[0], min(MARGINS[1], 1 + ahead))

    def epochs_within(self, seconds: float) -> int | None:
        """How many epochs the inputs pass in ``seconds`` at the rate of their recent moves
        (rounded up); None while too few moves were seen to tell."""
        with self._cond:
            moves = list(self._moves)
        if len(moves) < 2 or moves[-1] <= moves[0]:
            return None
        return math.ceil(seconds * (len(moves) - 1) / (moves[-1] - moves[0]))

    def close_ahead(self, epochs: dict[str, int | None], margin: int, deadline: float) -> int:
        """Close the gate ``margin`` epochs after the latest epoch any input is at (``epochs``, the
        driver's) or was let through to; returns that epoch, the plan's first. Moves to it or past
        it wait until :meth:`open`, or ``deadline`` (``time.monotonic()``).

        Raises:
            RescaleError: an input is closed (the steps' epochs would never come), or ``margin`` < 1.
        """
        if margin < 1:
            raise RescaleError(f"job {self.job!r}: a stepped rescale's first epoch must be after every input's, got a margin of {margin}")
        with self._cond:
            at = dict(self._at)
            for name, epoch in epochs.items():
                at[name] = max(at.get(name, -math.inf), math.inf if epoch is None else epoch)
            closed = sorted(name for name, to in at.items() if to == math.inf)
            if closed:
                raise RescaleError(f"job {self.job!r}: inputs {closed} closed while the rescale was made: the steps' "
                                  f"epochs would never come")
            self._limit, self._deadline = int(max(at.values(), default=0)) + margin, deadline
            self._held_since = math.inf
            return self._limit

    def open(self) -> float:
        """Let every input move again; returns how long the first move that waited at the gate
        since it closed has waited (0: none waited)."""
        with self._cond:
            self._limit = None
            self._cond.notify_all()
            return max(0.0, time.monotonic() - self._held_since)
