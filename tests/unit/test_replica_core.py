"""The replica core without Ray: a recording transport stands in for the actors."""

from __future__ import annotations

from collections import Counter
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.core import split_text
from raytide.engine.replica import ReplicaCore
from raytide.physical.plan import compile_plan
from raytide.physical.protocol import ChannelId, Declaration, EpochClosed, ProgressBatch, ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp


class Recorder:
    """A transport that keeps what the core sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Timestamp, Any]] = []
        self.tokens: list[tuple[Any, ChannelId, EpochClosed, int]] = []  # with how many batches were sent before
        self.flushes: list[tuple[list, bool, dict]] = []

        self.messages: list = []  # every message to the progress actor, in order

    def send(self, to, channel, vertex, time, batch, sequence=None):
        if isinstance(batch, EpochClosed):
            self.tokens.append((to, channel, batch, len(self.sent)))
        else:
            self.sent.append((time, batch))

    def send_marker(self, *args):
        raise AssertionError("no markers here")

    def to_progress(self, call):
        """Keeps each progress batch with the output records it carries."""
        self.messages.append(call.message)
        if isinstance(call.message, ProgressBatch):
            outputs = {name: {e: [r for part in parts for r in part] for e, parts in epochs.items()}
                       for name, epochs in (call.message.outputs or {}).items()}
            self.flushes.append((call.message.changes, call.message.ack, outputs))


def input_core(flow: rt.Dataflow) -> tuple[ReplicaCore, Recorder]:
    plan = compile_plan(flow, 1, True)
    transport = Recorder()
    return ReplicaCore(plan, plan.chain_of("words").name, 0, transport), transport


def test_a_combiner_ships_an_epoch_when_the_next_one_arrives_without_waiting_for_the_frontier():
    flow = rt.Dataflow("combine")
    flow.input("words").count_by_key(lambda w: w).output("counts")
    core, transport = input_core(flow)
    core.push_input("words", ["a", "b", "a"], 0)
    assert transport.sent == [], "epoch 0 may still grow: nothing is shipped yet"
    core.advance_input("words", 1)
    core.push_input("words", ["b"], 1)
    assert [(t, sorted(batch)) for t, batch in transport.sent] == [(Timestamp(0), [("a", 2), ("b", 1)])]
    core.on_progress({}, False)  # no frontier news: epoch 1 stays with the combiner
    assert len(transport.sent) == 1


def test_a_combiner_ships_an_epoch_as_soon_as_its_input_moves_on_and_the_last_one_when_it_closes():
    flow = rt.Dataflow("combine")
    flow.input("words").count_by_key(lambda w: w).output("counts")
    core, transport = input_core(flow)
    core.push_input("words", ["a", "b", "a"], 0)
    core.advance_input("words", 2)
    assert [(t, sorted(batch)) for t, batch in transport.sent] == [(Timestamp(0), [("a", 2), ("b", 1)])]
    core.push_input("words", ["b"], 2)
    core.advance_input("words", None)
    assert [(t, sorted(batch)) for t, batch in transport.sent][1:] == [(Timestamp(2), [("b", 1)])]


def test_an_input_moving_on_sends_every_count_replica_an_epoch_token_after_its_data():
    flow = rt.Dataflow("combine")
    flow.input("words").count_by_key(lambda w: w, name="count", parallelism=2).output("counts")
    core, transport = input_core(flow)
    core.push_input("words", ["a", "b", "a"], 0)
    core.advance_input("words", 1)
    core.advance_input("words", None)
    channel = ChannelId("count.combine", 0, 0, 0)
    sent_by_then = len(transport.sent)
    assert sent_by_then >= 1
    assert [(to, ch, token) for to, ch, token, _ in transport.tokens] == [
        (ReplicaKey("count", r), channel, EpochClosed(b)) for b in (1, None) for r in (0, 1)]
    assert all(before == sent_by_then for *_, before in transport.tokens), "every token after the epoch's data"


class HoldEpoch(rt.Vertex):
    """Keeps each epoch until notified: its chain may still send at an epoch its input left."""

    def on_recv(self, edge, message, time):
        self.notify_at(time)

    def on_notify(self, time):
        self.send_by(0, ["late"], time)


def test_an_input_whose_chain_waits_for_a_notification_owes_the_token_until_it_is_delivered():
    flow = rt.Dataflow("held")
    [held] = flow.vertex(HoldEpoch, [flow.input("words")], name="hold")
    held.count_by_key(lambda w: w).output("counts")
    core, transport = input_core(flow)
    core.push_input("words", ["a"], 0)
    core.advance_input("words", 2)
    assert transport.tokens == [], "hold may still send at epoch 0"
    ready = {Location.of_input(vertex, 0): [(Timestamp(2), False)] for vertex in core.chain.vertices[1:]}
    core.on_progress(ready, 0)  # epoch 0 is ready at hold, then at the combiner it sent "late" to
    sent_by_then = len(transport.sent)
    assert [(time, sorted(batch)) for time, batch in transport.sent] == [(Timestamp(0), [("late", 1)])]
    assert [token for _, _, token, before in transport.tokens] == [EpochClosed(2)], "owed, for the epoch it is at"
    assert transport.tokens[0][3] == sent_by_then, "after what the notification sent"
    core.on_progress({}, 0)
    assert len(transport.tokens) == 1, "paid once"


def shipped(transport: Recorder) -> Counter:
    """The net delta of every pointstamp the core has shipped so far."""
    net: Counter = Counter()
    for changes, _, _ in transport.flushes:
        for pointstamp, delta in changes:
            net[pointstamp] += delta
    return net


def test_a_combiner_behind_an_input_cancels_the_notifications_of_the_epochs_it_shipped():
    """Delivering them would take a round through the progress actor after the input moved
    on, and hold the merge after the exchange back meanwhile."""
    flow = rt.Dataflow("combine")
    flow.input("words").count_by_key(lambda w: w, name="count").output("counts")
    core, transport = input_core(flow)
    core.push_input("words", ["a", "b", "a"], 0)
    core.advance_input("words", 1)
    assert [(t, sorted(batch)) for t, batch in transport.sent] == [(Timestamp(0), [("a", 2), ("b", 1)])]
    assert not core.notifications.of("count.combine"), "no notification left pending"
    assert shipped(transport)[(Location.of_vertex("count.combine"), Timestamp(0))] == 0, "nothing holds the frontier there"


class Waits(rt.Vertex):
    """Keeps its records until its notification; a notification per time it got records."""

    def __init__(self) -> None:
        self.held: dict[Timestamp, list] = {}

    def on_recv(self, edge, message, time):
        if time not in self.held:
            self.notify_at(time)
        self.held.setdefault(time, []).extend(message)

    def on_notify(self, time):
        self.send_by(0, self.held.pop(time), time)


def test_an_input_replica_declares_what_its_vertices_wait_on_with_the_batch_of_its_next_move():
    """No answer can come while the input holds its epoch: a declaration then would be a message for nothing."""
    flow = rt.Dataflow("fused")
    flow.input("words").unary(Waits, name="waits").exchange(lambda w: w).output("out")
    core, transport = input_core(flow)
    core.push_input("words", ["a"], 0)
    core.push_input("words", ["b"], 0)
    assert transport.messages == [], "the input's epoch 0 keeps the notification from being due"
    core.advance_input("words", 1)
    [batch] = transport.messages
    assert isinstance(batch, ProgressBatch) and batch.interests == {Location.of_input("waits", 0): [(Timestamp(0), False)]}


def merge_core() -> tuple[ReplicaCore, Recorder]:
    """The replica of a count's merge (after the exchange), with its sink fused."""
    flow = rt.Dataflow("merge")
    flow.input("words").count_by_key(lambda w: w, name="count").output("counts")
    plan = compile_plan(flow, 1, True)
    transport = Recorder()
    return ReplicaCore(plan, plan.chain_of("count").name, 0, transport), transport


