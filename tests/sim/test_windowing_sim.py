"""Windows over epochs on the in-process runtime: every key's window emitted exactly once, at
``Timestamp(end - 1)``, with the value of a plain-Python reference, whatever the parallelism,
the interleaving, the crashes and recoveries, a live rescale of the window vertices, or a
snapshot restored at another parallelism.

The scenario (:func:`windows`) draws one spec of each kind and runs ``count``, ``reduce``,
``aggregate`` by an integer column and ``aggregate`` by a key function over one input. The
fault trials are the simulation tier's own (recovery, rescale, reshard), run on this
scenario by adding it to their table for the test's duration.
"""

from __future__ import annotations

import collections
import random
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pytest

import raytide as rt
import tests.sim.test_recovery_sim as recovery_sim
import tests.sim.test_rescale_sim as rescale_sim
import tests.sim.test_reshard_sim as reshard_sim
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob
from raytide.testing.outcome import LocalRecovery
from raytide.windows import Session, Sliding, Tumbling, WindowSpec
from tests.sim.scenarios import SCENARIOS, Scenario, as_counters

KEYS, VALUES = 4, 10


def _spec(rng: random.Random, kind: str) -> WindowSpec:
    if kind == "tumbling":
        return Tumbling(rng.randint(1, 3))
    if kind == "sliding":
        size = rng.randint(2, 4)
        return Sliding(size, rng.randint(1, size))
    return Session(rng.randint(1, 3))


def _windows_of(spec: WindowSpec, per_epoch: list[list[tuple[int, int]]]) -> dict[tuple, list[tuple[int, int]]]:
    """``{(key, start, end): records}`` from the definitions: every start on the step that
    covers the epoch; sessions as runs of a key's epochs closer than the gap."""
    out: dict[tuple, list] = defaultdict(list)
    if isinstance(spec, Session):
        by_key: dict[int, list] = defaultdict(list)
        for epoch, records in enumerate(per_epoch):
            for record in records:
                by_key[record[0]].append((epoch, record))
        for key, seen in by_key.items():
            run = [seen[0]]
            for epoch, record in seen[1:]:
                if epoch - run[-1][0] >= spec.gap:
                    out[(key, run[0][0], run[-1][0] + spec.gap)] = [r for _, r in run]
                    run = []
                run.append((epoch, record))
            out[(key, run[0][0], run[-1][0] + spec.gap)] = [r for _, r in run]
        return out
    size, every = (spec.size, spec.size) if isinstance(spec, Tumbling) else (spec.size, spec.every)
    for epoch, records in enumerate(per_epoch):
        for record in records:
            for start in range(epoch - size + 1, epoch + 1):
                if start % every == 0:
                    out[(record[0], start, start + size)].append(record)
    return out


def _emitted(spec: WindowSpec, per_epoch: list, value: Any) -> dict[int, Counter]:
    """Per epoch ``end - 1``, the Counter of ``(key, start, end, value(records))``."""
    out: dict[int, Counter] = defaultdict(Counter)
    for (key, start, end), records in _windows_of(spec, per_epoch).items():
        out[end - 1][(key, start, end, value(records))] += 1
    return dict(out)


def _sums(records: list[tuple[int, int]]) -> tuple:
    return (("peak", max(x for _, x in records)), ("total", sum(x for _, x in records)))


def _hashable(record: tuple) -> tuple:
    key, start, end, value = record
    return key, start, end, tuple(sorted(value.items()))


def windows(rng: random.Random, epochs: int = 5) -> Scenario:
    """``count`` (tumbling), ``reduce`` to the largest record (sliding), ``aggregate`` by the
    column ``k`` (session) and ``aggregate`` by a key function (any spec) of ``(k, x)`` records."""
    specs = {"count": _spec(rng, "tumbling"), "largest": _spec(rng, "sliding"), "by_column": _spec(rng, "session"),
             "by_function": _spec(rng, rng.choice(["tumbling", "sliding", "session"]))}
    flow = rt.Dataflow("windows")
    events = flow.input("events")
    events.window(lambda r: r[0], specs["count"], name="count.window").count().output("count")
    events.window(lambda r: r[0], specs["largest"], name="largest.window").reduce(max).output("largest")
    rows = events.map(lambda r: {"k": r[0], "x": r[1]}, name="rows")
    folds = {"total": ("x", np.add), "peak": ("x", np.maximum)}
    rows.window("k", specs["by_column"], name="by_column.window").aggregate(**folds).map(_hashable).output("by_column")
    rows.window(lambda row: row["k"], specs["by_function"], name="by_function.window").aggregate(**folds) \
        .map(_hashable).output("by_function")
    data = [[(rng.randrange(KEYS), rng.randrange(VALUES)) for _ in range(rng.randrange(6))] for _ in range(epochs)]
    expected = {"count": _emitted(specs["count"], data, len), "largest": _emitted(specs["largest"], data, max),
                "by_column": _emitted(specs["by_column"], data, _sums),
                "by_function": _emitted(specs["by_function"], data, _sums)}
    return Scenario("windows", flow, {"events": data}, expected)


