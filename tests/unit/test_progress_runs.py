"""A relay's merged runs (:func:`~raytide.engine.progress_runs.merge_runs`) against the
messages they stand for: the oracle is the progress core itself, given the same calls
unmerged.

The messages are a real job's: every numbered message the progress actor of an in-process
run took (batches with output records, acknowledgements asked for by a loop's rounds,
declarations, interests riding on batches). Each trial deals them into calls at random, so
that a call holds some of a replica's messages with gaps between them, out of order, and
some arrive before the ones they follow; one core takes each call as it is, the other takes
it merged. After every call both must push the same statuses to the same replicas, log the
same events (an epoch's parts in any order: replicas' parts of an epoch have none), and at
the end hold the same pointstamps, interests and acknowledgements owed.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.actors.progress_relay import merged
from raytide.engine import progress_runs
from raytide.engine.progress_core import ProgressCore, ProgressEffects
from raytide.engine.progress_runs import merge_runs
from raytide.physical.protocol import (
    Declaration,
    EpochComplete,
    ProgressBatch,
    ProgressRun,
    ReplicaKey,
    Sequenced,
    decode,
    encode,
)
from raytide.testing import world as world_module
from raytide.testing.local import LocalJob
from tests.sim.scenarios import SCENARIOS
from tests.sim.test_graph_sim import components_flow


def scenario(name: str) -> tuple[Any, dict]:
    found = SCENARIOS[name](random.Random(3))
    return found.flow, found.inputs


def components() -> tuple[Any, dict]:
    rng = random.Random(3)
    edges = [(rng.randrange(30), rng.randrange(30)) for _ in range(40)]
    return components_flow(), {"edges": [edges[i::3] for i in range(3)]}


#: The recorded jobs: their flows with their inputs (the components' rounds run at
#: notifications and ask for acknowledgements).
JOBS: dict[str, Callable[[], tuple[Any, dict]]] = {
    "keyed": lambda: scenario("keyed"),
    "nested loop": lambda: scenario("nested loop"),
    "components": components,
}


class Recording(ProgressCore):
    """The in-process runtime's progress core, keeping its construction and every message it took."""

    made: list[tuple[Any, ...]] = []
    connected: list[dict] = []
    taken: list[Sequenced] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Recording.made.append((args, kwargs))
        super().__init__(*args, **kwargs)

    def connect(self, subscriptions: dict) -> ProgressEffects:
        Recording.connected.append(subscriptions)
        return super().connect(subscriptions)

    def receive_all(self, calls: Any) -> ProgressEffects:
        Recording.taken.extend(calls)
        return super().receive_all(calls)


@functools.cache
def recorded() -> dict[str, tuple[tuple[Any, ...], dict, list[Sequenced]]]:
    """Per job, its progress core's arguments, its subscriptions and every message it took
    (once per test process: a cache, not a fixture, keeps it out of Hypothesis' reports)."""
    jobs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(world_module, "ProgressCore", Recording)
        for name, build in JOBS.items():
            Recording.made, Recording.connected, Recording.taken = [], [], []
            flow, inputs = build()
            run = LocalJob(flow, inputs, parallelism=2, seed=3).run()
            assert run.finished and len(Recording.made) == 1
            jobs[name] = (Recording.made[0], Recording.connected[0], list(Recording.taken))
    return jobs


def test_the_recorded_jobs_hold_every_kind_of_message_a_run_merges():
    """What the trials merge: batches with outputs, acknowledgements, interests and
    declarations; and every job's messages, taken in one call, make runs."""
    for name, (_, _, taken) in recorded().items():
        assert any(isinstance(call.message, ProgressRun) for call in merge_runs(taken)), name
    messages = [call.message for _, _, taken in recorded().values() for call in taken]
    assert any(isinstance(m, ProgressBatch) and m.outputs for m in messages)
    assert any(isinstance(m, ProgressBatch) and m.ack for m in messages)
    assert any(isinstance(m, ProgressBatch) and m.interests is not None for m in messages)
    assert any(isinstance(m, Declaration) for m in messages)


