"""Typed errors raised by raytide; each names the place (vertex, replica, epoch) it concerns."""

from __future__ import annotations

import traceback
from typing import Any, Protocol


class RaytideError(Exception):
    """Base class of every error raytide raises on purpose."""


class GraphError(RaytideError):
    """The dataflow graph is malformed (a cycle outside a loop, an unknown name, ...)."""


class ArgumentError(RaytideError, ValueError):
    """An argument of a raytide call has the wrong type or is out of range; the message names
    the argument, the value given and what it must be (a ValueError too)."""


class ProgressError(RaytideError):
    """A progress-tracking invariant was violated (for example a send into the past)."""


class InternalError(RaytideError):
    """raytide broke one of its own guarantees (an output epoch handed over twice, say): a
    bug in raytide, not in the dataflow or its inputs. The job fails at once rather than
    go on with output that may be wrong; the message names what broke, and where."""


class SnapshotError(RaytideError):
    """A snapshot could not be taken, committed or restored: a barrier broke the protocol, or a
    snapshot could not be written, read or verified (the message names the snapshot and part)."""


class StoreLeaseError(SnapshotError):
    """The snapshot store is held by another driver whose lease is live (it renews it while its
    job runs), or its lease cannot be read: this job would write where that one does. The
    message names the holder (host, process id, job, since when, until when) and how to take
    the store over (:mod:`raytide.snapshots.lease`)."""


class StoreFencedError(SnapshotError):
    """Another driver took the snapshot store over (its lease had lapsed: this driver was
    paused, cut off or too slow to renew it), so this job's writes to it are refused (fenced)
    and the job stops; the message names the new holder and what was refused."""


class RescaleError(RaytideError):
    """A rescale request is invalid or could not be carried out."""


class SparkIntegrationError(RaytideError):
    """Data could not be moved between Spark and the dataflow (for example an unsupported column type)."""


class SourceError(RaytideError):
    """An input source cannot be read as asked: unfit epochs, or a position it cannot resume from."""


class EpochColumnError(SourceError):
    """The column that gives each row's epoch is missing, not of integers, or holds nulls or negative values."""


class SparkEpochColumnError(EpochColumnError, SparkIntegrationError):
    """An unfit epoch column of a Spark DataFrame: an epoch-column error and a Spark integration error both."""


class Timed(Protocol):
    """What an error needs of a timestamp (:class:`~raytide.Timestamp`; errors import nothing of raytide)."""

    @property
    def epoch(self) -> int: ...  # noqa: D102

    @property
    def counters(self) -> tuple[int, ...]: ...  # noqa: D102


class UserCodeError(RaytideError):
    """User code raised inside a vertex callback, or in a function the user gave a vertex
    (a key function of an exchange runs in the sending replica but belongs to the vertex
    it feeds; ``where`` says so).

    A vertex breaking raytide's rules (a send into the past, an output port that does not
    exist) raises the rule's own error instead (:class:`ProgressError`, :class:`GraphError`),
    which names the vertex, the replica and the time just as well.

    Attributes:
        vertex, replica, time: where and when (``time`` is None outside a timestamped call).
        original: ``repr`` of the exception user code raised.
        traceback: its formatted traceback (the exception object itself may not pickle).
        where: what of the vertex's code raised, when not its own callback ("" otherwise).
        during: what raytide was doing, when it was not running the job as usual: a
            recovery restoring a snapshot, or its replay of an epoch ("" otherwise;
            :mod:`raytide.snapshots.blame`).
    """

    def __init__(self, vertex: str, replica: int, time: Timed | None, error: BaseException, where: str = "") -> None:
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self._set(vertex, replica, time, repr(error), tb, where)

    def _set(self, vertex: str, replica: int, time: Timed | None, original: str, tb: str, where: str,
             during: str = "") -> None:
        self.vertex, self.replica, self.time, self.original, self.traceback = vertex, replica, time, original, tb
        self.where, self.during = where, during
        place = f" ({where})" if where else ""
        at = f" at {_when(time)}" if time is not None or not during else ""
        context = f", {during}" if during else ""
        super().__init__(f"vertex {vertex!r} replica {replica}{place} failed{at}{context}: {original}\n{tb}")

    def in_context(self, during: str, where: str | None = None) -> UserCodeError:
        """This error, saying what raytide was doing when it was raised (``during``; and
        ``where``, what of the vertex's code raised, if given)."""
        return _rebuild_user_error(self.vertex, self.replica, self.time, self.original, self.traceback,
                                   self.where if where is None else where, during)

    def __reduce__(self) -> Any:
        return (_rebuild_user_error, (self.vertex, self.replica, self.time, self.original, self.traceback, self.where,
                                      self.during))


def _when(time: Timed | None) -> str:
    if time is None:
        return "no epoch"
    return f"epoch {time.epoch}" + (f", iteration {time.counters}" if time.counters else "")


def _rebuild_user_error(vertex: str, replica: int, time: Timed | None, original: str, tb: str,
                        where: str = "", during: str = "") -> UserCodeError:
    """Unpickles a :class:`UserCodeError` (it crosses Ray from the failing actor to the driver)."""
    error = UserCodeError.__new__(UserCodeError)
    error._set(vertex, replica, time, original, tb, where, during)
    return error


class ReplicaLost(RaytideError):
    """A replica's actor died (its process was killed or crashed): the job cannot go on.

    Not a failure of user code: the error names the replica that died (``job/chain/replica``,
    as in the Ray dashboard) and the vertices it hosted, and who noticed.
    """

    def __init__(self, replica: str, vertices: tuple[str, ...], noticed_by: str, cause: str = "") -> None:
        self.replica, self.vertices, self.noticed_by, self.cause = replica, vertices, noticed_by, cause
        super().__init__(f"replica {replica} (vertices {', '.join(vertices)}) died; {noticed_by} noticed"
                         + (f": {cause}" if cause else ""))

    def __reduce__(self) -> Any:
        return (ReplicaLost, (self.replica, self.vertices, self.noticed_by, self.cause))


class RecoveryError(RaytideError):
    """A job that takes snapshots could not recover from a failure: it failed more often than
    its ``max_restarts`` allow (the message lists what died each time), or an input cannot
    go back to where the snapshot left it. Epochs handed over before stay readable."""


class ActorLost(RaytideError):
    """The job's progress actor or snapshot coordinator died: the job cannot go on (without
    ``recovery``); the message names which."""


class JobTimeout(RaytideError, TimeoutError):
    """A wait on a job ran out of time; the message says what was still incomplete."""


class JobCancelled(RaytideError):
    """The job was cancelled (``job.cancel()``, leaving its ``with`` block, or Ctrl-C in a
    wait) before it finished: it takes no more input, and waiting for it cannot succeed.
    Epochs completed before the cancel stay readable with ``job.collect``."""


class RecordError(RaytideError):
    """A record cannot travel between processes (it does not pickle); the message names
    the input or output, the epoch and the record's type."""
