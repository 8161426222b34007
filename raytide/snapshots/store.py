"""Where committed snapshots live: durable, verifiable, on any filesystem ``pyarrow.fs`` knows.

Pure I/O, no Ray: the coordinator (which commits) and the replicas' writers (which write parts)
both use a :class:`SnapshotStore`; Ray's object store is not durable, so it is never the store.

Layout, under the store's root::

    snapshot-00000000000000000007/    one directory per snapshot id, zero-padded so names sort
        <part>                        the parts, written first (any order, any writer)
        _manifest.json                written LAST: the snapshot exists once this does
    _record-<name>.json               small records kept beside the snapshots (what a job's
                                      consumers have had: raytide.driver.recovery)
    _lease/gen-<generation>[-<token>].json   who holds the store (raytide.snapshots.lease)

The manifest lists every part with its size and SHA-256 and carries the caller's metadata
(input positions, vertex ids, parallelism, times). It is written under a temporary name and
then moved to ``_manifest.json``. A crash before the move leaves a directory without a
manifest: not committed, skipped by readers, deleted by :meth:`SnapshotStore.retain` once a
newer snapshot commits.

Atomicity per filesystem. On a local disk ``move`` is a ``rename``, atomic on POSIX. S3 has no
rename: pyarrow's ``S3FileSystem.move`` of a file is a server-side copy (CopyObject) followed by
a delete of the source. The commit is still atomic from a reader's view, because an S3 object
becomes visible whole or not at all (a PUT, a completed multipart upload and a CopyObject all
publish the object at once): a reader sees either no manifest or the complete one. A crash
between the copy and the delete only leaves a stray temporary file. pyarrow does not ``fsync``
local files; after a machine crash (not a process crash) a part may hold stale bytes behind a
committed manifest, which the checksums catch: :meth:`SnapshotStore.latest` then falls back.

Faults. A read that fails is tried again a few times (:mod:`raytide.snapshots.reads`), then
fails naming the store and the file, never passing for damage. A commit whose move raised is
read back: if its manifest is in place, it is committed (an ambiguous commit). A snapshot is
deleted manifest first, so a delete that fails partway leaves only an uncommitted directory.

Verification. Every read of a part checks its size and SHA-256 against the manifest.
:meth:`SnapshotStore.latest` checks every part of a snapshot before returning it, and skips a
damaged one (missing, partial or corrupt part; missing or unparsable manifest; bad signature)
with a :class:`RuntimeWarning` naming the snapshot and the damage.

Fencing (:mod:`raytide.snapshots.lease`). A store opened with a ``fence`` (its job's lease)
checks before every write, and after a manifest or a record, that no later generation took the
store over (:class:`~raytide.errors.StoreFencedError` if one did); one that follows its job's
incarnation (:meth:`SnapshotStore.at`: a coordinator's, the driver's) also that no recovery
recorded a later incarnation. Manifests carry the fence; a reader ignores (as damaged, with its
reason) one written after a takeover or a later incarnation listed the snapshots. Without a
fence nothing is checked, and no manifest is ignored.

Signing. With ``signing_key`` the manifest carries an HMAC-SHA256 over its canonical body, which
holds every part's checksum, so the HMAC covers the parts too. A store with a key refuses a
manifest whose HMAC is missing or wrong. Security note: snapshot state is pickled by its users,
so restoring a snapshot runs code chosen by whoever could write the store. Without a signing
key, anyone with write access to the store can therefore run code in the job that restores
from it; with a key, only holders of the key can produce a snapshot the store accepts.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import hmac
import json
import os
import re
import time
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raytide.errors import ArgumentError, SnapshotError
from raytide.snapshots.lease import Fence, fenced_reason
from raytide.snapshots.lease_store import LeaseFiles, LeaseView
from raytide.snapshots.manifest import (
    FORMAT,
    ID_DIGITS,
    MANIFEST,
    Manifest,
    PartInfo,
    canonical,
    check_id,
    check_part_name,
    manifest_from,
)
from raytide.snapshots.reads import READ_PAUSES, UnreadableFile, hashed, retried

if TYPE_CHECKING:  # imported where a store is opened: a host whose job keeps no snapshots starts without pyarrow
    import pyarrow.fs as pafs

    from raytide.snapshots.config import Recovery

_TEMP_PREFIX = "_manifest.json.tmp-"
_DIR_PREFIX = "snapshot-"
_RECORD_PREFIX = "_record-"
_DIR_PATTERN = re.compile(rf"{_DIR_PREFIX}(\d{{{ID_DIGITS}}})")


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A snapshot directory as found: its verified manifest, or what is wrong with it."""

    snapshot_id: int
    manifest: Manifest | None
    problem: str


