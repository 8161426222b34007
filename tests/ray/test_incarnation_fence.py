"""The store fenced by the job's incarnation, on a real Ray (docs/recovery.md, "Leases and
fencing"): a replica's process is SIGKILLed, the recovery records its incarnation in the store,
and then a coordinator actor of the incarnation before it (a real actor, given the job's plan,
its fenced store and the acknowledgements of every replica, as a zombie coordinator cut off
from Ray but still reaching the store would have them) tries to commit a snapshot: the store
refuses it, naming the incarnation that replaced it, and leaves no trace of it; the job's
output is exactly the failure-free one. A coordinator of the current incarnation given the same
acknowledgements commits (the refusal is the fence's, nothing else). With the driver planted not
to record its incarnations (``JobSnapshots.enter`` a no-op), the old coordinator commits and this
test fails."""

from __future__ import annotations

import pickle
import random
import time
from typing import Any

import pytest
import ray

import raytide as rt
from raytide.actors.coordinator_actor import CoordinatorActor
from raytide.snapshots.coordinator import Acknowledgement
from raytide.snapshots.recovery import JOB_PART
from raytide.snapshots.store import SnapshotStore
from tests.ray.test_recovery import a_replica, check, run_and_kill, scenario, sigkill

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]

#: A coordinator actor outside the job's pool, as the job's own is (calls on a few threads).
Coordinator = ray.remote(num_cpus=0, max_concurrency=4)(CoordinatorActor)


def commit_as(job: rt.Job, store: SnapshotStore, incarnation: int) -> Any:
    """A new coordinator actor of ``job`` in ``incarnation`` takes a snapshot now: it is handed
    every replica's acknowledgement (their summaries in ``store``'s latest snapshot); the
    object ref of its ``snapshot_now`` (the id committed, or its error), and the id it took."""
    snapshots = job._recovery
    assert snapshots is not None
    coordinator = Coordinator.remote(job.plan, snapshots.recovery, {}, incarnation, snapshots.first_id)
    latest = store.latest()
    assert latest is not None
    summaries = pickle.loads(store.read_part(latest.snapshot_id, JOB_PART))
    asked = coordinator.snapshot_now.remote(30.0, {})
    deadline = time.monotonic() + 30
    while (snapshot_id := ray.get(coordinator.stats.remote())["in_flight"]) is None:
        assert time.monotonic() < deadline, "the coordinator took no snapshot in 30 s"
        time.sleep(0.02)
    for key, summary in summaries.items():
        coordinator.acknowledge.remote(Acknowledgement(key, snapshot_id, incarnation, (), summary))
    return asked, snapshot_id


def test_a_coordinator_of_a_replaced_incarnation_cannot_commit(ray_session, tmp_path):
    keyed, rng, seen = scenario("keyed"), random.Random(3), []

    def kill(job: rt.Job) -> None:
        seen.append(job)
        sigkill(job, "{}/{}".format(*a_replica(job, rng)))

    got, stats = run_and_kill(keyed, tmp_path, [kill])
    check(keyed, got)
    assert stats["recoveries"]["count"] == 1, stats["recoveries"]
    job, store = seen[0], SnapshotStore(str(tmp_path / "store"))
    current = stats["recoveries"]["incarnation"]
    assert current >= 1

    asked, refused_id = commit_as(job, store, current - 1)
    with pytest.raises(ray.exceptions.RayTaskError, match=rf"snapshot {refused_id} was not committed: .*committing it "
                                                          rf"failed: StoreFencedError.*a recovery of this job started "
                                                          rf"incarnation {current} after this writer's incarnation "
                                                          rf"{current - 1}"):
        ray.get(asked, timeout=60)
    assert refused_id not in [manifest.snapshot_id for manifest in store.committed()]
    assert not (tmp_path / "store" / f"snapshot-{refused_id:020d}").exists(), "a refused commit left files"

    asked, committed_id = commit_as(job, store, current)
    assert ray.get(asked, timeout=60) == committed_id
    assert store.latest().snapshot_id == committed_id  # type: ignore[union-attr]
