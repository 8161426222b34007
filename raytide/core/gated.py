"""The state vertex of ``iterate_columns``: columnar keyed state behind an epoch gate.

:class:`GatedColumns` is a :class:`~raytide.core.columnar.KeyedColumns` whose
notifications go through the :class:`~raytide.core.epoch_gate.EpochGate`: one epoch in the
loop at a time, the next one parked until the replicas agree (through the token broadcast)
that the loop has nothing left of the current one. Its ports:

* inputs: 0 the entering stream, 1 the next round's updates (the feedback), 2 ticks (one
  per entering batch, to every replica), 3 tokens (rows each replica sent to the next round,
  in all and per key group, with its index and width: every replica sends one every round);
* outputs: 0 the next round's updates, ``1 .. n`` the step's other outputs, ``n + 1`` tokens.

A token reaches every replica as one row per key group (exchanged by :data:`TOKEN_KEY`, a
key of each group), not through a broadcast: so whatever the routing table, after a
rescale too, every replica gets one, and tokens logged in a snapshot are dealt again by key.

A round runs at its notification, or earlier, as soon as the replica holds every replica's
token for it and the rows they announce (:func:`~raytide.core.epoch_gate.round_complete`):
then the notification is withdrawn, and the round runs as the notification would run it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from raytide.core.arrangement import Rows
from raytide.core.columnar import ColumnsSpec, KeyedColumns
from raytide.core.epoch_gate import TOKEN_KEY, EpochGate, round_complete, round_time
from raytide.core.epochs import Phase, phase_of
from raytide.core.keygroups import DEFAULT_KEY_GROUPS
from raytide.core.routing import column_key_groups
from raytide.core.step import Step, checked_outputs, integer_keys
from raytide.core.vertex import Vertex
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp

UPDATES, TICKS, TOKENS = 1, 2, 3
#: One key of every key group, in group order: a token row for each reaches every replica.
_candidates = np.arange(64 * DEFAULT_KEY_GROUPS, dtype=np.int64)
GROUP_KEYS = _candidates[np.unique(column_key_groups(_candidates), return_index=True)[1]]
assert len(GROUP_KEYS) == DEFAULT_KEY_GROUPS, "every key group has a key among the candidates"


class Entry(Vertex):
    """Where a stream enters the gated vertex: each batch goes on as it is (output 0) with a
    one-row tick (output 1, to every replica), so that every replica runs the step at the
    batch's time. One vertex with two outputs rather than a tick vertex beside the state
    vertex: the entering stream then has one consumer and this vertex runs fused behind it,
    so the batches are not copied to an actor of its own only to be counted."""

    takes_lazy_batches = True  # passes batches on as they are

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        self.send_by(0, message, time)
        self.send_by(1, {"tick": np.zeros(1, dtype=np.int8)}, time)


class GatedColumns(KeyedColumns):
    """Columnar keyed state in a loop that epochs go through one after another (see the module docstring)."""

    def __init__(self, spec: ColumnsSpec) -> None:
        super().__init__(spec)
        self.gate = EpochGate()
        self.group_rows = np.zeros(DEFAULT_KEY_GROUPS, dtype=np.int64)  # this round's rows sent per key group

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        """Buffer the batch; if it completes a round this replica awaits, run the round now."""
        super().on_recv(edge, message, time)
        if edge in (UPDATES, TOKENS) and time in self.gate.awaiting and not self.gate.waits_before(time):
            inbox = self.pending[time]
            if round_complete(inbox.get(TOKENS, []), inbox.get(UPDATES, []), self.parallelism):
                self.cancel_notify(time)
                self.on_notify(time)

    def on_notify(self, time: Timestamp) -> None:
        phase, counter = phase_of(time), time.counters[-1]
        assert phase is not None, "a gated vertex runs inside a loop"
        inbox = self.pending.pop(time, {})
        self.gate.awaiting.discard(time)
        self.gate.slow.discard(time)
        announced = inbox.pop(TOKENS, [])
        tokens = sum(int(batch["sent"].sum()) for batch in announced)
        quiet = tokens == sum(int(batch["again"].sum()) for batch in announced if "again" in batch)
        if counter == 0:  # the epoch's entry: its first round now, or once the epoch before it is done
            start, entry = self.gate.start_counter(phase), self.gate.entry(phase, inbox)
            if start is None:
                self.gate.parked[phase] = entry
            else:
                self._gated_round(phase, start, entry)
        elif self.gate.ends_at(phase, counter, tokens):
            self._finish(phase, counter)
            following = self.gate.conclude(phase, counter)
            if following is not None:
                self._gated_round(*following)
        else:
            self._gated_round(phase, counter, inbox, quiet)

    def _gated_round(self, phase: Phase, counter: int, inbox: dict[int, list[Rows]], quiet: bool = False) -> None:
        """Round ``counter`` of ``phase``: the step, a token to every replica (what it sent,
        in all and per key group), and the notification of the next round (where the tokens
        are added up, unless they and the rows complete the round first)."""
        start = self.gate.started.setdefault(phase, counter)
        self.gate.went_on_at(phase, counter)
        time = round_time(phase, counter)
        self.group_rows[:] = 0
        rows, again = self._round(inbox, time, counter - start, quiet)
        size = len(GROUP_KEYS)  # "sent" is not 0 if the step asked to run again ("again": it did)
        self.send_by(self.spec.outputs, {TOKEN_KEY: GROUP_KEYS, "sent": np.full(size, rows + again),
                                         "again": np.full(size, int(again)), "rows": self.group_rows.copy(),
                                         "sender": np.full(size, self.replica), "width": np.full(size, self.parallelism)},
                     time)
        following = round_time(phase, counter + 1)
        self.gate.awaiting.add(following)
        self.notify_at(following)

    def _outgoing(self, port: int, batch: Rows | None) -> Rows | None:
        """:meth:`KeyedColumns._outgoing`, counting the next round's rows per key group for the token."""
        outgoing = super()._outgoing(port, batch)
        if port == 0 and outgoing is not None:
            keys = integer_keys(outgoing, self.spec.key, "output 0 of the step (the next round's updates)")
            self.group_rows += np.bincount(column_key_groups(keys), minlength=len(GROUP_KEYS))
        return outgoing

    def _finish(self, phase: Phase, counter: int) -> None:
        """The epoch's rounds are over: the spec's ``finish`` (if any) sends what leaves the
        loop for it. It runs again at a replica that took keys after it finished (a rescale
        moved their replica's request for this round here), so it must send only what it
        has not sent for the epoch (the graph layer marks rows with their epoch)."""
        if self.spec.finish is None:
            return
        time = round_time(phase, counter)
        keys, values = self._updates([])
        result = self.spec.finish(Step(time, keys, keys, values, self.state, self.index, self.arrangements, {},
                                       counter - self.gate.started.get(phase, counter)))
        self._check_state()
        leaving = self.spec.outputs - 1
        for port, batch in enumerate(checked_outputs(result, leaving, 1, "the finish function"), 1):
            self._send(port, batch, time)

    def snapshot(self) -> Any:
        return {**super().snapshot(), "gate": self.gate}

    def restore(self, state: Any) -> None:
        super().restore(state)
        self.gate = state["gate"]
        self._slow_down()

    def _slow_down(self) -> None:
        """The times pending or awaited now run only at their notifications (each has one
        here): a restore or a rescale may deal them tokens of another width or routing table."""
        self.gate.slow = set(self.pending) | self.gate.awaiting

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        """:meth:`KeyedColumns.take_keys`, with the gate's facts and requests (every new replica
        gets them) and the moving keys' rows of the parked entries.

        Raises:
            RescaleError: an epoch is in the loop and the step's rounds are not repeatable
                (the replicas may be at different rounds of it; see ``iterate_columns``).
        """
        in_loop = [phase for phase in (self.gate.live(), *map(phase_of, self.gate.awaiting), *self.gate.parked) if phase]
        if in_loop and not self.spec.repeatable_rounds:
            at = sorted(self.gate.awaiting)
            raise RescaleError(f"vertex {self.name!r} replica {self.replica}: epoch {min(in_loop)[0]} is in its loop "
                               f"(awaiting {at[0] if at else 'its turn'}), and its rounds are not repeatable "
                               f"(iterate_columns(repeatable_rounds=False)): its replicas may be at different "
                               f"rounds, so its keys move only between epochs; try again once the epoch is out")
        taken = super().take_keys(moving)
        gate = EpochGate(dict(self.gate.started), dict(self.gate.concluded), {}, set(self.gate.awaiting),
                         went_on=dict(self.gate.went_on))
        gate.parked, self.gate.parked = self._split(self.gate.parked, moving)
        return {**taken, "gate": gate}

    def put_keys(self, state: Any) -> None:
        super().put_keys(state)
        for time in state["gate"].awaiting - self.gate.awaiting:
            self.notify_at(time)
        self.gate.merge(state["gate"])
        self._slow_down()
