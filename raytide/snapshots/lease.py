"""Who holds a snapshot store, and which of its writes are fenced: the rules, pure (the file
I/O is :mod:`raytide.snapshots.lease_store`, the driver's renewal thread
:mod:`raytide.driver.store_lease`).

A job that writes a store holds a *lease* in it: a claim file under ``<root>/_lease/`` that
names a *generation* (a :class:`Fence`) and its holder (host, process, job), and says until
when it holds (``expires``, renewed every third of the lease while the job runs). Every
driver that takes the store bumps the generation; the greatest claim present holds it.
No lock server is needed; the filesystem's own atomic operations are::

    taker  ──list _lease/, read the greatest claim──▶ judge(): Take / Wait / Refuse
    taker  ──create claim gen-<G+1>──▶ _lease/        (local: os.link, fails if it exists;
                                                       object store: gen-<G+1>-<token>, unique)
    taker  ──list _lease/ again──▶ a greater claim than its own: refused (another won)
    taker  ──list committed snapshots──▶ rewrite its claim with fenced_after = the newest id
    holder ──every write: list _lease/──▶ a greater claim: StoreFencedError, nothing written
    holder ──commit: check, write the manifest, check again──▶ a greater claim after: the
                                          commit is reported failed (the job stops)
    reader ──a manifest of generation g, snapshot k──▶ ignored if a later generation took
                                          the store over having seen only snapshots up to
                                          fenced_after < k (:func:`fenced_by`)

A recovery of the job records the incarnation it starts the same way, as a *mark*: a claim of
its driver's own fence at that incarnation (``gen-<G>[-<token>]-inc-<n>.json``, created,
checked, then ``fenced_after`` written: :mod:`raytide.snapshots.incarnations`), which fences the
commits and deletes of the job's earlier incarnations (a coordinator declared dead and replaced,
still running) as a takeover fences an older generation; a replica's writer and the lease's
renewal are fenced per driver only (``newer(..., incarnations=False)``).

Why the double check suffices on a store whose reads see every write that finished before
them (a local filesystem, S3 since 2020): a commit whose check *after* its manifest saw no
greater claim finished writing the manifest before that claim was written, so the taker's
listing, made after its claim, counts the snapshot (``fenced_after`` >= its id) and readers
accept it. A commit that saw the greater claim is reported failed; its manifest may be
ignored or accepted (counted or not by the listing), and either is a consistent snapshot.
Clocks only decide *when* a takeover is allowed (``expires`` is the holder's wall clock,
compared with the taker's); fencing does not depend on them: a holder taken over too early
is stopped by its next write, loudly, and none of its later commits is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

#: The directory of claim files under a store's root.
LEASE_DIR = "_lease"
#: Seconds a lease lasts without renewal, unless ``rt.Recovery(lease=...)`` says otherwise.
DEFAULT_LEASE = 10.0
#: A live lease further ahead than this many lease terms is refused at once (a skewed clock,
#: or a holder with a far longer lease): a taker waits for at most about one term.
FAR_AHEAD = 2.0

_NAME = re.compile(r"gen-(\d{20})(?:-([0-9a-f]{32}))?(?:-inc-(\d{20}))?\.json")


@dataclass(frozen=True, order=True)
class Fence:
    """One generation of a store's holders, ordered: the greatest present holds the store.

    ``token`` tells claims of one generation apart on a store that cannot create a file
    exclusively (an object store: two takers may both claim it, and the greater token
    wins); it is ``""`` where creation is exclusive (a local filesystem).

    ``incarnation``: 0 for a driver's claim itself; ``n`` for the *mark* its driver writes
    when a recovery starts the job's incarnation ``n`` (:func:`~raytide.snapshots.incarnations.enter_incarnation`),
    which fences the commits and deletes of the incarnations before ``n`` (a coordinator
    declared dead and replaced, still running) as a takeover fences an older generation.
    Ordered after ``generation`` and ``token``: every incarnation of a claim is below the next claim.
    """

    generation: int
    token: str = ""
    incarnation: int = 0

    @property
    def claim(self) -> Fence:
        """The driver's claim this fence belongs to (incarnation 0)."""
        return replace(self, incarnation=0)

    def at(self, incarnation: int) -> Fence:
        """The fence of this claim's job in ``incarnation``."""
        return replace(self, incarnation=incarnation)

    @property
    def file_name(self) -> str:
        """The claim file's name: ``gen-<generation, 20 digits>[-<token>][-inc-<incarnation, 20 digits>].json``
        (sorted by generation)."""
        return (f"gen-{self.generation:020d}" + (f"-{self.token}" if self.token else "")
                + (f"-inc-{self.incarnation:020d}" if self.incarnation else "") + ".json")

    def __str__(self) -> str:
        return (f"generation {self.generation}" + (f" (claim {self.token[:8]})" if self.token else "")
                + (f", incarnation {self.incarnation}" if self.incarnation else ""))

    def to_json(self) -> list[Any]:
        """``[generation, token]``, and the incarnation if it is not 0 (as written before incarnations were fenced)."""
        return [self.generation, self.token, *([self.incarnation] if self.incarnation else [])]

    @staticmethod
    def from_json(value: Any) -> Fence:
        """A fence from ``[generation, token]`` or ``[generation, token, incarnation]``; ValueError if it is not one."""
        if not (isinstance(value, list) and len(value) in (2, 3) and all(type(v) is int for v in value[::2])
                and isinstance(value[1], str)):
            raise ValueError(f"not a fence: {value!r}")
        return Fence(*value)


