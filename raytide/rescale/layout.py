"""Replica states at a cut laid out for other widths, as pure functions: who gets what.

A rescale (and a restore at another width) turns the states of the replicas of one plan,
taken at an aligned cut, into the states of the replicas of another plan whose vertices
have other widths. It happens in two halves, so that each old replica can split its own
state where it lives and each new replica can gather its own, with only the moving parts
in between (:mod:`raytide.rescale.widths`):

* :func:`split`: one old replica's state, cut into a :class:`Piece` per new replica that
  gets any of it.
* :func:`merge`: one new replica's state, from the pieces addressed to it.

:func:`reshard` is the two in one place (a snapshot laid out again in the driver,
:mod:`raytide.rescale.reshard`). What goes where, per vertex whose width changed from
``p`` replicas to ``q``:

* **Key groups move to new owners.** The owners of the vertex's key groups become
  ``old.rescale(q)`` of the old routing table (:class:`~raytide.core.keygroups.KeyGroupAssignment`:
  the fewest groups move, the rest stay where they were); :func:`new_tables` computes
  them. Each old replica's state is split by :meth:`~raytide.Vertex.take_keys` (a key goes
  where its group goes) and each new replica gathers its share with
  :meth:`~raytide.Vertex.put_keys`, which also asks for the notifications that state needs.
  Every replica that sends to the vertex routes by the new table. A vertex behind a keyed
  one on a pipeline (fused with it) follows its keys.
* **Records in flight on a back edge** at the cut (logged) are routed again by the new
  table, so each reaches the replica that now owns its key.
* **Kept output records** (an output vertex at a new width): old replica ``r``'s go to
  new replica ``r mod q``.

A vertex that keeps its width keeps its state at the same replica index; so do inputs,
which never change width (their positions are per replica).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, key_group
from raytide.core.routing import ExchangeRouter, column_key_groups
from raytide.core.vertex import Vertex
from raytide.errors import RescaleError, SnapshotError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ChannelId, ReplicaKey
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.replica_state import HeldReport, LoggedBatch, ReplicaState

if TYPE_CHECKING:  # imported where used: every vertex host imports this module (a replica's split and merge)
    from raytide.snapshots.recovery import RestorePoint

#: A route out of a sender vertex: ``(vertex, output port, consumer index)``, as routing tables are keyed.
RouteKey = tuple[str, int, int]


@dataclass
class Piece:
    """What one old replica hands one new replica.

    Attributes:
        shares: per vertex whose width changed, what :meth:`~raytide.Vertex.take_keys`
            took for this replica, as ``(old replica, share)``.
        user: per vertex that kept its width (hosted here at the same index), its state.
        notifications: per vertex, the notifications it waited for that stay with it.
        input_epochs, positions, sources: the inputs hosted at the same index.
        kept: per output, its kept records per epoch.
        logged: back-edge batches in flight in the cut that go to this replica.
    """

    shares: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    notifications: dict[str, set[Timestamp]] = field(default_factory=dict)
    input_epochs: dict[str, int | None] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, dict[int, list]] = field(default_factory=dict)
    logged: list[LoggedBatch] = field(default_factory=list)


def reshard(plan: PhysicalPlan, old_widths: Mapping[str, int],
            old: Mapping[ReplicaKey, tuple[ReplicaState, list[LoggedBatch]]],
            ) -> dict[ReplicaKey, tuple[ReplicaState, list[LoggedBatch]]]:
    """Every replica of ``plan`` with its state and logged back-edge batches, made from the
    replica states ``old`` of a cut taken with the widths ``old_widths``.

    Raises:
        SnapshotError: a logged record on a broadcast edge into a vertex of another width.
        RescaleError: a vertex of another width keeps state it cannot split by key.
    """
    tables = new_tables(plan, old_widths, [state.tables for state, _ in old.values()])
    pieces: dict[ReplicaKey, list[Piece]] = {key: [] for key in plan.replica_keys()}
    for key, (state, logged) in old.items():
        for new, piece in split(plan, old_widths, tables, key.replica, state, logged).items():
            pieces[new].append(piece)
    return {key: merge(plan, old_widths, tables, key, share) for key, share in pieces.items()}


def check_splittable(plan: PhysicalPlan, old_widths: Mapping[str, int]) -> None:
    """Refuse, before anything stops, a change of width for a vertex that keeps state it
    cannot split by key (it overrides ``snapshot`` but not ``take_keys``/``put_keys``).

    Raises:
        RescaleError: naming the vertex.
    """
    for name in plan.vertices:
        if old_widths[name] != plan.width(name) and plan.vertex(name).factory is not None:
            vertex, _ = _instance(plan, name, 0, plan.width(name))
            if type(vertex).take_keys is Vertex.take_keys:
                vertex.take_keys(lambda key: False)  # the default: raises if the vertex keeps state


def new_tables(plan: PhysicalPlan, old_widths: Mapping[str, int],
               routes: Iterable[Mapping[RouteKey, KeyGroupAssignment]],
               kept: Collection[str] = ()) -> dict[str, KeyGroupAssignment]:
    """Per vertex, who owns its key groups in ``plan``: the table its senders routed by (the
    old replicas' ``routes``; those of :func:`_keyed_by`), rescaled with the fewest moves if
    its width changed (contiguous ranges if nobody routes to it by key). A vertex of ``kept``
    keeps its owners, only widened or narrowed (a stepped rescale's short switch, which adds
    replicas owning nothing or retires emptied ones: no key group moves).

    Raises:
        RescaleError: a vertex of ``kept`` narrowed below a replica that still owns groups.
    """
    old_tables: dict[RouteKey, KeyGroupAssignment] = {}
    for sent_by in routes:
        old_tables.update(sent_by)
    routed: dict[str, KeyGroupAssignment] = {}
    for name in plan.vertices:
        routed[name] = KeyGroupAssignment.contiguous(old_widths[name], DEFAULT_KEY_GROUPS)
        for source, output, index, _ in _exchange_inputs(plan, name):
            if (source, output, index) in old_tables:
                routed[name] = old_tables[(source, output, index)]
    tables: dict[str, KeyGroupAssignment] = {}
    for name in plan.vertices:
        table, width = routed[_keyed_by(plan, old_widths, name)], plan.width(name)
        if old_widths[name] == width:
            tables[name] = table
        elif name in kept:
            tables[name] = KeyGroupAssignment(table.owners, width)  # refuses an owner outside the new width
        else:
            tables[name] = table.rescale(width)[0]
    return tables


def split(plan: PhysicalPlan, old_widths: Mapping[str, int], tables: Mapping[str, KeyGroupAssignment],
          replica: int, state: ReplicaState, logged: list[LoggedBatch]) -> dict[ReplicaKey, Piece]:
    """Old replica ``replica``'s ``state`` and ``logged`` batches cut into a piece per new
    replica of ``plan`` (:func:`merge` puts them together). The vertices whose width changed
    give up their keys (:meth:`~raytide.Vertex.take_keys`): the objects in ``state`` are
    used up."""
    pieces: dict[ReplicaKey, Piece] = {}

    def piece(vertex: str, new: int) -> Piece:
        return pieces.setdefault(ReplicaKey(plan.chain_of(vertex).name, new), Piece())

    for name in _hosted(state):
        role, width = plan.vertex(name).role, plan.width(name)
        if old_widths[name] == width:
            here = piece(name, replica)
            if name in state.user:
                here.user[name] = state.user[name]
            if name in state.notifications:
                here.notifications[name] = set(state.notifications[name])
            if role == "input":
                here.input_epochs[name], here.positions[name] = state.input_epochs[name], state.positions[name]
                if name in state.sources:
                    here.sources[name] = state.sources[name]
            if role == "output":
                here.kept[name] = dict(state.kept.get(name, {}))
        elif role == "output":
            _deal_kept(state.kept.get(name, {}), piece(name, replica % width).kept.setdefault(name, {}))
        elif plan.vertex(name).factory is not None:
            _split_keys(plan, old_widths, tables, name, replica, state, piece)
    for channel, vertex, time, batch in logged:
        if old_widths[vertex] == plan.width(vertex):
            piece(vertex, replica).logged.append((channel, vertex, time, batch))
            continue
        for new, part in _reroute(plan, channel, vertex, replica, batch, tables[vertex]):
            piece(vertex, new).logged.append((channel, vertex, time, part))
    return pieces


def _split_keys(plan: PhysicalPlan, old_widths: Mapping[str, int], tables: Mapping[str, KeyGroupAssignment],
                name: str, replica: int, state: ReplicaState, piece: Callable[[str, int], Piece]) -> None:
    """Vertex ``name`` (its width changed) gives each new replica the keys it owns now; a
    vertex without state of its own (the default hooks) keeps the notifications it had at
    the same index, if that replica survives."""
    width, owners, group_of = plan.width(name), tables[name].owners, _group_function(plan, old_widths, name)
    vertex, _ = _instance(plan, name, replica, old_widths[name])
    vertex.restore(state.user.get(name))
    for new in range(width):
        piece(name, new).shares.setdefault(name, []).append((replica, vertex.take_keys(_owned_by(owners, group_of,
                                                                                                  new))))
    if type(vertex).take_keys is Vertex.take_keys and replica < width and name in state.notifications:
        piece(name, replica).notifications[name] = set(state.notifications[name])


def _deal_kept(kept: Mapping[int, list], into: dict[int, list]) -> None:
    """An output's ``kept`` records per epoch, added to those of the new replica it goes to."""
    for epoch, records in kept.items():
        into.setdefault(epoch, []).extend(records)


def merge(plan: PhysicalPlan, old_widths: Mapping[str, int], tables: Mapping[str, KeyGroupAssignment],
          key: ReplicaKey, pieces: Iterable[Piece]) -> tuple[ReplicaState, list[LoggedBatch]]:
    """New replica ``key``'s state and logged back-edge batches from the pieces the old
    replicas addressed to it (:func:`split`), in any order."""
    pieces = list(pieces)
    user: dict[str, Any] = {}
    notifications: dict[str, set[Timestamp]] = {}
    kept: dict[str, dict[int, list]] = {}
    routes: dict[RouteKey, KeyGroupAssignment] = {}
    input_epochs: dict[str, int | None] = {}
    positions: dict[str, int] = {}
    sources: dict[str, Any] = {}
    for piece in pieces:
        user.update(piece.user)
        input_epochs.update(piece.input_epochs)
        positions.update(piece.positions)
        sources.update(piece.sources)
        for name, times in piece.notifications.items():
            notifications.setdefault(name, set()).update(times)
        for name, epochs in piece.kept.items():
            _deal_kept(epochs, kept.setdefault(name, {}))
    for name in plan.chain(key.chain).vertices:
        vertex = plan.vertex(name)
        if old_widths[name] != plan.width(name) and vertex.factory is not None and vertex.role != "output":
            instance, context = _instance(plan, name, key.replica, plan.width(name))
            shares = sorted((share for piece in pieces for share in piece.shares.get(name, [])), key=lambda s: s[0])
            for _, share in shares:
                instance.put_keys(share)
            user[name] = instance.snapshot()
            notifications[name] = notifications.get(name, set()) | context.notifications
        if vertex.role == "output":
            kept.setdefault(name, {})
        for port in range(vertex.outputs):
            for index, consumer in enumerate(plan.consumers_of(name, port)):
                if consumer.channel.kind == "exchange":
                    routes[(name, port, index)] = tables[consumer.vertex]
    logged = [batch for piece in pieces for batch in piece.logged]
    return ReplicaState(user, notifications, input_epochs, positions, kept, routes, sources), logged


def hosted_positions(plan: PhysicalPlan, positions: Mapping[ReplicaKey, Mapping[str, int]],
                     ) -> dict[ReplicaKey, dict[str, int]]:
    """The inputs' ``positions`` at a cut, per old replica, keyed by the replica of ``plan``
    that hosts each input now (inputs keep their width, so their replica index)."""
    moved: dict[ReplicaKey, dict[str, int]] = {}
    for key, per_input in positions.items():
        for name, position in per_input.items():
            moved.setdefault(ReplicaKey(plan.chain_of(name).name, key.replica), {})[name] = position
    return moved


def cut_point(plan: PhysicalPlan, reports: Mapping[ReplicaKey, HeldReport]) -> RestorePoint:
    """Where the job rescaled to ``plan`` starts, from the ``reports`` of the replicas held at
    its cut: the kept output records, and its inputs' positions per replica of ``plan``. The
    pointstamps are left empty: they are what the new replicas hold once they have adopted
    their pieces."""
    from raytide.snapshots.recovery import RestorePoint, kept_records  # the store's modules: not in every host

    positions = hosted_positions(plan, {key: report.summary.positions for key, report in reports.items()})
    return RestorePoint(None, [], kept_records(report.summary for report in reports.values()), positions)


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


def _owned_by(owners: tuple[int, ...], group_of: Callable[[Hashable], int], replica: int) -> Callable[[Hashable], bool]:
    """Whether a key's group belongs to ``replica`` under ``owners``."""
    return lambda key: owners[group_of(key)] == replica


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
