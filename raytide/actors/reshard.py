"""A committed snapshot laid out again for another parallelism: ``restore=`` at another width.

A snapshot holds one part per replica. Restored at the parallelism it was taken at, each
replica reads its own part. When a job restores it with some vertices at another width,
:func:`reshard_snapshot` first writes (and commits) a new snapshot laid out for the new
job, which then restores from it as usual; later recoveries of that job use snapshots at
its own parallelism.

Per vertex whose width changed, from ``p`` replicas to ``q``:

* **Key groups move to new owners.** The owners of the vertex's key groups become
  ``old.rescale(q)`` of the old routing table (:class:`~raytide.core.keygroups.KeyGroupAssignment`:
  the fewest groups move, the rest stay where they were). Each old replica's state is split
  by :meth:`~raytide.Vertex.take_keys` (a key goes where its group goes) and each new
  replica gathers its share with :meth:`~raytide.Vertex.put_keys`, which also asks for the
  notifications that state needs. Every replica that sends to the vertex routes by the
  new table. A vertex behind a keyed one on a pipeline (fused with it) follows its keys.
* **Records in flight on a back edge** at the cut (logged in the snapshot) are routed again
  by the new table, so each reaches the replica that now owns its key.
* **Kept output records** (an output vertex at a new width) are dealt to the new replicas:
  the driver reads them as a whole.

Inputs keep their width: an input replica's position counts the driver calls *it* was
sent, and a source reader's position is in *its* share of the source, neither of which
means anything to a replica of another width. Vertices keep their names: a snapshot of
another program is refused. The snapshot is pickled user state, so this runs the same
code (and trusts the same store) as a restore does.
"""

from __future__ import annotations

import collections
import logging
import pickle
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytide.actors.plan import PhysicalPlan
from raytide.actors.protocol import ChannelId, ReplicaKey
from raytide.actors.recovery import JOB_PART, commit_snapshot, part_name
from raytide.actors.replica_state import LoggedBatch, ReplicaState, ReplicaSummary, complete, load, take
from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, key_group
from raytide.core.routing import ExchangeRouter, column_key_groups
from raytide.core.vertex import Vertex
from raytide.errors import RescaleError, SnapshotError
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.coordinator import Commit
from raytide.snapshots.store import Manifest, SnapshotStore

logger = logging.getLogger(__name__)

#: A route out of a sender vertex: ``(vertex, output port, consumer index)``, as routing tables are keyed.
RouteKey = tuple[str, int, int]


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


def reshard_snapshot(plan: PhysicalPlan, store: SnapshotStore, snapshot_id: int | None, retain: int) -> int | None:
    """The id of a committed snapshot laid out for ``plan``: ``snapshot_id`` (None: the latest)
    itself if its widths are ``plan``'s, else a new one written from it. None if the store
    holds no committed snapshot.

    Raises:
        SnapshotError: no such snapshot, or it cannot be laid out for ``plan``
            (:func:`changed_widths`).
        RescaleError: a vertex whose width changed keeps state it cannot split by key.
    """
    manifest = store.latest() if snapshot_id is None else store.manifest(snapshot_id)
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


# -- the pure part ---------------------------------------------------------------------------


@dataclass
class _Saved:
    """A snapshot's replica states, read per vertex and old replica."""

    states: dict[ReplicaKey, ReplicaState]
    replica_of: dict[tuple[str, int], ReplicaKey]  # (vertex, old replica) -> the old part holding it

    def find(self, vertex: str, replica: int) -> ReplicaState | None:
        """The saved state of the replica that hosted ``vertex``'s replica ``replica`` (None:
        the vertex keeps nothing, a probe)."""
        key = self.replica_of.get((vertex, replica))
        return None if key is None else self.states[key]


def reshard(plan: PhysicalPlan, old_widths: Mapping[str, int],
            old: Mapping[ReplicaKey, tuple[ReplicaState, list[LoggedBatch]]],
            ) -> dict[ReplicaKey, tuple[ReplicaState, list[LoggedBatch]]]:
    """Every replica of ``plan`` with its state and logged back-edge batches, made from the
    replica states ``old`` of a snapshot taken with the widths ``old_widths``.

    Raises:
        SnapshotError: a logged record on a broadcast edge into a vertex of another width.
        RescaleError: a vertex of another width keeps state it cannot split by key.
    """
    saved = _Saved({key: state for key, (state, _) in old.items()},
                   {(vertex, key.replica): key for key, (state, _) in old.items() for vertex in _hosted(state)})
    tables = _new_tables(plan, old_widths, saved)
    states: dict[ReplicaKey, ReplicaState] = {}
    moved = {name: _move_state(plan, name, old_widths, tables, saved)
             for name in plan.vertices if old_widths[name] != plan.width(name) and plan.vertex(name).factory}
    dealt = {name: _deal_kept(saved, name, old_widths[name], plan.width(name))
             for name in plan.outputs if old_widths[name] != plan.width(name)}
    for chain in plan.chains:
        for replica in range(chain.parallelism):
            key = ReplicaKey(chain.name, replica)
            user: dict[str, Any] = {}
            notifications: dict[str, set[Timestamp]] = {}
            state = _State()
            for name in chain.vertices:
                vertex = plan.vertex(name)
                same = old_widths[name] == plan.width(name)
                source = saved.find(name, replica) if same else None
                if name in moved:
                    user[name], notifications[name] = moved[name][replica]
                elif source is not None and name in source.user:
                    user[name], notifications[name] = source.user[name], set(source.notifications.get(name, ()))
                if vertex.role == "input" and source is not None:
                    state.input(name, source)
                if vertex.role == "output":
                    state.kept[name] = dealt[name][replica] if name in dealt else \
                        dict(source.kept.get(name, {})) if source is not None else {}
                for port in range(vertex.outputs):
                    for index, consumer in enumerate(plan.consumers_of(name, port)):
                        if consumer.channel.kind == "exchange":
                            state.tables[(name, port, index)] = tables[consumer.vertex]
            states[key] = ReplicaState(user, notifications, state.input_epochs, state.positions, state.kept,
                                       state.tables, state.sources)
    logged = _route_logged(plan, old_widths, tables, old)
    return {key: (state, logged.get(key, [])) for key, state in states.items()}


