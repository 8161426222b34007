"""Recovery with its snapshots on S3: a real S3-compatible server on this machine (moto in
server mode), named by a plain ``s3://`` URI that carries the endpoint and the credentials,
so that every actor of the job reaches it. A replica is killed after two committed
snapshots; the job restores from S3 and finishes with exactly the failure-free output."""

from __future__ import annotations

import random
import socket
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest
from moto.server import ThreadedMotoServer

from raytide.snapshots.store import SnapshotStore
from tests.ray.test_recovery import a_replica, check, run_and_kill, scenario, sigkill

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]


@pytest.fixture
def s3_uri() -> Iterator[str]:
    """An ``s3://`` URI of a fresh bucket on a moto server on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        query = f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        filesystem, _ = pafs.FileSystem.from_uri(f"s3://testing:testing@snapshots?{query}&allow_bucket_creation=true")
        filesystem.create_dir("snapshots")
        yield f"s3://testing:testing@snapshots/{uuid.uuid4().hex}?{query}"  # apart even if two servers met on a port
    finally:
        server.stop()


def test_a_job_recovers_from_snapshots_on_s3(ray_session, s3_uri, tmp_path):
    words = scenario("word count", seed=12)
    rng = random.Random(13)
    got, stats = run_and_kill(words, tmp_path, [lambda job: sigkill(job, str(a_replica(job, rng)))], store=s3_uri)
    check(words, got)
    assert stats["recoveries"]["count"] == 1 and stats["recoveries"]["recoveries"][0]["snapshot_id"] >= 2
    assert len(SnapshotStore(s3_uri).committed()) >= 1
