"""The progress actor's events pushed to the driver by socket (:mod:`raytide.actors.event_feed`,
:mod:`raytide.driver.event_link`), with real sockets and no Ray: what leaves the progress
actor's log and when, a hint's events kept for the driver's poll, the frames of an older
subscription dropped, and the driver taking each event once, in order."""

from __future__ import annotations

import threading

import raytide as rt
from raytide.actors.event_feed import EventFeed
from raytide.actors.progress_actor import ProgressActor
from raytide.actors.socket_hops import Inbound, Outbound
from raytide.driver.event_link import EventLink
from raytide.driver.outputs import OutputCollector
from raytide.physical.plan import compile_plan
from raytide.physical.protocol import EpochComplete, JobFinished, OutputFrontier


def _linked() -> tuple[EventLink, EventFeed]:
    link = EventLink(True, "feed")
    link.inbound = Inbound("feed/driver", link._delivered)
    link.on = True
    feed = EventFeed()
    feed.link, feed.token = Outbound("the driver", link.inbound.path), link.token
    return link, feed


def _taken(link: EventLink, count: int) -> list:
    frames: list = []
    while sum(n for _, n, _ in frames) < count and link.wait(10):
        frames += link.take()
    return frames


def _progress_actor(feed: EventFeed) -> ProgressActor:
    flow = rt.Dataflow("feed")
    flow.input("x").output("out")
    plan = compile_plan(flow, 1)
    actor = ProgressActor(plan.graph, plan.outputs, plan.initial_pointstamps())
    actor.feed = feed
    return actor


def test_events_written_leave_the_log_and_a_hint_keeps_them_until_the_poll_hands_them_over():
    link, feed = _linked()
    actor = _progress_actor(feed)
    try:
        actor._log([OutputFrontier("out", 1)])
        assert actor.events == [] and actor.first == 1  # in the driver's socket: read
        unpicklable = EpochComplete("out", 1, [threading.Lock()])  # its frame goes without a body: a hint
        actor._log([unpicklable])
        actor._log([OutputFrontier("out", 2)])
        assert actor.first == 1 and len(actor.events) == 2  # kept for the poll
        frames = _taken(link, 3)
        assert [(first, count, events is None) for first, count, events in frames] == [(0, 1, False), (1, 1, True), (2, 1, False)]
        events, end = actor.next_events(1, 0.0)
        assert events[1] == OutputFrontier("out", 2) and end == 3
        actor._log([JobFinished()])
        assert actor.events == [] and actor.first == 4  # the poll had them: written ones leave again
    finally:
        link.close()
        feed.close()


def test_the_driver_takes_each_event_once_in_order_and_drops_an_older_subscriptions_frames():
    link, feed = _linked()
    collector = OutputCollector(None, ["out"])
    collector.link.close()
    collector.link = link
    collector.open(0)
    collector.open(1)
    try:
        feed.send(0, [OutputFrontier("out", 1)])
        feed.send(0, [OutputFrontier("out", 1), OutputFrontier("out", 2)])  # a poll's and the socket's at once
        assert collector.wait(None, 10)  # subscribed: the frames are waited for, not a poll's answer
        _taken_into(collector, 2)
        assert collector.cursor == 2 and collector.epochs("out") == [0, 1]
        assert collector._fresh(5, [JobFinished()]) == [] and collector.cursor == 2  # after a gap: the frames bring it
        link.drop()
        feed.send(2, [JobFinished()])  # of the old token: dropped
        link.on = True
        feed.token = link.token
        feed.send(2, [OutputFrontier("out", 3)])
        assert _taken(link, 1) == [(2, 1, [OutputFrontier("out", 3)])]
    finally:
        link.close()
        feed.close()


def _taken_into(collector: OutputCollector, cursor: int) -> None:
    while collector.cursor < cursor and collector.link.wait(10):
        collector._pushed(0.0)
