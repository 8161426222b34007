"""What an input replica does with batches the driver deals it by reference (the Ray shell's
side of :mod:`raytide.sources.base`'s ``BlockRefs`` and :mod:`raytide.sources.clocked_stream`):
reads them where it runs, and hands a stream's share with event time to the replica's clock."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import ray

from raytide.core.batches import batch_length
from raytide.engine.replica import ReplicaCore
from raytide.sources.base import RemoteBatch

if TYPE_CHECKING:  # imported where used: a job without a stream with event time never loads the clock's modules
    from raytide.sources.clocked_stream import Heard, Share


class Unreadable(Exception):
    """A batch dealt by reference that cannot be read here; says why."""


def read_pushed(refs: Sequence[Any]) -> Iterator[Any]:
    """The batches of ``refs`` (object refs, :class:`RemoteBatch` handles), read here, in order.

    Raises:
        Unreadable: an object whose owner died or that was freed, or a remote batch that
            cannot be read any more (its Spark executor is gone).
    """
    try:
        stored = iter(ray.get([ref for ref in refs if not isinstance(ref, RemoteBatch)]))
    except Exception as error:
        raise Unreadable(f"a pushed object ref could not be read: {type(error).__name__}: {error}") from error
    for ref in refs:
        if not isinstance(ref, RemoteBatch):
            yield next(stored)
            continue
        try:
            batch = ref.read()
        except Exception as error:
            raise Unreadable(f"{type(error).__name__}: {error}") from error
        yield batch


def take_share(core: ReplicaCore, started: dict[str, Any], vertex: str, share: Share, batches: list) -> None:
    """One event: the replica's ``share`` of a clocked stream's batch (its ``batches`` read)
    through the input's clock (released first to ``share.release``, if the driver found the
    replica idle), kept in ``started`` (the replica's readers, whose positions every snapshot
    holds; made from the restored position at the first share after a restore): its items
    pushed at their epochs, the input moved as the clock says (closed at the stream's end),
    and the input's command count set to ``share.upto``, the next batch id, however many
    moves the share made."""
    from raytide.sources.clocked_stream import StreamClock

    clock = started.get(vertex)
    if not isinstance(clock, StreamClock):
        clock = started[vertex] = share.clock(core.restored_sources.get(vertex))
    for epoch, batch in clock.close() if share.end else clock.take(batches, share.release):
        if epoch != core.input_epochs[vertex]:
            core.advance_input(vertex, epoch)
        if batch_length(batch):
            core.push_input(vertex, batch, epoch)
    if share.end:
        core.advance_input(vertex, None)
    core.positions[vertex] = share.upto


def heard(started: dict[str, Any], vertex: str, replica: int) -> Heard | None:
    """What input replica ``replica`` answers to a share of stream input ``vertex``: its clock's
    watermark and the share's record count, by which the driver tells idle replicas (None: no clock)."""
    from raytide.sources.clocked_stream import StreamClock

    clock = started.get(vertex)
    return clock.heard(replica) if isinstance(clock, StreamClock) else None
