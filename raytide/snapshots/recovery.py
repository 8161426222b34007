"""Recovery as pure logic: how a job's snapshot is laid out in the store, where a restored
job starts, and how many restarts it may take.

Snapshot ``k`` of a job holds one part per replica (its :class:`LocalSnapshot` bytes,
named by :func:`part_name`) and a ``job`` part the coordinator writes at commit: every
replica's :class:`ReplicaSummary`. From the summaries alone recovery rebuilds the
progress tracker (:func:`restore_point`); each replica reads only its own part.

A recovery, whatever died (a replica's actor, the progress actor, the coordinator):

1. the driver starts incarnation ``n + 1``; every message of an older one is dropped
   where it arrives, and the snapshot in flight is abandoned;
2. every replica is reset in place (a fresh core) or, if its actor died, replaced on a
   warm host, and restores its part of the last committed snapshot (none yet: its
   initial state);
3. a new progress core starts from :func:`restore_point`'s pointstamps, with the kept
   output records and the epochs the driver already has (dropped when replayed);
4. every replica resumes (delivers its logged back-edge batches first) and every input
   is rewound to its position.

A failure during a recovery starts the next one. The steps are those of the in-process
runtime (:mod:`raytide.testing.local`), where crashes at every step are simulated.
"""

from __future__ import annotations

import pickle
import urllib.parse
import warnings
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from raytide.errors import RecoveryError, SnapshotError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.progress.outputs import NEVER, earliest_epoch
from raytide.progress.reachability import Location
from raytide.progress.tracker import Pointstamp, Tracker
from raytide.snapshots.coordinator import Commit
from raytide.snapshots.reads import UnreadableFile
from raytide.snapshots.replica_state import ReplicaSummary, pointstamps, unpickle_outputs
from raytide.snapshots.store import Manifest, SnapshotStore

#: The part the coordinator writes at commit: every replica's summary.
JOB_PART = "job"


def part_name(key: ReplicaKey) -> str:
    """The file name of ``key``'s part in a snapshot (vertex names may hold any character)."""
    return f"replica-{urllib.parse.quote(key.chain, safe='')}-{key.replica}"


def encode_summaries(summaries: Mapping[Hashable, ReplicaSummary]) -> bytes:
    """The ``job`` part's bytes."""
    return pickle.dumps(summaries, protocol=pickle.HIGHEST_PROTOCOL)


def snapshot_metadata(plan: PhysicalPlan, incarnation: int, delivered: Mapping[str, int],
                      complete: Mapping[str, int | None]) -> dict[str, object]:
    """The manifest's metadata: the vertices and their parallelism, the incarnation, per
    output the last epoch the driver had been handed when the snapshot was triggered (a job
    restored from it does not hand those out again), and per output the last epoch complete
    in the snapshot (:func:`complete_at_cut`)."""
    return {"job": plan.name, "incarnation": incarnation,
            "vertices": {name: plan.width(name) for name in plan.vertices}, "delivered": dict(delivered),
            "complete": dict(complete)}


def complete_at_cut(plan: PhysicalPlan, summaries: Mapping[Hashable, ReplicaSummary]) -> dict[str, int | None]:
    """Per output, the last epoch that is complete in the snapshot whose replicas' summaries
    are ``summaries`` (-1: none; None: every epoch, the output is finished).

    At an aligned cut no regular channel holds a record, so the pointstamps the replicas
    hold are all the work left: an output epoch that none of them can still result in has
    all its records in the snapshot (the output replicas' kept records). Restored from it,
    such an epoch is never computed again; that is what lets output be committed at a
    snapshot (``rt.Recovery(output_commit="snapshot")``) for dataflows that would not
    compute it the same way twice.
    """
    tracker = Tracker(plan.graph)
    tracker.update_all(pointstamps(list(summaries.values())))
    tracker.propagate()
    complete: dict[str, int | None] = {}
    for name in plan.outputs:
        low = earliest_epoch(tracker.frontier(Location.of_input(name, 0)))
        complete[name] = None if low == NEVER else int(low) - 1
    return complete


