"""What the supervisor does with the failures a world noticed, written once for the Ray driver
(:mod:`raytide.driver.supervisor`) and the simulator (:mod:`raytide.testing.local`).

Each world notices deaths its own way (the Ray driver: a host's pending ``watch`` call that
fails, the progress actor's long poll, the coordinator's sync; the simulator: a crash it
injected, noticed some steps later) and names them as the same errors
(:class:`~raytide.errors.ReplicaLost`, :class:`~raytide.errors.ActorLost`). Then:

* :func:`judge`: deaths, and only deaths, in a job with recovery are recovered from; any
  other failure (a vertex's error, the store taken over), or a death without recovery,
  fails the job with the first one;
* :func:`hand_death`: a death noticed while a machine is under way goes to the machine that
  takes it: a recovery starts over, a rescale that holds at its cut or hands its state over
  recovers in its old widths; otherwise the caller starts a new recovery;
* :func:`supervise`: one turn of the supervisor loop, both of them together, which both
  worlds take each time they look at what they noticed (the Ray driver at each pump, the
  simulator at each scheduler step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raytide.errors import ActorLost, ReplicaLost
from raytide.rescale.rescaling import RescalePhase
from raytide.supervisor.execution import Execution


@dataclass(frozen=True)
class Ruling:
    """What comes of the failures noticed at once: the deaths to recover from (``recover``,
    their causes joined), or the failure that fails the job (``fail``); neither: nothing happened."""

    recover: str | None = None
    fail: BaseException | None = None


def judge(failures: Sequence[BaseException], recovers: bool) -> Ruling:
    """The verdict on ``failures``, in a job that ``recovers`` (started with recovery) or not."""
    deaths = [failure for failure in failures if isinstance(failure, (ReplicaLost, ActorLost))]
    if recovers and deaths and len(deaths) == len(failures):
        return Ruling(recover="; ".join(map(str, deaths)))
    return Ruling(fail=failures[0]) if failures else Ruling()


def hand_death(cause: str, recovering: Execution | None, rescaling: Execution | None) -> bool:
    """Give death ``cause`` to the machine under way that takes it (see the module docstring);
    whether one did (if not, the caller starts a recovery)."""
    if recovering is not None and not recovering.over:
        recovering.died(cause)
        return True
    if rescaling is not None and rescaling.machine.phase in (RescalePhase.HOLDING, RescalePhase.HANDING_OVER):
        rescaling.died(cause)
        return True
    return False


def supervise(failures: Sequence[BaseException], recovers: bool, under_way: tuple[Execution | None, Execution | None],
              fail: Callable[[BaseException], None], recover: Callable[[str], None]) -> str | None:
    """One turn of the supervisor loop: the ``failures`` a world noticed in; the job failed with
    the first of them if any is no death (``fail``), or the deaths given to the machine under way that
    takes them (``under_way``: the recovery's and the rescale's executions, if any), or a new
    recovery started after them (``recover``, with their cause). Returns that cause (None: no death)."""
    ruling = judge(failures, recovers)
    if ruling.fail is not None:
        fail(ruling.fail)
    elif ruling.recover is not None and not hand_death(ruling.recover, *under_way):
        recover(ruling.recover)
    return ruling.recover