def fence_of(name: str) -> Fence | None:
    """The fence a claim file's name holds; None for any other name."""
    match = _NAME.fullmatch(name)
    return Fence(int(match.group(1)), match.group(2) or "", int(match.group(3) or 0)) if match else None


@dataclass(frozen=True)
class Holder:
    """Who holds (or wants) a store: the host, the process, the job, and the process space
    (``space``: the boot and the pid namespace, "" where unknown). Two holders in one
    process space can tell whether the other's process still exists."""

    host: str
    pid: int
    job: str
    space: str = ""

    def shares_space(self, other: Holder) -> bool:
        """Whether ``other``'s process id means the same process here."""
        return bool(self.space) and self.host == other.host and self.space == other.space

    def __str__(self) -> str:
        return f"job {self.job!r} (process {self.pid} on host {self.host!r})"


@dataclass(frozen=True)
class LeaseRecord:
    """A claim file's content.

    Attributes:
        fence: the generation claimed.
        holder: who claimed it.
        since, expires: when it was claimed and until when it holds (seconds since the
            epoch, the holder's clock); renewals move ``expires``.
        duration: the lease's length in seconds (renewed every third of it).
        fenced_after: the newest committed snapshot when it took the store over (-1: none);
            a manifest of an earlier generation with a greater id is ignored. None until the
            taker has listed them (or if it died first).
        released: its holder let it go (the job ended): the next driver need not wait.
    """

    fence: Fence
    holder: Holder
    since: float
    expires: float
    duration: float
    fenced_after: int | None = None
    released: bool = False

    def renewed(self, now: float) -> LeaseRecord:
        return replace(self, expires=now + self.duration)

    def describe(self, now: float) -> str:
        """``job 'x' (process 12 on host 'h'), generation 3, holding since ... UTC, expires at ... UTC (in 4.2 s)``."""
        if self.released:
            state = f"released at {_clock(self.expires)}"
        else:
            left = self.expires - now
            state = f"expires at {_clock(self.expires)} ({f'in {left:.1f} s' if left >= 0 else f'{-left:.1f} s ago'})"
        return f"{self.holder}, {self.fence}, holding since {_clock(self.since)}, {state}"

    def to_json(self) -> dict[str, Any]:
        holder = self.holder
        return {"fence": self.fence.to_json(), "host": holder.host, "pid": holder.pid, "job": holder.job,
                "space": holder.space, "since": self.since, "expires": self.expires, "duration": self.duration,
                "fenced_after": self.fenced_after, "released": self.released}

    @staticmethod
    def from_json(body: Any) -> LeaseRecord:
        """The record in parsed JSON; ValueError, KeyError or TypeError if it is not one."""
        fenced_after = body["fenced_after"]
        if fenced_after is not None and type(fenced_after) is not int:
            raise ValueError(f"fenced_after is not an integer: {fenced_after!r}")
        holder = Holder(str(body["host"]), int(body["pid"]), str(body["job"]), str(body["space"]))
        return LeaseRecord(Fence.from_json(body["fence"]), holder, float(body["since"]), float(body["expires"]),
                           float(body["duration"]), fenced_after, bool(body["released"]))


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


