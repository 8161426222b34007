"""A store's snapshots for people: ``python -m raytide snapshots STORE`` and
``rt.snapshots.describe``, a table of the committed snapshots (id, commit time, size, parts,
what the metadata holds) and a line for each directory that is not one, with the reason."""

from __future__ import annotations

from datetime import datetime, timezone

from raytide.snapshots.manifest import Manifest
from raytide.snapshots.store import SnapshotStore


def describe(uri_or_store: str | SnapshotStore) -> str:
    """A human-readable table of the snapshots in a store: for each committed one its id, commit
    time (UTC), total size, number of parts and metadata keys (the vertices, when the metadata
    names them); then one line per directory that is not a committed snapshot, with the reason."""
    store = uri_or_store if isinstance(uri_or_store, SnapshotStore) else SnapshotStore(uri_or_store)
    entries = store._entries()
    if not entries:
        return f"no snapshots in {store.uri}"
    rows = [("id", "committed (UTC)", "size", "parts", "metadata")]
    rows += [_row(entry.manifest) for entry in entries if entry.manifest is not None]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [f"snapshots in {store.uri}:"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    lines += [f"snapshot {entry.snapshot_id}: {entry.problem}" for entry in entries if entry.manifest is None]
    return "\n".join(line.rstrip() for line in lines)


def _row(manifest: Manifest) -> tuple[str, str, str, str, str]:
    when = datetime.fromtimestamp(manifest.committed_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    about = "keys: " + ", ".join(sorted(manifest.metadata)) if manifest.metadata else "-"
    vertices = manifest.metadata.get("vertices")
    if isinstance(vertices, (list, dict)):
        about = f"vertices: {', '.join(map(str, vertices))}; {about}"
    return str(manifest.snapshot_id), when, _human_size(manifest.total_size), str(len(manifest.parts)), about


def _human_size(size: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    power = min(max(size.bit_length() - 1, 0) // 10, 3)
    return f"{size} B" if power == 0 else f"{size / 1024**power:.1f} {('KiB', 'MiB', 'GiB')[power - 1]}"
