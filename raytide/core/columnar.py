"""Columnar keyed state: NumPy columns per replica, a user step per (replica, timestamp).

:class:`KeyedColumns` is the vertex behind :meth:`Stream.keyed_columns
<raytide.core.dataflow.Stream.keyed_columns>` and :meth:`Stream.iterate_columns
<raytide.core.dataflow.Stream.iterate_columns>`. Its input ports are of two kinds:

* *update* ports take column batches (dicts of arrays) with an integer key column,
  exchanged by that column (routed with NumPy, see :mod:`raytide.core.routing`); rows of
  equal keys are folded with the combiners (NumPy ufuncs, :mod:`raytide.core.combine`);
* *arranged* ports take rows that stay: they join the replica's :class:`~raytide.core.
  arrangement.Arrangement`, indexed by the slot of their key, and every later step sees them.

Each replica keeps a :class:`~raytide.core.keyindex.KeyIndex` (key -> slot) and, per state
column, one array indexed by slot. Batches are buffered in ``on_recv``; at the time's
notification the step function runs once over all of them (:class:`Step`) and returns
column batches, one per output port. An output that goes round a loop back to this vertex
is combined before it is sent, so one row per key leaves the replica.

The state lives across iterations and epochs. Inside a loop, epochs must not overlap at a
replica: a notification of an earlier epoch after one of a later epoch means both are in
the loop at once and the state would mix them, so the vertex refuses it
(:mod:`raytide.core.epochs`, docs/iteration.md).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytide.core.arrangement import Arrangement, Rows
from raytide.core.combine import combine_by_key
from raytide.core.epochs import check_epoch_order, later
from raytide.core.keyindex import KeyIndex
from raytide.core.operators import _per_time, _refuse_shared_keys
from raytide.core.step import Step, checked_outputs, columns_of, integer_keys, keys_moving
from raytide.core.vertex import Vertex
from raytide.progress.timestamps import Timestamp

#: A state column: its dtype, and the value of a new key (a scalar, or a function of the new keys).
StateColumn = tuple[Any, Any]


@dataclass(frozen=True)
class ColumnsSpec:
    """What a :class:`KeyedColumns` vertex does; built once, shared by its replicas.

    Attributes:
        step: the user's function, ``step(Step) -> batch | tuple of batches | None``.
        key: the integer key column of the update ports.
        state: per state column, ``(dtype, initial value)``.
        combine: per value column of the updates, the ufunc folding rows of equal keys
            (empty: updates reach the step as they came, keys possibly repeated).
        arranged: per arranged input port, its key column.
        outputs: how many output ports the step fills.
        send_combine: output ports combined (by ``key``, with ``combine``) before they are sent.
        ticks: input ports whose batches only make every replica run the step at their time.
        finish: in a loop, run when an epoch's rounds are over (see :meth:`Stream.iterate_columns
            <raytide.core.dataflow.Stream.iterate_columns>`); fills outputs ``1 ..``.
        repeatable_rounds: in a loop, whether running a round again for keys that ran it
            leaves their state and what they send as it was (see ``iterate_columns``).
        netted: per arranged input port whose rows carry a multiplicity, that diff column:
            its arrangement nets them (:class:`~raytide.core.arrangement.Arrangement`).
    """

    step: Callable[[Step], Any]
    key: str
    state: Mapping[str, StateColumn]
    combine: Mapping[str, np.ufunc] = field(default_factory=dict)
    arranged: Mapping[int, str] = field(default_factory=dict)
    outputs: int = 1
    send_combine: frozenset[int] = frozenset()
    ticks: frozenset[int] = frozenset()
    finish: Callable[[Step], Any] | None = None
    repeatable_rounds: bool = False
    netted: Mapping[int, str] = field(default_factory=dict)


class KeyedColumns(Vertex):
    """Columnar keyed state with arranged inputs; see the module docstring."""

    def __init__(self, spec: ColumnsSpec) -> None:
        self.spec = spec
        self.control_ports = spec.ticks  # ticks and tokens are not records
        self._reset({port: () for port in spec.arranged})
        self.pending: dict[Timestamp, dict[int, list[Rows]]] = {}
        self.phase: tuple | None = None

    def _reset(self, names: Mapping[int, tuple[str, ...]]) -> None:
        """No keys, no state, empty arrangements (with the value columns ``names`` per port)."""
        self.index = KeyIndex()
        self.state = {name: np.empty(0, dtype=dtype) for name, (dtype, _) in self.spec.state.items()}
        self.arrangements = {port: Arrangement(names[port], self.spec.netted.get(port)) for port in self.spec.arranged}

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        inbox = _per_time(self, self.pending, time, dict)
        inbox.setdefault(edge, []).append(columns_of(message, f"input {edge}"))

    def on_notify(self, time: Timestamp) -> None:
        self.phase = check_epoch_order(self, self.phase, time)
        if self._round(self.pending.pop(time, {}), time, time.counters[-1] if time.counters else 0)[1]:
            self.notify_at(Timestamp(time.epoch, time.counters[:-1] + (time.counters[-1] + 1,)))

    def _round(self, inbox: dict[int, list[Rows]], time: Timestamp, iteration: int,
               quiet: bool = False) -> tuple[int, bool]:
        """Run the step over ``inbox`` as round ``iteration`` at ``time`` and send what it returns.

        Returns the rows sent on output 0, and whether the step asked to run again.
        """
        for port in self.spec.ticks:
            inbox.pop(port, None)
        added = {port: self._arrange(port, inbox.pop(port, [])) for port in self.spec.arranged}
        keys, values = self._updates([batch for port in sorted(inbox) for batch in inbox[port]])
        step = Step(time, keys, self._slots(keys), values, self.state, self.index, self.arrangements, added,
                    iteration, quiet)
        result = self.spec.step(step)
        self._check_state()
        sent = [self._send(port, batch, time) for port, batch in enumerate(checked_outputs(result, self.spec.outputs))]
        return sent[0], step.wants_again

    # -- the parts of a notification ------------------------------------------------

    def _arrange(self, port: int, batches: list[Rows]) -> tuple[np.ndarray, Rows]:
        """Add an arranged port's rows (new keys get slots); returns ``(their slots, their columns)``."""
        if not batches:
            return np.empty(0, dtype=np.int64), {}
        column = self.spec.arranged[port]
        rows = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
        slots = self._slots(integer_keys(rows, column, f"arranged input {port}"))
        self._add_arranged(port, slots, rows)
        return slots, rows

    def _add_arranged(self, port: int, slots: np.ndarray, rows: Rows) -> None:
        """Add rows to the arrangement of ``port``; its first rows fix its columns (all but the key)."""
        arrangement = self.arrangements[port]
        if not arrangement.names:
            arrangement.names = tuple(name for name in rows if name != self.spec.arranged[port])
        arrangement.add(slots, rows, len(self.index))

    def _updates(self, batches: list[Rows]) -> tuple[np.ndarray, Rows]:
        """The update rows of a time, combined by key if the vertex has combiners."""
        spec = self.spec
        if not batches:
            return np.empty(0, dtype=np.int64), {name: np.empty(0, dtype=np.int64) for name in spec.combine}
        rows = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
        if not spec.combine:
            return integer_keys(rows, spec.key, "the updates"), {n: v for n, v in rows.items() if n != spec.key}
        return self._combined(rows, "the updates")

    def _combined(self, rows: Rows, what: str) -> tuple[np.ndarray, Rows]:
        """``rows`` folded to one per key with the combiners, which must cover every value column."""
        spec = self.spec
        keys = integer_keys(rows, spec.key, what)
        missing = sorted(set(spec.combine) - set(rows))
        extra = sorted(set(rows) - set(spec.combine) - {spec.key})
        if extra or missing:
            raise ValueError(f"{what}: columns {sorted(rows)}, but the combiners (combine=) are for "
                             f"{sorted(spec.combine)} with key {spec.key!r}: every value column needs one combiner")
        return combine_by_key(keys, rows, spec.combine)

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        """The slots of ``keys``; keys new to this replica get slots and initial state."""
        slots = self.index.lookup(keys)
        missing = slots < 0
        if not missing.any():  # every key held already: a loop's later rounds, mostly
            return slots
        new = self.index.add(keys[missing])  # only those: a later epoch's few new keys skip a pass over the table
        for name, (dtype, init) in self.spec.state.items():
            first = init(new) if callable(init) else np.full(len(new), init, dtype=dtype)
            self.state[name] = np.concatenate([self.state[name], np.asarray(first, dtype=dtype)])
        return self.index.slots(keys)

    def _check_state(self) -> None:
        """The step may change state values in place, never a column's length or dtype."""
        for name, (dtype, _) in self.spec.state.items():
            column = self.state.get(name)
            if not isinstance(column, np.ndarray) or column.dtype != np.dtype(dtype) or len(column) != len(self.index):
                what = (f"{type(column).__name__}" if not isinstance(column, np.ndarray)
                        else f"{column.dtype} array of {len(column)} rows")
                raise TypeError(f"the step left state column {name!r} as a {what}; it must stay a {np.dtype(dtype)} "
                                f"array of one row per key ({len(self.index)}): change values in place")

    def _send(self, port: int, batch: Rows | None, time: Timestamp) -> int:
        """Send a batch of the step on ``port`` (see :meth:`_outgoing`); returns its rows."""
        outgoing = self._outgoing(port, batch)
        if outgoing is None:
            return 0
        self.send_by(port, outgoing, time)
        return len(next(iter(outgoing.values())))

    def _outgoing(self, port: int, batch: Rows | None) -> Rows | None:
        """What goes out on ``port`` for a batch of the step: nothing if it is empty, else the
        batch, combined first if the port says so."""
        if batch is None or not len(next(iter(batch.values()), ())):
            return None
        if port in self.spec.send_combine:
            keys, values = self._combined(batch, f"output {port} of the step")
            batch = {self.spec.key: keys, **values}
        return batch

    def statistics(self) -> dict[str, int]:
        """For arrangements with diffs: the rows they hold and the rows netting took away."""
        netted = [self.arrangements[port] for port in self.spec.netted if port in self.arrangements]
        if not netted:
            return {}
        return {"arranged_updates": sum(a.held for a in netted), "compacted_away": sum(a.cancelled for a in netted)}

    # -- snapshots and rescaling ----------------------------------------------------

    def snapshot(self) -> Any:
        return {"ids": self.index.ids, "state": self.state, "arranged": self._arranged_rows(), "pending": self.pending,
                "phase": self.phase}

    def restore(self, state: Any) -> None:
        self._reset({port: tuple(n for n in rows if n != self.spec.arranged[port])
                     for port, rows in state["arranged"].items()})
        self._adopt(state["ids"], state["state"], state["arranged"])
        self.pending, self.phase = state["pending"], state["phase"]

    def _arranged_rows(self, keep: np.ndarray | None = None) -> dict[int, Rows]:
        """Each arrangement's rows with their key column (only those of slots ``keep`` selects)."""
        out = {}
        for port, arrangement in self.arrangements.items():
            slots, rows = arrangement.rows()
            chosen = slice(None) if keep is None else keep[slots]
            out[port] = {self.spec.arranged[port]: self.index.ids[slots][chosen],
                         **{name: values[chosen] for name, values in rows.items()}}
        return out

    def _adopt(self, ids: np.ndarray, state: Mapping[str, np.ndarray], arranged: Mapping[int, Rows]) -> None:
        """Take over keys ``ids`` (none held here) with their state and arranged rows."""
        slots = self._slots(ids)
        for name, values in state.items():
            self.state[name][slots] = values
        for port, rows in arranged.items():
            keys = rows[self.spec.arranged[port]]
            if len(keys):
                self._add_arranged(port, self.index.slots(keys), rows)

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        """The state, arranged rows and pending updates of the moving keys; this replica keeps the rest
        (re-indexed), and a time left without pending rows loses its notification."""
        going = keys_moving(self.index.ids, moving)
        taken = {"ids": self.index.ids[going], "state": {n: a[going] for n, a in self.state.items()},
                 "arranged": self._arranged_rows(going), "pending": self._take_pending(moving), "phase": self.phase}
        kept = (self.index.ids[~going], {n: a[~going] for n, a in self.state.items()}, self._arranged_rows(~going))
        self._reset({port: arrangement.names for port, arrangement in self.arrangements.items()})
        self._adopt(*kept)
        return taken

    def _take_pending(self, moving: Callable[[Hashable], bool]) -> dict[Timestamp, dict[int, list[Rows]]]:
        """The moving keys' pending rows; a time left with none here loses its notification."""
        taken, kept = self._split(self.pending, moving)
        for time in set(self.pending) - set(kept):
            self.cancel_notify(time)
        self.pending = kept
        return taken

    def _split(self, inboxes: Mapping[Any, dict[int, list[Rows]]],
               moving: Callable[[Hashable], bool]) -> tuple[dict[Any, dict[int, list[Rows]]], dict]:
        """Inboxes (per time, per port, batches) split into ``(the moving keys' rows, the rest)``;
        tick ports go to both (every replica runs at a tick's time), empty inboxes to neither."""
        taken: dict[Any, dict[int, list[Rows]]] = {}
        kept: dict[Any, dict[int, list[Rows]]] = {}
        for time, inbox in inboxes.items():
            for port, batches in inbox.items():
                if port in self.spec.ticks:
                    taken.setdefault(time, {})[port] = kept.setdefault(time, {})[port] = batches
                    continue
                rows = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
                going = keys_moving(integer_keys(rows, self.spec.arranged.get(port, self.spec.key), f"input {port}"),
                                    moving)
                for part, mask in ((taken, going), (kept, ~going)):
                    if mask.any():
                        part.setdefault(time, {})[port] = [{n: v[mask] for n, v in rows.items()}]
        return taken, kept

    def put_keys(self, state: Any) -> None:
        """Adopt another replica's keys (a key held here too is refused); pending rows join their time."""
        _refuse_shared_keys(self, self.index.ids.tolist(), state["ids"].tolist(), "")
        self.phase = later(self.phase, state["phase"])
        self._adopt(state["ids"], state["state"], state["arranged"])
        for time, inbox in state["pending"].items():
            mine = _per_time(self, self.pending, time, dict)
            for port, batches in inbox.items():
                mine.setdefault(port, []).extend(batches)
