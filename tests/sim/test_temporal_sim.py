"""Joins across time on the in-process runtime: ``interval_join`` and ``join_latest`` give
exactly a plain-Python reference's matches, each once at its epoch, whatever the
parallelism and interleaving, through crashes and recoveries, and through live rescales of
the join vertices (their keyed state and notifications move). The fault trials are the
simulation tier's own, run on these scenarios by adding them to its table."""

from __future__ import annotations

import collections
import random
from collections import Counter, defaultdict

import pytest

import raytide as rt
import tests.sim.test_recovery_sim as recovery_sim
import tests.sim.test_rescale_sim as rescale_sim
from raytide.testing.local import LocalJob
from tests.sim.scenarios import SCENARIOS, Scenario, as_counters

KEYS = 3


def _draw(rng: random.Random, epochs: int, side: str) -> list[list[tuple[int, str]]]:
    return [[(rng.randrange(KEYS), f"{side}{epoch}.{n}") for n in range(rng.randrange(4))] for epoch in range(epochs)]


def interval(rng: random.Random, epochs: int = 3) -> Scenario:
    """Views and buys of equal keys whose epochs differ by ``lower..upper``."""
    lower = rng.randint(-2, 1)
    upper = lower + rng.randint(0, 2)
    flow = rt.Dataflow("interval")
    flow.input("views").interval_join(flow.input("buys"), lambda r: r[0], lower, upper, name="joined").output("pairs")
    views, buys = _draw(rng, epochs, "v"), _draw(rng, epochs, "b")
    expected: dict[int, Counter] = defaultdict(Counter)
    for a, left in enumerate(views):
        for b, right in enumerate(buys):
            if lower <= b - a <= upper:
                for v in left:
                    for w in right:
                        if v[0] == w[0]:
                            expected[max(a, b)][(v[0], v, w)] += 1
    return Scenario("interval join", flow, {"views": views, "buys": buys}, {"pairs": dict(expected)})


def timed_interval(rng: random.Random, epochs: int = 3) -> Scenario:
    """Views and buys on event-time inputs (half-second epochs) whose own timestamps differ by
    ``lower..upper`` seconds (quarters: sums exact); each epoch's list holds its records."""
    grains = rng.choice([(0.5, 0.5), (0.5, 1.0)])
    lower = rng.randint(-6, 2) / 4
    upper = lower + rng.randint(0, 6) / 4
    flow = rt.Dataflow("timed-interval")
    views, buys = (flow.input(side, event_time=rt.EventTime(lambda r: r[1], granularity=grain))
                   for side, grain in zip(("views", "buys"), grains))
    views.interval_join(buys, lambda r: r[0], lower, upper, name="joined").output("pairs")
    drawn = [[[(rng.randrange(KEYS), e * grain + rng.randrange(int(grain * 4)) / 4, f"{side}{e}.{n}")
               for n in range(rng.randrange(4))] for e in range(epochs)] for side, grain in zip("vb", grains)]
    expected: dict[int, Counter] = defaultdict(Counter)
    for a, left in enumerate(drawn[0]):
        for b, right in enumerate(drawn[1]):
            for v in left:
                expected[max(a, b)].update((v[0], v, w) for w in right if v[0] == w[0] and lower <= w[1] - v[1] <= upper)
    return Scenario("interval join in seconds", flow, {"views": drawn[0], "buys": drawn[1]},
                    {"pairs": {e: c for e, c in expected.items() if c}})


def latest(rng: random.Random, epochs: int = 3) -> Scenario:
    """Clicks enriched with the latest profile of their key, as of their epoch."""
    flow = rt.Dataflow("latest")
    flow.input("clicks").join_latest(flow.input("profiles"), lambda r: r[0], name="enrich").output("enriched")
    clicks, profiles = _draw(rng, epochs, "c"), _draw(rng, epochs, "p")
    expected: dict[int, Counter] = defaultdict(Counter)
    for t, records in enumerate(clicks):
        for click in records:
            seen = [(e, p) for e in range(t + 1) for p in profiles[e] if p[0] == click[0]]
            last = max((e for e, _ in seen), default=None)
            values = [p for e, p in seen if e == last] or [None]
            expected[t].update((click[0], click, value) for value in values)
    return Scenario("join latest", flow, {"clicks": clicks, "profiles": profiles}, {"enriched": dict(expected)})


@pytest.fixture
def with_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SCENARIOS, "interval join", interval)
    monkeypatch.setitem(SCENARIOS, "interval join in seconds", timed_interval)
    monkeypatch.setitem(SCENARIOS, "join latest", latest)


