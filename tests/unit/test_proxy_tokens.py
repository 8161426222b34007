"""Proxy epoch tokens (``raytide.engine.epoch_tokens``: ``ProxyPlan`` on the driver's side,
``TokenBook`` on the receiver's) against what was really sent on each channel.

A model of one input's replicas feeding one receiver replica: every epoch some replicas get
records (in the call that moves them on, or in a call of their own before it), the driver's
``ProxyPlan`` says who moves quietly and who sends proxies, and each replica's channel carries
its data, its own token and the proxies it sends, in order. The channels deliver in any
interleaving (FIFO each), from the start or, as after a recovery, each from a replica's
restored position into a receiver that starts with no tokens. Safety: no record arrives on
a channel at an epoch the book has closed there. Liveness: once the input closes and
everything is delivered, every channel is closed.
"""

from __future__ import annotations

import random

import pytest

import raytide as rt
from raytide.engine import epoch_tokens
from raytide.engine.epoch_tokens import ProxyPlan, TokenBook
from raytide.errors import ProgressError
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import ChannelId, EpochClosed

TRIALS = 3000


def keyed_plan(parallelism: int) -> PhysicalPlan:
    flow = rt.Dataflow("proxies")
    flow.input("x").map(lambda x: x % 5).count_by_key(lambda k: k).output("counts")
    return compile_plan(flow, parallelism)


def receiver(plan: PhysicalPlan) -> tuple[str, list[ChannelId]]:
    """The vertex that takes the input chain's tokens, and its replica 0's channels."""
    [head] = epoch_tokens.receivers(plan)
    return head, plan.input_channels(head, 0)


def sent_events(rng: random.Random, width: int, epochs: int) -> list[list[list[tuple]]]:
    """Per replica, its calls' events in order, each the messages it put on its channel:
    ``("data", epoch)`` or ``("token", EpochClosed)``; the input closes at the end."""
    plan = ProxyPlan(width, allowed=True)
    events: list[list[list[tuple]]] = [[] for _ in range(width)]
    for epoch in range(epochs):
        fed = [replica for replica in range(width) if rng.random() < 0.4]
        alone = [replica for replica in fed if rng.random() < 0.3]  # a held push that went on its own
        for replica in alone:
            plan.pushed(replica)
            events[replica].append([("data", epoch)])
        carriers = [replica for replica in fed if replica not in alone]
        for replica, (quiet, proxies) in plan.close(epoch + 1, carriers).items():
            assert not (quiet and replica in fed), "a replica with records moved quietly"
            event = [("data", epoch)] if replica in carriers else []
            if not quiet:
                event += [("token", EpochClosed(epoch + 1))]
                event += [("token", EpochClosed(epoch + 1, other, after)) for other, after in proxies]
            events[replica].append(event)
    for replica, (quiet, _) in plan.close(None, []).items():
        assert not quiet
        events[replica].append([("token", EpochClosed(None))])
    return events


def deliver(rng: random.Random, book: TokenBook, channels: list[ChannelId], queues: list[list[tuple]]) -> None:
    """Deliver every message in a random interleaving, checking each record against the book."""
    positions = [0] * len(queues)
    while any(position < len(queue) for position, queue in zip(positions, queues)):
        replica = rng.choice([r for r, queue in enumerate(queues) if positions[r] < len(queue)])
        kind, what = queues[replica][positions[replica]]
        positions[replica] += 1
        channel = channels[replica]
        if kind == "data":
            closed = book.closed.get(channel, 0)
            assert closed is not None and what >= closed, (
                f"a record of epoch {what} arrived on {channel} after the book closed it below {closed}")
        else:
            book.record(channel, what)


@pytest.mark.parametrize("restored", [False, True], ids=["from the start", "from restored positions"])
def test_proxies_never_close_a_channel_ahead_of_its_records_and_every_channel_closes(restored):
    rng = random.Random(7)
    for width in (2, 3):
        plan = keyed_plan(width)
        head, channels = receiver(plan)
        source = sorted(channels, key=lambda channel: channel.sender)
        for trial in range(TRIALS):
            events = sent_events(rng, width, rng.randint(1, 8))
            cuts = [rng.randrange(len(mine)) if restored else 0 for mine in events]
            queues = [[message for event in mine[cut:] for message in event] for mine, cut in zip(events, cuts)]
            book = TokenBook(plan, head, 0)
            deliver(rng, book, source, queues)
            assert all(book.closed.get(channel, 0) is None for channel in source), (trial, book.closed, events)


def test_a_replica_pushed_to_since_its_token_is_not_proxied():
    plan = ProxyPlan(3, allowed=True)
    assert plan.close(1, [0]) == {0: (False, ()), 1: (False, ()), 2: (False, ())}  # no token known yet
    plan.pushed(2)
    assert plan.close(2, [0]) == {0: (False, ((1, 1),)), 1: (True, ()), 2: (False, ())}
    assert plan.close(3, []) == {r: (False, ()) for r in range(3)}  # nobody to carry proxies
    assert plan.close(4, [1]) == {0: (True, ()), 1: (False, ((0, 3), (2, 3))), 2: (True, ())}
    plan.reset()
    assert plan.close(5, [1]) == {r: (False, ()) for r in range(3)}
    assert ProxyPlan(2, allowed=False).close(1, [0]) == ProxyPlan(2, allowed=False).close(2, [0]) == {0: (False, ()), 1: (False, ())}


def test_proxies_only_where_every_replica_reaches_every_receiver_and_none_owes_a_token():
    assert epoch_tokens.proxying_inputs(keyed_plan(2)) == {"x"}
    assert epoch_tokens.proxying_inputs(keyed_plan(1)) == frozenset()  # one replica: nobody to proxy
    flow = rt.Dataflow("outputs")
    flow.input("x").map(lambda x: x).output("out")  # the chain hosts its output: no tokens
    assert epoch_tokens.proxying_inputs(compile_plan(flow, 2)) == frozenset()


def test_a_proxy_for_a_channel_the_receiver_does_not_take_is_an_error():
    plan = keyed_plan(2)
    head, channels = receiver(plan)
    book = TokenBook(plan, head, 0)
    with pytest.raises(ProgressError, match="not one of its token channels"):
        book.record(channels[0], EpochClosed(3, for_sender=5, after=2))
