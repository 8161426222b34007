"""Keyed state split and merged by key (``take_keys`` / ``put_keys``): every built-in stateful
vertex, run on P replicas and rescaled to Q at any point with its state moved key group by key
group, computes what one replica given every record computes, and what plain Python computes.

The replicas are driven as a runtime would drive them: each message goes to the replica that
owns its records' keys (``key_group`` over a ``KeyGroupAssignment``), or, for a combiner,
whose input is not exchanged, to any replica; a time is completed (``on_notify`` on every
replica, in timestamp order) once all its messages have arrived. At the rescale, each replica
hands the keys of every group that changes owner to the new owner (a retiring one hands every
key it holds), through cloudpickle as between processes, and the puts arrive in random order.
"""

from __future__ import annotations

import operator
import pickle
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.keygroups import KeyGroupAssignment, key_group
from raytide.core.operators import (
    BatchFunction,
    EpochJoin,
    KeyedCount,
    KeyedMerge,
    KeyedReduce,
    StatefulMap,
    flat_map_batch,
    pair_key,
)
from raytide.core.split_text import TALLY_MIN_CHARS, SplitText
from raytide.core.vertex import Vertex
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp
from tests.unit.harness import RecordingContext, bound

K = 128

#: A message as delivered: its time, input port, batch, and ``spread``, which replica (modulo
#: the parallelism) it goes to when its input is not exchanged.
Message = tuple[Timestamp, int, Any, int]
#: Where the parts of a batch go: ``route(port, batch, spread, assignment) -> [(replica, part)]``.
Router = Callable[[int, Any, int, KeyGroupAssignment], list[tuple[int, Any]]]
Sent = list[tuple[Timestamp, Any]]


def by_key(*keys: Callable[[Any], Any]) -> Router:
    """An exchange by ``keys[port]``: each record to the owner of its key's group (the words
    of a SplitText stay one SplitText per owner, so that they still reach a word tally)."""

    def route(port: int, batch: Any, spread: int, assignment: KeyGroupAssignment) -> list[tuple[int, Any]]:
        parts: dict[int, list] = {}
        for record in batch.records() if isinstance(batch, SplitText) else batch:
            parts.setdefault(assignment.owners[key_group(keys[port](record), K)], []).append(record)
        if isinstance(batch, SplitText):
            return [(owner, SplitText(" ".join(words))) for owner, words in parts.items()]
        return list(parts.items())

    return route


def spread(port: int, batch: Any, spread: int, assignment: KeyGroupAssignment) -> list[tuple[int, Any]]:
    """A pipeline input (a combiner's): the whole batch to whichever replica read it."""
    return [(spread % assignment.parallelism, batch)]


