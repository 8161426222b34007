"""Epoch tokens (raytide.engine.epoch_tokens) in the seeded interleavings: a vertex fed only
by inputs' chains is notified by its senders' tokens, ahead of the progress actor, and
always with the plain-Python output; a planted error in the tokens is caught."""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable

import pytest

import raytide as rt
from raytide.engine import epoch_tokens
from raytide.engine.replica import ReplicaCore
from raytide.engine.riding import Rides
from raytide.progress.publisher import answers
from raytide.progress.reachability import Location
from raytide.testing.local import LocalJob
from tests.sim.scenarios import SCENARIOS, Scenario, as_counters
from tests.sim.seeds import seeds
from tests.sim.test_recovery_sim import trial as recovery_trial
from tests.sim.test_runtime_sim import run_scenario

#: The scenarios with a vertex that takes tokens (the loops' vertices are on a cycle: none).
WITH_TOKENS = ("join", "keyed", "word count")
#: Of those, the ones whose input replicas close epochs for one another at parallelism 2 and 3
#: (``epoch_tokens.proxies_allowed``; keyed's input chain also feeds a ``stateful_map``, which takes no tokens).
WITH_PROXIES = ("join", "word count")


def long(name: str, epochs: int = 8) -> Callable[[random.Random], Scenario]:
    """Scenario ``name`` over ``epochs`` epochs: long enough for a replica's own tokens to
    trail its peers' proxy tokens for it (with 3, a proxy comes after an older own token in
    2 of 60 seeds; with 8, 46 times)."""
    return functools.partial(SCENARIOS[name], epochs=epochs)


class HoldEpoch(rt.Vertex):
    """Keeps an epoch's records until it is notified of it, then sends them on: fused behind
    its input, it makes a sender that still waits for a notification when its input moves on."""

    def __init__(self) -> None:
        self.kept: dict[rt.Timestamp, list] = {}

    def on_recv(self, edge: int, message: list, time: rt.Timestamp) -> None:
        self.kept.setdefault(time, []).extend(message)
        self.notify_at(time)

    def on_notify(self, time: rt.Timestamp) -> None:
        self.send_by(0, self.kept.pop(time, []), time)


def held_until_notified(rng: random.Random) -> Scenario:
    """``HoldEpoch`` behind the input, then ``count_by_key`` (which takes tokens)."""
    flow = rt.Dataflow("held")
    [held] = flow.vertex(HoldEpoch, [flow.input("n")], name="hold")
    held.count_by_key(lambda x: x % 3, name="count").output("counts")
    data = [[rng.randrange(10) for _ in range(rng.randrange(6))] for _ in range(3)]
    expected = {e: Counter(Counter(x % 3 for x in xs).items()) for e, xs in enumerate(data) if xs}
    return Scenario("held", flow, {"n": data}, {"counts": expected})


def exact(make, seed: int) -> bool:
    """Whether seed ``seed`` of scenario ``make`` finishes with the plain-Python output."""
    scenario, job = run_scenario(make, seed)
    try:
        run = job.run()
    except RuntimeError:  # a hang or a livelock
        return False
    return run.failure is None and run.finished and as_counters(run.outputs) == scenario.expected


def test_a_vertex_fed_by_inputs_is_notified_by_tokens_ahead_of_the_progress_actor(monkeypatch):
    """In every scenario with a vertex that takes tokens, some notifications are due by the
    tokens while the statuses the progress actor pushed do not make them due yet."""
    ahead: Counter = Counter()
    ready = ReplicaCore._ready

    def counted(core: ReplicaCore, vertex: str, time: rt.Timestamp) -> bool:
        pushed = all((status := core.statuses.get(Location.of_input(vertex, port))) is not None
                     and answers(status, time)[0] for port in range(len(core.plan.vertex(vertex).inputs)))
        ahead[core.plan.name] += core.tokens.ready(vertex, time) and not pushed
        return ready(core, vertex, time)

    monkeypatch.setattr(ReplicaCore, "_ready", counted)
    for name in WITH_TOKENS:
        for seed in range(10):
            assert exact(SCENARIOS[name], seed), f"{name}, seed {seed}"
    assert set(ahead) == {SCENARIOS[name](random.Random(0)).flow.name for name in WITH_TOKENS}, ahead