def dealt(taken: list[Sequenced], rng: random.Random) -> list[list[Sequenced]]:
    """``taken`` dealt into calls at random, each call's messages shuffled."""
    calls: list[list[Sequenced]] = [[] for _ in range(rng.randint(1, max(1, len(taken) // 8)))]
    for call in taken:
        calls[rng.randrange(len(calls))].append(call)
    for call in calls:
        rng.shuffle(call)
    return calls


def comparable(effects: ProgressEffects) -> tuple[dict, list]:
    """The pushes per replica, and the events with each epoch's parts sorted."""
    events = [EpochComplete(e.output, e.epoch, sorted(e.parts, key=repr)) if isinstance(e, EpochComplete) else e
              for e in effects.events]
    return dict(effects.pushes), events


def state(core: ProgressCore) -> tuple[Any, ...]:
    publisher = core.publisher
    return (publisher.tracker.active_pointstamps(), publisher.interests, publisher._owed, publisher.batches_applied,
            core.outputs.complete, core.in_order.waiting())


@pytest.mark.parametrize("name", list(JOBS))
@settings(max_examples=150)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_call_merged_into_runs_does_what_its_messages_do(name, seed):
    (args, kwargs), subscriptions, taken = recorded()[name]
    rng = random.Random(seed)
    plain, merged = ProgressCore(*args, **kwargs), ProgressCore(*args, **kwargs)
    assert comparable(plain.connect(subscriptions)) == comparable(merged.connect(subscriptions))
    for number, call in enumerate(dealt(taken, rng)):
        assert comparable(merged.receive_all(merge_runs(call))) == comparable(plain.receive_all(call)), f"call {number}"
    assert state(merged) == state(plain)
    assert plain.done and merged.done and state(plain)[-1] == {}


def test_merge_runs_crosses_no_gap_and_keeps_a_lone_message_as_it_is():
    sender, other = ReplicaKey("a", 0), ReplicaKey("b", 0)
    batch = [Sequenced(sender, n, ProgressBatch([], ack=n == 1)) for n in range(5)]
    lone = Sequenced(other, 7, Declaration({}))
    merged = merge_runs([batch[4], lone, batch[0], batch[1], batch[3]])
    assert [(c.sender, c.sequence, progress_runs.last_number(c)) for c in merged] == [
        (sender, 0, 1), (sender, 3, 4), (other, 7, 7)]
    assert merged[0].message == ProgressRun(1, [], acks=1, batches=2) and merged[2] is lone


def _first_interests(calls: list[Sequenced]) -> list[Sequenced]:
    """Planted: a run keeps the first interests its replica declared, not the last."""
    def first(call: Sequenced) -> Sequenced:
        if not isinstance(call.message, ProgressRun):
            return call
        sent = [c for c in calls if c.sender == call.sender and call.sequence <= c.sequence <= call.message.last]
        declared = [c.message.interests for c in sorted(sent) if c.message.interests is not None]
        return call._replace(message=dataclasses.replace(call.message, interests=declared[0] if declared else None))
    return [first(call) for call in merge_runs(calls)]


def _no_acks(calls: list[Sequenced]) -> list[Sequenced]:
    """Planted: a run forgets the acknowledgements its batches asked for."""
    return [call._replace(message=dataclasses.replace(call.message, acks=0)) if isinstance(call.message, ProgressRun)
            else call for call in merge_runs(calls)]


def _across_gaps(calls: list[Sequenced]) -> list[Sequenced]:
    """Planted: a replica's messages in a call make one run, gaps and all."""
    by_sender: dict[ReplicaKey, list[Sequenced]] = {}
    for call in calls:
        by_sender.setdefault(call.sender, []).append(call)
    return [progress_runs._run(sorted(sent), {}) if len(sent) > 1 else sent[0] for sent in by_sender.values()]


@pytest.mark.parametrize("planted", [_first_interests, _no_acks, _across_gaps], ids=lambda f: f.__name__)
def test_the_oracle_sees_a_merge_that_loses_what_a_message_said(planted):
    """Teeth: each planted merge differs from the plain core, after a call or at the end, in some of 40 trials."""
    (args, kwargs), subscriptions, taken = recorded()["components"]
    caught = 0
    for seed in range(40):
        plain, merged = ProgressCore(*args, **kwargs), ProgressCore(*args, **kwargs)
        plain.connect(subscriptions), merged.connect(subscriptions)
        try:
            differ = any(comparable(merged.receive_all(planted(call))) != comparable(plain.receive_all(call))
                         for call in dealt(taken, random.Random(seed)))
            caught += differ or state(merged) != state(plain)
        except ValueError:  # a run over a gap: the message in the gap then comes twice
            caught += 1
    assert caught > 0


def test_the_ray_relay_merges_each_incarnations_calls_apart_and_passes_a_lone_call_on_untouched():
    """``progress_relay.merged``: what the Ray relay forwards, one blob per incarnation."""
    sender = ReplicaKey("a", 0)
    old, new = [Sequenced(sender, n, ProgressBatch([])) for n in range(2)], [Sequenced(sender, n, ProgressBatch([])) for n in range(3)]
    lone = [encode((1, (new[0],)))]
    assert merged(lone) == (lone, 0)
    blobs, runs = merged([encode((0, (old[0],))), encode((1, (new[2],))), encode((0, (old[1],))),
                          encode((1, (new[0], new[1])))])
    assert runs == 2
    assert [decode(blob) for blob in blobs] == [(0, (Sequenced(sender, 0, ProgressRun(1, [], 0, 2)),)),
                                                (1, (Sequenced(sender, 0, ProgressRun(2, [], 0, 3)),))]


@pytest.mark.parametrize("name", list(JOBS))
@settings(max_examples=60)
@given(seed=st.integers(0, 2**32 - 1))
def test_runs_merged_again_by_a_groups_relay_do_what_their_messages_do(name, seed):
    """Two levels of relays: each call's messages dealt among nodes' relays, each merging what
    it got into runs, and their runs, shuffled, merged again by the group's relay."""
    (args, kwargs), subscriptions, taken = recorded()[name]
    rng = random.Random(seed)
    plain, merged = ProgressCore(*args, **kwargs), ProgressCore(*args, **kwargs)
    plain.connect(subscriptions), merged.connect(subscriptions)
    for number, call in enumerate(dealt(taken, rng)):
        gathered = [run for part in dealt(call, rng) for run in merge_runs(part)]
        rng.shuffle(gathered)
        assert comparable(merged.receive_all(merge_runs(gathered))) == comparable(plain.receive_all(call)), f"call {number}"
    assert state(merged) == state(plain)


@pytest.mark.parametrize("name", list(JOBS))
def test_a_merge_makes_equal_pointstamps_one_object_and_pickles_each_once(name):
    """Every job's messages merged in one call, singles included: equal pointstamps (and their
    locations and times) are one object, the changes unchanged, so the call's blob writes each once
    and is smaller than the same runs with pointstamps of their own."""
    _, _, taken = recorded()[name]
    found = merge_runs(taken)
    pointstamps = [pointstamp for call in found if not isinstance(call.message, Declaration)
                   for pointstamp, _ in call.message.changes]
    assert len(pointstamps) > len(set(pointstamps)), "the job repeats no pointstamp: nothing to show"
    one = {}
    for pointstamp in pointstamps:
        assert one.setdefault(pointstamp, pointstamp) is pointstamp, pointstamp
        assert one.setdefault(pointstamp[0], pointstamp[0]) is pointstamp[0]
        assert one.setdefault(pointstamp[1], pointstamp[1]) is pointstamp[1]
    apart = [_copied(call) for call in found]  # the same runs, nothing shared
    assert [call.message.changes for call in apart if not isinstance(call.message, Declaration)] == [
        call.message.changes for call in found if not isinstance(call.message, Declaration)]
    assert len(encode(found)) < len(encode(apart))


def _copied(call: Sequenced) -> Sequenced:
    """``call`` with every pointstamp a new object (as unpickled from a replica's own blob)."""
    if isinstance(call.message, Declaration):
        return call
    changes = [(decode(encode(pointstamp)), delta) for pointstamp, delta in call.message.changes]
    return call._replace(message=dataclasses.replace(call.message, changes=changes))