class Cluster:
    """The replicas of one vertex, fed messages, completing times, rescaled on demand."""

    def __init__(self, factory: Callable[[], Vertex], route: Router, parallelism: int, messages: list[Message]) -> None:
        self.factory, self.route = factory, route
        self.assignment = KeyGroupAssignment.contiguous(parallelism, K)
        self.contexts: list[RecordingContext] = []  # every replica's, retired ones too: all output counts
        self.replicas = [self._replica(r) for r in range(parallelism)]
        self.left = Counter(time for time, *_ in messages)  # messages each time still waits for

    def _replica(self, index: int) -> Vertex:
        context = RecordingContext()
        context.vertex, context.replica = "keyed", index
        self.contexts.append(context)
        return bound(self.factory(), context)[0]

    def deliver(self, message: Message) -> None:
        time, port, batch, which = message
        for replica, part in self.route(port, batch, which, self.assignment):
            self.replicas[replica].on_recv(port, part, time)
        self.left[time] -= 1
        while self.left and not self.left[first := min(self.left, key=tuple)]:
            del self.left[first]
            for vertex in self.replicas:  # those that asked (moved state asks at its new owner)
                context = vertex.context
                assert isinstance(context, RecordingContext)
                if first in context.notifications:
                    context.cancel_notify(first)
                    vertex.on_notify(first)

    def rescale(self, parallelism: int, rng: Random) -> None:
        """Move state to the owners of ``assignment.rescale(parallelism)``; the retiring replicas
        must be left with nothing."""
        new, moves = self.assignment.rescale(parallelism)
        groups: dict[tuple[int, int], set[int]] = {}
        for move in moves:
            groups.setdefault((move.from_replica, move.to_replica), set()).add(move.key_group)
        handed = []
        for source, vertex in enumerate(self.replicas):
            for target in range(parallelism):
                if source < parallelism:  # a survivor hands over the groups that change owner
                    chosen = groups.get((source, target), set())
                    moving = lambda key, chosen=chosen: key_group(key, K) in chosen  # noqa: E731
                else:  # a retiring replica hands every key it holds to its new owner
                    moving = lambda key, target=target: new.owners[key_group(key, K)] == target  # noqa: E731
                if source != target:
                    handed.append((target, cloudpickle.loads(cloudpickle.dumps(vertex.take_keys(moving)))))
                    assert holds_nothing(self.factory, vertex.take_keys(moving)), "take_keys left moving keys behind"
        for retired in self.replicas[parallelism:]:
            assert retired.snapshot() == self.factory().snapshot(), "a retiring replica kept state"
        self.replicas = self.replicas[:parallelism] + [self._replica(r) for r in range(len(self.replicas), parallelism)]
        for vertex in self.replicas:
            vertex.context.parallelism = parallelism
        self.assignment = new
        rng.shuffle(handed)
        for target, state in handed:
            self.replicas[target].put_keys(state)

    def sent(self) -> Sent:
        return [sent for context in self.contexts for sent in context.sent]


def holds_nothing(factory: Callable[[], Vertex], taken: Any) -> bool:
    """Whether state ``take_keys`` returned holds nothing: put into a fresh vertex, it leaves it empty."""
    fresh, _ = bound(factory())
    fresh.put_keys(taken)
    return bool(fresh.snapshot() == factory().snapshot())


def run(factory: Callable[[], Vertex], route: Router, messages: list[Message],
        parallelism: int = 1, rescale: tuple[int, int, Random] | None = None) -> Sent:
    """Everything sent by ``parallelism`` replicas fed ``messages``; ``rescale = (before, q, rng)``
    rescales to q replicas before message number ``before``."""
    cluster = Cluster(factory, route, parallelism, messages)
    for position, message in enumerate([*messages, None]):
        if rescale is not None and position == rescale[0]:
            cluster.rescale(rescale[1], rescale[2])
        if message is not None:
            cluster.deliver(message)
    assert not cluster.left, "every time completed"
    return cluster.sent()


# --------------------------------------------------------------------------- what is compared


def multiset(sent: Sent) -> Counter:
    """Every record sent, with its time."""
    return Counter((time, record) for time, batch in sent for record in batch)


def sums(sent: Sent) -> dict[Timestamp, Counter]:
    """``(key, value)`` partials added up per time and key."""
    out: dict[Timestamp, Counter] = {}
    for time, batch in sent:
        for key, value in batch:
            out.setdefault(time, Counter())[key] += value
    return out


def records(batch: Any) -> list:
    return batch.records() if isinstance(batch, SplitText) else batch


def pair_sums(messages: list[Message]) -> dict[Timestamp, Counter]:
    return sums([(time, records(batch)) for time, _, batch, _ in messages])


def word_counts(messages: list[Message]) -> dict[Timestamp, Counter]:
    return sums([(time, [(word, 1) for word in records(batch)]) for time, _, batch, _ in messages])


def running_total(state: int | None, record: tuple[str, int]) -> tuple[int | None, int]:
    """The key's total so far; a total of 0 forgets the key (returns None as the new state)."""
    total = (state or 0) + record[1]
    return (total or None), total


def running_totals(messages: list[Message]) -> Counter:
    """``stateful_map(running_total)``: time by time, within a time in arrival order."""
    totals: Counter = Counter()
    out: Counter = Counter()
    for time, _, batch, _ in sorted(messages, key=lambda message: tuple(message[0])):  # stable: arrival order kept
        for key, value in batch:
            totals[key] += value
            out[(time, (key, totals[key]))] += 1
    return out