class SnapshotStore:
    """Snapshots under one root of a ``pyarrow.fs`` filesystem; see the module docstring.

    Args:
        uri: A local path, or any URI ``pyarrow.fs.FileSystem.from_uri`` understands
            (``s3://bucket/prefix``, ``file:///data/snapshots``, ...); with ``filesystem``,
            a path inside that filesystem (for example ``"bucket/prefix"`` for an
            ``S3FileSystem`` built with ``endpoint_override``).
        signing_key: If given, manifests are signed with HMAC-SHA256 under this key, and
            manifests that are unsigned or signed otherwise are refused.
        filesystem: The filesystem to use instead of one derived from ``uri``.
        fence: The writing job's lease: its writes are refused once another driver took the store over.
    """

    def __init__(self, uri: str, signing_key: bytes | None = None, *, filesystem: pafs.FileSystem | None = None,
                 fence: Fence | None = None) -> None:
        if signing_key is not None and not (isinstance(signing_key, bytes) and signing_key):
            raise ArgumentError(f"signing_key must be non-empty bytes or None, not {type(signing_key).__name__}")
        self.uri, self.fence = uri, fence
        self.follows_incarnation = False  # fenced by its job's later incarnations too (:meth:`at`)
        self.filesystem, self.root = _resolve(uri, filesystem)
        self._key = signing_key
        self.leases = LeaseFiles(self.filesystem, self.root, uri)
        self.read_pauses: Sequence[float] = READ_PAUSES  # between attempts of a read (raytide.snapshots.reads)

    def at(self, incarnation: int) -> SnapshotStore:
        """This store as the job's ``incarnation`` writes it (a coordinator, the driver): refused once a
        recovery recorded a later one (:func:`~raytide.snapshots.incarnations.enter_incarnation`)."""
        entered = copy.copy(self)
        entered.fence = self.fence.at(incarnation) if self.fence is not None else None
        entered.follows_incarnation = True
        return entered

    def __repr__(self) -> str:
        return f"SnapshotStore({self.uri!r}, signed={self._key is not None})"

    # -- paths -------------------------------------------------------------------------------

    def snapshot_dir(self, snapshot_id: int) -> str:
        """The directory of snapshot ``snapshot_id`` inside :attr:`filesystem`."""
        check_id(snapshot_id)
        return f"{self.root}/{_DIR_PREFIX}{snapshot_id:0{ID_DIGITS}d}"

    def part_path(self, snapshot_id: int, name: str) -> str:
        """Where part ``name`` of snapshot ``snapshot_id`` lives inside :attr:`filesystem`."""
        check_part_name(name)
        return f"{self.snapshot_dir(snapshot_id)}/{name}"

    def manifest_path(self, snapshot_id: int) -> str:
        """Where the manifest of snapshot ``snapshot_id`` lives inside :attr:`filesystem`."""
        return f"{self.snapshot_dir(snapshot_id)}/{MANIFEST}"

    # -- writing -----------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Write and delete a probe file under the store's root (creating the root): ``rt.run``
        refuses a store that cannot be written (a :class:`SnapshotError` naming it and what the
        filesystem said), where every snapshot would be abandoned and the job have no fault tolerance."""
        probe = f"{self.root}/.raytide-probe-{uuid.uuid4().hex}"
        try:
            self.filesystem.create_dir(self.root, recursive=True)
            with self.filesystem.open_output_stream(probe) as out:
                out.write(b"probe")
            self.filesystem.delete_file(probe)
        except (OSError, ValueError) as error:  # pyarrow's errors are OSErrors (ArrowInvalid: ValueError)
            raise SnapshotError(f"the snapshot store {self.uri!r} cannot be written ({type(error).__name__}: "
                                f"{error}): every snapshot would be abandoned and the job would run with no fault "
                                f"tolerance; give rt.Recovery a directory (or URI) it can write") from error

    def write_part(self, snapshot_id: int, name: str, data: bytes) -> PartInfo:
        """Writes one part of an uncommitted snapshot and returns what the manifest needs of it
        (a :class:`SnapshotError` if the snapshot is already committed: its parts are immutable)."""
        path = self.part_path(snapshot_id, name)
        self._guard(f"writing part {name!r} of snapshot {snapshot_id}")
        self._refuse_if_committed(snapshot_id, f"cannot write part {name!r}")
        self.filesystem.create_dir(self.snapshot_dir(snapshot_id), recursive=True)
        with self.filesystem.open_output_stream(path) as out:
            out.write(data)
        return PartInfo(name, len(data), hashlib.sha256(data).hexdigest())

    def commit(self, snapshot_id: int, parts: list[PartInfo], metadata: dict[str, Any]) -> Manifest:
        """Commits snapshot ``snapshot_id``: writes its manifest last, under a temporary name, then moves it in place.

        Args:
            parts: The :class:`PartInfo` of every part, as :meth:`write_part` returned them.
            metadata: JSON-able data for the restorer (input positions, vertex ids, parallelism, times).

        Raises:
            ArgumentError: If a part repeats or ``metadata`` is not JSON-able.
            SnapshotError: If the snapshot is already committed, or a part is missing or of another size.
            StoreFencedError: another driver took the store over before the manifest was
                written (it is not), or while it was (it may be ignored by readers).
        """
        body = self._body(snapshot_id, parts, metadata)
        self._guard(f"committing snapshot {snapshot_id}")
        self._refuse_if_committed(snapshot_id, "cannot commit it again")
        for part in parts:
            self._check_present(snapshot_id, part)
        text = canonical({**body, "hmac": self._sign(body)} if self._key else body)
        self.filesystem.create_dir(self.snapshot_dir(snapshot_id), recursive=True)  # a snapshot may have no parts
        temp = f"{self.snapshot_dir(snapshot_id)}/{_TEMP_PREFIX}{uuid.uuid4().hex}"
        with self.filesystem.open_output_stream(temp) as out:
            out.write(text)
        try:
            self._publish(temp, snapshot_id)
        except OSError:  # the move may still have happened (an ambiguous commit): then it is committed
            if not self._published(snapshot_id, text):
                raise
        self._guard(f"snapshot {snapshot_id}: its manifest was written, but may be ignored by readers")
        return manifest_from(json.loads(text))

    def _publish(self, temp: str, snapshot_id: int) -> None:
        """Move the manifest at ``temp`` in place; on a local disk never over another (``os.link``):
        a late commit of a driver that lost the store cannot replace the new holder's (on S3 it can)."""
        if not self.leases.exclusive:
            self.filesystem.move(temp, self.manifest_path(snapshot_id))
            return
        try:
            os.link(temp, self.manifest_path(snapshot_id))
        except FileExistsError as error:
            os.unlink(temp)
            raise SnapshotError(f"snapshot {snapshot_id} is already committed: cannot commit it again") from error
        except OSError:  # a filesystem without hard links: a rename, atomic too, but it may replace
            os.replace(temp, self.manifest_path(snapshot_id))
            return
        os.unlink(temp)

    def _published(self, snapshot_id: int, text: bytes) -> bool:
        """Whether snapshot ``snapshot_id``'s manifest in place is ``text``: a commit whose move
        raised is committed if it is, and must be counted so (its id is never committed again)."""
        try:
            return self._read_file(self.manifest_path(snapshot_id), f"the manifest of snapshot {snapshot_id}") == text
        except (OSError, SnapshotError):  # unknown: reported as not committed (it stays restorable if it is)
            return False

    def _body(self, snapshot_id: int, parts: list[PartInfo], metadata: dict[str, Any]) -> dict[str, Any]:
        """The manifest's canonical body (everything but the HMAC); refuses bad arguments."""
        check_id(snapshot_id)
        if not all(isinstance(part, PartInfo) for part in parts) or len({part.name for part in parts}) != len(parts):
            raise ArgumentError(f"parts must be distinct PartInfo values, not {parts!r}")
        if not isinstance(metadata, dict):
            raise ArgumentError(f"metadata must be a dict, not {type(metadata).__name__}")
        body = {"format": FORMAT, "snapshot_id": snapshot_id, "committed_at": time.time(),
                "parts": [part.to_json() for part in parts], "metadata": metadata}
        if self.fence is not None:
            body["fence"] = self.fence.to_json()
        try:
            canonical(body)
        except (TypeError, ValueError) as error:
            raise ArgumentError(f"metadata of snapshot {snapshot_id} is not JSON-able: {error}") from error
        return body

    def _check_present(self, snapshot_id: int, part: PartInfo) -> None:
        """A cheap check at commit: the part exists with the size the writer reported."""
        import pyarrow.fs as pafs

        info = self.filesystem.get_file_info(self.part_path(snapshot_id, part.name))
        if info.type != pafs.FileType.File or info.size != part.size:
            found = "missing" if info.type != pafs.FileType.File else f"{info.size} bytes"
            raise SnapshotError(f"snapshot {snapshot_id}: cannot commit, part {part.name!r} of {part.size} bytes is {found}")

    def _refuse_if_committed(self, snapshot_id: int, what: str) -> None:
        import pyarrow.fs as pafs

        if self.filesystem.get_file_info(self.manifest_path(snapshot_id)).type != pafs.FileType.NotFound:
            raise SnapshotError(f"snapshot {snapshot_id} is already committed: {what}")

    def _guard(self, what: str) -> None:
        """Refuse ``what`` with a :class:`~raytide.errors.StoreFencedError` if this store's
        fence was taken over (nothing is checked without a fence)."""
        if self.fence is not None:
            self.leases.check(self.fence, f"{what} (snapshot store {self.uri!r})", self.follows_incarnation)

    def _sign(self, body: dict[str, Any]) -> str:
        assert self._key is not None
        return hmac.new(self._key, canonical(body), hashlib.sha256).hexdigest()

    def write_record(self, name: str, body: dict[str, Any]) -> None:
        """Replace the small JSON record ``name`` under the store's root (``_record-<name>.json``,
        signed like a manifest with a signing key): written under a temporary name, then
        moved into place, so a reader sees the old record or the new one whole."""
        check_part_name(name)
        text = canonical({**body, "hmac": self._sign(body)} if self._key else body)
        self._guard(f"writing record {name!r}")
        temp = f"{self.root}/{_TEMP_PREFIX}{uuid.uuid4().hex}"
        with self.filesystem.open_output_stream(temp) as out:
            out.write(text)
        self.filesystem.move(temp, f"{self.root}/{_RECORD_PREFIX}{name}.json")
        self._guard(f"record {name!r} was written, but another driver may read it")

    def read_record(self, name: str) -> dict[str, Any] | None:
        """Record ``name`` as :meth:`write_record` left it; None if there is none.

        Raises:
            SnapshotError: it does not parse or (with a signing key) its signature does not verify.
        """
        check_part_name(name)
        try:
            with self.filesystem.open_input_stream(f"{self.root}/{_RECORD_PREFIX}{name}.json") as stream:
                body = json.loads(stream.read())
        except FileNotFoundError:
            return None
        except ValueError as error:
            raise SnapshotError(f"record {name!r} of store {self.uri!r} does not parse: {error!r}") from error
        signature = body.pop("hmac", None)
        if self._key is not None and not (isinstance(signature, str)
                                          and hmac.compare_digest(signature.encode(), self._sign(body).encode())):
            raise SnapshotError(f"record {name!r} of store {self.uri!r}: its signature does not verify")
        return body

    # -- reading -----------------------------------------------------------------------------

    def manifest(self, snapshot_id: int) -> Manifest:
        """The verified manifest of snapshot ``snapshot_id`` (parts not read).

        Raises:
            SnapshotError: If the snapshot is not committed, or its manifest does not parse or verify.
        """
        entry = self._entry(snapshot_id, self.leases.view())
        if entry.manifest is None:
            raise SnapshotError(f"snapshot {snapshot_id} in {self.uri}: {entry.problem}")
        return entry.manifest

    def read_part(self, snapshot_id: int, name: str) -> bytes:
        """The bytes of part ``name`` of committed snapshot ``snapshot_id``, checked against its manifest.

        Raises:
            SnapshotError: Naming the snapshot and the part, if the snapshot is not committed, the
                part is missing, or its size or checksum differ (with expected and actual values).
        """
        return self._read_verified(snapshot_id, self.manifest(snapshot_id).part(name))

    def _read_verified(self, snapshot_id: int, part: PartInfo, keep: bool = True) -> bytes:
        """Reads ``part`` in chunks, hashing as it goes, and checks it against the manifest.

        Returns the bytes, or ``b""`` with ``keep=False`` (verifying a large snapshot then needs
        one chunk of memory). Only a missing part is a damage: a read that fails (a network
        failure) is tried again, then raises :class:`UnreadableFile`, never passing for damage.
        """
        path = self.part_path(snapshot_id, part.name)
        try:
            size, sha256, data = retried(lambda: hashed(self.filesystem, path, keep),
                                         f"part {part.name!r} of snapshot {snapshot_id}", self.uri, self.read_pauses)
        except FileNotFoundError as error:
            raise SnapshotError(f"snapshot {snapshot_id}: part {part.name!r} is missing") from error
        if size != part.size or sha256 != part.sha256:
            raise SnapshotError(
                f"snapshot {snapshot_id}: part {part.name!r} is corrupt: expected {part.size} bytes with sha256 "
                f"{part.sha256}, found {size} bytes with sha256 {sha256}")
        return data

    def _read_file(self, path: str, what: str) -> bytes:
        """The bytes at ``path``, read again after a transient failure (:func:`~raytide.snapshots.reads.retried`)."""
        def read() -> bytes:
            with self.filesystem.open_input_stream(path) as source:
                return source.read()

        return retried(read, what, self.uri, self.read_pauses)

    def _verify_parts(self, manifest: Manifest) -> str:
        """What is wrong with the parts of ``manifest`` ("" if nothing): every part is read and checked."""
        for part in manifest.parts:
            try:
                self._read_verified(manifest.snapshot_id, part, keep=False)
            except UnreadableFile:  # not damage: it may be intact
                raise
            except SnapshotError as error:
                return str(error)
        return ""

    # -- listing -----------------------------------------------------------------------------

    def committed(self) -> list[Manifest]:
        """The manifests of all committed snapshots, in id order: those whose manifest parses and verifies.

        Parts are not read; :meth:`latest` checks them.
        """
        return [entry.manifest for entry in self._entries() if entry.manifest is not None]

    def latest(self, since: int = 0) -> Manifest | None:
        """The newest committed snapshot whose every part exists with the right size and checksum,
        among those with an id of at least ``since`` (a run's own, in a store other runs used).

        A damaged newer snapshot (see the module docstring) is skipped with a
        :class:`RuntimeWarning` naming it and the damage. None if no snapshot is intact.
        """
        for entry in reversed(self._entries()):
            if entry.snapshot_id < since:
                break
            problem = entry.problem if entry.manifest is None else self._verify_parts(entry.manifest)
            if not problem:
                return entry.manifest
            warnings.warn(f"skipping snapshot {entry.snapshot_id} in {self.uri}: {problem}", RuntimeWarning, stacklevel=2)
        return None

    def next_id(self) -> int:
        """The id for the next snapshot: one more than any snapshot directory, committed or not (1 at first)."""
        return max(self._ids(), default=0) + 1

    def retain(self, keep: int) -> list[int]:
        """Deletes all but the newest ``keep`` committed snapshots, and every uncommitted directory
        older than the newest committed snapshot (abandoned writes). Returns the ids deleted.

        "Committed" means a manifest that parses and verifies; parts are not read, so with
        ``keep=1`` a newest snapshot with a corrupt part leaves nothing to fall back to.
        Uncommitted directories newer than the newest commit are kept: they may be in progress.
        """
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ArgumentError(f"keep must be an int >= 1, not {keep!r}")
        entries = self._entries()
        committed = [entry.snapshot_id for entry in entries if entry.manifest is not None]
        if not committed:
            return []
        self._guard("deleting old snapshots")
        kept = set(committed[-keep:])
        doomed = [entry.snapshot_id for entry in entries
                  if entry.snapshot_id not in kept and (entry.manifest is not None or entry.snapshot_id < committed[-1])]
        for snapshot_id in doomed:
            self._delete(snapshot_id)
        return doomed

    def _delete(self, snapshot_id: int) -> None:
        """Delete snapshot ``snapshot_id``, its manifest first: a delete that fails partway leaves an
        uncommitted directory (a later :meth:`retain` deletes it), never a manifest whose parts are gone."""
        with contextlib.suppress(FileNotFoundError):  # an abandoned snapshot has none
            self.filesystem.delete_file(self.manifest_path(snapshot_id))
        self.filesystem.delete_dir(self.snapshot_dir(snapshot_id))

    def _ids(self) -> list[int]:
        """The ids of all snapshot directories, ascending; other names under the root are ignored."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.root, allow_not_found=True)
        names = (Path(info.path).name for info in self.filesystem.get_file_info(selector) if info.type == pafs.FileType.Directory)
        return sorted(int(match.group(1)) for match in map(_DIR_PATTERN.fullmatch, names) if match)

    def _entries(self) -> list[_Entry]:
        ids, leases = self._ids(), self.leases.view()  # the claims are listed once for every manifest
        return [self._entry(snapshot_id, leases) for snapshot_id in ids]

    def _entry(self, snapshot_id: int, leases: LeaseView) -> _Entry:
        """Reads and verifies the manifest of one snapshot directory (a fenced one is not committed)."""
        try:
            text = self._read_file(self.manifest_path(snapshot_id), f"the manifest of snapshot {snapshot_id}")
        except FileNotFoundError:
            return _Entry(snapshot_id, None, "not committed (no manifest)")
        try:
            manifest = self._parse(snapshot_id, text)
        except SnapshotError as error:
            return _Entry(snapshot_id, None, str(error))
        taken = leases.fencing(manifest.fence, snapshot_id)
        return _Entry(snapshot_id, manifest, "") if taken is None else _Entry(snapshot_id, None, fenced_reason(manifest.fence, taken))

    def _parse(self, snapshot_id: int, text: bytes) -> Manifest:
        """The manifest in ``text``, refused with a :class:`SnapshotError` unless it parses, belongs
        to ``snapshot_id`` and (with a signing key) carries a valid HMAC."""
        try:
            body = json.loads(text)
            signature = body.pop("hmac", None) if isinstance(body, dict) else None
            manifest = manifest_from(body)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise SnapshotError(f"manifest does not parse: {error!r}") from error
        if manifest.snapshot_id != snapshot_id:
            raise SnapshotError(f"manifest is of snapshot {manifest.snapshot_id}, not {snapshot_id}")
        if self._key is not None:
            if not isinstance(signature, str):
                raise SnapshotError("manifest is not signed, and this store requires a signature")
            if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
                raise SnapshotError("manifest signature does not verify (tampered, or signed with another key)")
        return manifest


def store_of(recovery: Recovery) -> SnapshotStore:
    """The store of ``recovery``, fenced by the lease its job holds (``recovery.fence``, set by ``rt.run``)."""
    return SnapshotStore(recovery.store, recovery.signing_key, fence=recovery.fence)


def _resolve(uri: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path for ``uri``; a plain path is a local directory."""
    import pyarrow.fs as pafs

    if filesystem is not None:
        return filesystem, uri.rstrip("/")
    if "://" not in uri:
        return pafs.LocalFileSystem(), Path(uri).absolute().as_posix()
    try:
        resolved, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise ArgumentError(f"snapshot store URI {uri!r} is not one pyarrow.fs understands: {error}") from error
    return resolved, path.rstrip("/")
