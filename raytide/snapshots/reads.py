"""Reading a snapshot store's files: a read that fails is tried again, a few times, before
it fails with an error naming the store and the file.

Why: a read fails now and then on a store reached over a network (a dropped connection, a
throttled bucket). A recovery reads the store (the latest intact snapshot, then each
replica's part), and an error raised in its restore step fails the job at once
(:mod:`raytide.snapshots.blame`: the same snapshot would raise again at every restart).
A transient failure must not end a job that a second read would have recovered, so every
read of a snapshot's file goes through :func:`retried`: after a failed attempt it pauses
(``pauses``: one pause per retry, growing) and reads again from the start. Once the
attempts are spent it raises :class:`UnreadableFile`, a
:class:`~raytide.errors.SnapshotError` naming the store, the file and the last failure.

A missing file (``FileNotFoundError``) is not retried: it is no failure of the read but
what the store holds (a snapshot not committed, a damaged one), which the caller reports
as such. :class:`UnreadableFile` is never taken for damage either: a snapshot that could
not be read is not skipped as damaged (:meth:`~raytide.snapshots.store.SnapshotStore.latest`
raises it), since a newer intact snapshot passed over would restore older state.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from raytide.errors import SnapshotError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: The pauses, in seconds, before the second, third and fourth attempt of a read.
READ_PAUSES = (0.05, 0.25, 1.0)
#: Bytes read at a time when a part is hashed.
CHUNK = 1 << 22

Read = TypeVar("Read")


class UnreadableFile(SnapshotError):
    """A file of a snapshot store that could not be read, every attempt failing (the message
    names the store, the file and the last failure)."""


def retried(read: Callable[[], Read], what: str, uri: str, pauses: Sequence[float] = READ_PAUSES) -> Read:
    """``read()``, tried again after each pause of ``pauses`` while it raises an ``OSError``
    other than ``FileNotFoundError`` (which it raises at once).

    Raises:
        UnreadableFile: every attempt failed; names ``what`` (the file) and store ``uri``.
    """
    for pause in pauses:
        try:
            return read()
        except FileNotFoundError:
            raise
        except OSError:
            if pause > 0:  # a store reached in steps (the simulator's) reads again at once
                time.sleep(pause)
    try:
        return read()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise UnreadableFile(f"reading {what} of snapshot store {uri!r} failed {len(pauses) + 1} times; "
                             f"the last failure: {error!r}") from error


def hashed(filesystem: pafs.FileSystem, path: str, keep: bool) -> tuple[int, str, bytes]:
    """The size, SHA-256 and (with ``keep``; else ``b""``) bytes of the file at ``path``, read in chunks."""
    digest, size, chunks = hashlib.sha256(), 0, []
    with filesystem.open_input_stream(path) as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            chunks += [chunk] if keep else []
    return size, digest.hexdigest(), b"".join(chunks)