def join_matches(messages: list[Message]) -> Counter:
    out: Counter = Counter()
    for time in {message[0] for message in messages}:
        left = [r for t, port, batch, _ in messages if t == time and port == 0 for r in batch]
        right = [r for t, port, batch, _ in messages if t == time and port == 1 for r in batch]
        out.update((time, (a[0], a, b)) for a in left for b in right if a[0] == b[0])
    return out


# --------------------------------------------------------------------------- the cases

keys = st.sampled_from([f"k{i}" for i in range(8)])
times = st.integers(0, 3).map(Timestamp)
pairs = st.lists(st.tuples(keys, st.integers(-3, 9)), min_size=1, max_size=6)
positive_pairs = st.lists(st.tuples(keys, st.integers(1, 9)), min_size=1, max_size=6)
partials = st.dictionaries(keys, st.integers(1, 9), min_size=1).map(lambda d: list(d.items()))  # a key once each
LONG = TALLY_MIN_CHARS // 6 + 1  # copies of a line of at least 6 characters and a space: a tally counts them
words = st.one_of(
    st.lists(st.sampled_from(["ox", "yak", "emu", "gnu"]), min_size=1, max_size=5),
    st.tuples(st.sampled_from(["ox yak", "emu ox ox"]), st.integers(LONG, 2 * LONG)).map(
        lambda line_times: flat_map_batch(str.split)([line_times[0]] * line_times[1])),
)


def messages(batches: st.SearchStrategy[Any], ports: int = 1) -> st.SearchStrategy[list[Message]]:
    """Messages in delivery order: by time, but a message may lag behind those of the next time
    (from a slower sender), so that some times are complete, with state kept across them,
    while others are still open."""
    lagging = st.tuples(st.integers(0, 2), times, st.integers(0, ports - 1), batches, st.integers(0, 11))
    return st.lists(lagging, min_size=4, max_size=16).map(
        lambda drawn: [message[1:] for message in sorted(drawn, key=lambda m: m[1].epoch + m[0])])


def same(word: str) -> str:
    return word


@dataclass(frozen=True)
class Case:
    """A vertex, how its input is routed, its messages, and how its output is judged.

    ``compare`` turns the output into what must be equal on P -> Q replicas and on one;
    ``summary`` turns one replica's output into what plain Python computes from the
    messages (``reference``).
    """

    factory: Callable[[], Vertex]
    route: Router
    messages: st.SearchStrategy[list[Message]]
    compare: Callable[[Sent], Any]
    summary: Callable[[Sent], Any]
    reference: Callable[[list[Message]], Any]


#: A combiner's ``max_keys``: small enough to ship some partials early, large enough to hold some.
COMBINED = 4
reduce_ = lambda max_keys=None: KeyedReduce(pair_key, operator.itemgetter(1), operator.add, max_keys)  # noqa: E731
CASES = {
    "stateful_map": Case(lambda: StatefulMap(pair_key, running_total), by_key(pair_key), messages(pairs),
                         multiset, multiset, running_totals),
    "reduce": Case(reduce_, by_key(pair_key), messages(positive_pairs), multiset, sums, pair_sums),
    "reduce combiner": Case(lambda: reduce_(COMBINED), spread, messages(positive_pairs), sums, sums, pair_sums),
    "count": Case(lambda: KeyedCount(same), by_key(same), messages(words), multiset, sums, word_counts),
    "count combiner": Case(lambda: KeyedCount(same, COMBINED), spread, messages(words), sums, sums, word_counts),
    "merge": Case(lambda: KeyedMerge(operator.add), by_key(pair_key), messages(partials), multiset, sums, pair_sums),
    "merge of spread partials": Case(lambda: KeyedMerge(operator.add), spread, messages(partials), sums, sums, pair_sums),
    "join": Case(lambda: EpochJoin(pair_key, pair_key), by_key(pair_key, pair_key), messages(pairs, ports=2),
                 multiset, multiset, join_matches),
}


#: Every change of parallelism up to 4, drawn uniformly (half of them scale in, where a survivor
#: may already hold a key it is handed).
SIZES = [(p, q) for p in range(1, 5) for q in range(1, 5)]