def test_a_replica_that_must_declare_a_new_notification_ships_what_it_holds_back_along_but_holds_back_the_rest():
    """The declaration goes anyway: the held -1 riding on it spares the frontier a round trip.
    Later -1s of that time are held back while covered, their wait declared once."""
    core, transport = merge_core()
    where, t0 = Location.of_input("count", 0), Timestamp(0)
    channel = ChannelId("count.combine", 0, 0, 0)
    core.on_progress({where: [(t0, True)]}, False)  # the frontier at t0 is held elsewhere: the -1 is covered
    core.on_messages([(channel, "count", t0, [("a", 2)])])
    [batch] = transport.messages
    assert not any(isinstance(m, Declaration) for m in transport.messages)
    assert isinstance(batch, ProgressBatch) and batch.interests == {where: [(t0, False)]}, "its notification's"
    assert dict(batch.changes) == {(where, t0): -1, (Location.of_vertex("count"), t0): 1}
    core.on_messages([(channel, "count", t0, [("b", 1)])])
    core.on_messages([(channel, "count", t0, [("c", 1)])])
    assert transport.messages[1:] == [Declaration({where: [(t0, True)]})], "held back while covered, its wait declared once"


def test_on_input_epoch_may_send_only_where_a_notification_is_pending():
    class Eager(rt.Vertex):
        def on_recv(self, edge, message, time):
            self.held = (time, message)
            if message[0] == "wait":
                self.notify_at(time)

        def on_input_epoch(self, epoch):
            self.send_by(0, self.held[1], self.held[0])

    flow = rt.Dataflow("eager")
    flow.input("words").unary(Eager, name="eager").exchange(lambda w: w).output("out")
    core, transport = input_core(flow)
    core.push_input("words", ["wait"], 0)
    core.advance_input("words", 1)
    assert transport.sent == [(Timestamp(0), ["wait"])]
    core, transport = input_core(flow)
    core.push_input("words", ["go"], 0)
    with pytest.raises(rt.RaytideError, match="'eager' replica 0 sent at .*0.* in on_input_epoch.*earlier than"):
        core.advance_input("words", 1)


