"""The supervisor loop, written once: a state machine's effects carried out by a runtime
(:mod:`raytide.supervisor.runtime`), one method per effect, and the answers fed back to the
machine, until it ends. The Ray driver and the simulator run this same loop on the recovery
machine (:class:`~raytide.snapshots.recovering.Recovering`) and the rescale machine
(:class:`~raytide.rescale.rescaling.Rescaling`)::

    machine.start() ──▶ effects ──▶ runtime.<method per effect>(effect, execution)
          ▲                                  │ the answer now (the Ray driver waits for it),
          │                                  │ None (no answer follows, or one comes later:
          └──── machine.on(answer) ◀─────────┘ execution.answer(event), from a queued step)

A runtime that answers later queues the steps that lead to the answer (:meth:`Execution.queue`);
its world runs them one at a time (:meth:`Execution.step`), as the simulator's scheduler does,
so a crash can strike between any two. A death noticed meanwhile (:meth:`Execution.died`)
drops what was queued and is answered to the machine, which starts over or recovers. The Ray
driver queues nothing: each of its methods waits, with a timeout, and answers.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from raytide.rescale.rescaling import RescalePhase
from raytide.snapshots.recovering import Died, RecoveryPhase
from raytide.supervisor.runtime import RECOVERY_EFFECTS, RESCALE_EFFECTS

#: The phases in which each machine has nothing left to do, by the machine's phase type.
ENDS: dict[type, tuple[Any, ...]] = {
    RecoveryPhase: (RecoveryPhase.DONE, RecoveryPhase.FAILED),
    RescalePhase: (RescalePhase.DONE, RescalePhase.FAILED),
}
#: The runtime method of each effect, by the machine's phase type.
METHODS: dict[type, dict[type, str]] = {RecoveryPhase: RECOVERY_EFFECTS, RescalePhase: RESCALE_EFFECTS}


class Execution:
    """One machine (a :class:`~raytide.snapshots.recovering.Recovering` or a
    :class:`~raytide.rescale.rescaling.Rescaling`) executed on ``runtime``.

    :meth:`start` it; a runtime that answers an effect later calls :meth:`answer`; a world
    that steps runs :attr:`steps` one at a time (:meth:`step`)."""

    def __init__(self, machine: Any, runtime: Any) -> None:
        self.machine, self.runtime = machine, runtime
        self.methods = METHODS[type(machine.phase)]
        #: The steps queued (by a runtime that answers later); its world runs the first at :meth:`step`.
        self.steps: collections.deque[Callable[[], None]] = collections.deque()

    def start(self) -> None:
        """Carry out the machine's first effects (and all that follow at once)."""
        self.follow(self.machine.start())

    @property
    def over(self) -> bool:
        """Whether the machine ended: nothing is queued and its phase is one in which nothing is left to do."""
        return not self.steps and self.machine.phase in ENDS[type(self.machine.phase)]

    def step(self) -> None:
        """Run the first step queued."""
        self.steps.popleft()()

    def died(self, cause: str) -> None:
        """A death noticed meanwhile: what was queued is dropped, and the machine answers it."""
        self.steps.clear()
        self.answer(Died(cause))

    def answer(self, event: Any) -> None:
        """Feed ``event`` (an answer, or what happened meanwhile) to the machine and carry out what follows."""
        self.follow(self.machine.on(event))

    def queue(self, steps: list[Callable[[], None]], answer: Any) -> None:
        """``steps``, then a step that answers the machine (``answer``, or what the callable ``answer`` makes then)."""
        made = answer if callable(answer) else (lambda: answer)
        self.steps.extend(steps)
        self.steps.append(lambda: self.answer(made()))

    def follow(self, effects: list[Any]) -> None:
        """Carry out ``effects`` in order, each through its runtime method; an answer given at
        once is fed to the machine and what it leads to is carried out before the next effect."""
        pending = collections.deque(effects)
        while pending:
            effect = pending.popleft()
            answer = getattr(self.runtime, self.methods[type(effect)])(effect, self)
            if answer is not None:
                pending.extendleft(reversed(self.machine.on(answer)))
