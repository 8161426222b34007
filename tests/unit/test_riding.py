"""Where a replica's progress batches go (:mod:`raytide.engine.riding`): with its data to one
peer, or to the progress actor; the rules the Ray transport and the in-process runtime share."""

from __future__ import annotations

import itertools

from raytide.engine.riding import MAX_RIDING, Rides
from raytide.physical.protocol import Declaration, ProgressBatch, ReplicaKey, Sequenced

LOOP, OTHER = "loop", "other"
ME, PEER, THEIRS = ReplicaKey(LOOP, 0), ReplicaKey(LOOP, 1), ReplicaKey(OTHER, 0)
_numbers = itertools.count()


def batch(ack: bool = False, outputs: dict | None = None, sender: ReplicaKey = ME) -> Sequenced:
    return Sequenced(sender, next(_numbers), ProgressBatch([], ack, None, outputs))


def test_a_rounds_batch_rides_with_its_rows_to_its_one_peer_of_the_same_chain():
    rides = Rides(LOOP, tokens_ride=False)
    call = batch()
    assert rides.place(call, in_event=True, pending={PEER: None}) == ()
    assert rides.take(PEER) == [call] and rides.take(PEER) == []


def test_a_batch_goes_to_the_progress_actor_when_its_data_went_to_another_chain_or_to_two_peers_or_outside_an_event():
    rides = Rides(LOOP, tokens_ride=False)
    for in_event, pending in [(True, {THEIRS: None}), (True, {PEER: None, ReplicaKey(LOOP, 2): None}), (False, {PEER: None}),
                              (True, {})]:
        call = batch()
        assert rides.place(call, in_event, pending) == (call,)
    assert rides.riding == {}


def test_output_records_and_declarations_never_ride():
    rides = Rides(LOOP, tokens_ride=True)
    rides.sent(PEER, token=True)
    with_outputs = batch(outputs={"out": {0: [b"rows"]}})
    declaration = Sequenced(ME, next(_numbers), Declaration({}))
    assert rides.place(with_outputs, True, {PEER: None}) == (with_outputs,)
    assert rides.place(declaration, True, {PEER: None}) == (declaration,)


def test_an_inputs_batch_rides_with_the_first_token_that_went_with_data():
    rides = Rides(OTHER, tokens_ride=True)
    first, second = ReplicaKey(LOOP, 0), ReplicaKey(LOOP, 1)
    rides.sent(second, token=False)  # data to the second receiver
    rides.sent(first, token=True)  # a token to the first, which got no data: not it
    rides.sent(second, token=True)
    call = batch(sender=ReplicaKey(OTHER, 0))
    assert rides.place(call, True, {second: None, first: None}) == ()
    assert rides.take(second) == [call]
    rides.end_event()
    assert rides.token_peer is None and not rides.data_peers


def test_a_chain_whose_batch_may_not_go_with_its_tokens_keeps_no_token_peer():
    rides = Rides(OTHER, tokens_ride=False)
    rides.sent(PEER, token=True)
    assert rides.token_peer is None


def test_batches_passed_on_ride_again_until_there_are_max_riding_or_one_asks_for_an_acknowledgement():
    rides = Rides(LOOP, tokens_ride=False)
    carried = [batch(sender=PEER) for _ in range(MAX_RIDING - 1)]
    rides.carried(carried)
    own = batch()
    assert rides.place(own, True, {PEER: None}) == ()
    assert rides.take(PEER) == [*carried, own] and rides.passing_on == []

    rides.carried([batch(sender=PEER) for _ in range(MAX_RIDING)])
    assert len(rides.place(batch(), True, {PEER: None})) == MAX_RIDING + 1  # too many: all to the progress actor

    acked = batch(ack=True, sender=PEER)
    rides.carried([acked])
    assert rides.place(own, True, {PEER: None}) == (acked, own)


def test_two_batches_of_one_event_ride_together_in_order():
    rides = Rides(LOOP, tokens_ride=False)
    first, second = batch(ack=True), batch()
    rides.place(first, True, {PEER: None})
    rides.place(second, True, {PEER: None})
    assert rides.take(PEER) == [first, second]


def test_a_batch_whose_peer_got_its_data_before_it_is_stranded_for_the_progress_actor():
    rides = Rides(OTHER, tokens_ride=True)
    rides.sent(PEER, token=True)
    call = batch(sender=ReplicaKey(OTHER, 0))
    rides.place(call, True, {})  # a marker sent the token on: nothing pending for PEER
    assert rides.take_stranded() == [call] and rides.riding == {}


def test_what_is_passed_on_and_not_sent_on_is_taken_once():
    rides = Rides(LOOP, tokens_ride=False)
    carried = [batch(sender=PEER)]
    rides.carried(carried)
    assert rides.take_passing_on() == carried and rides.take_passing_on() == []
    rides.carried(carried)
    rides.reset()
    assert rides.passing_on == [] and rides.riding == {}


def test_kept_riders_go_once_every_channel_closed_their_epoch_or_with_the_replicas_next_message():
    """A receiver keeps what rode to it with tokens (``Rides.keep``): each batch goes on by
    itself once the epoch its token closed is closed on every channel, or before that with
    the replica's own next message, in the order it came."""
    rides = Rides(OTHER, tokens_ride=False)
    first, second = batch(sender=PEER), batch(sender=PEER)
    rides.carried([first])
    rides.keep(3)
    rides.carried([second])
    rides.keep(4)
    assert rides.take_passing_on(lambda until: False) == []
    assert rides.take_passing_on(lambda until: until is not None and until <= 3) == [first]
    own = batch(sender=THEIRS)
    assert rides.place(own, in_event=True, pending={}) == (second, own)
    assert rides.kept == [] and rides.take_passing_on() == []


def test_at_most_max_riding_batches_are_kept():
    rides = Rides(OTHER, tokens_ride=False)
    calls = [batch(sender=PEER) for _ in range(MAX_RIDING + 1)]
    for call in calls[:-1]:
        rides.carried([call])
        rides.keep(1)
    assert rides.take_passing_on(lambda until: False) == []
    rides.carried(calls[-1:])
    rides.keep(1)
    assert rides.take_passing_on(lambda until: False) == calls and rides.kept == []


def test_a_recovery_forgets_what_was_kept():
    rides = Rides(OTHER, tokens_ride=False)
    rides.carried([batch(sender=PEER)])
    rides.keep(None)
    rides.reset()
    assert rides.take_passing_on() == []
