"""``rt.Recovery(signing_key=..., interval="auto")`` in a running job on a real Ray: the
interval starts at 1 s and becomes the utilization model's once three snapshots are
measured, periodic snapshots commit, signed; a snapshot someone rewrote (a part replaced by
a pickle that would run code, its checksum updated in the manifest, which they cannot
sign) is skipped by a recovery after a real SIGKILL, with a warning naming it, and the one
before is restored: the output is exactly the reference's and the planted code never ran;
``restore=`` of it is refused naming the snapshot (docs/recovery.md, Security)."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import time
import warnings
from pathlib import Path

import pytest

import raytide as rt
from raytide.snapshots.store import SnapshotStore
from tests.odd_keys import odd_keys_flow, odd_pairs, reference
from tests.ray.jobs import wait_for_epoch
from tests.ray.test_recovery import sigkill
from tests.sim.scenarios import as_counters

pytestmark = pytest.mark.ray

KEY = b"the job's signing key"


class Planted:
    """What an attacker's part unpickles to: it touches ``marker`` (any code could run there)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return Path.touch, (self.marker,)


def rewrite(store: Path, snapshot_id: int, marker: Path) -> None:
    """Replace a part of snapshot ``snapshot_id`` with :class:`Planted` and update its size and
    checksum in the manifest, keeping the manifest's signature (the key is not the attacker's)."""
    directory = store / f"snapshot-{snapshot_id:020d}"
    manifest = json.loads((directory / "_manifest.json").read_text())
    part = next(part for part in manifest["parts"] if part["name"].startswith("replica-seen"))
    data = pickle.dumps(Planted(marker))
    (directory / part["name"]).write_bytes(data)
    part.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (directory / "_manifest.json").write_text(json.dumps(manifest))


def snapshots_once(job: rt.Job, what: str, condition) -> dict:
    """``job.stats()["snapshots"]`` once ``condition`` holds of them (within 30 s)."""
    deadline = time.monotonic() + 30
    while not condition(snapshots := job.stats()["snapshots"]):
        assert time.monotonic() < deadline, f"not {what} within 30 s: {snapshots}"
        time.sleep(0.05)
    return snapshots


def test_a_signed_store_with_an_auto_interval_recovers_from_a_sigkill_skipping_a_rewritten_snapshot(ray_session,
                                                                                                    tmp_path):
    inputs, store, marker = odd_pairs(random.Random(12), epochs=8, most=12), tmp_path / "store", tmp_path / "ran"
    recovery = rt.Recovery(str(store), interval="auto", signing_key=KEY, max_restarts=2)
    with warnings.catch_warnings(record=True) as warned, rt.run(odd_keys_flow(), parallelism=2, recovery=recovery) as job:
        warnings.simplefilter("always")
        for epoch in range(3):
            job.push("pairs", inputs[epoch], epoch=epoch)
        job.advance("pairs", 3)
        first = snapshots_once(job, "a periodic snapshot committed", lambda snapshots: snapshots["committed"] >= 1)
        assert first["interval_s"] == 1.0, first  # the model has no durations yet
        kept = job.snapshot(timeout=60)
        for epoch in (3, 4):
            job.push("pairs", inputs[epoch], epoch=epoch)
        job.advance("pairs", 5)
        wait_for_epoch(job, "running", 4, timeout=60)
        rewritten = job.snapshot(timeout=60)
        tuned = snapshots_once(job, "tuned after three snapshots", lambda snapshots: snapshots["interval_s"] != 1.0)
        assert tuned["committed"] >= 3, tuned
        rewrite(store, rewritten, marker)
        sigkill(job, f"{job.plan.chain_of('seen').name}/1")
        for epoch in (5, 6, 7):
            job.push("pairs", inputs[epoch], epoch=epoch)
        job.close("pairs")
        job.wait(timeout=60)
        got = {name: job.collect(name) for name in ("per_epoch", "running")}
        recoveries = job.stats()["recoveries"]
    assert as_counters(got) == reference(inputs)
    assert 1.0 < tuned["interval_s"] <= 3600.0, tuned  # T* of the measured durations and the prior failure rate
    assert recoveries["count"] == 1 and recoveries["recoveries"][0]["snapshot_id"] == kept, (kept, recoveries)
    assert any(f"skipping snapshot {rewritten}" in str(w.message) and "signature does not verify" in str(w.message)
               for w in warned), [str(w.message) for w in warned]
    assert not marker.exists(), "the rewritten part was unpickled"
    assert SnapshotStore(str(store), signing_key=KEY).manifest(kept).snapshot_id == kept  # the others verify
    with pytest.raises(rt.errors.SnapshotError, match=f"snapshot {rewritten} .*signature does not verify"):
        rt.run(odd_keys_flow(), recovery=rt.Recovery(str(store), signing_key=KEY), restore=rewritten)
    assert not marker.exists()
