"""The store's answer to each fault, one call at a time (the seeded trials of
``tests/sim/test_store_fault_kinds_sim.py`` check them inside running jobs): an ambiguous
commit stands, a failed read is retried and then named, a failed delete leaves no committed
snapshot with parts missing and fails no commit."""

from __future__ import annotations

import pytest

from raytide.errors import SnapshotError
from raytide.snapshots import reads
from raytide.snapshots.recovery import commit_snapshot
from raytide.snapshots.store import Manifest, SnapshotStore
from raytide.testing.store_faults import FaultyStore, StoreFaults
from tests.unit.test_snapshot_store import write_snapshot


def test_an_ambiguous_commit_is_read_back_and_stands(tmp_path):
    store = FaultyStore(str(tmp_path), StoreFaults(ambiguous=1.0), seed=0)
    manifest = write_snapshot(store, {"p": b"state"}, job="j")  # the move raised: the store read it back
    assert store.files.ambiguous_ids == [1]
    assert SnapshotStore(str(tmp_path)).latest() == manifest
    with pytest.raises(SnapshotError, match="snapshot 1 is already committed"):
        store.commit(1, list(manifest.parts), {"job": "j"})


def test_a_commit_whose_manifest_is_not_in_place_still_fails(tmp_path):
    store = FaultyStore(str(tmp_path), StoreFaults(torn=1.0), seed=0)
    store.files.faults = StoreFaults()  # the part is written whole
    part = store.write_part(1, "p", b"state")
    store.files.faults = StoreFaults(torn=1.0)  # the manifest's temporary file is torn
    with pytest.raises(OSError, match="injected torn write"):
        store.commit(1, [part], {})
    assert SnapshotStore(str(tmp_path)).committed() == []


def test_a_failed_read_is_tried_again_and_then_named(tmp_path):
    manifest = write_snapshot(SnapshotStore(str(tmp_path)), {"p": b"state"})
    store = FaultyStore(str(tmp_path), StoreFaults(reads=1.0), seed=0)
    with pytest.raises(reads.UnreadableFile) as raised:
        store.read_part(manifest.snapshot_id, "p")
    assert f"snapshot store {str(tmp_path)!r} failed 4 times" in str(raised.value)
    assert "the manifest of snapshot 1" in str(raised.value)
    with pytest.raises(reads.UnreadableFile, match="of snapshot 1"):
        store.latest()  # not skipped as damaged: it may be intact
    store.files.faults = StoreFaults(reads=0.5)
    assert store.read_part(manifest.snapshot_id, "p") == b"state"  # seed 0 draws fewer than four failures in a row


def test_a_missing_file_is_not_retried(tmp_path):
    calls = []

    def missing() -> bytes:
        calls.append(1)
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        reads.retried(missing, "part 'p' of snapshot 1", "store", (0.0, 0.0))
    assert calls == [1]


def test_a_failed_delete_leaves_no_committed_snapshot_with_parts_missing(tmp_path):
    plain = SnapshotStore(str(tmp_path))
    for data in (b"one", b"two", b"three"):
        write_snapshot(plain, {"a": data, "b": data, "c": data})
    store = FaultyStore(str(tmp_path), StoreFaults(deletes=1.0), seed=0)
    with pytest.raises(OSError, match="injected failed delete"):
        store.retain(1)
    assert all(not plain._verify_parts(manifest) for manifest in plain.committed())
    assert plain.retain(1) == [1, 2] and plain._ids() == [3]


class _Commit:
    """What commit_snapshot reads of the coordinator's commit."""

    snapshot_id, incarnation, parts, summaries = 2, 1, (), {}


def test_a_failed_retention_fails_no_commit(tmp_path, monkeypatch):
    write_snapshot(SnapshotStore(str(tmp_path)), {"p": b"old"})
    store = FaultyStore(str(tmp_path), StoreFaults(deletes=1.0), seed=0)
    monkeypatch.setattr("raytide.snapshots.recovery.complete_at_cut", lambda plan, summaries: {})
    monkeypatch.setattr("raytide.snapshots.recovery.snapshot_metadata", lambda *args: {})
    with pytest.warns(RuntimeWarning, match="snapshot 2 is committed, but deleting older snapshots"):
        commit_snapshot(store, None, _Commit(), {}, retain=1)  # type: ignore[arg-type]
    latest = SnapshotStore(str(tmp_path)).latest()
    assert isinstance(latest, Manifest) and latest.snapshot_id == 2
