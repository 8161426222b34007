"""The snapshot store on a local directory: round trip, manifest-last commits, detection of every
kind of damage with fallback to the previous snapshot, retention, signing, and a stateful property
test against an in-memory oracle. The ``check_*`` helpers run unchanged against S3 too
(tests/unit/test_snapshot_store_s3.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from raytide.errors import ArgumentError, SnapshotError
from raytide.snapshots import Manifest, SnapshotStore, describe
from raytide.snapshots.reads import CHUNK
from raytide.snapshots.store import MANIFEST

KEY = b"the coordinator's key"


# -- helpers shared with the S3 tests -----------------------------------------------------------

def read(store: SnapshotStore, path: str) -> bytes:
    with store.filesystem.open_input_stream(path) as source:
        return source.read()


def overwrite(store: SnapshotStore, path: str, data: bytes) -> None:
    with store.filesystem.open_output_stream(path) as out:
        out.write(data)


def flip_byte(store: SnapshotStore, path: str, index: int = 0, mask: int = 0x01) -> None:
    """Damages one byte of a file in place (bit rot, a torn sector)."""
    data = bytearray(read(store, path))
    data[index] ^= mask
    overwrite(store, path, bytes(data))


def write_snapshot(store: SnapshotStore, parts: dict[str, bytes], **metadata: object) -> Manifest:
    """What the coordinator and writers will do: parts first, then one commit."""
    snapshot_id = store.next_id()
    infos = [store.write_part(snapshot_id, name, data) for name, data in parts.items()]
    return store.commit(snapshot_id, infos, dict(metadata))


def files_of(store: SnapshotStore, snapshot_id: int) -> list[str]:
    selector = pafs.FileSelector(store.snapshot_dir(snapshot_id), allow_not_found=True)
    return sorted(info.path.rsplit("/", 1)[-1] for info in store.filesystem.get_file_info(selector)
                  if info.type == pafs.FileType.File)


def check_round_trip(store: SnapshotStore) -> None:
    """Parts and metadata come back exactly; the manifest is the only other file of the snapshot."""
    parts = {"vertex-a.0": b"state of a", "vertex-b.0": bytes(range(256)) * 3, "empty": b""}
    metadata = {"vertices": ["a", "b"], "positions": {"input": [3, 7]}, "parallelism": 1}
    first = write_snapshot(store, parts, **metadata)
    assert first.snapshot_id == 1 and first.metadata == metadata
    assert store.committed() == [first] and store.latest() == first
    assert {name: store.read_part(1, name) for name in parts} == parts
    assert first.total_size == sum(map(len, parts.values()))
    assert files_of(store, 1) == sorted([*parts, "_manifest.json"])
    second = write_snapshot(store, {"vertex-a.0": b"later"}, vertices=("a",))
    assert second.metadata == {"vertices": ["a"]}  # what a reader gets back from JSON
    assert [m.snapshot_id for m in store.committed()] == [1, 2] and store.latest() == second
    assert store.manifest(2) == second and store.next_id() == 3


def damage_part(store: SnapshotStore, snapshot_id: int) -> None:
    flip_byte(store, store.part_path(snapshot_id, "p"), index=2)


def truncate_part(store: SnapshotStore, snapshot_id: int) -> None:
    overwrite(store, store.part_path(snapshot_id, "p"), read(store, store.part_path(snapshot_id, "p"))[:2])


def delete_part(store: SnapshotStore, snapshot_id: int) -> None:
    store.filesystem.delete_file(store.part_path(snapshot_id, "p"))


def delete_manifest(store: SnapshotStore, snapshot_id: int) -> None:
    store.filesystem.delete_file(store.manifest_path(snapshot_id))


def garble_manifest(store: SnapshotStore, snapshot_id: int) -> None:
    flip_byte(store, store.manifest_path(snapshot_id), index=0, mask=0xFF)


def swap_manifest(store: SnapshotStore, snapshot_id: int) -> None:
    overwrite(store, store.manifest_path(snapshot_id), read(store, store.manifest_path(snapshot_id - 1)))


#: Each kind of damage, and what the warning must say about it.
DAMAGE: dict[str, tuple[Callable[[SnapshotStore, int], None], str]] = {
    "flipped part byte": (damage_part, r"part 'p' is corrupt: expected 5 bytes with sha256 \w+, found 5 bytes"),
    "truncated part": (truncate_part, "part 'p' is corrupt: expected 5 bytes .* found 2 bytes"),
    "missing part": (delete_part, "part 'p' is missing"),
    "missing manifest": (delete_manifest, r"not committed \(no manifest\)"),
    "unparsable manifest": (garble_manifest, "manifest does not parse"),
    "manifest of another snapshot": (swap_manifest, "manifest is of snapshot 1, not 2"),
}


def check_fallback(store: SnapshotStore, damage: str) -> None:
    """Snapshot 2 damaged: ``latest()`` warns naming snapshot 2 and the damage, and returns snapshot 1."""
    first = write_snapshot(store, {"p": b"first"})
    write_snapshot(store, {"p": b"later"})
    spoil, message = DAMAGE[damage]
    spoil(store, 2)
    with pytest.warns(RuntimeWarning, match=f"skipping snapshot 2 in .*: .*{message}"):
        assert store.latest() == first
    assert read(store, store.part_path(1, "p")) == b"first"


# -- local directory ----------------------------------------------------------------------------

@pytest.fixture
def store(tmp_path) -> SnapshotStore:
    return SnapshotStore(str(tmp_path / "snapshots"))


def test_round_trip(store):
    check_round_trip(store)


def test_round_trip_through_a_file_uri_and_a_signed_store(tmp_path):
    check_round_trip(SnapshotStore((tmp_path / "s").as_uri(), signing_key=KEY))


def test_an_empty_store_has_nothing(store):
    assert store.committed() == [] and store.latest() is None and store.next_id() == 1
    assert describe(store) == f"no snapshots in {store.uri}"


def test_parts_written_without_a_commit_are_not_a_snapshot(store):
    """A crash after the parts but before the commit: the previous snapshot is the latest."""
    first = write_snapshot(store, {"p": b"first"})
    store.write_part(2, "p", b"orphan")
    assert store.committed() == [first]
    with pytest.warns(RuntimeWarning, match=r"skipping snapshot 2 .*not committed \(no manifest\)"):
        assert store.latest() == first
    with pytest.raises(SnapshotError, match=r"snapshot 2 in .*not committed"):
        store.read_part(2, "p")
    assert store.next_id() == 3


class Crash(Exception):
    """The committing process died here."""


class CrashingLocal(pafs.FileSystemHandler):
    """A local filesystem on which the commit's process dies at one point: in the middle of
    writing the manifest (``"write"``), or between writing it and moving it in place (``"move"``),
    once :attr:`armed`."""

    def __init__(self, crash_at: str) -> None:
        self.fs, self.crash_at, self.armed = pafs.LocalFileSystem(), crash_at, False

    def open_output_stream(self, path, metadata):
        if self.armed and self.crash_at == "write" and "_manifest" in path:
            return pa.PythonFile(TornFile(self.fs.open_output_stream(path)), mode="w")
        return self.fs.open_output_stream(path)

    def move(self, src, dest):
        if self.armed and self.crash_at == "move":
            raise Crash(f"died before moving {src}")
        self.fs.move(src, dest)

    def get_type_name(self):
        return "crashing-local"

    def normalize_path(self, path):
        return self.fs.normalize_path(path)

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.fs.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok):
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self.fs.delete_file(path)

    def copy_file(self, src, dest):
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        return self.fs.open_input_file(path)

    def open_append_stream(self, path, metadata):
        return self.fs.open_append_stream(path)


class TornFile(io.RawIOBase):
    """Writes half of what it is given, flushed to disk, then dies."""

    def __init__(self, out: pa.NativeFile) -> None:
        self.out = out

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.out.write(bytes(data)[: len(data) // 2])
        self.out.close()
        raise Crash("died while writing the manifest")


@pytest.mark.parametrize("crash_at", ["write", "move"])
def test_a_commit_that_dies_leaves_no_manifest(tmp_path, crash_at):
    handler = CrashingLocal(crash_at)
    store = SnapshotStore(str(tmp_path), filesystem=pafs.PyFileSystem(handler))
    first = write_snapshot(store, {"p": b"first"})
    handler.armed = True
    with pytest.raises(Crash):
        write_snapshot(store, {"p": b"later"})
    assert store.filesystem.get_file_info(store.manifest_path(2)).type == pafs.FileType.NotFound
    assert store.committed() == [first]
    with pytest.warns(RuntimeWarning, match="skipping snapshot 2"):
        assert store.latest() == first
    write_snapshot(SnapshotStore(str(tmp_path)), {"p": b"after the restart"})
    assert SnapshotStore(str(tmp_path)).retain(1) == [1, 2]  # the abandoned snapshot 2 goes too


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_is_detected_and_the_previous_snapshot_used(store, damage):
    check_fallback(store, damage)


def test_fallback_skips_several_damaged_snapshots_and_can_find_none(store):
    for data in (b"one", b"two", b"three"):
        write_snapshot(store, {"p": data})
    damage_part(store, 3)
    delete_manifest(store, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert store.latest().snapshot_id == 1
    assert [re.search(r"snapshot (\d)", str(w.message)).group(1) for w in caught] == ["3", "2"]
    damage_part(store, 1)
    with pytest.warns(RuntimeWarning):
        assert store.latest() is None


def test_read_part_with_a_flipped_byte_names_snapshot_part_and_checksums(store):
    manifest = write_snapshot(store, {"p": b"first", "q": b"other"})
    flip_byte(store, store.part_path(1, "q"), index=4)
    actual = hashlib.sha256(read(store, store.part_path(1, "q"))).hexdigest()
    with pytest.raises(SnapshotError, match=f"snapshot 1: part 'q' is corrupt: expected 5 bytes with sha256 "
                                            f"{manifest.part('q').sha256}, found 5 bytes with sha256 {actual}"):
        store.read_part(1, "q")
    assert store.read_part(1, "p") == b"first"
    with pytest.raises(SnapshotError, match="snapshot 1 has no part 'r'"):
        store.read_part(1, "r")


def test_a_part_larger_than_a_read_chunk_is_read_and_checked_whole(store):
    big = bytes(range(256)) * (CHUNK // 256) + b"tail"
    write_snapshot(store, {"big": big})
    assert store.read_part(1, "big") == big and store.latest().snapshot_id == 1
    flip_byte(store, store.part_path(1, "big"), index=len(big) - 1)
    with pytest.warns(RuntimeWarning, match="part 'big' is corrupt"):
        assert store.latest() is None


def test_committed_snapshots_are_immutable_and_commits_check_their_parts(store):
    write_snapshot(store, {"p": b"first"})
    with pytest.raises(SnapshotError, match="snapshot 1 is already committed: cannot write part 'p'"):
        store.write_part(1, "p", b"overwrite")
    with pytest.raises(SnapshotError, match="snapshot 1 is already committed: cannot commit it again"):
        store.commit(1, [], {})
    info = store.write_part(2, "p", b"abc")
    with pytest.raises(SnapshotError, match="snapshot 2: cannot commit, part 'q' of 3 bytes is missing"):
        store.commit(2, [info, dataclasses.replace(info, name="q")], {})
    with pytest.raises(SnapshotError, match="part 'p' of 4 bytes is 3 bytes"):
        store.commit(2, [dataclasses.replace(info, size=4)], {})
    assert store.committed()[-1].snapshot_id == 1


@pytest.mark.parametrize(("call", "message"), [
    (lambda s: s.write_part(-1, "p", b""), "snapshot_id must be a non-negative int"),
    (lambda s: s.write_part(1, "../p", b""), "part name must be a plain file name"),
    (lambda s: s.write_part(1, "_manifest.json", b""), "part name must be a plain file name"),
    (lambda s: s.commit(1, [], {"t": object()}), "metadata of snapshot 1 is not JSON-able"),
    (lambda s: s.commit(1, [], {"x": float("nan")}), "metadata of snapshot 1 is not JSON-able"),
    (lambda s: s.retain(0), "keep must be an int >= 1"),
    (lambda s: s.commit(1, [("p", 1, "00")], {}), "parts must be distinct PartInfo values"),
])
def test_bad_arguments_are_refused(store, call, message):
    with pytest.raises(ArgumentError, match=message):
        call(store)


def test_retain_keeps_the_newest_and_drops_abandoned_writes(store):
    for data in (b"1", b"2", b"3"):
        write_snapshot(store, {"p": data})
    store.write_part(4, "p", b"abandoned")
    write_snapshot(store, {"p": b"5"})
    store.write_part(6, "p", b"in progress")
    assert store.retain(2) == [1, 2, 4]
    assert [m.snapshot_id for m in store.committed()] == [3, 5]
    assert files_of(store, 6) == ["p"] and store.next_id() == 7


def test_describe_lists_committed_snapshots_and_what_is_wrong_with_the_rest(store):
    write_snapshot(store, {"a": b"x" * 1536, "b": b"y"}, vertices=["count", "sum"], epoch=4)
    store.write_part(2, "p", b"orphan")
    lines = describe(str(store.root)).splitlines()
    assert lines[0] == f"snapshots in {store.root}:"
    assert re.fullmatch(r"id\s+committed \(UTC\)\s+size\s+parts\s+metadata", lines[1])
    assert re.fullmatch(r"1\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+1\.5 KiB\s+2\s+vertices: count, sum; keys: epoch, vertices",
                        lines[2])
    assert lines[3:] == ["snapshot 2: not committed (no manifest)"]


# -- signing ------------------------------------------------------------------------------------

@pytest.fixture
def signed(tmp_path) -> SnapshotStore:
    return SnapshotStore(str(tmp_path / "signed"), signing_key=KEY)


def rewrite_manifest(store: SnapshotStore, snapshot_id: int, change: Callable[[dict], None]) -> None:
    """Edits a manifest as an attacker would: parsed, changed, written back (the HMAC kept)."""
    body = json.loads(read(store, store.manifest_path(snapshot_id)))
    change(body)
    overwrite(store, store.manifest_path(snapshot_id), json.dumps(body).encode())


def replace_part(store: SnapshotStore, snapshot_id: int) -> None:
    """Swaps a part for other bytes and fixes its checksum in the manifest: only the HMAC can tell."""
    evil = b"evil pickle"
    overwrite(store, store.part_path(snapshot_id, "p"), evil)
    rewrite_manifest(store, snapshot_id, lambda body: body["parts"][0].update(
        size=len(evil), sha256=hashlib.sha256(evil).hexdigest()))


def write_other_key(store: SnapshotStore, snapshot_id: int) -> None:
    """Replaces a snapshot with one a forger signed with another key."""
    store.filesystem.delete_dir(store.snapshot_dir(snapshot_id))
    forger = SnapshotStore(store.root, signing_key=b"not the key")
    forger.commit(snapshot_id, [forger.write_part(snapshot_id, "p", b"forged")], {})


SIGNATURE_ATTACKS: dict[str, tuple[Callable[[SnapshotStore, int], None], str]] = {
    "tampered metadata": (lambda s, i: rewrite_manifest(s, i, lambda b: b["metadata"].update(epoch=99)), "signature does not verify"),
    "tampered part": (replace_part, "signature does not verify"),
    "signature removed": (lambda s, i: rewrite_manifest(s, i, lambda b: b.pop("hmac")), "is not signed"),
    "signed with another key": (write_other_key, "signature does not verify"),
}


@pytest.mark.parametrize("attack", sorted(SIGNATURE_ATTACKS))
def test_a_signed_store_refuses_manifests_it_did_not_sign(signed, attack):
    first = write_snapshot(signed, {"p": b"first"}, epoch=1)
    write_snapshot(signed, {"p": b"later"}, epoch=2)
    forge, message = SIGNATURE_ATTACKS[attack]
    forge(signed, 2)
    with pytest.warns(RuntimeWarning, match=f"skipping snapshot 2 .*manifest {message}"):
        assert signed.latest() == first
    with pytest.raises(SnapshotError, match=f"snapshot 2 in .*manifest {message}"):
        signed.read_part(2, "p")
    assert signed.committed() == [first]


def test_the_attacks_pass_an_unsigned_store_which_is_why_signing_exists(store):
    write_snapshot(store, {"p": b"first"})
    write_snapshot(store, {"p": b"later"})
    replace_part(store, 2)
    assert store.read_part(2, "p") == b"evil pickle"


def test_an_unsigned_manifest_is_refused_by_a_store_with_a_key(tmp_path):
    write_snapshot(SnapshotStore(str(tmp_path)), {"p": b"unsigned"})
    with pytest.raises(SnapshotError, match="manifest is not signed"):
        SnapshotStore(str(tmp_path), signing_key=KEY).manifest(1)


# -- property test against an oracle ------------------------------------------------------------

@dataclasses.dataclass
class Model:
    """What the oracle knows of one snapshot directory: each file's bytes as the store wrote them,
    and as they are now (None once deleted). A file is intact when the two agree: damage can be
    undone (a flip flipped back, an appended byte truncated away), and the store must see that too."""

    written: dict[str, bytes]
    now: dict[str, bytes | None]

    def intact(self, name: str) -> bool:
        return name in self.written and self.now[name] == self.written[name]

    def committed(self) -> bool:
        """The manifest is as written: with a signing key, any other manifest is refused."""
        return self.intact(MANIFEST)

    def restorable(self) -> bool:
        return all(map(self.intact, self.written))

    def files(self) -> Iterator[str]:
        return (name for name, data in self.now.items() if data is not None)


class StoreMachine(RuleBasedStateMachine):
    """Random writes, commits, damage and retention on a signed local store, against a dict oracle."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        self.store = SnapshotStore(self.directory.name, signing_key=KEY)
        self.model: dict[int, Model] = {}

    def teardown(self) -> None:
        self.directory.cleanup()

    @rule(parts=st.lists(st.binary(max_size=6), max_size=3), commit=st.booleans())
    def snapshot(self, parts, commit):
        snapshot_id = self.store.next_id()
        assert snapshot_id == max(self.model, default=0) + 1
        infos = [self.store.write_part(snapshot_id, f"part{i}", data) for i, data in enumerate(parts)]
        if commit:
            self.store.commit(snapshot_id, infos, {"parts": len(parts)})
        written = {f"part{i}": data for i, data in enumerate(parts)}
        if commit:
            written[MANIFEST] = read(self.store, self.store.manifest_path(snapshot_id))
        if written:  # nothing written, no directory
            self.model[snapshot_id] = Model(written, dict(written))

    @rule(data=st.data(), how=st.sampled_from(["flip", "truncate", "append", "delete"]), where=st.integers(0, 2**16),
          mask=st.integers(1, 255))
    def damage(self, data, how, where, mask):
        """Damages one file; ``where`` picks the byte (a manifest's length varies with its commit time)."""
        files = [(i, name) for i, model in sorted(self.model.items()) for name in model.files()]
        if not files:
            return
        snapshot_id, name = data.draw(st.sampled_from(files))
        path = f"{self.store.snapshot_dir(snapshot_id)}/{name}"
        content = read(self.store, path)
        if how == "delete":
            self.store.filesystem.delete_file(path)
        elif how == "append" or not content:
            overwrite(self.store, path, content + b"!")
        elif how == "truncate":
            overwrite(self.store, path, content[: where % len(content)])
        else:
            flip_byte(self.store, path, where % len(content), mask)
        self.model[snapshot_id].now[name] = None if how == "delete" else read(self.store, path)

    @rule(keep=st.integers(1, 3))
    def retain(self, keep):
        committed = [i for i, model in sorted(self.model.items()) if model.committed()]
        doomed = [i for i in sorted(self.model)
                  if i not in committed[-keep:] and (i in committed or (committed and i < committed[-1]))]
        assert self.store.retain(keep) == doomed
        for snapshot_id in doomed:
            del self.model[snapshot_id]

    @invariant()
    def latest_is_the_newest_intact_snapshot(self):
        expected = max((i for i, model in self.model.items() if model.committed() and model.restorable()), default=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            latest = self.store.latest()
        assert (latest.snapshot_id if latest else None) == expected
        skipped = sorted((i for i in self.model if expected is None or i > expected), reverse=True)
        assert [int(re.search(r"snapshot (\d+)", str(w.message)).group(1)) for w in caught] == skipped
        assert [m.snapshot_id for m in self.store.committed()] == sorted(i for i, model in self.model.items() if model.committed())


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=100, stateful_step_count=20, deadline=None)


