"""A snapshot store whose filesystem fails as real ones do, for the simulator's trials.

:class:`FaultyStore` is a :class:`~raytide.snapshots.store.SnapshotStore` on the local
disk, unchanged, opened on a filesystem (:class:`FaultyFiles`, a ``pyarrow`` filesystem
handler) that fails beneath it, on the files of snapshots only (records and leases are
left alone), each fault drawn by ``random.Random(seed)`` at the rates of
:class:`StoreFaults`:

* ``ambiguous``: a manifest moved in place, the move then raising (the reply was lost):
  the commit is done, and its call says it failed;
* ``torn``: a part or a manifest cut off partway, the write (or the manifest's move, as a
  copy that dies) then raising: half a file is left where the whole was meant; or, for a
  part, silently: the write returns, the file has its size but its second half is zeros
  (what a machine's crash leaves of a file written without ``fsync``);
* ``reads``: a read of a manifest or a part raising (a dropped connection);
* ``deletes``: a retention delete that removes some of a snapshot's files, or none, and
  raises (a bucket's delete of many objects, one at a time, cut off);
* ``races``: before a part is read, another process runs the store's retention
  (``retain(1)``, on a store of its own): a delete racing with a restore.

It plugs into the simulator as any store does (``LocalRecovery(store=FaultyStore(...))``),
so :class:`~raytide.testing.local.LocalJob` runs the store's own code over it: what the
trials check is the store's and the runtime's answer to each fault. A store reached in
steps has no use for a pause between read attempts: :attr:`SnapshotStore.read_pauses` is
zero here.
"""

from __future__ import annotations

import collections
import io
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from raytide.snapshots.manifest import MANIFEST
from raytide.snapshots.store import SnapshotStore


@dataclass(frozen=True)
class StoreFaults:
    """The chance of each fault per call on a snapshot's files (see the module docstring)."""

    ambiguous: float = 0.0
    torn: float = 0.0
    reads: float = 0.0
    deletes: float = 0.0
    races: float = 0.0


class FaultyFiles(pafs.FileSystemHandler):
    """The local filesystem, failing on snapshots' files as ``faults`` and ``seed`` draw.

    :attr:`injected` counts the faults injected by kind; :attr:`published` lists the snapshots
    whose manifest was moved in place (committed), :attr:`ambiguous_ids` those whose move then
    raised; :attr:`racing` is the retention another process runs.
    """

    def __init__(self, faults: StoreFaults, seed: int) -> None:
        self.fs, self.faults, self.rng = pafs.LocalFileSystem(), faults, random.Random(seed)
        self.injected: collections.Counter[str] = collections.Counter()
        self.ambiguous_ids: list[int] = []
        self.published: list[int] = []
        self.racing: Callable[[], object] = lambda: None

    def _draw(self, kind: str, path: str) -> bool:
        """Whether fault ``kind`` strikes this call on ``path`` (never off a snapshot's directory)."""
        if "/snapshot-" not in path or self.rng.random() >= getattr(self.faults, kind):
            return False
        self.injected[kind] += 1
        return True

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        if self._draw("torn", path):
            silent = not path.rsplit("/", 1)[-1].startswith("_manifest") and self.rng.random() < 0.5
            return pa.PythonFile(_TornFile(self.fs.open_output_stream(path), path, silent), mode="w")
        return self.fs.open_output_stream(path)

    def move(self, src: str, dest: str) -> None:
        if dest.endswith(MANIFEST) and self._draw("torn", dest):
            with self.fs.open_input_stream(src) as source, self.fs.open_output_stream(dest) as out:
                text = source.read()
                out.write(text[: len(text) // 2])
            raise OSError(f"injected torn write: the copy of {src} to {dest} died halfway")
        self.fs.move(src, dest)
        if dest.endswith(MANIFEST) and "/snapshot-" in dest:
            self.published.append(int(dest.split("/snapshot-")[-1].split("/")[0]))
        if dest.endswith(MANIFEST) and self._draw("ambiguous", dest):
            self.ambiguous_ids.append(self.published[-1])
            raise OSError(f"injected ambiguous commit: {dest} was moved in place, but the call failed")

    def open_input_stream(self, path: str) -> Any:
        if not path.endswith(MANIFEST) and self._draw("races", path):
            self.racing()
        if self._draw("reads", path):
            raise OSError(f"injected failed read of {path}")
        return self.fs.open_input_stream(path)

    def delete_dir(self, path: str) -> None:
        if self._draw("deletes", path):
            found = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            for info in self.rng.sample(found, len(found) // 2):
                self.fs.delete_file(info.path)
            raise OSError(f"injected failed delete of {path} after {len(found) // 2} of its {len(found)} files")
        self.fs.delete_dir(path)

    def delete_file(self, path: str) -> None:
        if self._draw("deletes", path):
            raise OSError(f"injected failed delete of {path}")
        self.fs.delete_file(path)

    # -- the rest as the local filesystem does it ----------------------------------------

    def get_type_name(self) -> str:
        return "faulty-local"

    def normalize_path(self, path: str) -> str:
        return self.fs.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        """Refused, as a filesystem refuses what it may not do: the files beneath are this
        machine's whole local filesystem, and no store empties its root."""
        raise PermissionError("FaultyFiles refuses to empty the root of the local filesystem")

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_file(self, path: str) -> Any:
        return self.fs.open_input_file(path)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_append_stream(path)


class _TornFile(io.RawIOBase):
    """A file that takes half of what it is given, then fails (its writer's connection died);
    ``silent``: that keeps its size, zeros for its second half, and does not fail."""

    def __init__(self, out: Any, path: str, silent: bool) -> None:
        super().__init__()
        self.out, self.path, self.silent = out, path, silent

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        half = len(data) // 2
        self.out.write(bytes(data)[:half] + (bytes(len(data) - half) if self.silent else b""))
        if self.silent:
            return len(data)
        self.out.close()
        raise OSError(f"injected torn write: {self.path} cut off after {len(data) // 2} of {len(data)} bytes")


class FaultyStore(SnapshotStore):
    """A store in local ``directory`` on :class:`FaultyFiles` (``files``): the store's own code,
    its filesystem failing as ``faults`` and ``seed`` draw; a race runs ``retain(1)`` on a
    store of its own, on the plain local filesystem."""

    def __init__(self, directory: str, faults: StoreFaults, seed: int) -> None:
        self.files = FaultyFiles(faults, seed)
        super().__init__(directory, filesystem=pafs.PyFileSystem(self.files))
        self.read_pauses = (0.0, 0.0, 0.0)
        self.files.racing = lambda: SnapshotStore(directory).retain(1)
