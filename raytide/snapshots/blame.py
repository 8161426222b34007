"""User code failing in a recovery: the error says so, and the job fails at once.

A recovery brings a job back from lost processes; it does not retry exceptions. User code
that raises while a recovery restores a replica (a vertex's ``restore()``, in a recovery,
a job's start from ``restore=`` or a rescale's hand-over) or while the restored job
computes an epoch again (a "poison" record that fails only on its replay) fails the job
with that error at once, as it would outside a recovery: the same snapshot and the same
records would raise again at every restart, so spending ``max_restarts`` on them would
only delay the error. What changes is the error: it names the step it was raised in.

* :func:`raised_in`: the error of a replica's part of a recovery step (the recovery
  machine's :class:`~raytide.snapshots.recovering.Raised`): a :class:`UserCodeError` of
  ``restore()`` says so and names the recovery and the snapshot; another raytide error (a
  part that does not verify, a key two replicas hold) is kept as it is; anything else is
  a :class:`RaytideError` naming the phase and the recovery.
* :class:`Replaying`: what the latest recovery computes again (the epochs from the
  restored frontier to the latest one the driver had fed), by which the driver
  (``OutputCollector``) and the simulator (``LocalRun``) name a user error at such an
  epoch as raised in the replay (:meth:`Replaying.blame`).

>>> from raytide.progress.timestamps import Timestamp
>>> error = UserCodeError("count", 1, Timestamp(5), ValueError("bad record"))
>>> replay = Replaying("j", 2, 3, ("replica j/count/0 died",), first=4, fed=9)
>>> str(replay.blame(error)).splitlines()[0]  # doctest: +NORMALIZE_WHITESPACE
"vertex 'count' replica 1 failed at epoch 5, during the replay of the recovery of job 'j' to incarnation 2 (epochs
 4 to 9 computed again from snapshot 3, after: replica j/count/0 died): ValueError('bad record')"
>>> replay.blame(UserCodeError("count", 1, Timestamp(10), ValueError("new"))).during  # fed after the recovery
''
>>> unfed = Replaying("j", 2, None, ("x died",), first=0, fed=None)  # inputs read in the replicas
>>> unfed.blame(error).during
"after the recovery of job 'j' to incarnation 2, which computes the epochs from 0 on again from its start (after: x died)"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from raytide.errors import RaytideError, UserCodeError
from raytide.progress.tracker import Pointstamp


def raised_in(error: BaseException, job: str, incarnation: int, snapshot_id: int | None, adopting: bool,
              causes: Sequence[str], phase: str = "restoring the replicas") -> RaytideError:
    """The error that fails a job whose actor raised ``error`` in ``phase`` of a recovery
    machine (of ``job`` into ``incarnation``, after ``causes``; none: a start from
    ``restore=``) that restores it from ``snapshot_id`` (None: the job's start) or,
    ``adopting``, from the state a rescale handed over."""
    step = _step(job, incarnation, snapshot_id, adopting, causes)
    if isinstance(error, UserCodeError):
        return error.in_context(step, where="its restore()" if error.time is None else None)
    if type(error) is RaytideError:  # an actor's own wrapping of an unexpected error: say where too
        return RaytideError(f"{error}, {step}")
    if isinstance(error, RaytideError):
        return error
    return RaytideError(f"{phase} raised {error!r}, {step}")


def _step(job: str, incarnation: int, snapshot_id: int | None, adopting: bool, causes: Sequence[str]) -> str:
    if adopting:
        return f"adopting the state handed over in the rescale of job {job!r} to incarnation {incarnation}"
    source = "its start" if snapshot_id is None else f"snapshot {snapshot_id}"
    if not causes:
        return f"restoring job {job!r} from {source} (restore=)"
    return f"during the recovery of job {job!r} to incarnation {incarnation}, restoring {source} (after: {_after(causes)})"


def _after(causes: Sequence[str]) -> str:
    return "; ".join(causes)


@dataclass(frozen=True)
class Replaying:
    """The epochs a recovery computes again: from ``first`` (the lowest of the restored
    pointstamps: the snapshot held every epoch before it complete) to ``fed`` (the latest
    epoch the driver had fed the job; None if it does not know: inputs read in the replicas)."""

    job: str
    incarnation: int
    snapshot_id: int | None
    causes: tuple[str, ...]
    first: int
    fed: int | None

    @classmethod
    def of(cls, job: str, incarnation: int, snapshot_id: int | None, causes: Sequence[str],
           pointstamps: Sequence[tuple[Pointstamp, int]], fed: int | None) -> Replaying | None:
        """What a recovery after ``causes`` from ``pointstamps`` computes again (None: it is no
        recovery from a death, but a start from ``restore=`` or a rescale, or nothing is left to compute)."""
        epochs = [time.epoch for (_, time), count in pointstamps if count > 0]
        if not causes or not epochs:
            return None
        return cls(job, incarnation, snapshot_id, tuple(causes), min(epochs), fed if fed is None or fed >= 0 else None)

    def blame(self, error: BaseException) -> BaseException:
        """``error``, saying it was raised in this replay if it is user code's at an epoch the
        recovery computes again (any other error as it is)."""
        if not isinstance(error, UserCodeError) or error.time is None or error.during:
            return error
        epoch, source = error.time.epoch, "its start" if self.snapshot_id is None else f"snapshot {self.snapshot_id}"
        recovery = f"the recovery of job {self.job!r} to incarnation {self.incarnation}"
        if epoch < self.first or (self.fed is not None and epoch > self.fed):
            return error
        if self.fed is None:
            return error.in_context(f"after {recovery}, which computes the epochs from {self.first} on again "
                                    f"from {source} (after: {_after(self.causes)})")
        return error.in_context(f"during the replay of {recovery} (epochs {self.first} to {self.fed} computed again "
                                f"from {source}, after: {_after(self.causes)})")