def commit_snapshot(store: SnapshotStore, plan: PhysicalPlan, commit: Commit, delivered: Mapping[str, int],
                    retain: int) -> dict[str, int | None]:
    """Commit ``commit``: write the ``job`` part (every replica's summary), then the manifest
    (last: the snapshot exists once it does), then delete all but the last ``retain``
    committed snapshots. Returns the outputs' epochs complete in it (:func:`complete_at_cut`).

    A delete that fails does not fail the commit (a warning says so): reported failed, a
    committed snapshot would hold back the outputs it releases, and a store that cannot
    delete would fail every commit. The snapshots left are deleted by a later commit's
    retention (the store deletes a manifest first, so none is left half deleted).

    ``delivered``: per output the last epoch the driver had been handed at the trigger.

    Every write goes through ``store`` as the commit's incarnation writes it
    (:meth:`~raytide.snapshots.store.SnapshotStore.at`): a coordinator declared dead and
    replaced by a recovery, still running, has its commit and its retention refused once the
    recovery recorded its incarnation (a :class:`~raytide.errors.StoreFencedError`). A store
    that follows an incarnation already is the driver's, rewriting a snapshot for a rescaled
    job (``commit`` then carries the old snapshot's incarnation): it writes in its own.
    """
    store = store if store.follows_incarnation else store.at(commit.incarnation)
    job = store.write_part(commit.snapshot_id, JOB_PART, encode_summaries(commit.summaries))
    complete = complete_at_cut(plan, commit.summaries)
    store.commit(commit.snapshot_id, [*commit.parts, job],
                 snapshot_metadata(plan, commit.incarnation, delivered, complete))
    try:
        store.retain(retain)
    except (OSError, UnreadableFile) as error:  # the snapshot is committed all the same: never report it failed
        warnings.warn(f"snapshot {commit.snapshot_id} is committed, but deleting older snapshots of {store.uri} "
                      f"failed ({error!r}): a later commit deletes them", RuntimeWarning, stacklevel=2)
    return complete


class Committed(NamedTuple):
    """What the driver learns of a committed snapshot: its id, where each input replica was
    in it (the calls before are not needed again), and per output its last complete epoch."""

    snapshot_id: int
    positions: dict[ReplicaKey, dict[str, int]]
    complete: dict[str, int | None]


@dataclass(frozen=True)
class RestorePoint:
    """Where a (re)started job begins: a committed snapshot, or the very start (``snapshot_id`` None)."""

    snapshot_id: int | None
    pointstamps: list[tuple[Pointstamp, int]]
    kept: dict[str, dict[int, list]] = field(default_factory=dict)
    positions: dict[ReplicaKey, dict[str, int]] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)
    complete: dict[str, int | None] = field(default_factory=dict)  # per output, its last epoch complete here
    #: per ``(input, replica)``, the epoch that replica of the input was at (None: closed)
    input_epochs: dict[tuple[str, int], int | None] = field(default_factory=dict)

    def position(self, key: ReplicaKey, vertex: str) -> int:
        """How many of its driver commands input ``vertex``'s replica ``key`` had consumed."""
        return self.positions.get(key, {}).get(vertex, 0)


def input_epochs(summaries: Mapping[ReplicaKey, ReplicaSummary]) -> dict[tuple[str, int], int | None]:
    """Per ``(input, replica)``, the epoch that input replica was at in a snapshot (None: it
    was closed): its own capability. The replicas of one input may be at different epochs:
    each took the snapshot's marker between two of its own driver commands."""
    epochs: dict[tuple[str, int], int | None] = {}
    for key, summary in summaries.items():
        for name in summary.positions:
            here = Location.of_vertex(name)
            epochs[(name, key.replica)] = min((time.epoch for (location, time), count in summary.capabilities
                                              if location == here and count > 0), default=None)
    return epochs


