"""``python -m raytide snapshots STORE [--show ID]`` in a child process, on a real local store
(not in the unit tier: waiting for a child process sleeps)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from raytide.snapshots import SnapshotStore

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raytide", "snapshots", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def committed_store(path: Path) -> SnapshotStore:
    """Snapshots 1 and 2 committed; 3 written but never committed."""
    store = SnapshotStore(str(path))
    for snapshot_id in (1, 2, 3):
        part = store.write_part(snapshot_id, "count-0", b"state of count" * snapshot_id)
        if snapshot_id < 3:
            store.commit(snapshot_id, [part], {"vertices": ["count"], "epoch": snapshot_id})
    return store


def test_it_lists_the_committed_snapshots_and_what_is_wrong_with_the_others(tmp_path):
    committed_store(tmp_path)
    done = cli(str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines()[2:] if line[:1].isdigit()]
    assert rows == ["1", "2"], done.stdout
    assert "vertices: count" in done.stdout
    assert "snapshot 3:" in done.stdout, "the uncommitted directory is named with its problem"


def test_it_shows_one_snapshots_parts_and_metadata(tmp_path):
    store = committed_store(tmp_path)
    done = cli(str(tmp_path), "--show", "2")
    assert done.returncode == 0, done.stderr
    part = store.manifest(2).part("count-0")
    assert f"count-0  {part.size} bytes  sha256 {part.sha256}" in done.stdout
    assert '"epoch": 2' in done.stdout


def test_a_snapshot_that_is_not_committed_is_a_clear_error(tmp_path):
    committed_store(tmp_path)
    done = cli(str(tmp_path), "--show", "3")
    assert done.returncode == 2 and "snapshot 3" in done.stderr and done.stdout == "", (done.stdout, done.stderr)