def test_a_sender_that_waits_for_a_notification_sends_no_token_before_it():
    """A vertex behind the input holds each epoch until notified: its chain sends no token
    for an epoch it may still send at, and the count after the exchange waits for it."""
    for seed in range(150):
        assert exact(held_until_notified, seed), f"seed {seed}"


def _ready_on_any_channel(book: epoch_tokens.TokenBook, vertex: str, time: rt.Timestamp) -> bool:
    return (vertex == book.head and bool(book.closed) and not time.counters
            and any(below is None or time.epoch < below for below in book.closed.values()))


def _one_epoch_ahead(book: epoch_tokens.TokenBook, channel, token) -> None:
    book.closed[channel] = None if token.below is None else token.below + 1


def _never_paid(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted error: a sender forgets the token it owes."""
    close = epoch_tokens.TokenSender.close

    def forgetting(sender: epoch_tokens.TokenSender, *args) -> None:
        close(sender, *args)
        sender.owed = False

    monkeypatch.setattr(epoch_tokens.TokenSender, "close", forgetting)


def _proxy_unguarded(book: epoch_tokens.TokenBook, channel, token) -> None:
    """A planted error: a proxy token closes its replica's channel without waiting for that
    replica's own token (data it sent before that token may still be on its way)."""
    if token.for_sender is not None:
        channel = channel._replace(sender=token.for_sender)
    book.closed[channel] = book.latest = token.below


def _proxy_after_any_own_token(book: epoch_tokens.TokenBook, channel, token) -> None:
    """A planted error (the guard loosened to ``elif channel in self.own``): a proxy token
    closes its replica's channel once any own token of it came, not the one it waits for."""
    proxied = channel._replace(sender=token.for_sender) if token.for_sender is not None else None
    if proxied is not None and proxied in book.own:
        book._close(proxied, token.below)
    else:
        _record(book, channel, token)


_record = epoch_tokens.TokenBook.record


def _answered_alone_unheard(book: epoch_tokens.TokenBook, vertex: str, time: rt.Timestamp) -> bool:
    return vertex == book.head and bool(book.channels) and not time.counters


@pytest.mark.parametrize("plant, scenarios", [
    pytest.param(lambda m: m.setattr(epoch_tokens.TokenBook, "ready", _ready_on_any_channel),
                 [SCENARIOS[name] for name in WITH_TOKENS], id="ready on one channel's token"),
    pytest.param(lambda m: m.setattr(epoch_tokens.TokenBook, "record", _one_epoch_ahead),
                 [SCENARIOS[name] for name in WITH_TOKENS], id="a token one epoch ahead"),
    pytest.param(lambda m: m.setattr(epoch_tokens, "may_close", lambda pending, below: True),
                 [held_until_notified], id="a token while a notification is pending"),
    pytest.param(_never_paid, [held_until_notified], id="an owed token never sent"),
    pytest.param(lambda m: m.setattr(epoch_tokens.TokenBook, "record", _proxy_unguarded),
                 [SCENARIOS[name] for name in WITH_PROXIES], id="a proxy token before the token it waits for"),
    pytest.param(lambda m: m.setattr(epoch_tokens.TokenBook, "record", _proxy_after_any_own_token),
                 [long(name) for name in WITH_PROXIES], id="a proxy token after an older own token"),
])
def test_a_planted_error_in_the_tokens_is_caught(monkeypatch, plant, scenarios):
    """Each planted error gives a wrong output within 20 seeds of a scenario it can show in
    (where it cannot, as a token one epoch ahead where no replica waits for it, it is
    harmless)."""
    plant(monkeypatch)
    caught = [make for make in scenarios if not all(exact(make, seed) for seed in range(20))]
    assert caught, "no scenario caught the planted error"


def test_waits_left_to_the_tokens_are_not_declared_and_still_answered():
    """Once a token has come on every channel, a receiver declares none of the waits the
    tokens will answer (no declaration, no status push for them), in every scenario with
    receivers; and always with the plain-Python output."""
    left: Counter = Counter()
    interests = ReplicaCore._interests

    def counted(core: ReplicaCore, held: bool = True):
        found = interests(core, held)
        for vertex, pending in core.notifications.pending.items():
            if any(core.tokens.answers_alone(vertex, time) for time in pending):
                left[core.plan.name] += 1
                declared = [(location, wait) for location, wait in found.items() if location.vertex == vertex]
                assert all(is_held for _, waits in declared for _, is_held in waits), (vertex, pending, declared)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ReplicaCore, "_interests", counted)
        for name in WITH_TOKENS:
            for seed in range(10):
                assert exact(SCENARIOS[name], seed), f"{name}, seed {seed}"
    assert set(left) == {SCENARIOS[name](random.Random(0)).flow.name for name in WITH_TOKENS}, left


