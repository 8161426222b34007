"""What the in-process runtime's executors of a state machine share
(:class:`~raytide.testing.recovery.SteppedRecovery`, :class:`~raytide.testing.rescaling.SteppedRescale`):
the machine's effects done at once or queued as steps the runtime's scheduler runs one at a
time, the answers fed back, and a death noticed meanwhile that drops what was queued.
"""

from __future__ import annotations

import abc
import collections
import random
from collections.abc import Callable
from typing import Any

from raytide.snapshots.recovering import Died


class SteppedMachine(abc.ABC):
    """One machine executed on ``runtime``, a queued step per :meth:`step`.

    A subclass says how to do each effect (:meth:`_act`: at once, returning its answer, or by
    queueing steps whose last answers) and which phases end the machine (:attr:`ENDS`).
    """

    #: The machine's phases in which nothing is left to do.
    ENDS: tuple[Any, ...] = ()

    def __init__(self, runtime: Any, machine: Any, rng: random.Random) -> None:
        self.runtime, self.machine, self.rng = runtime, machine, rng
        #: The steps queued; the runtime runs the first at :meth:`step`.
        self.steps: collections.deque[Callable[[], None]] = collections.deque()
        self._follow(machine.start())

    @property
    def over(self) -> bool:
        """Whether the machine ended: nothing is queued and its phase is one of :attr:`ENDS`."""
        return not self.steps and self.machine.phase in self.ENDS

    def step(self) -> None:
        self.steps.popleft()()

    def died(self, cause: str) -> None:
        """A death noticed meanwhile: what was queued is dropped, and the machine answers it."""
        self.steps.clear()
        self._answer(Died(cause))

    def _answer(self, event: Any) -> None:
        self._follow(self.machine.on(event))

    def _follow(self, effects: list[Any]) -> None:
        for effect in effects:
            answer = self._act(effect)
            if answer is not None:
                self._answer(answer)

    @abc.abstractmethod
    def _act(self, effect: Any) -> Any:
        """Do ``effect`` at once (and return its answer, or None) or queue the steps that answer it."""