@pytest.fixture
def with_windows(monkeypatch: pytest.MonkeyPatch) -> str:
    """The simulation tier's fault trials, on this scenario."""
    monkeypatch.setitem(SCENARIOS, "windows", windows)
    return "windows"


def test_every_window_is_emitted_once_at_its_end_whatever_the_parallelism_and_interleaving():
    for seed in range(25):
        rng = random.Random(seed)
        scenario = windows(rng, epochs=rng.randint(1, 7))
        run = LocalJob(scenario.flow, scenario.inputs, rng.randint(1, 4), seed, chaining=rng.random() < 0.8).run()
        assert run.finished and as_counters(run.outputs) == scenario.expected, f"seed {seed}"


def test_crashes_recover_with_every_window_once(with_windows, store_root):
    seen: collections.Counter = collections.Counter()
    recoveries = 0
    for seed in range(24):
        result = recovery_sim.trial(with_windows, seed, str(store_root / str(seed)), seen)
        assert result.exact, f"seed {seed}: {result.describe()}"
        recoveries += len(result.run.recoveries) if result.run else 0
    assert recoveries >= 12, recoveries


def test_live_rescales_with_crashes_move_pending_windows_with_their_notifications(with_windows, store_root):
    seen: collections.Counter = collections.Counter()
    for seed in range(24):
        wrong = rescale_sim.trial(with_windows, seed, str(store_root / str(seed)), seen)
        assert wrong is None, f"seed {seed}: {wrong}"
    assert seen["trials that rescaled"] >= 12, seen


def test_a_snapshot_restored_at_another_parallelism_keeps_every_pending_window(with_windows, store_root):
    restored = 0
    for seed in range(16):
        did_restore, wrong = reshard_sim.trial(with_windows, seed, str(store_root / str(seed)))
        assert wrong is None, f"seed {seed}: {wrong}"
        restored += did_restore
    assert restored >= 6, restored


def test_a_rescaled_window_vertex_holds_its_keys_pending_windows_on_the_new_replicas(store_root):
    """A session window rescaled from 1 replica to 3 while every key's session is open: after
    the rescale the three replicas hold the keys' windows between them, each key once, and
    the sessions close there, once each. Keys 0-7 have records in epochs 0-2 only, so their
    sessions' ends never move after the rescale: they close at the notifications that moved
    with them (key 99, busy in every epoch, keeps time going)."""
    flow = rt.Dataflow("sessions")
    flow.input("events").window(lambda r: r[0], Session(50), name="sessions.window").count().output("sessions")
    data = [[(k, 0) for k in range(8) if epoch < 3] + [(99, 0)] for epoch in range(40)]
    job = LocalJob(flow, {"events": data}, 1, 5, recovery=LocalRecovery(SnapshotStore(str(store_root)), interval=5))
    job.rescale({"sessions.window": 3}, at_step=120)
    held: list[dict] = []

    def look(job: LocalJob) -> None:
        if job.result.rescales and not held:  # the first step at which the new replicas all hold windows
            windows = [dict(core.vertices["sessions.window"].pending.windows) for core in job.replicas.values()
                       if "sessions.window" in core.vertices]
            if len(windows) == 3 and all(windows):
                held.extend(windows)

    run = job.run(after_step=look)
    assert run.rescales and job.plan.width("sessions.window") == 3
    assert sorted(k for windows in held for k in windows) == [*range(8), 99]
    assert as_counters(run.outputs) == {"sessions": {51: Counter({(k, 0, 52, 3): 1 for k in range(8)}),
                                                     88: Counter({(99, 0, 89, 40): 1})}}


def test_windows_are_refused_inside_a_loop_and_bad_arguments_before_anything_is_built():
    flow = rt.Dataflow("refused")
    events = flow.input("events")
    loop = flow.loop()
    with pytest.raises(rt.GraphError, match="inside loop"):
        loop.enter(events).window(lambda r: r, Tumbling(2))
    with pytest.raises(rt.ArgumentError, match="spec must be"):
        events.window(lambda r: r, 3)
    with pytest.raises(rt.ArgumentError, match="key must be"):
        events.window(7, Tumbling(2))
    with pytest.raises(rt.ArgumentError, match="at least one output"):
        events.window("k", Tumbling(2)).aggregate()
    with pytest.raises(rt.ArgumentError, match=r"\(column, ufunc\)"):
        events.window("k", Tumbling(2)).aggregate(total=np.add)
    with pytest.raises(rt.GraphError, match="subtract"):
        events.window("k", Tumbling(2)).aggregate(total=("x", np.subtract))
    with pytest.raises(rt.ArgumentError, match="fn must be"):
        events.window("k", Tumbling(2)).reduce(None)
