"""Word count per epoch as a careful hand-written Ray actor pipeline (the baseline raytide must beat).

The input is a text file of ``"\\n"``-separated lines; words are separated by whitespace
(:meth:`str.split`). Lines are numbered from 0 in file order and grouped into ``n_epochs``
contiguous epochs (:func:`bench.baselines.data.epoch_bounds`). The result is
``{epoch: {word: count}}`` with every epoch present (empty epochs map to ``{}``).

Pipeline (no record ever passes through the driver):

1. ``n_mappers`` mapper tasks each take one byte range of the file, aligned to line
   starts, and count its lines; the driver turns those counts into each range's first
   global line index (a few integers). Meanwhile the reducer actors start.
2. Each mapper task reads its range in blocks of about ``block_bytes`` (tens of thousands
   of lines), cuts blocks at epoch boundaries and counts the words of every piece into a
   :class:`Counter` for the current epoch (a map-side combiner; or, for comparison, with
   Arrow's kernels, as raytide's word count does: :class:`ArrowCounts`). When its part of an epoch
   ends (or after ``flush_lines`` lines) it shuffles the pre-aggregated counts by
   ``zlib.crc32(word.encode()) % n_reducers``: one remote call per reducer, with a bounded
   number of calls in flight (back-pressure). At the end it closes every epoch at every
   reducer.
3. Reducer actors merge the partial counts per epoch; an epoch is complete at a reducer
   once all mappers have closed it. The driver then gathers the (disjoint) per-reducer
   dictionaries.

Mappers are tasks rather than actors so that they run on Ray's pooled worker processes
(an actor costs a fresh process, ~0.3 s); they need 1 CPU each.
Reducers are actors with ``num_cpus=0`` so that they can never be starved by mappers.

:func:`wordcount_ray` returns only the result; the caller times it (actor start-up and
tear-down included). :func:`wordcount_reference` is the plain-Python reference.
"""

from __future__ import annotations

import os
import pickle
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import ray

from bench.baselines.data import PathLike, epoch_bounds, epoch_of_line

WordCounts = dict[int, dict[str, int]]

DEFAULT_BLOCK_BYTES = 1 << 20  # about 30,000 lines of 10 short words
DEFAULT_FLUSH_LINES = 200_000
DEFAULT_MAX_IN_FLIGHT = 8


def partition_of(word: str, n_reducers: int) -> int:
    """The reducer that owns ``word``: a stable hash (CRC-32 of its UTF-8 bytes) modulo ``n_reducers``."""
    return zlib.crc32(word.encode("utf-8")) % n_reducers


def line_start_at_or_after(f: BinaryIO, offset: int) -> int:
    """Offset of the first line that starts at or after byte ``offset`` (or the file size).

    Args:
        f: The file, opened in binary mode.
        offset: A byte offset.

    Returns:
        ``0`` for ``offset <= 0``; otherwise one past the first ``"\\n"`` at or after
        ``offset - 1``, or the end of the file.
    """
    if offset <= 0:
        return 0
    f.seek(offset - 1)
    f.readline()
    return f.tell()


