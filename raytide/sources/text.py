"""Text files split by byte ranges into lines, read in parallel by the input replicas.

Each file is cut into one byte range per reader; a reader starts at the first line that
begins inside its range and reads every line that begins there, so each line is read
exactly once. Epochs are one per file, or one per ``lines_per_epoch`` lines counted
across all files (a reader finds the number of its first line by counting the newlines
before its range, at C speed, instead of asking anyone). A reader's position
(:class:`TextPosition`) is a line start within its byte range and a count of the lines
read after it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow.fs as pafs

from raytide.errors import SourceError
from raytide.sources.base import Reader, Source
from raytide.sources.numbering import epoch_slices

CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class TextFileSource(Source):
    """Lines of text files as records.

    Args:
        paths: files to read, local paths or URIs that ``pyarrow.fs`` understands.
        lines_per_epoch: start a new epoch every this many lines (counted over all files
            in order); None gives one epoch per file.
        batch_lines: lines per message.
        event_time: each line's epoch by its own time instead: a function of a line giving
            its timestamp, or an ``rt.EventTime`` whose timestamp is one (docs/windows.md).
    """

    paths: str | Sequence[str]
    lines_per_epoch: int | None = None
    batch_lines: int = 4096
    event_time: Any = None

    def event_time_schema(self) -> tuple[str, None]:
        """How errors name this source, and its records' schema: none (lines have no columns)."""
        if self.lines_per_epoch is not None and self.event_time is not None:
            raise SourceError(f"text source {self.paths!r}: give lines_per_epoch or event_time, not both")
        return f"text source {self.paths!r}", None

    def _files(self) -> list[tuple[pafs.FileSystem, str, int]]:
        paths = [self.paths] if isinstance(self.paths, str) else list(self.paths)
        files = []
        for path in paths:
            fs, inner = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
            info = fs.get_file_info(inner)
            if info.type != pafs.FileType.File:
                raise FileNotFoundError(f"text source: {path!r} is not a file")
            files.append((fs, inner, info.size))
        return files

    def epochs_known(self) -> int | None:
        """With one epoch per file, the number of files; None with ``lines_per_epoch`` or ``event_time`` (the
        lines are not counted before they are read)."""
        if self.lines_per_epoch is not None or self.event_time is not None:
            return None
        return 1 if isinstance(self.paths, str) else len(self.paths)

    def readers(self, parallelism: int) -> list[Reader[TextPosition]]:
        """One reader per input replica, each owning one byte range of every file."""
        if self.lines_per_epoch is not None and self.lines_per_epoch < 1:
            raise ValueError(f"lines_per_epoch must be positive, got {self.lines_per_epoch}")
        files = self._files()
        return [TextReader(self, files, index, parallelism) for index in range(parallelism)]


@dataclass(frozen=True)
class TextPosition:
    """Where a text reader has got to: in file ``file``, the ``skip`` lines after byte ``offset`` are read.

    ``offset`` is a line start within the reader's share of the file (at the very start, the
    first byte of its byte range); it moves forward once per chunk read, so resuming reads
    again at most about a chunk (:data:`CHUNK_BYTES`) and a batch. ``lines_before`` is the
    number of lines in the files before ``file``, which numbers the lines for
    ``lines_per_epoch`` without counting those files again.
    """

    file: int
    offset: int
    skip: int
    lines_before: int


