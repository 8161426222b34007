"""raytide's command line: ``python -m raytide snapshots STORE [--show ID]``.

``snapshots`` lists the snapshots of a store (a local directory or any URI ``pyarrow.fs``
understands): each committed one with its id, commit time, size, parts and metadata, then
every directory that is not a committed snapshot, with what is wrong with it. ``--show ID``
prints one snapshot's verified manifest: its parts with their sizes and checksums, and its
metadata. Nothing is unpickled: listing a store someone else can write is safe.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from raytide.errors import RaytideError
from raytide.snapshots import SnapshotStore, describe


def _show(store: SnapshotStore, snapshot_id: int) -> str:
    """One snapshot's manifest, verified, as text."""
    manifest = store.manifest(snapshot_id)
    lines = [f"snapshot {manifest.snapshot_id} in {store.uri}, {len(manifest.parts)} parts, {manifest.total_size} bytes:"]
    lines += [f"  {part.name}  {part.size} bytes  sha256 {part.sha256}" for part in manifest.parts]
    lines.append("metadata: " + json.dumps(manifest.metadata, indent=2, sort_keys=True))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a store or snapshot that cannot be read)."""
    parser = argparse.ArgumentParser(prog="python -m raytide", description="raytide's command line")
    commands = parser.add_subparsers(dest="command", required=True)
    snapshots = commands.add_parser("snapshots", help="list the snapshots of a store, or show one")
    snapshots.add_argument("store", help="a local directory or a URI pyarrow.fs understands (s3://bucket/prefix)")
    snapshots.add_argument("--show", type=int, metavar="ID", help="print the manifest of snapshot ID")
    args = parser.parse_args(argv)
    try:
        store = SnapshotStore(args.store)
        print(describe(store) if args.show is None else _show(store, args.show))
    except RaytideError as error:
        print(f"raytide snapshots: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