def cuts(feed: list[Message]) -> st.SearchStrategy[int]:
    """Where to rescale: often while a time is open (some of its messages delivered, some not),
    where the replicas hold per-time state, and anywhere at all."""
    last = {time: position for position, (time, *_) in enumerate(feed)}
    first = {time: position for position, (time, *_) in reversed(list(enumerate(feed)))}
    open_ = [cut for cut in range(len(feed)) if any(first[t] < cut <= last[t] for t in first)]
    anywhere = st.integers(0, len(feed))
    return st.one_of(st.sampled_from(open_), anywhere) if open_ else anywhere


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@settings(max_examples=60, deadline=None)  # the first long word batch imports pyarrow
@given(data=st.data())
def test_rescaled_anywhere_the_replicas_compute_what_one_does(case, data):
    feed = data.draw(case.messages, label="messages")
    before = data.draw(cuts(feed), label="rescale before message")
    p, q = data.draw(st.sampled_from(SIZES), label="P -> Q")
    rng = data.draw(st.randoms(use_true_random=False))
    one = run(case.factory, case.route, feed)
    assert case.summary(one) == case.reference(feed), "the oracle replica computes what plain Python does"
    rescaled = run(case.factory, case.route, feed, p, (before, q, rng))
    assert case.compare(rescaled) == case.compare(one)


# --------------------------------------------------------------------------- one replica's state


def fed(case: Case, data: st.DataObject) -> Vertex:
    """One replica of ``case`` fed a drawn prefix of drawn messages: some times completed, some
    open (the vertex holds their state)."""
    feed = data.draw(case.messages, label="messages")
    cluster = Cluster(case.factory, case.route, 1, feed)
    for message in feed[:data.draw(cuts(feed), label="delivered")]:
        cluster.deliver(message)
    return cluster.replicas[0]


def copied(state: Any) -> Any:
    return pickle.loads(pickle.dumps(state))


def without_empty_times(state: Any) -> Any:
    """A snapshot with the empty accumulators of its times dropped (a take drops them: harmless)."""
    if isinstance(state, dict) and all(isinstance(time, Timestamp) for time in state):
        return {time: held for time, held in state.items() if held}
    return state


def by_key_order(state: Any) -> Any:
    """A stateful map's waiting records per time and key, in arrival order: what its output
    depends on (a put appends the records of another replica's keys after this one's)."""
    if isinstance(state, dict) and "waiting" in state:
        waiting = {time: {key: [r for r in rs if pair_key(r) == key] for key in map(pair_key, rs)}
                   for time, rs in state["waiting"].items()}
        return {"state": state["state"], "waiting": waiting}
    return state


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_take_then_put_back_restores_the_snapshot(case, data):
    vertex = fed(case, data)
    before = copied(vertex.snapshot())
    chosen = data.draw(st.sets(st.integers(0, 3)), label="moving groups of 4")  # for any kind of key
    vertex.put_keys(copied(vertex.take_keys(lambda key: key_group(key, 4) in chosen)))
    assert by_key_order(vertex.snapshot()) == by_key_order(without_empty_times(before))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_taking_no_key_takes_nothing_and_putting_it_changes_nothing(case, data):
    vertex = fed(case, data)
    before = without_empty_times(copied(vertex.snapshot()))
    nothing = vertex.take_keys(lambda key: False)
    assert without_empty_times(vertex.snapshot()) == before
    vertex.put_keys(copied(nothing))
    assert without_empty_times(vertex.snapshot()) == before
    assert holds_nothing(case.factory, nothing)


def test_a_count_gathers_its_word_tally_into_the_keys_it_hands_over():
    """The words of a long SplitText wait in a tally, not in the counts; taking them must count them."""
    counter, _ = bound(KeyedCount(same))
    counter.on_recv(0, flat_map_batch(str.split)(["ox yak"] * LONG), Timestamp(0))
    assert counter.tallies, "held in the tally"
    assert counter.take_keys(lambda word: word == "ox") == {Timestamp(0): Counter(ox=LONG)}
    assert counter.snapshot() == {Timestamp(0): Counter(yak=LONG)}


