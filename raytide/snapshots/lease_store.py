"""A snapshot store's lease files on any ``pyarrow.fs`` filesystem: the thin I/O under the
rules of :mod:`raytide.snapshots.lease` (whose docstring has the protocol).

Claims are created atomically where the filesystem can: on a local filesystem a claim is
written under a temporary name, then hard-linked (``os.link``) to ``gen-<G>.json``, which
fails if that generation is claimed already, so one taker wins each generation. An object
store (S3 through ``pyarrow.fs``) has no conditional put: each taker writes its own
``gen-<G>-<token>.json`` and then lists the claims; the greatest claim holds the store. Two
takers of one generation may both see theirs alone and start; the lesser is then fenced at
its first write. Renewals and releases replace the holder's own claim file (a rename on a
local disk, one PUT on an object store). A read on an object store may still be torn:
``pyarrow.fs`` learns an object's size, then reads its bytes in ranged GETs, and a renewal
between the two gives bytes of two versions, or fewer bytes than it expects (an
``OSError``), both seen on the S3 server the tests run; a claim that does not parse or fails
to read is read again (:data:`TORN_READ_PAUSES`) before it is called unreadable.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from raytide.errors import StoreFencedError, StoreLeaseError
from raytide.snapshots.lease import LEASE_DIR, Fence, Holder, LeaseRecord, Refuse, Take, fence_of, fenced_by, judge, newer

if TYPE_CHECKING:  # imported where a store is opened: a host whose job keeps no snapshots starts without pyarrow
    import pyarrow.fs as pafs

logger = logging.getLogger(__name__)

#: The longest a driver waiting for a lease to lapse goes without looking at it again (seconds).
POLL = 0.5
#: A driver waits for a lease to lapse at most this many of the longer of its own and the
#: holder's lease terms, plus :data:`WAIT_SLACK` seconds, before it gives up.
WAIT_TERMS = 4
WAIT_SLACK = 5.0
#: The pauses (seconds) before each new read of a claim that did not parse on an object store.
TORN_READ_PAUSES = (0.02, 0.1, 0.3)


class LeaseFiles:
    """The claim files of the store at ``root`` of ``filesystem`` (``uri`` names it in errors)."""

    def __init__(self, filesystem: pafs.FileSystem, root: str, uri: str) -> None:
        self.filesystem, self.uri = filesystem, uri
        self.dir = f"{root}/{LEASE_DIR}"

    @property
    def exclusive(self) -> bool:
        """Whether a claim can be created only if absent (a local filesystem)."""
        import pyarrow.fs as pafs

        return isinstance(self.filesystem, pafs.LocalFileSystem)

    def fences(self) -> list[Fence]:
        """Every claim present, in fence order (names only: nothing is read)."""
        import pyarrow.fs as pafs

        infos = self.filesystem.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
        return sorted(fence for info in infos if info.type == pafs.FileType.File
                      and (fence := fence_of(info.base_name)) is not None)

    def read(self, fence: Fence) -> LeaseRecord:
        """The claim of ``fence``.

        Raises:
            StoreLeaseError: it is gone or does not parse (naming the file and what to do).
        """
        path = f"{self.dir}/{fence.file_name}"
        try:
            record = LeaseRecord.from_json(self._parsed(path))
            if record.fence != fence:
                raise ValueError(f"it holds {record.fence}, not {fence}")
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise StoreLeaseError(f"the lease file {path!r} of snapshot store {self.uri!r} cannot be read "
                                  f"({type(error).__name__}: {error}); if no driver uses the store, delete it") from error
        return record

    def _parsed(self, path: str) -> dict:
        """The JSON at ``path``, read again after a pause while it does not parse on an object
        store (a read torn by a renewal: see the module docstring)."""
        for pause in () if self.exclusive else TORN_READ_PAUSES:
            try:
                return json.loads(self._bytes(path))
            except (ValueError, OSError):  # torn: bytes of two versions, or fewer than the size read first
                if pause:
                    time.sleep(pause)
        return json.loads(self._bytes(path))

    def _bytes(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(path) as stream:
            return stream.read()

    def current(self) -> LeaseRecord | None:
        """The greatest claim (the store's holder, live or not); None if there is none."""
        claims = [fence for fence in self.fences() if not fence.incarnation]  # not its incarnation marks
        return self.read(claims[-1]) if claims else None

    def create(self, record: LeaseRecord) -> bool:
        """Write ``record`` as a new claim; False if its generation is claimed already (only
        where creation is exclusive: on an object store each claim has a name of its own)."""
        text = json.dumps(record.to_json()).encode()
        path = f"{self.dir}/{record.fence.file_name}"
        if not self.exclusive:
            self.filesystem.create_dir(self.dir, recursive=True)
            with self.filesystem.open_output_stream(path) as out:
                out.write(text)
            return True
        os.makedirs(self.dir, exist_ok=True)
        temp = _write_local(f"{self.dir}/.claim-{uuid.uuid4().hex}", text)
        try:
            os.link(temp, path)  # atomic, and never over an existing claim
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: created exclusively, then written
            return _create_local(path, text)
        finally:
            os.unlink(temp)
        return True

    def write(self, record: LeaseRecord) -> None:
        """Replace the holder's own claim with ``record`` (a renewal, a release, its ``fenced_after``)."""
        text = json.dumps(record.to_json()).encode()
        path = f"{self.dir}/{record.fence.file_name}"
        if self.exclusive:
            os.replace(_write_local(f"{self.dir}/.claim-{uuid.uuid4().hex}", text), path)
        else:
            with self.filesystem.open_output_stream(path) as out:
                out.write(text)

    def check(self, own: Fence, what: str, incarnations: bool = False) -> None:
        """Refuse ``what`` if a claim greater than ``own`` is present (with ``incarnations``, or
        a mark of a later incarnation of its own job: ``own`` is a replaced coordinator's).

        Raises:
            StoreFencedError: naming the driver that took the store over, or the incarnation
                that replaced ``own``'s.
        """
        greater = newer(own, self.fences(), incarnations)
        if greater is not None and greater.claim == own.claim:
            raise StoreFencedError(f"{what}: refused, a recovery of this job started incarnation {greater.incarnation} "
                                   f"after this writer's incarnation {own.incarnation} (it was declared dead and "
                                   f"replaced, and still runs)")
        if greater is not None:
            raise StoreFencedError(f"{what}: refused, another driver took the snapshot store {self.uri!r} over from "
                                   f"this job ({own}): {self._who(greater.claim)}. This job stops: its lease had lapsed "
                                   f"(was its driver paused, cut off from the store, or stopped?)")

    def _who(self, fence: Fence) -> str:
        try:
            return self.read(fence).describe(time.time())
        except StoreLeaseError:
            return f"another driver ({fence})"

    def view(self) -> LeaseView:
        """The claims present now, for judging manifests (:func:`~raytide.snapshots.lease.fenced_by`)."""
        return LeaseView(self)


class LeaseView:
    """The claims of a store as listed once, read lazily and kept: what a reader of its
    manifests needs to tell which are fenced."""

    def __init__(self, files: LeaseFiles) -> None:
        self.files, self.fences = files, files.fences()
        self.records: dict[Fence, LeaseRecord | None] = {}

    def fencing(self, fence: Fence | None, snapshot_id: int) -> LeaseRecord | None:
        """The takeover that fences a manifest of ``fence`` for ``snapshot_id``; None: it stands."""
        return fenced_by(fence, snapshot_id, self._after(fence)) if fence is not None and self.fences else None

    def _after(self, fence: Fence) -> Iterator[LeaseRecord]:
        for later in self.fences:
            if later > fence:
                if later not in self.records:
                    try:
                        self.records[later] = self.files.read(later)
                    except StoreLeaseError:  # unreadable: it fences nothing (its taker's writes are checked anyway)
                        self.records[later] = None
                record = self.records[later]
                if record is not None:
                    yield record


def _create_local(path: str, text: bytes) -> bool:
    """Create the local file ``path`` holding ``text``; False if it exists (a reader may see
    it empty for a moment, and then fails to parse it: :meth:`LeaseFiles.read`)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "wb") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    return True


def _write_local(path: str, text: bytes) -> str:
    """Write ``text`` to the local file ``path``, flushed to the disk; returns ``path``."""
    with open(path, "wb") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    return path


# -- taking a store ------------------------------------------------------------------------


def this_holder(job: str) -> Holder:
    """This process as a holder of job ``job``."""
    return Holder(socket.gethostname(), os.getpid(), job, _process_space())


def _process_space() -> str:
    """The boot and the pid namespace of this process ("" where unknown, as off Linux)."""
    try:
        return f"{Path('/proc/sys/kernel/random/boot_id').read_text().strip()}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def process_gone(holder: Holder, here: Holder) -> bool:
    """Whether ``holder``'s process is known to be gone: it shares this process space and no
    process (but a zombie) has its id. A process elsewhere is never known gone."""
    if not here.shares_space(holder) or holder.pid == here.pid:
        return False
    try:
        with open(f"/proc/{holder.pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"])
    except FileNotFoundError:
        return True
    except OSError:
        return False


def acquire(files: LeaseFiles, here: Holder, duration: float, newest_committed: Callable[[], int], *,
            clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
            gone: Callable[[Holder, Holder], bool] = process_gone) -> LeaseRecord:
    """Take the store for ``here`` with a lease of ``duration`` seconds: claim the next
    generation if it is free, waiting for a lease that may lapse (its holder does not renew
    it), and record the newest committed snapshot (``newest_committed()``, -1: none) as
    ``fenced_after``. Returns the claim, which the caller renews.

    Raises:
        StoreLeaseError: another driver holds the store (it renews its lease), naming it.
    """
    started, first_seen, judged = clock(), None, False
    while True:
        current, now = files.current(), clock()
        limit = WAIT_TERMS * max(duration, current.duration if current is not None else 0.0) + WAIT_SLACK
        if judged and now - started > limit:  # judged once first: a process starved before its first look still tries
            raise StoreLeaseError(f"waited {now - started:.1f} s (at most {limit:g}) to take snapshot store "
                                  f"{files.uri!r}, in vain; last seen: "
                                  f"{current.describe(now) if current is not None else 'no claim'}")
        verdict, judged = judge(current, first_seen, now, here, current is not None and gone(current.holder, here)), True
        if isinstance(verdict, Refuse):
            raise StoreLeaseError(refusal(files.uri, verdict, now))
        if isinstance(verdict, Take):
            record = _claim(files, here, duration, verdict.generation, clock)
            if record is not None:
                logger.info("%s took snapshot store %r: %s", here, files.uri, verdict.why)
                return settle(files, record, newest_committed, clock)
            first_seen = None  # another driver claimed that generation first: judge it afresh
            continue
        first_seen = first_seen or current
        sleep(max(0.0, min(POLL, verdict.until - now)) + 0.01)


def _claim(files: LeaseFiles, here: Holder, duration: float, generation: int,
           clock: Callable[[], float]) -> LeaseRecord | None:
    """Claim ``generation``; None if another driver's claim of it (or a later one) wins."""
    now = clock()
    fence = Fence(generation, "" if files.exclusive else uuid.uuid4().hex)
    record = LeaseRecord(fence, here, now, now + duration, duration)
    if not files.create(record) or newer(fence, files.fences()) is not None:
        return None
    return record


def settle(files: LeaseFiles, record: LeaseRecord, newest_committed: Callable[[], int],
            clock: Callable[[], float]) -> LeaseRecord:
    """The claim holds: list what is committed (after the claim, so every commit that saw no
    greater claim is counted) and write it into the claim as ``fenced_after``."""
    try:
        record = replace(record, fenced_after=newest_committed()).renewed(clock())
        files.write(record)
    except BaseException:  # the store failed: let the claim go, so that no one waits for it
        with contextlib.suppress(Exception):
            files.write(replace(record, released=True, expires=clock()))
        raise
    return record


def refusal(uri: str, verdict: Refuse, now: float) -> str:
    """Why a driver may not take store ``uri``, whom to ask, and how to take it over."""
    holder = verdict.holder
    return (f"the snapshot store {uri!r} is held by another driver: {holder.describe(now)}; {verdict.why}. Two drivers "
            f"writing one store would overwrite each other's snapshots. Stop that driver (or let its job end), then "
            f"run again: a driver that died lets its lease lapse within {holder.duration:g} s, and rt.run takes the "
            f"store over once it has (waiting for a lease that is not renewed); or give this job a store of its own")
