"""Vertices whose user code fails only in a recovery, for the simulation and Ray tests of
``docs/recovery.md`` ("User code failing in a recovery"): a ``restore()`` that raises, and
an ``on_notify`` that raises only when an epoch comes round a second time (a poison record
that fails on its replay). What a vertex has seen is kept in files, outside its snapshot,
so that it outlives a replica's process."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import raytide as rt


class Brittle(rt.Vertex):
    """Totals per key across epochs, sent at each epoch's end; its ``restore()`` raises."""

    def __init__(self) -> None:
        self.totals: Counter = Counter()

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        self.totals.update(message)
        self.notify_at(time)

    def on_notify(self, time: rt.Timestamp) -> None:
        self.send_by(0, sorted(self.totals.items()), time)

    def snapshot(self) -> Counter:
        return self.totals

    def restore(self, state: Counter) -> None:
        raise ValueError("the saved totals cannot be read back")

    def take_keys(self, moving: Callable[[Any], bool]) -> Counter:
        taken = Counter({key: n for key, n in self.totals.items() if moving(key)})
        self.totals -= taken
        return taken

    def put_keys(self, state: Counter) -> None:
        self.totals.update(state)


class Poison(rt.Vertex):
    """Counts each epoch's records; raises in ``on_notify`` at an epoch this replica was
    notified of before (in ``memory``, a directory): only a replay gets there twice."""

    def __init__(self, memory: str) -> None:
        self.memory, self.counts = Path(memory), Counter()

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        self.counts[time.epoch] += len(message)
        self.notify_at(time)

    def on_notify(self, time: rt.Timestamp) -> None:
        seen = self.memory / f"replica-{self.replica}-epoch-{time.epoch}"
        if seen.exists():
            raise ValueError(f"poison record in epoch {time.epoch}")
        seen.touch()
        self.send_by(0, [(time.epoch, self.counts.pop(time.epoch))], time)

    def snapshot(self) -> Counter:
        return self.counts

    def restore(self, state: Counter) -> None:
        self.counts = state


def brittle_flow(name: str = "brittle") -> rt.Dataflow:
    """Numbers totalled per key (``x % 6``: both replicas get keys) by :class:`Brittle` at two replicas, and counted
    per key by ``count_by_key`` (a vertex a rescale can change while Brittle keeps its width)."""
    flow = rt.Dataflow(name)
    numbers = flow.input("numbers")
    numbers.map(lambda x: x % 6).unary(Brittle, exchange=lambda k: k, name="totals", parallelism=2).output("sums")
    numbers.count_by_key(lambda x: x % 5, name="count").output("counts")
    return flow


def poison_flow(memory: str, name: str = "poison") -> rt.Dataflow:
    """Numbers counted per epoch by :class:`Poison` (records exchanged by value)."""
    flow = rt.Dataflow(name)
    flow.input("numbers").unary(lambda: Poison(memory), exchange=lambda x: x, name="poison").output("per_epoch")
    return flow
