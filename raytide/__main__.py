"""raytide's command line: ``python -m raytide snapshots STORE [--show ID]`` and ``python -m raytide ui``.

``snapshots`` lists the snapshots of a store (a local directory or any URI ``pyarrow.fs``
understands): each committed one with its id, commit time, size, parts and metadata, then
every directory that is not a committed snapshot, with what is wrong with it. ``--show ID``
prints one snapshot's verified manifest: its parts with their sizes and checksums, and its
metadata. Nothing is unpickled: listing a store someone else can write is safe.

``ui`` connects to a Ray cluster (``--address``, default ``auto``) and serves the live view of
the jobs whose drivers post to the cluster's board (``rt.run(..., ui=True)``, or ``RAYTIDE_UI=1``
in a driver's environment) until Ctrl-C; see docs/ui.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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


def _ui(address: str, host: str, port: int, token: str | None) -> int:
    """Serve the cluster's watched jobs until Ctrl-C."""
    import ray

    from raytide.driver.watch import serve_board

    ray.init(address=address, log_to_driver=False)
    server = serve_board(host, port, token)
    print(f"raytide ui: the jobs on Ray cluster {address!r} at {server.url()} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a store or snapshot that cannot be read)."""
    parser = argparse.ArgumentParser(prog="python -m raytide", description="raytide's command line")
    commands = parser.add_subparsers(dest="command", required=True)
    snapshots = commands.add_parser("snapshots", help="list the snapshots of a store, or show one")
    snapshots.add_argument("store", help="a local directory or a URI pyarrow.fs understands (s3://bucket/prefix)")
    snapshots.add_argument("--show", type=int, metavar="ID", help="print the manifest of snapshot ID")
    ui = commands.add_parser("ui", help="serve the live view of the jobs running on a Ray cluster")
    ui.add_argument("--address", default="auto", help="the Ray cluster (default: auto, as RAY_ADDRESS or the last ray start)")
    ui.add_argument("--host", default="127.0.0.1", help="where to serve (another than loopback: a token is required)")
    ui.add_argument("--port", type=int, default=8266, help="the port to serve on (0: any free one)")
    ui.add_argument("--token", default=None, help="the token requests must carry (default: random, off loopback)")
    args = parser.parse_args(argv)
    if args.command == "ui":
        return _ui(args.address, args.host, args.port, args.token)
    try:
        store = SnapshotStore(args.store)
        print(describe(store) if args.show is None else _show(store, args.show))
    except RaytideError as error:
        print(f"raytide snapshots: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