def test_a_combiners_partials_of_one_key_fold_together():
    (counts, _), (reduced, _) = bound(KeyedCount(same, 10)), bound(reduce_(10))
    counts.on_recv(0, ["ox", "ox", "yak"], Timestamp(1))
    counts.put_keys({Timestamp(1): Counter(ox=3), Timestamp(2): Counter(emu=1)})
    assert counts.snapshot() == {Timestamp(1): Counter(ox=5, yak=1), Timestamp(2): Counter(emu=1)}
    reduced.on_recv(0, [("ox", 4)], Timestamp(1))
    reduced.put_keys({Timestamp(1): {"ox": 5, "yak": 1}})
    assert reduced.snapshot() == {Timestamp(1): {"ox": 9, "yak": 1}}


# --------------------------------------------------------------------------- a key's state lives on one replica


def test_a_stateful_map_refuses_the_state_of_a_key_it_holds_too():
    vertex = StatefulMap(pair_key, running_total)
    vertex.restore({"state": {"ox": 1, ("a", 1): 2}, "waiting": {}})
    with pytest.raises(RescaleError, match=r"StatefulMap.*key \('a', 1\).*held by two replicas"):
        vertex.put_keys({"state": {"emu": 3, ("a", 1): 5}, "waiting": {}})
    assert vertex.snapshot()["state"] == {"ox": 1, ("a", 1): 2}, "nothing of a refused state is taken in"


def test_a_join_refuses_records_of_a_key_it_holds_too_at_that_time():
    join = EpochJoin(pair_key, pair_key)
    bound(join)[0].on_recv(0, [("ox", 1)], Timestamp(0))
    join.put_keys({Timestamp(1): join_sides(right={"ox": [("ox", 2)]})})  # another time: no clash
    with pytest.raises(RescaleError, match=r"vertex 'v'.*key 'ox' at Timestamp\(0\) is held by two replicas"):
        join.put_keys({Timestamp(0): join_sides(right={"ox": [("ox", 3)]})})


def join_sides(left: dict | None = None, right: dict | None = None) -> tuple[dict, dict]:
    return defaultdict(list, left or {}), defaultdict(list, right or {})


def test_a_join_keeps_its_sides_defaultdicts_across_a_move():
    source, _ = bound(EpochJoin(pair_key, pair_key))
    target, context = bound(EpochJoin(pair_key, pair_key))
    source.on_recv(0, [("ox", 1)], Timestamp(0))
    target.put_keys(cloudpickle.loads(cloudpickle.dumps(source.take_keys(lambda key: True))))
    assert source.snapshot() == {}, "a time left without records goes"
    target.on_recv(1, [("ox", 2), ("emu", 3)], Timestamp(0))  # a new key on the moved side: needs the defaultdict
    assert context.sent == [(Timestamp(0), [("ox", ("ox", 1), ("ox", 2))])]


# --------------------------------------------------------------------------- the defaults


class Stateless(Vertex):
    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        self.send_by(0, message, time)


class Tally(Vertex):
    """A user's stateful vertex that says nothing of how its state splits."""

    def __init__(self) -> None:
        self.seen = 0

    def snapshot(self) -> int:
        return self.seen


@pytest.mark.parametrize("vertex", [Stateless(), BatchFunction(len)], ids=["user's", "built-in"])
def test_a_vertex_without_state_hands_over_nothing(vertex):
    assert vertex.take_keys(lambda key: True) is None
    vertex.put_keys(None)


def test_a_stateful_vertex_without_the_hooks_cannot_change_parallelism():
    with pytest.raises(RescaleError, match=r"'Tally' keeps state \(it overrides snapshot\(\)\) but does not "
                                           r"implement take_keys/put_keys"):
        Tally().take_keys(lambda key: True)
    running, context = bound(Tally())
    context.vertex = "tally_by_user"
    with pytest.raises(RescaleError, match="'tally_by_user' keeps state.*cannot be split when its parallelism changes"):
        running.put_keys(0)
