"""A committed snapshot laid out again for another parallelism: ``restore=`` at another width,
and a recovery after a live rescale, before the rescaled job's first snapshot.

A snapshot holds one part per replica. Restored at the parallelism it was taken at, each
replica reads its own part. When a job restores it with some vertices at another width,
:func:`reshard_snapshot` first writes (and commits) a new snapshot laid out for the new
job, which then restores from it as usual; later recoveries of that job use snapshots at
its own parallelism.

What goes where is :mod:`raytide.rescale.layout`'s (the same as a live rescale's).

Inputs keep their width: an input replica's position counts the driver calls *it* was
sent, and a source reader's position is in *its* share of the source, neither of which
means anything to a replica of another width. Vertices keep their names: a snapshot of
another program is refused. The snapshot is pickled user state, so this runs the same
code (and trusts the same store) as a restore does.
"""

from __future__ import annotations

import logging
import pickle

from raytide.errors import SnapshotError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.layout import reshard
from raytide.snapshots.coordinator import Commit
from raytide.snapshots.recovery import JOB_PART, RestorePoint, commit_snapshot, part_name, restore_point
from raytide.snapshots.replica_state import ReplicaSummary, complete, load, take
from raytide.snapshots.store import Manifest, SnapshotStore

logger = logging.getLogger(__name__)

def widths_of(manifest: Manifest) -> dict[str, int]:
    """The parallelism of every vertex when snapshot ``manifest`` was taken."""
    return {str(name): int(width) for name, width in manifest.metadata.get("vertices", {}).items()}


def changed_widths(plan: PhysicalPlan, manifest: Manifest) -> dict[str, tuple[int, int]]:
    """``{vertex: (width in the snapshot, width in plan)}`` for every vertex whose width differs.

    Raises:
        SnapshotError: the snapshot is of another program (other vertex names), or an
            input's width differs (see the module docstring).
    """
    old = widths_of(manifest)
    if set(old) != set(plan.vertices):
        raise SnapshotError(f"snapshot {manifest.snapshot_id} is of another program: it has vertices "
                            f"{sorted(old)}, this job {sorted(plan.vertices)}")
    changed = {name: (old[name], plan.width(name)) for name in plan.vertices if old[name] != plan.width(name)}
    inputs = sorted(name for name in changed if name in plan.inputs)
    if inputs:
        raise SnapshotError(
            f"snapshot {manifest.snapshot_id} cannot be restored with input {inputs[0]!r} at "
            f"{changed[inputs[0]][1]} replicas: it was taken at {changed[inputs[0]][0]}, and an input's position "
            f"in a snapshot is per replica; give the input its width explicitly "
            f"(flow.input({inputs[0]!r}, parallelism={changed[inputs[0]][0]}))")
    return changed


def reshard_snapshot(plan: PhysicalPlan, store: SnapshotStore, snapshot_id: int | None, retain: int,
                     since: int = 0) -> int | None:
    """The id of a committed snapshot laid out for ``plan``: ``snapshot_id`` (None: the latest
    intact one with an id of at least ``since``)
    itself if its widths are ``plan``'s, else a new one written from it. None if the store
    holds no committed snapshot.

    Raises:
        SnapshotError: no such snapshot, or it cannot be laid out for ``plan``
            (:func:`changed_widths`).
        RescaleError: a vertex whose width changed keeps state it cannot split by key.
    """
    manifest = store.latest(since) if snapshot_id is None else store.manifest(snapshot_id)
    if manifest is None:
        return None
    changed = changed_widths(plan, manifest)
    if not changed:
        return manifest.snapshot_id
    old_widths = widths_of(manifest)
    summaries: dict[ReplicaKey, ReplicaSummary] = pickle.loads(store.read_part(manifest.snapshot_id, JOB_PART))
    old = {key: load(store.read_part(manifest.snapshot_id, part_name(key))) for key in summaries}
    new_id = store.next_id()
    layout = reshard(plan, old_widths, old)
    parts, new_summaries = [], {}
    for key, (state, logged) in layout.items():
        snapshot = complete(new_id, key, take(state, 0.0)[0], {None: tuple(logged)})
        parts.append(store.write_part(new_id, part_name(key), snapshot.data))
        new_summaries[key] = snapshot.summary
    delivered = {str(name): int(epoch) for name, epoch in manifest.metadata.get("delivered", {}).items()}
    incarnation = int(manifest.metadata.get("incarnation", 0))
    commit_snapshot(store, plan, Commit(new_id, incarnation, tuple(parts), dict(new_summaries), 0.0), delivered,
                    retain + 1)  # the snapshot it came from is kept too
    logger.warning("snapshot %d was taken with %s; written again as snapshot %d for %s", manifest.snapshot_id,
                   {name: widths[0] for name, widths in changed.items()}, new_id,
                   {name: widths[1] for name, widths in changed.items()})
    return new_id


def latest_restore_point(plan: PhysicalPlan, store: SnapshotStore, retain: int, since: int,
                         started_from: int | None) -> RestorePoint:
    """Where a recovery restores a run from: its latest intact snapshot (an id of at least
    ``since``, its first), else the snapshot it was started from (``restore=``), else the
    start; laid out for ``plan``'s widths first if it was taken at others (a rescale since).
    Never another run's snapshot, though the store may hold some."""
    snapshot_id = reshard_snapshot(plan, store, None, retain, since=since)
    if snapshot_id is None and started_from is not None:
        snapshot_id = reshard_snapshot(plan, store, started_from, retain)
    return restore_point(plan, store if snapshot_id is not None else None, snapshot_id)