@pytest.mark.parametrize("make", [interval, timed_interval, latest])
def test_every_match_once_at_its_epoch_whatever_the_parallelism_and_interleaving(make):
    for seed in range(30):
        rng = random.Random(seed)
        scenario = make(rng, epochs=rng.randint(1, 6))
        run = LocalJob(scenario.flow, scenario.inputs, rng.randint(1, 4), seed, chaining=rng.random() < 0.8).run()
        assert run.finished and as_counters(run.outputs) == scenario.expected, f"seed {seed}"


@pytest.mark.parametrize("name", ["interval join", "interval join in seconds", "join latest"])
def test_crashes_recover_with_every_match_once(with_joins, name, store_root):
    seen: collections.Counter = collections.Counter()
    recoveries = 0
    for seed in range(30):
        result = recovery_sim.trial(name, seed, str(store_root / str(seed)), seen)
        assert result.exact, f"seed {seed}: {result.describe()}"
        recoveries += len(result.run.recoveries) if result.run else 0
    assert recoveries >= 12, recoveries


@pytest.mark.parametrize("name", ["interval join", "interval join in seconds", "join latest"])
def test_live_rescales_with_crashes_move_the_join_state_with_its_notifications(with_joins, name, store_root):
    seen: collections.Counter = collections.Counter()
    for seed in range(30):
        wrong = rescale_sim.trial(name, seed, str(store_root / str(seed)), seen)
        assert wrong is None, f"seed {seed}: {wrong}"
    assert seen["trials that rescaled"] >= 12, seen


def test_joins_are_refused_inside_a_loop_and_bad_bounds_before_anything_is_built():
    flow = rt.Dataflow("refused")
    views, buys = flow.input("views"), flow.input("buys")
    with pytest.raises(rt.ArgumentError, match=r"interval_join 'j' \(of 'views' and 'buys'\): lower=2 must be at most upper=1"):
        views.interval_join(buys, lambda r: r, 2, 1, name="j")
    with pytest.raises(rt.ArgumentError, match=r"interval_join 'interval_join_\w+' .*upper must be a whole number of "
                                               r"epochs \(its inputs have no event time\), not 1.5 \(float\)"):
        views.interval_join(buys, lambda r: r, 0, 1.5)
    spec = rt.EventTime("t", granularity=0.5)
    clicks, orders = flow.input("clicks", event_time=spec), flow.input("orders", event_time=spec)
    clicks.interval_join(orders.map(lambda r: r), lambda r: r, -1.5, 0.25, name="fine")  # seconds, through a map
    with pytest.raises(rt.ArgumentError, match=r"interval_join 'k' .*lower must be a number of seconds \(its inputs "
                                               r"have event time\), not '1' \(str\)"):
        clicks.interval_join(orders, lambda r: r, "1", 2, name="k")
    with pytest.raises(rt.ArgumentError, match=r"interval_join 'k' .*upper must be a number of seconds .*not nan"):
        clicks.interval_join(orders, lambda r: r, 0, float("nan"), name="k")
    with pytest.raises(rt.ArgumentError, match=r"interval_join 'k' .*lower=2.5 must be at most upper=0.5"):
        clicks.interval_join(orders, lambda r: r, 2.5, 0.5, name="k")
    with pytest.raises(rt.GraphError, match=r"interval_join 'm' \(of 'clicks' and 'buys'\): 'clicks' comes from "
                                            r"event-time inputs and the other stream does not"):
        clicks.interval_join(buys, lambda r: r, 0, 1, name="m")
    with pytest.raises(rt.GraphError, match=r"interval_join 'u' .* comes from inputs of different event times \("
                                            r"'clicks': timestamp 't' every 0.5 s, 'views': no event time\)"):
        clicks.concat(views).interval_join(orders, lambda r: r, 0, 1, name="u")
    with pytest.raises(rt.ArgumentError, match="key must be a function"):
        views.join_latest(buys, "k")
    loop = flow.loop()
    with pytest.raises(rt.GraphError, match="inside loop"):
        loop.enter(views).join_latest(loop.enter(buys), lambda r: r)


def test_a_record_that_lost_its_timestamp_before_an_interval_join_in_seconds_fails_the_job_naming_the_join():
    spec = rt.EventTime("t")
    flow = rt.Dataflow("lost-time")
    views, buys = flow.input("views", event_time=spec), flow.input("buys", event_time=spec)
    views.map(lambda r: {"k": r["k"]}).interval_join(buys, lambda r: r["k"], 0, 1, name="joined").output("pairs")
    run = LocalJob(flow, {"views": [[{"k": 1, "t": 0.5}]], "buys": [[{"k": 1, "t": 0.7}]]}, 1, 0).run()
    assert isinstance(run.failure, rt.RecordError), run.failure
    assert "interval_join 'joined' replica 0 at Timestamp(0): a record of input 0 ({'k': 1}) has no timestamp 't'" in str(
        run.failure)
