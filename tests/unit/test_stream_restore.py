"""Which snapshot a job with stream inputs restores: the latest one at a batch boundary.

A stream's batch is dealt in one call per input replica, so a snapshot in which all of
an input's replicas are at one epoch holds exactly the batches before it; one that cut
the input between two replicas' calls cannot be restored exactly after the driver is
gone (the producer's replay would be dealt anew). Checked here on a real store against a
brute-force oracle over random histories of snapshots.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.driver.streams import restore_id, stream_epochs
from raytide.errors import SnapshotError
from raytide.physical.protocol import ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.recovery import JOB_PART
from raytide.snapshots.replica_state import ReplicaSummary
from raytide.snapshots.store import SnapshotStore
from raytide.sources.stream import boundary_epoch


def summary(vertex: str, epoch: int | None) -> ReplicaSummary:
    """An input replica of ``vertex`` at ``epoch`` (None: closed), with a downstream pointstamp beside it."""
    held = [] if epoch is None else [((Location.of_vertex(vertex), Timestamp(epoch)), 1)]
    return ReplicaSummary([*held, ((Location.of_vertex("count"), Timestamp(0)), 1)], {vertex: 7}, {})


def commit(store: SnapshotStore, epochs: dict[str, list[int | None]]) -> int:
    """A committed snapshot whose input replicas were at ``epochs`` (per input, per replica)."""
    snapshot_id = store.next_id()
    summaries = {ReplicaKey(f"{name}-chain", index): summary(name, epoch)
                 for name, per_replica in epochs.items() for index, epoch in enumerate(per_replica)}
    summaries[ReplicaKey("count", 0)] = ReplicaSummary([], {}, {})
    part = store.write_part(snapshot_id, JOB_PART, pickle.dumps(summaries))
    store.commit(snapshot_id, [part], {})
    return snapshot_id


def test_the_epochs_of_each_stream_input_replica_are_read_from_the_summaries(tmp_path):
    store = SnapshotStore(str(tmp_path))
    snapshot_id = commit(store, {"lines": [3, 4], "other": [None, 9]})
    assert stream_epochs(store, snapshot_id, ["lines", "other"]) == {"lines": [3, 4], "other": [None, 9]}


replica_epochs = st.lists(st.integers(0, 3), min_size=2, max_size=2)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.fixed_dictionaries({"a": replica_epochs, "b": replica_epochs}), min_size=1, max_size=5))
def test_latest_is_the_newest_snapshot_with_every_stream_input_at_one_epoch(tmp_path_factory, history):
    store = SnapshotStore(str(tmp_path_factory.mktemp("store")))
    ids = [commit(store, epochs) for epochs in history]
    at_boundary = [i for i, epochs in zip(ids, history) if all(len(set(e)) == 1 for e in epochs.values())]
    if at_boundary:
        assert restore_id(store, "latest", ["a", "b"]) == at_boundary[-1]
    else:
        with pytest.raises(SnapshotError, match="no committed snapshot at a batch boundary"):
            restore_id(store, "latest", ["a", "b"])
    for snapshot_id in ids:
        if snapshot_id in at_boundary:
            assert restore_id(store, snapshot_id, ["a", "b"]) == snapshot_id
        else:
            with pytest.raises(SnapshotError, match=f"snapshot {snapshot_id} cut stream inputs"):
                restore_id(store, snapshot_id, ["a", "b"])


def test_latest_of_an_empty_store_starts_afresh(tmp_path):
    assert restore_id(SnapshotStore(str(tmp_path)), "latest", ["a"]) is None


def test_a_closed_input_or_replicas_apart_are_at_no_boundary():
    assert boundary_epoch([4, 4, 4]) == 4
    assert boundary_epoch([4, 5]) is None
    assert boundary_epoch([None, None]) is None