def test_a_record_is_replaced_whole_read_back_and_ignored_by_the_snapshot_listing(tmp_path):
    store = SnapshotStore(str(tmp_path))
    assert store.read_record("consumed") is None
    store.write_record("consumed", {"delivered": {"out": 3}})
    store.write_record("consumed", {"delivered": {"out": 4}, "run_first": 2})
    assert store.read_record("consumed") == {"delivered": {"out": 4}, "run_first": 2}
    assert store.committed() == [] and store.next_id() == 1, "a record is not a snapshot"
    assert [p.name for p in tmp_path.iterdir()] == ["_record-consumed.json"], "no temporary file is left"


def test_a_signed_stores_record_that_was_altered_or_is_unsigned_is_refused(tmp_path):
    signed = SnapshotStore(str(tmp_path), signing_key=b"key")
    signed.write_record("consumed", {"delivered": {"out": 4}})
    assert signed.read_record("consumed") == {"delivered": {"out": 4}}
    path = tmp_path / "_record-consumed.json"
    path.write_text(path.read_text().replace("4", "9"))
    with pytest.raises(SnapshotError, match="record 'consumed' .* signature does not verify"):
        signed.read_record("consumed")
    SnapshotStore(str(tmp_path)).write_record("consumed", {"delivered": {"out": 9}})
    with pytest.raises(SnapshotError, match="signature does not verify"):
        signed.read_record("consumed")