def test_a_vertex_may_send_at_the_time_of_a_pending_notification_but_not_before_it():
    class Late(rt.Vertex):
        def on_recv(self, edge, message, time):
            if time.epoch == 1:
                self.notify_at(time)
            else:
                self.send_by(0, message, Timestamp(message[0]))

    flow = rt.Dataflow("late")
    flow.input("words").unary(Late, name="late").exchange(lambda w: w).output("out")
    core, transport = input_core(flow)
    core.push_input("words", [0], 0)
    core.advance_input("words", 1)
    core.push_input("words", [9], 1)
    core.advance_input("words", 2)
    core.push_input("words", [1], 2)  # at the pending notification's time: allowed
    assert transport.sent == [(Timestamp(0), [0]), (Timestamp(1), [1])]
    with pytest.raises(rt.RaytideError, match="'late' replica 0 sent at .*0.* while processing .*2.*earlier than"):
        core.push_input("words", [0], 2)


def test_output_records_travel_with_the_progress_batch_that_retires_them():
    flow = rt.Dataflow("sink")
    flow.input("words").map(str.upper).output("out")
    core, transport = input_core(flow)
    core.push_input("words", ["a", "b"], 0)
    changes, ack, outputs = transport.flushes[-1]
    assert outputs == {"out": {0: ["A", "B"]}} and not ack


class PassOn(rt.Vertex):
    """Passes every record on until its third iteration; records what it saw."""

    def __init__(self):
        self.seen = []

    def on_recv(self, edge, message, time):
        self.seen.append((edge, time.counters, list(message)))
        if time.counters[-1] < 2:
            self.send_by(0, [x + 1 for x in message], time)


def self_loop_core() -> tuple[ReplicaCore, Recorder]:
    """One replica of a loop whose vertex feeds itself (the feedback fused into its actor)."""
    flow = rt.Dataflow("self-loop")
    loop = flow.loop("l")
    back = loop.feedback(name="back")
    onward, done = flow.vertex(PassOn, [loop.enter(flow.input("x"), name="in"), back.stream], outputs=2,
                               exchange=[lambda x: x] * 2, name="step")
    back.connect(onward)  # one consumer per output: the feedback is fused into the vertex's actor
    loop.leave(done).output("out")
    plan = compile_plan(flow, 1, True)
    transport = Recorder()
    return ReplicaCore(plan, plan.chain_of("step").name, 0, transport), transport


def test_a_feedback_routed_back_to_its_own_replica_skips_the_transport_and_nets_out_in_progress():
    core, transport = self_loop_core()
    core.on_messages([(ChannelId("in", 0, 0, 0), "step", Timestamp(0, (0,)), [5, 7])])
    vertex = core.vertices["step"]
    assert vertex.seen == [(0, (0,), [5, 7]), (1, (1,), [6, 8]), (1, (2,), [7, 9])]
    assert transport.sent == [], "the feedback's batches went back to this replica without the transport"
    assert core.snapshot_stats()["local_sends"] == 2
    shipped: dict = {}
    for changes, _, _ in transport.flushes:
        for pointstamp, delta in changes:
            shipped[pointstamp] = shipped.get(pointstamp, 0) + delta
    fed_back = [p for p, d in shipped.items() if d and p[0].vertex == "step" and p[1].counters[-1] > 0]
    assert fed_back == [], f"a self-sent batch's +1 and -1 cancel before progress is shipped: {fed_back}"


