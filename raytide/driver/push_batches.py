"""What ``job.push`` was given, made ready to send (:mod:`raytide.driver.inputs` sends it):
an epoch checked to be an integer, records made a batch (a string, None or a non-iterable
refused), cut into pieces (:func:`push_pieces`), each piece packed for the wire, or an error
naming the input, the epoch and the first record that does not pickle, before anything is sent."""

from __future__ import annotations

import collections.abc
import itertools
import operator
from typing import Any

from raytide.core.batches import BATCH_KINDS, batch_length, eager, is_arrow, not_a_batch, split_batch, to_records
from raytide.errors import GraphError, RecordError
from raytide.physical.pickled import unpicklable
from raytide.physical.wire import pack

#: The most bytes a piece of a pushed column batch carries when cut one piece per input replica:
#: a replica's window of ``max_inflight`` calls then holds at most that many times it.
COLUMN_PIECE_BYTES = 16 << 20


def push_pieces(batch: Any, replicas: int, batch_size: int, piece_bytes: int = COLUMN_PIECE_BYTES) -> list[Any]:
    """A pushed batch cut into the pieces sent to an input's ``replicas`` in turn.

    Records (a list, a NumPy array) go in pieces of ``batch_size``. A column batch (a dict
    of columns, an Arrow table) goes in one piece per replica, at least ``batch_size`` rows
    and at most ``piece_bytes`` each (more pieces if needed): its operators work
    per column batch, and every piece costs a driver call and an exchange message per
    downstream replica (issue 71: a 20k-row update cut at 4,096 rows took five calls).
    """
    batch = eager(batch)
    rows = batch_length(batch)
    if rows <= batch_size or not (isinstance(batch, dict) or is_arrow(batch)):
        return split_batch(batch, batch_size)
    size = batch.nbytes if is_arrow(batch) else sum(getattr(column, "nbytes", 0) for column in batch.values())
    per_replica, fitting = -(-rows // replicas), max(1, rows * piece_bytes // max(size, 1))
    return split_batch(batch, max(batch_size, min(per_replica, fitting)))


def as_epoch(name: str, epoch: Any) -> int:
    """``epoch`` as an int: ints and integer-like values (NumPy integers, anything with
    ``__index__``) are accepted; anything else raises a GraphError naming the input."""
    try:
        return operator.index(epoch)
    except TypeError:
        raise GraphError(f"input {name!r}: epoch {epoch!r} is not an integer (got {type(epoch).__name__})") from None


def pushed_batch(name: str, epoch: int | None, records: Any) -> Any:
    """What ``job.push`` was given, as a batch: a batch as it is, another iterable (a tuple,
    a range, a generator) as a list; a string, None or a non-iterable raises a RecordError
    (naming the epoch, unless the push has none: an event-time input's)."""
    if not_a_batch(records) is None:
        return records
    if isinstance(records, (str, bytes)) or not isinstance(records, collections.abc.Iterable):
        where = f"input {name!r}" + (f" epoch {epoch}" if epoch is not None else "")
        raise RecordError(f"{where}: push got {not_a_batch(records)}, not records; "
                          f"a push takes {BATCH_KINDS}, or any other iterable of records")
    return list(records)


def offsets(pieces: list) -> list[int]:
    """The index of each piece's first record in the whole push."""
    return list(itertools.accumulate((batch_length(piece) for piece in pieces[:-1]), initial=0))


def packed(name: str, epoch: int, piece: Any, offset: int) -> tuple[Any, bool]:
    """``pack(piece)``, or a RecordError naming the input, the epoch and the first record that does not pickle."""
    try:
        return pack(piece)
    except Exception as error:
        raise unpicklable(to_records(piece), error, f"input {name!r} epoch {epoch}", offset,
                          "; nothing of this push was sent") from error
