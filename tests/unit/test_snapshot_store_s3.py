"""The snapshot store on S3: a real S3-compatible server on this machine (moto in server mode,
spoken to over HTTP by pyarrow's own S3 client), with the local tests' round trip and damage checks.

S3 has no rename: pyarrow's ``move`` of a file is CopyObject then DeleteObject. The commit stays
atomic for readers because the manifest object appears whole or not at all; these tests check
that a commit leaves exactly the parts and the manifest behind (the temporary copy deleted)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest
from moto.server import ThreadedMotoServer

from raytide.snapshots import SnapshotStore
from tests.unit.test_snapshot_store import DAMAGE, KEY, check_fallback, check_round_trip, files_of, write_snapshot


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3() -> Iterator[pafs.S3FileSystem]:
    """A moto S3 server on a free local port, and a pyarrow client of it (started once per module)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", access_key="testing",
                                secret_key="testing", region="us-east-1", allow_bucket_creation=True,
                                connect_timeout=5, request_timeout=10)
    finally:
        server.stop()


@pytest.fixture
def bucket(s3) -> str:
    """A fresh bucket per test, so tests do not see each other's snapshots."""
    name = f"snapshots-{uuid.uuid4().hex}"
    s3.create_dir(name)
    return name


def test_round_trip(s3, bucket):
    check_round_trip(SnapshotStore(f"{bucket}/jobs/wordcount", filesystem=s3))


def test_round_trip_signed(s3, bucket):
    check_round_trip(SnapshotStore(f"{bucket}/signed", KEY, filesystem=s3))


def test_a_commit_leaves_only_parts_and_the_manifest(s3, bucket):
    """``move`` on S3 is copy + delete: the temporary manifest must be gone after a commit."""
    store = SnapshotStore(bucket, filesystem=s3)
    write_snapshot(store, {"a": b"1", "b": b"2"})
    assert files_of(store, 1) == ["_manifest.json", "a", "b"]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_is_detected_and_the_previous_snapshot_used(s3, bucket, damage):
    check_fallback(SnapshotStore(f"{bucket}/snapshots", filesystem=s3), damage)


def test_retain_deletes_on_s3(s3, bucket):
    store = SnapshotStore(bucket, filesystem=s3)
    for data in (b"1", b"2", b"3"):
        write_snapshot(store, {"p": data})
    assert store.retain(1) == [1, 2]
    assert [m.snapshot_id for m in store.committed()] == [3] and files_of(store, 1) == []
