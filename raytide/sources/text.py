"""Text files split by byte ranges into lines, read in parallel by the input replicas.

Each file is cut into one byte range per reader; a reader starts at the first line that
begins inside its range and reads every line that begins there, so each line is read
exactly once. Epochs are one per file, or one per ``lines_per_epoch`` lines counted
across all files (a reader finds the number of its first line by counting the newlines
before its range, at C speed, instead of asking anyone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional, Sequence, Union

import pyarrow.fs as pafs

from raytide.sources.numbering import epoch_slices

CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class TextFileSource:
    """Lines of text files as records.

    Args:
        paths: files to read, local paths or URIs that ``pyarrow.fs`` understands.
        lines_per_epoch: start a new epoch every this many lines (counted over all files
            in order); None gives one epoch per file.
        batch_lines: lines per message.
    """

    paths: Union[str, Sequence[str]]
    lines_per_epoch: Optional[int] = None
    batch_lines: int = 4096

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

    def readers(self, parallelism: int) -> list[TextReader]:
        """One reader per input replica, each owning one byte range of every file."""
        if self.lines_per_epoch is not None and self.lines_per_epoch < 1:
            raise ValueError(f"lines_per_epoch must be positive, got {self.lines_per_epoch}")
        files = self._files()
        return [TextReader(self, files, index, parallelism) for index in range(parallelism)]


@dataclass(frozen=True)
class TextReader:
    """Reader ``index`` of ``count``: its byte range of every file, as ``(epoch, lines)``."""

    source: TextFileSource
    files: list[tuple[pafs.FileSystem, str, int]]
    index: int
    count: int

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        numbered = self.source.lines_per_epoch is not None  # epochs by line number: count the lines before ours
        lines_before = 0  # lines in the files before this one
        for file_index, (fs, path, size) in enumerate(self.files):
            start, end = size * self.index // self.count, size * (self.index + 1) // self.count
            with fs.open_input_file(path) as f:
                first = _first_line_start(f, start)
                stop = _first_line_start(f, end) if end < size else size
                number = lines_before + (_count_newlines(f, 0, first) if numbered else 0)
                for batch in _lines(f, first, stop, self.source.batch_lines):
                    yield from self._epochs(file_index, number, batch)
                    number += len(batch)
                if numbered and file_index + 1 < len(self.files):  # the lines after our range end the count
                    # a last line without a newline counts once: in our range if it ended the file
                    unterminated = size > 0 and not _ends_with_newline(f, size) and not first < stop == size
                    lines_before = number + _count_newlines(f, stop, size) + unterminated

    def _epochs(self, file_index: int, number: int, batch: list[str]) -> Iterator[tuple[int, list[str]]]:
        per = self.source.lines_per_epoch
        if per is None:
            yield file_index, batch
            return
        for epoch, start, stop in epoch_slices(number, len(batch), per):
            yield epoch, batch[start:stop]


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


def _lines(f: BinaryIO, first: int, stop: int, batch_lines: int) -> Iterator[list[str]]:
    """The lines in bytes ``[first, stop)`` (which begin and end on line boundaries), in batches."""
    f.seek(first)
    position, carry, batch = first, b"", []
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
            yield batch[start : start + batch_lines]
        batch = batch[full:]
    if carry:
        batch.append(carry.decode())
    if batch:
        yield batch