@dataclass
class _State:
    """The parts of a new replica's state other than its vertices' own."""

    input_epochs: dict[str, int | None] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, dict[int, list]] = field(default_factory=dict)
    tables: dict[RouteKey, KeyGroupAssignment] = field(default_factory=dict)

    def input(self, name: str, source: ReplicaState) -> None:
        """Input ``name`` as the old replica of the same index had it (inputs keep their width)."""
        self.input_epochs[name] = source.input_epochs[name]
        self.positions[name] = source.positions[name]
        if name in source.sources:
            self.sources[name] = source.sources[name]


def _hosted(state: ReplicaState) -> set[str]:
    """The vertices a saved replica hosted (each appears in one of its per-vertex maps)."""
    return {*state.user, *state.input_epochs, *state.kept, *(vertex for vertex, _, _ in state.tables)}


def _exchange_inputs(plan: PhysicalPlan, name: str) -> list[tuple[str, int, int, Any]]:
    """``(source, output, consumer index, key)`` of every exchange edge into ``name``."""
    edges = []
    for port, port_edges in enumerate(plan.vertex(name).inputs):
        for edge in port_edges:
            if edge.channel.kind == "exchange":
                index = next(i for i, c in enumerate(plan.consumers_of(edge.source, edge.output))
                             if c.vertex == name and c.port == port)
                edges.append((edge.source, edge.output, index, edge.channel.key))
    return edges


def _keyed_by(plan: PhysicalPlan, old_widths: Mapping[str, int], name: str) -> str:
    """The vertex whose exchange inputs decide where ``name``'s keys live: ``name`` itself,
    or, for a vertex that only reads one upstream vertex of its width over a pipeline (a
    vertex fused behind a keyed one), that upstream's."""
    inputs = [edge for port in plan.vertex(name).inputs for edge in port]
    while (len(inputs) == 1 and inputs[0].channel.kind == "pipeline"
           and plan.width(inputs[0].source) == plan.width(name)
           and old_widths[inputs[0].source] == old_widths[name]):
        name = inputs[0].source
        inputs = [edge for port in plan.vertex(name).inputs for edge in port]
    return name


def _new_tables(plan: PhysicalPlan, old_widths: Mapping[str, int], saved: _Saved) -> dict[str, KeyGroupAssignment]:
    """Per vertex, who owns its key groups in the new job: the table its senders routed by
    (those of :func:`_keyed_by`), rescaled with the fewest moves if its width changed
    (contiguous ranges if nobody routes to it by key)."""
    routed: dict[str, KeyGroupAssignment] = {}
    for name in plan.vertices:
        routed[name] = KeyGroupAssignment.contiguous(old_widths[name], DEFAULT_KEY_GROUPS)
        for source, output, index, _ in _exchange_inputs(plan, name):
            sender = saved.find(source, 0)
            if sender is not None and (source, output, index) in sender.tables:
                routed[name] = sender.tables[(source, output, index)]
    tables: dict[str, KeyGroupAssignment] = {}
    for name in plan.vertices:
        table = routed[_keyed_by(plan, old_widths, name)]
        tables[name] = table if old_widths[name] == plan.width(name) else table.rescale(plan.width(name))[0]
    return tables


def _group_function(plan: PhysicalPlan, old_widths: Mapping[str, int], name: str) -> Callable[[Hashable], int]:
    """How ``name``'s keys map to key groups: as the first exchange input of the vertex that
    decides where they live (:func:`_keyed_by`) hashes them."""
    keys = [key for *_, key in _exchange_inputs(plan, _keyed_by(plan, old_widths, name))]
    if keys and isinstance(keys[0], str):  # exchanged by an integer column: the vectorised hash
        return lambda key: int(column_key_groups(np.asarray([key]), DEFAULT_KEY_GROUPS)[0])
    return lambda key: key_group(key, DEFAULT_KEY_GROUPS)