def test_waits_left_to_the_tokens_before_every_channel_sent_one_hang_a_recovered_job(monkeypatch, store_root):
    """The planted error of leaving a wait to the tokens before a token has come on every
    channel: a restored replica whose senders' inputs are already closed gets none, and with
    its wait undeclared the job hangs. The recovery trials catch it within 30 seeds."""
    monkeypatch.setattr(epoch_tokens.TokenBook, "answers_alone", _answered_alone_unheard)
    caught = [(name, seed) for name in ("word count", "join") for seed in range(30)
              if not recovery_trial(name, seed, str(store_root / f"{name}-{seed}")).exact]
    assert caught, "no recovery trial caught the planted error"


def test_wide_edges_and_loops_take_no_tokens():
    """Tokens go between at most :data:`~raytide.engine.epoch_tokens.MAX_TOKEN_PAIRS` pairs of
    replicas, and never to a vertex on a cycle."""
    scenario = SCENARIOS["word count"](random.Random(0))
    narrow = LocalJob(scenario.flow, scenario.inputs, parallelism=8, seed=0).plan
    wide = LocalJob(scenario.flow, scenario.inputs, parallelism=9, seed=0).plan
    assert epoch_tokens.receivers(narrow) == {"count"} and epoch_tokens.receivers(wide) == frozenset()
    for name in ("loop", "nested loop"):
        scenario = SCENARIOS[name](random.Random(0))
        assert epoch_tokens.receivers(LocalJob(scenario.flow, scenario.inputs, parallelism=2, seed=0).plan) == frozenset()


def test_an_inputs_progress_rides_with_its_tokens_only_where_every_frontier_waits_for_them():
    """An input's chain whose every channel goes to a vertex that takes tokens sends its
    batch with them (on Ray); one that hosts an output, or also feeds a per-batch function,
    calls the progress actor itself."""
    def plan_of(flow: rt.Dataflow):
        return LocalJob(flow, {name: [[1]] for name in flow.inputs()}, parallelism=2, seed=0).plan

    counted = rt.Dataflow("counted")
    counted.input("x").map(lambda x: x, name="m").count_by_key(lambda x: x, name="count").output("counts")
    fused_output = rt.Dataflow("fused-output")
    source = fused_output.input("x")
    source.map(lambda x: x, name="m").output("same")
    source.count_by_key(lambda x: x, name="count").output("counts")
    also_per_batch = rt.Dataflow("also-per-batch")
    mapped = also_per_batch.input("x").map(lambda x: x, name="m")
    mapped.count_by_key(lambda x: x, name="count").output("counts")
    mapped.exchange(lambda x: x, name="moving").output("moved")
    rides = {flow.name: epoch_tokens.rides_with_tokens(plan, plan.chain_of("x").name)
             for flow in (counted, fused_output, also_per_batch) for plan in [plan_of(flow)]}
    assert rides == {"counted": True, "fused-output": False, "also-per-batch": False}


def test_inputs_batches_ride_with_their_tokens_in_the_simulator_as_on_ray(rides_carried):
    """The in-process runtime runs the Ray transport's riding rules (raytide.engine.riding):
    in every scenario with a vertex that takes tokens some input batches go with tokens to
    a count replica, which passes them on, and every seed still gives the plain-Python output.
    (With the batches dropped where they are passed on, these seeds hang or fail.)"""
    for name in WITH_TOKENS:
        rides_carried.clear()
        for seed in range(10):
            assert exact(SCENARIOS[name], seed), f"{name}, seed {seed}"
        assert sum(rides_carried.values()) >= 10, (name, rides_carried)