def test_batches_that_arrived_together_are_one_event_with_one_progress_message():
    """What another replica sent in one event comes in one call (``on_messages``): each batch is
    taken in order as if alone, and the replica, on a cycle (it ships after every event), ships once."""
    channel, t0 = ChannelId("in", 0, 0, 0), Timestamp(0, (0,))
    together, together_sent = self_loop_core()
    together.on_messages([(channel, "step", t0, [5]), (channel, "step", t0, [7])])
    apart, apart_sent = self_loop_core()
    apart.on_messages([(channel, "step", t0, [5])])
    apart.on_messages([(channel, "step", t0, [7])])
    assert sorted(together.vertices["step"].seen) == sorted(apart.vertices["step"].seen)
    assert together.vertices["step"].seen[:2] == [(0, (0,), [5]), (0, (0,), [7])], "both taken before the rest"
    assert len(together_sent.messages) == len(apart_sent.messages) - 1


@settings(max_examples=40, deadline=None)
@given(epochs=st.lists(st.lists(st.sampled_from(["a", "A", "b", "B", "ab"]), max_size=8), min_size=1, max_size=4))
@pytest.mark.parametrize("key", [lambda w: w, str.lower, lambda w: w[0]], ids=["identity", "builtin", "lambda"])
def test_a_count_combiner_ships_the_reference_counts_per_epoch_whatever_the_key(key, epochs):
    flow = rt.Dataflow("combine")
    flow.input("words").count_by_key(key).output("counts")
    core, transport = input_core(flow)
    for epoch, words in enumerate(epochs):
        core.advance_input("words", epoch)
        core.push_input("words", words, epoch)
    core.advance_input("words", len(epochs))
    core.push_input("words", ["next"], len(epochs))  # a later epoch ships every earlier one
    shipped = {t.epoch: dict(batch) for t, batch in transport.sent}
    assert shipped == {e: dict(Counter(map(key, words))) for e, words in enumerate(epochs) if words}


#: Lines of words and whitespace of every kind, lone surrogates included (Arrow cannot hold those).
lines = st.text(alphabet=st.one_of(st.sampled_from(" \t\n\x1c\u2028\u3000abc\u00e9"), st.characters()), max_size=15)


@settings(max_examples=40, deadline=None)
@given(epochs=st.lists(st.lists(lines, max_size=6), min_size=1, max_size=3), tally_words=st.sampled_from([1, 4, 1 << 20]),
       min_chars=st.sampled_from([0, 12, split_text.TALLY_MIN_CHARS]))
def test_word_count_ships_the_reference_counts_per_epoch_however_often_its_tally_is_counted(epochs, tally_words, min_chars):
    flow = rt.Dataflow("wordcount")
    flow.input("words").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    core, transport = input_core(flow)
    with mock.patch.object(split_text, "TALLY_WORDS", tally_words), mock.patch.object(split_text, "TALLY_MIN_CHARS", min_chars):
        for epoch, batch in enumerate(epochs):
            core.advance_input("words", epoch)
            for line in batch:  # one batch per line: the tally holds several
                core.push_input("words", [line], epoch)
        core.advance_input("words", None)
    shipped: dict[int, Counter] = {}
    for time, pairs in transport.sent:
        shipped.setdefault(time.epoch, Counter()).update(dict(pairs))
    assert shipped == {e: Counter(" ".join(batch).split()) for e, batch in enumerate(epochs) if " ".join(batch).split()}


def test_a_snapshot_of_word_count_holds_the_words_still_waiting_in_its_tally():
    flow = rt.Dataflow("wordcount")
    flow.input("words").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    core, _ = input_core(flow)
    core.advance_input("words", 0)
    with mock.patch.object(split_text, "TALLY_MIN_CHARS", 0):
        core.push_input("words", ["a b a", "c \u2028 a"], 0)
    combiner = next(v for name, v in core.vertices.items() if name.endswith(".combine"))
    assert combiner.snapshot() == {Timestamp(0): Counter({"a": 3, "b": 1, "c": 1})}


class _Lists(rt.Vertex):
    """A user's vertex: keeps the type of every message it gets."""

    def __init__(self) -> None:
        self.kinds: list[type] = []

    def on_recv(self, edge, message, time):
        self.kinds.append(type(message))
        self.send_by(0, message, time)


def test_a_users_vertex_after_flat_map_of_str_split_gets_a_plain_list_of_words():
    flow = rt.Dataflow("words")
    flow.input("words").flat_map(str.split).unary(_Lists).output("out")
    core, transport = input_core(flow)
    core.advance_input("words", 0)
    core.push_input("words", ["a b", "c"], 0)
    (user,) = [v for v in core.vertices.values() if isinstance(v, _Lists)]
    assert user.kinds == [list]
    assert [outputs for _, _, outputs in transport.flushes if outputs] == [{"out": {0: ["a", "b", "c"]}}]
