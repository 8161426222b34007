"""A snapshot's manifest: its parts (name, size, SHA-256), the committer's metadata and the
lease generation that committed it, in the one canonical JSON form that is signed and
written (:mod:`raytide.snapshots.store` writes and reads it)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from raytide.errors import ArgumentError, SnapshotError
from raytide.snapshots.lease import Fence

#: The manifest's file name in its snapshot's directory.
MANIFEST = "_manifest.json"
#: The manifest format written, and the only one read.
FORMAT = 1
#: Digits of a snapshot id in its directory's name: wide enough for any non-negative int64.
ID_DIGITS = 20


@dataclasses.dataclass(frozen=True)
class PartInfo:
    """One part file of a snapshot: its name inside the snapshot's directory, size in bytes, SHA-256 (hex)."""

    name: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The part's entry in a manifest."""
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A committed snapshot: its id, parts, the committer's metadata and when it was committed.

    ``metadata`` is exactly what a reader gets back from the JSON (tuples become lists, keys
    strings), so the manifest :meth:`SnapshotStore.commit` returns equals the one read later.
    """

    snapshot_id: int
    parts: tuple[PartInfo, ...]
    metadata: dict[str, Any]
    committed_at: float  # seconds since the epoch, UTC
    fence: Fence | None = None  # the lease generation of the job that committed it (None: it held none)

    @property
    def total_size(self) -> int:
        """The bytes of all parts together."""
        return sum(part.size for part in self.parts)

    def part(self, name: str) -> PartInfo:
        """The part called ``name``; a :class:`SnapshotError` if the snapshot has none."""
        for part in self.parts:
            if part.name == name:
                return part
        raise SnapshotError(f"snapshot {self.snapshot_id} has no part {name!r} (parts: {[p.name for p in self.parts]})")


def manifest_from(body: Any) -> Manifest:
    """A :class:`Manifest` from parsed JSON (without the HMAC); KeyError/TypeError/ValueError if malformed."""
    if body["format"] != FORMAT:
        raise ValueError(f"unknown manifest format {body['format']!r}")
    parts = tuple(PartInfo(str(p["name"]), _integer(p["size"]), str(p["sha256"])) for p in body["parts"])
    if not isinstance(body["metadata"], dict):
        raise TypeError("metadata is not an object")
    fence = Fence.from_json(body["fence"]) if "fence" in body else None
    return Manifest(_integer(body["snapshot_id"]), parts, body["metadata"], float(body["committed_at"]), fence)


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def canonical(body: dict[str, Any]) -> bytes:
    """The one byte form of a manifest body that is signed and written (sorted keys, no NaN)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def check_id(snapshot_id: int) -> None:
    if not isinstance(snapshot_id, int) or isinstance(snapshot_id, bool) or not 0 <= snapshot_id < 10**ID_DIGITS:
        raise ArgumentError(f"snapshot_id must be a non-negative int below 10**{ID_DIGITS}, not {snapshot_id!r}")


def check_part_name(name: str) -> None:
    """Part names are plain file names; names starting with ``_`` are the store's own."""
    if not isinstance(name, str) or not name or name in (".", "..") or name.startswith("_") or re.search(r"[/\\]", name):
        raise ArgumentError(f"part name must be a plain file name not starting with '_', not {name!r}")