@dataclass
class TextReader(Reader[TextPosition]):
    """Reader ``index`` of ``count``: its byte range of every file, as ``(epoch, lines)``."""

    source: TextFileSource
    files: list[tuple[pafs.FileSystem, str, int]]
    index: int
    count: int

    def _range(self, size: int) -> tuple[int, int]:
        return size * self.index // self.count, size * (self.index + 1) // self.count

    def start(self) -> TextPosition:
        first_byte = self._range(self.files[0][2])[0] if self.files else 0
        return TextPosition(file=0, offset=first_byte, skip=0, lines_before=0)

    def check_position(self, position: TextPosition) -> None:
        if 0 <= position.file < len(self.files):
            size = self.files[position.file][2]
            fits = self._range(size)[0] <= position.offset <= size
        else:
            fits = position == self.start()  # no files: nothing but the start
        if not fits or position.skip < 0 or position.lines_before < 0:
            raise SourceError(f"text reader {self.index} of {self.count} of {self.source.paths!r}: "
                              f"{position} is not one of its positions")

    def read_from(self, position: TextPosition) -> Iterator[tuple[int, list[str], TextPosition]]:
        numbered = self.source.lines_per_epoch is not None  # epochs by line number: count the lines before ours
        lines_before = position.lines_before  # lines in the files before this one
        for file_index in range(position.file, len(self.files)):
            fs, path, size = self.files[file_index]
            start, end = self._range(size)
            with fs.open_input_file(path) as f:
                first = _first_line_start(f, start)
                stop = _first_line_start(f, end) if end < size else size
                at, skip = first, 0  # read from byte `at`, yield from its `skip`-th line on
                if file_index == position.file:
                    at, skip = max(first, _first_line_start(f, position.offset)), position.skip
                number = lines_before + (_count_newlines(f, 0, at) if numbered else 0)  # of the line at `at`
                read = 0  # lines from `at` on
                for index, anchor, anchor_skip, batch in _lines(f, at, stop, self.source.batch_lines):
                    read = index + len(batch)
                    cut = min(len(batch), max(0, skip - index))  # lines before the position: read again, not yielded
                    for epoch, lo, hi in self._epochs(file_index, number + index + cut, len(batch) - cut):
                        after = TextPosition(file_index, anchor, anchor_skip + cut + hi, lines_before)
                        yield epoch, batch[cut + lo : cut + hi], after
                if numbered and file_index + 1 < len(self.files):  # the lines after our range end the count
                    # a last line without a newline counts once: in our range if it ended the file
                    unterminated = size > 0 and not _ends_with_newline(f, size) and not first < stop == size
                    lines_before = number + read + _count_newlines(f, stop, size) + unterminated

    def _epochs(self, file_index: int, number: int, length: int) -> Iterator[tuple[int, int, int]]:
        """``(epoch, start, stop)`` of ``length`` lines, the first of them line ``number`` overall."""
        per = self.source.lines_per_epoch
        if per is not None:
            yield from epoch_slices(number, length, per)
        elif length:
            yield file_index, 0, length


def _first_line_start(f: BinaryIO, start: int) -> int:
    """The offset of the first line beginning at or after ``start`` (the file size if none)."""
    if start == 0:
        return 0
    f.seek(start - 1)
    position = start - 1
    while True:
        chunk = f.read(CHUNK_BYTES)
        if not chunk:
            return position
        newline = chunk.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(chunk)


def _count_newlines(f: BinaryIO, start: int, stop: int) -> int:
    """The number of newlines in bytes ``[start, stop)``."""
    f.seek(start)
    count, position = 0, start
    while position < stop:
        chunk = f.read(min(CHUNK_BYTES, stop - position))
        if not chunk:
            break
        count += chunk.count(b"\n")
        position += len(chunk)
    return count


def _ends_with_newline(f: BinaryIO, size: int) -> bool:
    f.seek(size - 1)
    return f.read(1) == b"\n"


def _lines(f: BinaryIO, first: int, stop: int, batch_lines: int) -> Iterator[tuple[int, int, int, list[str]]]:
    """The lines in bytes ``[first, stop)`` (which begin and end on line boundaries), in batches.

    Yields:
        ``(index, anchor, skip, batch)``: ``batch[0]`` is line ``index`` from ``first``, and
        line ``skip`` after byte ``anchor``, a line start: a place to resume from. The
        anchor moves to the first line not yet yielded after each chunk read.
    """
    f.seek(first)
    position, carry, batch = first, b"", []
    index, anchor, skip = 0, first, 0  # of batch[0]
    while position < stop:
        chunk = f.read(min(CHUNK_BYTES, stop - position))
        if not chunk:
            break
        position += len(chunk)
        block, newline, carry = (carry + chunk).rpartition(b"\n")
        if newline:  # decoded in one go: a character never spans a newline
            batch.extend(block.decode().split("\n"))
        full = len(batch) - len(batch) % batch_lines
        for start in range(0, full, batch_lines):
            yield index, anchor, skip, batch[start : start + batch_lines]
            index, skip = index + batch_lines, skip + batch_lines
        batch = batch[full:]
        if newline:  # the lines left over (fewer than a batch) end where the carry begins
            anchor, skip = position - len(carry) - sum(len(line.encode()) + 1 for line in batch), 0
    if carry:
        batch.append(carry.decode())
    if batch:
        yield index, anchor, skip, batch