# -- taking a store ------------------------------------------------------------------------


@dataclass(frozen=True)
class Take:
    """Claim generation ``generation``: the store is free (``why``)."""

    generation: int
    why: str


@dataclass(frozen=True)
class Wait:
    """The holder may be dead: look again at ``until`` (its lease's expiry)."""

    until: float


@dataclass(frozen=True)
class Refuse:
    """Another driver holds the store: ``holder``'s lease is live (``why``)."""

    holder: LeaseRecord
    why: str


Verdict = Take | Wait | Refuse


def judge(current: LeaseRecord | None, first_seen: LeaseRecord | None, now: float, here: Holder,
          holder_gone: bool) -> Verdict:
    """What a driver (``here``) that wants the store does, seeing ``current`` (the greatest
    claim; None: no claim yet) at ``now``, having first seen ``first_seen`` when it began
    to wait (None: it has not waited). ``holder_gone``: the holder's process is known not
    to exist (it shares this process space and its id is gone)."""
    if current is None:
        return Take(1, "no driver has held it")
    generation = current.fence.generation + 1
    if current.released:
        return Take(generation, f"{current.holder} released it")
    if current.expires <= now:
        return Take(generation, f"the lease of {current.holder} expired {now - current.expires:.1f} s ago")
    if holder_gone and current.holder.pid != here.pid:
        return Take(generation, f"the process of {current.holder} is gone")
    if current.holder.shares_space(here) and current.holder.pid == here.pid:
        return Refuse(current, "a job of this very process holds it: cancel that job first (job.cancel(), "
                               "job.stop() or the end of its with block)")
    if first_seen is not None and (current.fence, current.expires) != (first_seen.fence, first_seen.expires):
        return Refuse(current, "its holder renewed the lease while this driver waited for it to lapse: it is alive")
    if current.expires - now > FAR_AHEAD * current.duration:
        return Refuse(current, f"its lease runs {current.expires - now:.1f} s ahead, more than {FAR_AHEAD:g} of its "
                               f"{current.duration:g} s terms (is a clock off?)")
    return Wait(current.expires)


# -- fencing -------------------------------------------------------------------------------


def newer(own: Fence, present: Iterable[Fence], incarnations: bool = True) -> Fence | None:
    """The greatest fence of ``present`` if it is greater than ``own`` (the holder ``own``
    is fenced: another driver took the store over, or a recovery of its own job started a
    later incarnation); None if ``own`` still holds. ``incarnations=False``: a writer fenced
    per driver only (a replica's writer, the lease's renewal), which its own driver's
    incarnation marks do not fence."""
    greatest = max(present if incarnations else (fence.claim for fence in present), default=None)
    return greatest if greatest is not None and greatest > own else None


def fenced_by(fence: Fence | None, snapshot_id: int, later: Iterator[LeaseRecord]) -> LeaseRecord | None:
    """The takeover (or incarnation mark) that fences a manifest of ``fence`` for snapshot
    ``snapshot_id`` (None: the manifest stands). ``later``: the claims and marks of greater
    fences. Any of them that knows ``fenced_after`` and counted fewer snapshots fences it: a
    mark may be settled after a later takeover (a driver paused between the two), so the
    first in fence order need not have listed the fewest. A manifest without a fence
    (written by a writer that holds no lease) is never fenced."""
    if fence is None:
        return None
    return next((record for record in later if record.fence > fence and record.fenced_after is not None
                 and snapshot_id > record.fenced_after), None)


def fenced_reason(fence: Fence | None, taken: LeaseRecord) -> str:
    """Why a reader ignores a manifest of ``fence`` that ``taken`` fences (:func:`fenced_by`)."""
    if fence is not None and taken.fence.claim == fence.claim:
        return (f"fenced: committed by incarnation {fence.incarnation} after a recovery of its job started incarnation "
                f"{taken.fence.incarnation}, having seen snapshots up to {taken.fenced_after} (a late commit of a "
                f"coordinator declared dead and replaced)")
    return (f"fenced: committed by {fence} after {taken.holder} took the store over in {taken.fence}, having seen "
            f"snapshots up to {taken.fenced_after} (a late commit of a driver that had lost the store)")