def byte_range(f: BinaryIO, index: int, n_splits: int) -> tuple[int, int]:
    """Byte range ``[start, end)`` of split ``index`` of ``n_splits``, aligned to line starts.

    The ranges of all splits tile the file and each holds whole lines only.

    Args:
        f: The file, opened in binary mode.
        index: Split number, ``0 <= index < n_splits``.
        n_splits: Number of splits.

    Returns:
        ``(start, end)`` byte offsets.
    """
    size = os.fstat(f.fileno()).st_size
    start = line_start_at_or_after(f, index * size // n_splits)
    end = line_start_at_or_after(f, (index + 1) * size // n_splits)
    return start, end


def iter_blocks(f: BinaryIO, start: int, end: int, block_bytes: int) -> Iterator[bytes]:
    """Read ``[start, end)`` in blocks of whole lines of about ``block_bytes`` each.

    ``end`` must be a line start (or the file size). Every block ends with ``"\\n"``
    except possibly the last one of the file.
    """
    f.seek(start)
    pos = start
    while pos < end:
        block = f.read(min(block_bytes, end - pos))
        if not block:
            return
        if not block.endswith(b"\n") and pos + len(block) < end:
            block += f.readline()  # stops at the next line start, which is <= end
        pos += len(block)
        yield block


def count_lines(block: bytes) -> int:
    """Number of lines in a block of whole lines (a last line without ``"\\n"`` counts)."""
    if not block:
        return 0
    return block.count(b"\n") + (not block.endswith(b"\n"))


def split_after_lines(block: bytes, n: int) -> tuple[bytes, bytes]:
    """Split ``block`` after its first ``n`` lines (``n >= 1``, fewer lines than the block has)."""
    newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n"))
    cut = int(newlines[n - 1]) + 1
    return block[:cut], block[cut:]


def iter_epoch_pieces(blocks: Iterator[bytes], first_line: int, bounds: list[int]) -> Iterator[tuple[int, bytes]]:
    """Cut blocks of whole lines at epoch boundaries.

    Args:
        blocks: Consecutive blocks of whole lines.
        first_line: Global index of the first line of the first block.
        bounds: Epoch boundaries from :func:`bench.baselines.data.epoch_bounds`.

    Yields:
        ``(epoch, piece)`` where ``piece`` holds whole lines of that epoch only.
    """
    line = first_line
    for block in blocks:
        n = count_lines(block)
        while n:
            epoch = epoch_of_line(bounds, line)
            room = bounds[epoch + 1] - line
            if n <= room:
                yield epoch, block
                line += n
                break
            piece, block = split_after_lines(block, room)
            yield epoch, piece
            line += room
            n -= room


def pack(obj: object) -> bytes:
    """Pickle a dictionary of counts for a remote call.

    Ray serialises plain ``bytes`` with little overhead, while its own serialisation of a
    large ``dict`` of small strings is about 3x slower than :mod:`pickle`.
    """
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(data: bytes) -> Any:
    """Inverse of :func:`pack`."""
    return pickle.loads(data)


def partition_counts(counts: dict[str, int], n_reducers: int) -> list[dict[str, int]]:
    """Split pre-aggregated counts by owning reducer (:func:`partition_of`).

    Args:
        counts: ``{word: count}`` of one pre-aggregated batch.
        n_reducers: Number of reducers.

    Returns:
        ``n_reducers`` dictionaries; entry ``r`` holds the words reducer ``r`` owns.
    """
    parts: list[dict[str, int]] = [{} for _ in range(n_reducers)]
    for word, count in counts.items():
        parts[partition_of(word, n_reducers)][word] = count
    return parts


@ray.remote
class WordCountReducer:
    """Merges the partial counts of the words it owns, per epoch."""

    def __init__(self, n_mappers: int) -> None:
        self._n_mappers = n_mappers
        self._counts: dict[int, dict[str, int]] = {}
        self._closes: Counter[int] = Counter()

    def add(self, epoch: int, packed: bytes) -> None:
        """Merge ``{word: count}`` of ``epoch`` sent by one mapper (see :func:`pack`)."""
        partial: dict[str, int] = unpack(packed)
        acc = self._counts.get(epoch)
        if acc is None:
            self._counts[epoch] = partial  # take ownership: the first partial needs no merge
            return
        if len(partial) > len(acc):
            self._counts[epoch], acc, partial = partial, partial, acc  # merge the smaller into the larger
        get = acc.get
        for word, count in partial.items():
            acc[word] = get(word, 0) + count

    def close(self, epoch: int) -> None:
        """One mapper will send nothing more for ``epoch``."""
        self._closes[epoch] += 1

    def result(self) -> bytes:
        """The counts of every epoch that all mappers have closed, as packed ``{epoch: {word: count}}``."""
        return pack({e: self._counts.get(e, {}) for e, n in self._closes.items() if n == self._n_mappers})


@ray.remote
def count_range_lines(path: str, index: int, n_mappers: int, block_bytes: int) -> int:
    """Number of lines in byte range ``index`` of ``n_mappers`` (see :func:`byte_range`)."""
    with open(path, "rb") as f:
        start, end = byte_range(f, index, n_mappers)
        return sum(count_lines(b) for b in iter_blocks(f, start, end, block_bytes))


class _Shuffler:
    """Sends pre-aggregated counts to the reducers, with a bound on unacknowledged calls."""

    def __init__(self, reducers: list[ray.actor.ActorHandle], max_in_flight: int) -> None:
        self._reducers = reducers
        self._max_in_flight = max_in_flight
        self._in_flight: list[ray.ObjectRef] = []
        self.calls = 0

    def send(self, epoch: int, counts: dict[str, int]) -> None:
        """Partition ``counts`` by reducer and send each non-empty part in one call."""
        for reducer, part in zip(self._reducers, partition_counts(counts, len(self._reducers))):
            if part:
                self._in_flight.append(reducer.add.remote(epoch, pack(part)))
                self.calls += 1
        excess = len(self._in_flight) - self._max_in_flight
        if excess > 0:
            _, self._in_flight = ray.wait(self._in_flight, num_returns=excess)

    def close_all(self, n_epochs: int) -> None:
        """Close every epoch at every reducer and wait until all calls have been processed."""
        closes = [r.close.remote(e) for e in range(n_epochs) for r in self._reducers]
        ray.get(self._in_flight + closes)  # merged before the driver asks for results
        self._in_flight = []


class PythonCounts:
    """A mapper's pre-aggregation: ``str.split`` and :meth:`Counter.update` (both loops in C)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, piece: bytes) -> None:
        """Count the words of ``piece`` (whole lines of UTF-8 text)."""
        self.counts.update(piece.decode("utf-8").split())

    def take(self) -> dict[str, int]:
        """The counts so far, and start again from none."""
        counts, self.counts = self.counts, Counter()
        return counts


class ArrowCounts:
    """A mapper's pre-aggregation in Arrow's C++ kernels: split, then ``value_counts`` at the flush.

    Arrow's whitespace is ``str.split``'s; its splits also give empty tokens where
    whitespace begins or ends a piece, which are no words and are dropped.
    """

    def __init__(self) -> None:
        self.tokens: list[Any] = []

    def add(self, piece: bytes) -> None:
        """Split ``piece`` (whole lines of UTF-8 text) into tokens, to be counted at :meth:`take`."""
        import pyarrow as pa
        import pyarrow.compute as pc

        piece.decode("utf-8")  # the same check of the encoding as PythonCounts makes
        offsets = pa.py_buffer(np.array([0, len(piece)], dtype=np.int64))
        text = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(piece)])
        self.tokens.append(pc.utf8_split_whitespace(text).flatten())

    def take(self) -> dict[str, int]:
        """The counts of the tokens so far, and start again from none."""
        import pyarrow as pa
        import pyarrow.compute as pc

        tally = pc.value_counts(pa.chunked_array(self.tokens, type=pa.large_string()))
        self.tokens = []
        counts = dict(zip(tally.field(0).to_pylist(), tally.field(1).to_pylist()))
        counts.pop("", None)
        return counts


#: How a mapper pre-aggregates, by name.
COUNTERS = {"python": PythonCounts, "arrow": ArrowCounts}


@ray.remote
def map_range(
    path: str,
    index: int,
    n_mappers: int,
    first_line: int,
    bounds: list[int],
    reducers: list[ray.actor.ActorHandle],
    block_bytes: int,
    flush_lines: int,
    max_in_flight: int,
    counter: str = "python",
) -> int:
    """Count the words of byte range ``index`` and shuffle them to the reducers.

    Blocks of about ``block_bytes`` are counted into one :class:`Counter` per epoch (a
    map-side combiner), which is shipped when this range's part of the epoch ends or when
    it has absorbed ``flush_lines`` lines. Every epoch is closed at every reducer at the end.

    Args:
        path: The text file.
        index: Which of the ``n_mappers`` line-aligned byte ranges to read.
        n_mappers: Number of ranges.
        first_line: Global index of the range's first line.
        bounds: Epoch boundaries (:func:`bench.baselines.data.epoch_bounds`).
        reducers: Reducer actors; word ``w`` goes to ``reducers[crc32(w) % len(reducers)]``.
        block_bytes: Approximate bytes read per block.
        flush_lines: Maximum lines pre-aggregated before a shuffle.
        max_in_flight: Unacknowledged reducer calls allowed before waiting.
        counter: How to pre-aggregate, a key of :data:`COUNTERS`.

    Returns:
        The number of ``add`` calls made to reducers.
    """
    shuffler = _Shuffler(reducers, max_in_flight)
    counts = COUNTERS[counter]()
    current, pending = -1, 0
    with open(path, "rb") as f:
        start, end = byte_range(f, index, n_mappers)
        blocks = iter_blocks(f, start, end, block_bytes)
        for epoch, piece in iter_epoch_pieces(blocks, first_line, bounds):
            if (epoch != current or pending >= flush_lines) and pending:
                shuffler.send(current, counts.take())
                pending = 0
            current = epoch
            counts.add(piece)
            pending += count_lines(piece)
    if pending:
        shuffler.send(current, counts.take())
    shuffler.close_all(len(bounds) - 1)
    return shuffler.calls


def start_reducers(n_reducers: int, n_mappers: int) -> list[ray.actor.ActorHandle]:
    """Fresh reducer actors for one run of :func:`wordcount_ray`.

    ``num_cpus=0``: reducers must never wait for a CPU held by a mapper that waits for them.
    """
    return [WordCountReducer.options(num_cpus=0).remote(n_mappers) for _ in range(n_reducers)]


def wordcount_ray(
    path: PathLike,
    n_epochs: int = 10,
    n_mappers: int = 2,
    n_reducers: int = 2,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    flush_lines: int = DEFAULT_FLUSH_LINES,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    reducers: list[ray.actor.ActorHandle] | None = None,
    counter: str = "python",
) -> WordCounts:
    """Word count per epoch with Ray (mapper tasks, reducer actors); the caller times it.

    Expects Ray to be initialised. Unless ``reducers`` are given, reducer actors are
    started (overlapping with the line-counting pass) and killed inside the call, so
    their start-up is part of the time.

    Args:
        path: Text file of ``"\\n"``-separated lines (readable by the Ray workers).
        n_epochs: Number of contiguous line-index epochs.
        n_mappers: Reader/mapper tasks, one line-aligned byte range each.
        n_reducers: Reducer actors; word ``w`` goes to ``crc32(w) % n_reducers``.
        block_bytes: Approximate bytes per block read by a mapper (tens of thousands of lines).
        flush_lines: Lines a mapper pre-aggregates at most before shuffling them.
        max_in_flight: Unacknowledged reducer calls a mapper may have before it waits.
        reducers: ``n_reducers`` fresh reducers from :func:`start_reducers` (the caller kills
            them), to leave their start-up out of the time.
        counter: How mappers pre-aggregate: ``"python"`` (:class:`PythonCounts`, the
            baseline) or ``"arrow"`` (:class:`ArrowCounts`, the kernels raytide's word
            count uses).

    Returns:
        ``{epoch: {word: count}}`` for ``epoch`` in ``range(n_epochs)``.
    """
    path = os.fspath(os.path.abspath(path))
    # Counting tasks first, so that they take Ray's idle pooled workers and the actors the new ones.
    counting = [count_range_lines.remote(path, i, n_mappers, 8 * block_bytes) for i in range(n_mappers)]
    owned = reducers is None
    if owned:
        reducers = start_reducers(n_reducers, n_mappers)
    try:
        line_counts = ray.get(counting)
        bounds = epoch_bounds(sum(line_counts), n_epochs)
        firsts = np.cumsum([0, *line_counts[:-1]]).tolist()
        ray.get(
            [
                map_range.remote(path, i, n_mappers, first, bounds, reducers, block_bytes, flush_lines, max_in_flight,
                                 counter)
                for i, first in enumerate(firsts)
            ]
        )
        return merge_reducer_results([unpack(b) for b in ray.get([r.result.remote() for r in reducers])], n_epochs)
    finally:
        for reducer in reducers if owned else ():
            ray.kill(reducer)


def merge_reducer_results(parts: list[WordCounts], n_epochs: int) -> WordCounts:
    """Union the per-reducer results (their word sets are disjoint) into one per epoch."""
    result: WordCounts = {e: {} for e in range(n_epochs)}
    for part in parts:
        for epoch, counts in part.items():
            if not result[epoch]:
                result[epoch] = counts
            else:
                result[epoch].update(counts)
    return result


def wordcount_reference(path: PathLike, n_epochs: int = 10) -> WordCounts:
    """Plain-Python word count per epoch, with the same semantics as :func:`wordcount_ray`.

    Args:
        path: Text file of ``"\\n"``-separated lines.
        n_epochs: Number of contiguous line-index epochs.

    Returns:
        ``{epoch: {word: count}}`` for ``epoch`` in ``range(n_epochs)``.
    """
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file's final "\n" ends the last line; it does not start a new one
    bounds = epoch_bounds(len(lines), n_epochs)
    result: dict[int, Counter[str]] = {e: Counter() for e in range(n_epochs)}
    for i, line in enumerate(lines):
        result[epoch_of_line(bounds, i)].update(line.decode("utf-8").split())
    return {e: dict(c) for e, c in result.items()}
