"""The calls a rewind hands over to be sent after it returns (:mod:`raytide.driver.input_replay`):
every input replica of the new incarnation gets the logged calls after its restored position,
in order, each once, and before any call made after the rewind, whether a feeder of its input,
a snapshot's flush or the replay thread sends them; a second rewind (a death during the replay)
drops what the first left pending. Checked against the call log itself: the calls a replica
gets are the log's from its position on, and no call reaches a handle of an earlier incarnation."""

from __future__ import annotations

import collections
import random
import threading
from dataclasses import dataclass

import pytest

import raytide as rt
from raytide.driver import inputs
from raytide.physical.plan import PhysicalPlan, compile_plan

INPUTS = ("x", "y")
WAIT = 10.0  # a deadline for the replay thread, never reached when it works


@dataclass(frozen=True)
class Handle:
    """Stands for an input replica's actor handle in one incarnation (the sender is the test's)."""

    name: str
    index: int
    incarnation: int


def handles(width: int, incarnation: int) -> dict[str, list[Handle]]:
    return {name: [Handle(name, index, incarnation) for index in range(width)] for name in INPUTS}


def plan_of(width: int) -> PhysicalPlan:
    flow = rt.Dataflow("replayed", parallelism=width)
    for name in INPUTS:
        flow.input(name).output(f"{name}_out")
    return compile_plan(flow)


def fed_feeds(width: int) -> tuple[inputs.InputFeeds, dict[Handle, list]]:
    """A job's inputs x and y of ``width`` replicas each, fed epochs 0-5; what each handle got."""
    feeds = inputs.InputFeeds(plan_of(width), handles(width, 0), max_inflight=1, batch_size=1,
                              raise_if_failed=lambda: None, keep_calls=1)
    feeds.held_pushes.held = lambda: None  # a held push goes with the call after it: no thread here
    got: dict[Handle, list] = collections.defaultdict(list)
    feeds.sender.send = lambda actor, method, args: got[actor].append((method, args))
    for name in INPUTS:
        feed(feeds, name, range(6))
    return feeds, got


def feed(feeds: inputs.InputFeeds, name: str, epochs: range) -> None:
    for epoch in epochs:
        feeds.push(name, [(name, epoch), (name, -epoch)], epoch)
        feeds.advance(name, epoch + 1)


def logged_after(feeds: inputs.InputFeeds, replica: tuple[str, int], position: int) -> list:
    """The replica's logged calls after ``position`` commands (nothing was trimmed: no commit)."""
    calls, skipped = list(feeds.logs[replica].calls), 0
    while calls and skipped < position:
        skipped += calls.pop(0)[0]
    return [(method, args) for _, method, args in calls]


def boundaries(feeds: inputs.InputFeeds, rng: random.Random) -> dict[tuple[str, int], int]:
    """A restored position per input replica, each at a call boundary of its log."""
    positions = {}
    for replica, log in feeds.logs.logs.items():
        weights = [weight for weight, _, _ in log.calls]
        positions[replica] = sum(weights[:rng.randrange(len(weights) + 1)])
    return positions


def rewind(feeds: inputs.InputFeeds, incarnation: int, width: int, positions: dict, thread: bool = False) -> None:
    if not thread:  # the feeders and flush send the pending calls: an order the test chooses
        feeds.replay._run = lambda *args: None  # type: ignore[method-assign]
    feeds.rewind(incarnation, handles(width, incarnation), positions, plan_of(width))


def assert_replayed(feeds: inputs.InputFeeds, got: dict[Handle, list], incarnation: int, width: int,
                    positions: dict) -> None:
    for name, mine in handles(width, incarnation).items():
        for handle in mine:
            assert got[handle] == logged_after(feeds, (name, handle.index), positions[(name, handle.index)]), handle
    assert not [handle for handle in got if handle.incarnation > incarnation], "a call to a handle not made yet"


@pytest.mark.parametrize("seed", range(12))
def test_a_feeder_sends_its_inputs_replay_first_and_a_second_rewind_drops_what_was_pending(seed):
    rng = random.Random(seed)
    width = rng.choice([1, 2, 3])
    feeds, got = fed_feeds(width)
    first = boundaries(feeds, rng)
    rewind(feeds, 1, width, first)
    assert not [handle for handle in got if handle.incarnation == 1], "the rewind sent calls itself"
    before = {handle: list(calls) for handle, calls in got.items()}
    feed(feeds, "x", range(6, 8))  # x's replay, then its new calls; y's replay still pending
    assert all(got[handle] == before.get(handle, []) for handle in handles(width, 1)["y"])
    for handle in handles(width, 1)["x"]:
        assert got[handle] == logged_after(feeds, ("x", handle.index), first[("x", handle.index)])
    if rng.random() < 0.5:  # a death during the replay: a recovery from positions of the log kept
        second = boundaries(feeds, rng)
        second[("y", 0)] = feeds.logs[("y", 0)].end  # nothing to replay to it: what the first left must go
        rewind(feeds, 2, width, second)
        feed(feeds, rng.choice(INPUTS), range(8, 9))
        feeds.flush()
        assert_replayed(feeds, got, 2, width, second)
    else:
        feeds.flush()  # before a snapshot the user asks for: every pending call goes
        assert_replayed(feeds, got, 1, width, first)


def test_with_no_feeder_the_replay_thread_sends_every_replay_in_order():
    feeds, got = fed_feeds(2)
    positions = boundaries(feeds, random.Random(0))
    rewind(feeds, 1, 2, positions, thread=True)
    assert feeds.replay.thread is not None
    feeds.replay.thread.join(WAIT)
    assert not feeds.replay.thread.is_alive() and feeds.replay.error is None
    assert_replayed(feeds, got, 1, 2, positions)
    assert not feeds.replay.pending


def test_a_commit_while_a_push_holds_an_input_returns_at_once_and_trims_that_input_at_the_next():
    """The pump's commit does not wait for an input another thread holds: a push waiting for its replica's
    window holds it, and a stopped replica opens none until the stall rule of that same pump has it killed
    (a job hung 480 s so in a full run). The held input is trimmed at the next commit, the other at once."""
    feeds, _ = fed_feeds(1)
    at = {replica: sum(weight for weight, _, _ in list(log.calls)[:2]) for replica, log in feeds.logs.logs.items()}
    with feeds.locks["x"]:
        commit = threading.Thread(target=feeds.commit, args=(1, at))
        commit.start()
        commit.join(WAIT)
        assert not commit.is_alive(), f"the commit waited {WAIT:g} s for input x's lock"
    assert (feeds.logs[("x", 0)].base, feeds.logs[("y", 0)].base) == (0, at[("y", 0)])
    feeds.commit(2, at)
    assert feeds.logs[("x", 0)].base == at[("x", 0)]