class _MovingContext:
    """The context of a vertex whose state is being moved: it may ask for notifications
    (kept as the new replica's), never send."""

    def __init__(self, vertex: str, replica: int, parallelism: int) -> None:
        self.vertex, self.replica, self.parallelism = vertex, replica, parallelism
        self.notifications: set[Timestamp] = set()

    def send_by(self, output: int, message: Any, time: Timestamp) -> None:
        raise RescaleError(f"vertex {self.vertex!r} replica {self.replica} sent records at {time} while its state "
                           f"was being moved to another parallelism; take_keys and put_keys must not send")

    def notify_at(self, time: Timestamp) -> None:
        self.notifications.add(time)

    def cancel_notify(self, time: Timestamp) -> None:
        self.notifications.discard(time)


def _instance(plan: PhysicalPlan, name: str, replica: int, parallelism: int) -> tuple[Vertex, _MovingContext]:
    factory = plan.vertex(name).factory
    assert factory is not None
    vertex, context = factory(), _MovingContext(name, replica, parallelism)
    vertex.bind(context)
    return vertex, context


def _move_state(plan: PhysicalPlan, name: str, old_widths: Mapping[str, int],
                tables: Mapping[str, KeyGroupAssignment], saved: _Saved) -> list[tuple[Any, set[Timestamp]]]:
    """Per new replica of ``name``: its vertex's state and notifications, gathered from every
    old replica by key (see the module docstring). A vertex without state of its own (the
    default hooks) keeps at each surviving replica the notifications it had."""
    old_width = old_widths[name]
    width, owners, group_of = plan.width(name), tables[name].owners, _group_function(plan, old_widths, name)
    shares: list[list[Any]] = [[] for _ in range(width)]
    for replica in range(old_width):
        vertex, _ = _instance(plan, name, replica, old_width)
        source = saved.find(name, replica)
        vertex.restore(source.user.get(name) if source is not None else None)
        for new in range(width):
            shares[new].append(vertex.take_keys(_owned_by(owners, group_of, new)))
    moved = []
    for new, share in enumerate(shares):
        vertex, context = _instance(plan, name, new, width)
        stateless = type(vertex).take_keys is Vertex.take_keys
        for part in share:
            vertex.put_keys(part)
        source = saved.find(name, new) if stateless and new < old_width else None
        kept = set(source.notifications.get(name, ())) if source is not None else set()
        moved.append((vertex.snapshot(), context.notifications | kept))
    return moved


def _owned_by(owners: tuple[int, ...], group_of: Callable[[Hashable], int], replica: int) -> Callable[[Hashable], bool]:
    """Whether a key's group belongs to ``replica`` under ``owners``."""
    return lambda key: owners[group_of(key)] == replica


def _deal_kept(saved: _Saved, name: str, old_width: int, width: int) -> list[dict[int, list]]:
    """Output ``name``'s kept records per new replica: old replica ``r``'s go to ``r mod width``."""
    dealt: list[dict[int, list]] = [{} for _ in range(width)]
    for replica in range(old_width):
        source = saved.find(name, replica)
        for epoch, records in (source.kept.get(name, {}) if source is not None else {}).items():
            dealt[replica % width].setdefault(epoch, []).extend(records)
    return dealt


def _route_logged(plan: PhysicalPlan, old_widths: Mapping[str, int], tables: Mapping[str, KeyGroupAssignment],
                  old: Mapping[ReplicaKey, tuple[ReplicaState, list[LoggedBatch]]],
                  ) -> dict[ReplicaKey, list[LoggedBatch]]:
    """The logged back-edge batches per new replica: to the same replica index where the
    vertex kept its width, else routed again by key (or dealt round, on a pipeline)."""
    routed: dict[ReplicaKey, list[LoggedBatch]] = collections.defaultdict(list)
    for key, (_, batches) in old.items():
        for channel, vertex, time, batch in batches:
            chain, width = plan.chain_of(vertex).name, plan.width(vertex)
            if old_widths[vertex] == width:
                routed[ReplicaKey(chain, key.replica)].append((channel, vertex, time, batch))
                continue
            for replica, part in _reroute(plan, channel, vertex, key.replica, batch, tables[vertex]):
                routed[ReplicaKey(chain, replica)].append((channel, vertex, time, part))
    return routed


def _reroute(plan: PhysicalPlan, channel: ChannelId, vertex: str, old_replica: int, batch: Any,
             table: KeyGroupAssignment) -> list[tuple[int, Any]]:
    consumer = next(c for c in plan.consumers_of(channel.source, channel.output)
                    if c.vertex == vertex and c.port == channel.port)
    if consumer.channel.kind == "exchange":
        assert consumer.channel.key is not None
        return ExchangeRouter(consumer.channel.key, table.parallelism, table=table).route(batch)
    if consumer.channel.kind == "pipeline":
        return [(old_replica % plan.width(vertex), batch)]
    raise SnapshotError(f"vertex {vertex!r}: the snapshot holds records in flight on a broadcast edge from "
                        f"{channel.source!r}, which cannot be dealt to another number of replicas")