def test_a_receiver_keeps_riders_only_from_one_chain_that_never_owes_a_token():
    """A batch that rode with tokens may wait at its receiver for the other channels' tokens
    (``epoch_tokens.riders_may_wait``) where every channel comes from one sender chain whose
    vertices never wait for a notification past their input's move (an input, per-batch
    functions, a combiner); not behind a join of two inputs, nor behind a vertex that keeps
    an epoch until it is notified (its token may wait for the kept batch)."""
    def keeps(flow: rt.Dataflow) -> dict[str, bool]:
        plan = LocalJob(flow, {name: [[1]] for name in flow.inputs()}, parallelism=2, seed=0).plan
        return {head: epoch_tokens.riders_may_wait(plan, head) for head in sorted(epoch_tokens.receivers(plan))}

    counted = rt.Dataflow("counted")
    counted.input("x").map(lambda x: x, name="m").count_by_key(lambda x: x, name="count").output("counts")
    assert keeps(counted) == {"count": True}
    assert keeps(SCENARIOS["join"](random.Random(0)).flow) == {"join": False}
    assert keeps(held_until_notified(random.Random(0)).flow) == {"count": False}


def test_riders_kept_for_the_last_token_give_the_plain_python_output_crashes_included(monkeypatch, store_root):
    """In every scenario whose receivers may keep riders some are kept, and each seed gives
    the plain-Python output, with crashes too (the recovery trials: the full count runs in
    ``test_recovery_sim``). Kept forever instead, they hang these seeds."""
    kept = Counter()
    keep = Rides.keep

    def counted(rides: Rides, until):
        kept[rides.chain] += len(rides.passing_on)
        keep(rides, until)

    monkeypatch.setattr(Rides, "keep", counted)
    for name in ("keyed", "word count"):
        for seed in range(10):
            assert exact(SCENARIOS[name], seed), f"{name}, seed {seed}"
            result = recovery_trial(name, seed, str(store_root / f"{name}-{seed}"))
            assert result.exact, f"{name}, seed {seed}: {result.describe()}"
    assert sum(kept.values()) >= 20, kept


def test_input_replicas_without_records_are_closed_by_a_peers_proxy_tokens(monkeypatch):
    """Where an input's replicas close epochs for one another, the replicas without records
    move quietly and a peer's proxy tokens close their channels: at once where their own
    last token is in, later where it is still on its way (the guard), and a receiver is
    notified by them; always with the plain-Python output. Over 8 epochs, some proxies come
    after an older own token of their replica: closing at once there (the guard loosened to
    any own token) gives a wrong output in 5 of these 60 seeds."""
    seen: Counter = Counter()
    advance, record = ReplicaCore.advance_input, epoch_tokens.TokenBook.record

    def counted_advance(core: ReplicaCore, vertex: str, epoch, quiet: bool = False, proxies: tuple = ()) -> None:
        seen["quiet advances"] += quiet
        seen["proxies sent"] += len(proxies)
        advance(core, vertex, epoch, quiet, proxies)

    def counted_record(book: epoch_tokens.TokenBook, channel, token) -> None:
        proxied = channel._replace(sender=token.for_sender) if token.for_sender is not None else None
        before = (dict(book.closed), set(book.proxied), dict(book.own))
        record(book, channel, token)
        if proxied is not None:
            seen["after an older own token"] += proxied in before[2] and (
                epoch_tokens._epoch_key(before[2][proxied]) < epoch_tokens._epoch_key(token.after))
            seen["closed by a proxy at once"] += book.closed.get(proxied, -1) != before[0].get(proxied, -1)
            seen["kept for the own token"] += proxied in book.proxied and proxied not in before[1]
        elif channel in before[1] and channel not in book.proxied and book.closed[channel] != token.below:
            seen["closed by a kept proxy"] += 1

    monkeypatch.setattr(ReplicaCore, "advance_input", counted_advance)
    monkeypatch.setattr(epoch_tokens.TokenBook, "record", counted_record)
    for name in WITH_PROXIES:
        for seed in seeds(30, f"proxies {name}"):
            assert exact(long(name), seed), f"{name}, seed {seed}"
    for what in ("quiet advances", "proxies sent", "closed by a proxy at once", "kept for the own token",
                 "closed by a kept proxy", "after an older own token"):
        assert seen[what] > 0, dict(seen)