def restore_point(plan: PhysicalPlan, store: SnapshotStore | None, snapshot_id: int | None = None,
                  since: int = 0) -> RestorePoint:
    """Committed snapshot ``snapshot_id`` of ``store``; by default the latest one with an id of
    at least ``since`` (damaged ones are skipped with a warning), or the start of the job if
    there is none.

    Raises:
        SnapshotError: ``snapshot_id`` is not a committed, intact snapshot, or the snapshot
            is of another program or parallelism.
    """
    if store is None:
        return RestorePoint(None, plan.initial_pointstamps())
    manifest = store.latest(since) if snapshot_id is None else store.manifest(snapshot_id)
    if manifest is None:
        return RestorePoint(None, plan.initial_pointstamps())
    return _from_manifest(plan, store, manifest)


def _from_manifest(plan: PhysicalPlan, store: SnapshotStore, manifest: Manifest) -> RestorePoint:
    summaries: dict[ReplicaKey, ReplicaSummary] = pickle.loads(store.read_part(manifest.snapshot_id, JOB_PART))
    expected = set(plan.replica_keys())
    if set(summaries) != expected:
        raise SnapshotError(f"snapshot {manifest.snapshot_id} holds replicas {sorted(map(str, summaries))}, but this "
                            f"job has {sorted(map(str, expected))}: it is of another program or parallelism")
    kept = kept_records(summaries.values())
    delivered = manifest.metadata.get("delivered", {})
    complete = manifest.metadata.get("complete", {})
    return RestorePoint(manifest.snapshot_id, pointstamps(list(summaries.values())), kept,
                        {key: summary.positions for key, summary in summaries.items()},
                        {str(name): int(epoch) for name, epoch in delivered.items()},
                        {str(name): None if epoch is None else int(epoch) for name, epoch in complete.items()},
                        input_epochs(summaries))


def kept_records(summaries: Iterable[ReplicaSummary]) -> dict[str, dict[int, list]]:
    """Per output and epoch, the lists of records the output replicas kept at a cut (one
    list per replica that kept any): what a new progress actor hands the driver again."""
    kept: dict[str, dict[int, list]] = {}
    for summary in summaries:
        for name, epochs in unpickle_outputs(summary.outputs).items():
            for epoch, records in epochs.items():
                if records:
                    kept.setdefault(name, {}).setdefault(epoch, []).append(records)
    return kept


def unrecoverable(job: str, what: str) -> RecoveryError:
    """The error of job ``job``, started without ``recovery=``, when ``what`` happened that only a
    recovery could have undone (it has no snapshot store, so nothing can bring it back)."""
    return RecoveryError(f"job {job!r} was started without recovery=, and {what}; start it with "
                         f"recovery=rt.Recovery(store) to have it recovered")


@dataclass
class RestartBudget:
    """Counts recoveries; the one past ``max_restarts`` is a :class:`RecoveryError` naming every failure."""

    max_restarts: int
    causes: list[str] = field(default_factory=list)
    #: The job's name if it was started without ``recovery=`` (:meth:`none`): its rescales'
    #: machines are the only ones spending this, and their error says that, not "max_restarts=0".
    unrecovered: str | None = None

    @classmethod
    def none(cls, job: str) -> RestartBudget:
        """The budget of job ``job``, started without ``recovery=``: no restart at all."""
        return cls(0, unrecovered=job)

    def spend(self, cause: str) -> None:
        """Record a failure; raises RecoveryError once more have happened than may be recovered from."""
        self.causes.append(cause)
        if self.unrecovered is not None:
            raise unrecoverable(self.unrecovered, f"its rescale met a failure only a recovery could undo: {cause}")
        if len(self.causes) > self.max_restarts:
            listed = "; ".join(f"{i}. {c}" for i, c in enumerate(self.causes, 1))
            raise RecoveryError(f"the job failed {len(self.causes)} times, more than max_restarts="
                                f"{self.max_restarts} allows: {listed}")
