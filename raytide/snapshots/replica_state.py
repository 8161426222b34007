"""What a replica saves in a snapshot, and what recovery needs of it without reading it.

At an aligned cut (:mod:`raytide.snapshots.barriers`) no regular channel holds a record,
so a replica's share of the job's state is: the state of every vertex of its chain (the
user's :meth:`~raytide.Vertex.snapshot`), the notifications they wait for, its inputs'
epochs and positions (how many driver commands each consumed), the routing tables its
exchanges use, the output records it received of epochs the driver has not been handed
yet, and the back-edge records logged after its local snapshot (in flight in the cut).

Recovery rebuilds the progress tracker from the :class:`ReplicaSummary` of every replica
(Naiad's pointstamps: +1 per pending notification at its vertex, +1 per open input at
its epoch, +1 per logged back-edge record at the input it goes to), seeds the output log
with the kept records and rewinds each input to its position. Held-back progress deltas
are not saved: they are part of what the rebuilt tracker already counts.

The state is pickled with cloudpickle when the local snapshot is taken, which both
copies it (processing goes on and mutates it) and lets user state hold functions. The
kept output records, most of a snapshot's bytes when the driver lags, are pickled once
per output and epoch, outside the rest of the state: the same bytes go into the
replica's part (restored into the replica) and its summary (read by recovery, sent to
the coordinator as bytes, which Ray and the job part copy without looking into them).
An epoch's records are only ever appended to, so an epoch whose list has not grown since
the last snapshot reuses that snapshot's bytes (:func:`pickle_outputs`): a lagging
driver costs each record one pickling, not one per snapshot.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from raytide.core.keygroups import KeyGroupAssignment
from raytide.errors import SnapshotError
from raytide.physical.protocol import ChannelId, ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp

#: A record batch as a replica received it: ``(channel, vertex, time, batch)``.
LoggedBatch = tuple[ChannelId, str, Timestamp, Any]
#: Per output, the pickled records of each epoch (a list of records when unpickled).
PickledOutputs = dict[str, dict[int, bytes]]
#: Per ``(output, epoch)``: the kept list that was pickled, its length then, and its bytes.
OutputPickles = dict[tuple[str, int], tuple[list, int, bytes]]


@dataclass(frozen=True)
class Sequences:
    """What a replica's snapshot records of its numbered channels (:mod:`raytide.engine.numbered_channels`).

    Attributes:
        taken: per input channel, the number of the first message after the snapshot's
            barrier (what the restored replica expects next).
        sent: per output channel, the number of the first message after the barrier (the
            log's mark: where a restored sender numbers on from).
        figures: the replica's progress figures at the snapshot (``protocol.Figures``).
        snapshot_id: the snapshot's (every barrier up to it came on every input channel).
    """

    taken: dict[Hashable, int] = field(default_factory=dict)
    sent: dict[Hashable, int] = field(default_factory=dict)
    figures: dict[Any, int] = field(default_factory=dict)
    snapshot_id: int = 0


@dataclass(frozen=True)
class ReplicaState:
    """Everything a replica restores from (pickled into its part of the snapshot)."""

    user: dict[str, Any]
    notifications: dict[str, set[Timestamp]]
    input_epochs: dict[str, int | None]
    positions: dict[str, int]
    kept: dict[str, dict[int, list]]
    tables: dict[tuple[str, int, int], KeyGroupAssignment]
    sources: dict[str, Any]  # per input read here from a source: its reader's position
    sequences: Sequences | None = None  # its numbered channels (None: numbering off, or a rescale's state)


@dataclass(frozen=True)
class ReplicaSummary:
    """What recovery needs of a replica's snapshot without unpickling user state.

    Attributes:
        capabilities: the pointstamps the replica holds at the cut, logged records included.
        positions: per input it hosts, how many driver commands it had consumed.
        outputs: per output it hosts, the records of each epoch not handed to the driver
            yet, pickled (:func:`unpickle_outputs` reads them).
    """

    capabilities: list[tuple[Pointstamp, int]]
    positions: dict[str, int]
    outputs: PickledOutputs
    alignment_s: float = 0.0  # from the snapshot's first barrier here to the local snapshot


@dataclass(frozen=True)
class TakenState:
    """A local snapshot taken at alignment, waiting for its back edges' barriers: the
    state without its kept records, which are in ``outputs``."""

    state: bytes
    capabilities: list[tuple[Pointstamp, int]]
    positions: dict[str, int]
    outputs: PickledOutputs
    alignment_s: float


@dataclass(frozen=True)
class HeldReport:
    """A replica held at a rescale's cut (:mod:`raytide.rescale.widths`): what the driver
    needs of it. Its state stays where it is, by reference, until it is handed over.

    Attributes:
        summary: as a snapshot's (its capabilities count its logged back-edge batches).
        tables: the routing tables its exchanges used, per ``(vertex, output port,
            consumer index)``: where the keys of the vertices it sends to lived.
    """

    summary: ReplicaSummary
    tables: dict[tuple[str, int, int], KeyGroupAssignment]


@dataclass(frozen=True)
class CutAnswer:
    """The coordinator's answer to a rescale's cut (``hold_now``): every replica's report
    (``cut_id`` set), or why the cut was not held (``missed``: abandoned, by a recovery or at
    its timeout, or asked for in an incarnation the job has left); neither: the snapshot in
    flight did not end in time, so no cut was started. An answer, never an exception: the
    driver stops waiting for a cut when it notices a death, and an error nobody reads would
    be printed as unhandled."""

    cut_id: int | None = None
    reports: dict[Any, HeldReport] = field(default_factory=dict)
    missed: str | None = None


@dataclass(frozen=True)
class LocalSnapshot:
    """A replica's complete local snapshot ``snapshot_id``: the bytes to write and the summary."""

    snapshot_id: int
    key: ReplicaKey
    data: bytes
    summary: ReplicaSummary


def take(state: ReplicaState, alignment_s: float, pickles: OutputPickles | None = None) -> tuple[TakenState, OutputPickles]:
    """Copy ``state`` (by pickling it) with the pointstamps it holds; ``alignment_s``: how long
    the replica aligned its inputs for this snapshot; ``pickles``: what the last snapshot
    returned (its pickled kept records). Returns the snapshot and the pickles for the next."""
    outputs, pickles = pickle_outputs(state.kept, pickles or {})
    data = cloudpickle.dumps(dataclasses.replace(state, kept={}))
    return TakenState(data, capabilities(state), dict(state.positions), outputs, alignment_s), pickles


def unpicklable_state(state: ReplicaState, error: Exception, replica: str, snapshot_id: int) -> SnapshotError:
    """The error of a snapshot whose ``state`` did not pickle (``error``), naming the vertex
    whose state it was (the first that does not pickle alone), the ``replica`` and the snapshot."""
    where = "its notifications, positions or kept output records"
    for name, user in state.user.items():
        try:
            cloudpickle.dumps(user)
        except Exception:
            where = f"vertex {name!r}"
            break
    return SnapshotError(f"snapshot {snapshot_id}: the state of {where} on replica {replica} cannot be pickled, so it "
                         f"cannot be snapshotted: {error!r}; keep only picklable values in vertex state (open a "
                         f"lock, file or connection again in restore())")


def capabilities(state: ReplicaState, logged: Iterable[LoggedBatch] = ()) -> list[tuple[Pointstamp, int]]:
    """The pointstamps a replica in ``state`` holds, with ``logged`` back-edge batches still
    to deliver: +1 per pending notification at its vertex, per open input at its epoch and
    per logged batch at the input it goes to."""
    held: list[tuple[Pointstamp, int]] = [
        ((Location.of_vertex(vertex), time), 1) for vertex, times in state.notifications.items() for time in times]
    held += [((Location.of_vertex(name), Timestamp(epoch)), 1)
             for name, epoch in state.input_epochs.items() if epoch is not None]
    return held + _logged_capabilities(logged)


def _logged_capabilities(logged: Iterable[LoggedBatch]) -> list[tuple[Pointstamp, int]]:
    """+1 per logged back-edge batch at the input it goes to, at its time."""
    return [((Location.of_input(vertex, channel.port), time), 1) for channel, vertex, time, _ in logged]


def pickle_outputs(kept: Mapping[str, Mapping[int, list]], pickles: OutputPickles) -> tuple[PickledOutputs, OutputPickles]:
    """Per output and epoch the ``kept`` records, pickled; those of an epoch whose list is
    the one in ``pickles`` with the same length are not pickled again (kept lists only
    grow). Also returns the pickles of exactly these lists, for the next call.

    >>> kept = {"out": {0: ["a", "b"], 1: ["c"]}}
    >>> outputs, pickles = pickle_outputs(kept, {})
    >>> kept["out"][1].append("d")
    >>> again, _ = pickle_outputs(kept, pickles)
    >>> again["out"][0] is outputs["out"][0], unpickle_outputs(again)
    (True, {'out': {0: ['a', 'b'], 1: ['c', 'd']}})
    """
    fresh: OutputPickles = {}
    outputs: PickledOutputs = {}
    for name, epochs in kept.items():
        outputs[name] = {}
        for epoch, records in epochs.items():
            cached = pickles.get((name, epoch))
            if cached is None or cached[0] is not records or cached[1] != len(records):
                cached = (records, len(records), cloudpickle.dumps(records))
            fresh[name, epoch] = cached
            outputs[name][epoch] = cached[2]
    return outputs, fresh


def unpickle_outputs(outputs: PickledOutputs) -> dict[str, dict[int, list]]:
    """The kept records per output and epoch from what :func:`pickle_outputs` made of them."""
    return {name: {epoch: cloudpickle.loads(data) for epoch, data in epochs.items()} for name, epochs in outputs.items()}


def complete(snapshot_id: int, key: ReplicaKey, taken: TakenState, logged: Mapping[Any, tuple]) -> LocalSnapshot:
    """The local snapshot once the back edges' barriers came: the taken state plus ``logged``
    (per back-edge channel, the batches that arrived after the local snapshot)."""
    batches: list[LoggedBatch] = [batch for records in logged.values() for batch in records]
    held = taken.capabilities + _logged_capabilities(batches)
    data = cloudpickle.dumps((taken.state, taken.outputs, batches))
    return LocalSnapshot(snapshot_id, key, data, ReplicaSummary(held, taken.positions, taken.outputs, taken.alignment_s))


def load(data: bytes) -> tuple[ReplicaState, list[LoggedBatch]]:
    """A replica's state (its kept records included) and logged batches from the bytes of its
    :class:`LocalSnapshot`."""
    state, outputs, batches = cloudpickle.loads(data)
    return dataclasses.replace(cloudpickle.loads(state), kept=unpickle_outputs(outputs)), batches


def pointstamps(summaries: list[ReplicaSummary]) -> list[tuple[Pointstamp, int]]:
    """The tracker's pointstamps at the cut: every replica's capabilities, summed."""
    return summed(pair for summary in summaries for pair in summary.capabilities)


def summed(held: Iterable[tuple[Pointstamp, int]]) -> list[tuple[Pointstamp, int]]:
    """``(pointstamp, count)`` pairs with the counts of each pointstamp added up (zeros dropped)."""
    total: collections.Counter[Pointstamp] = collections.Counter()
    for pointstamp, count in held:
        total[pointstamp] += count
    return [(pointstamp, count) for pointstamp, count in total.items() if count]
