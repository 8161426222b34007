"""The driver's wait for several actors' answers (``JobPlacement.wait``) when one of them fails:
the others that fail too are read, not left for Ray to report as unhandled errors when their
refs go (seen in a rescale whose replica was killed: a survivor's ``adopt`` of the pieces the
dead replica owned failed with ``OwnerDiedError`` after the dead one's own call had failed).
And its wait for events, which a watched actor's death ends at once (``DeathAlarm``); and its look at
the job while a consumer takes epochs shown already, which it makes as often as while one waits."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
import ray

import raytide as rt
from raytide.driver.event_link import EventLink
from raytide.driver.outputs import Liveness
from raytide.driver.placement import JobPlacement
from tests.delivery import assert_exactly_once
from tests.ray.jobs import SequenceFeed, next_in_sequence
from tests.ray.test_rescale_deaths import Unhandled

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
def fails_after(seconds: float) -> None:
    time.sleep(seconds)
    raise ValueError(f"failed after {seconds} s")


def test_a_wait_that_fails_reads_the_answers_that_fail_after_the_first(ray_session):
    unhandled = Unhandled()
    logging.getLogger("ray._private.worker").addHandler(unhandled)
    try:
        first = fails_after.remote(0.0)
        ray.wait([first], timeout=30)  # failed first whatever the load (two tasks started together may finish in any order)
        refs = [first, fails_after.remote(0.3)]
        with pytest.raises(ray.exceptions.RayTaskError, match="failed after 0.0 s"):
            JobPlacement.wait(SimpleNamespace(name="waits"), refs, "two calls")
        del refs
        gc.collect()  # an answer nobody read is reported as its ref goes
        time.sleep(1.0)
    finally:
        logging.getLogger("ray._private.worker").removeHandler(unhandled)
    assert not unhandled.errors, unhandled.errors


@ray.remote(num_cpus=0)
class Watched:
    """An actor whose ``watch`` does not return while it lives, as a host's does during its lease."""

    def watch(self) -> None:
        threading.Event().wait(60)


def test_a_death_ends_the_drivers_wait_for_events_and_the_next_look_sees_it(ray_session):
    actor = Watched.remote()
    liveness = Liveness({"watched": actor})
    link = EventLink(True, "woken")
    link.on = True  # subscribed: the driver waits for frames, which never come here
    liveness.alarm.wake = link.wake
    assert liveness.check() is None
    liveness.next_look = time.monotonic() + 60  # only the alarm lets the next look happen now
    started = time.monotonic()
    threading.Timer(0.2, ray.kill, [actor]).start()
    assert not link.wait(20)  # woken, with no frame
    assert time.monotonic() - started < 10, "the wait for events ran on after the watched actor died"
    dead = liveness.check()
    assert dead is not None and dead[0] == "watched"
    assert isinstance(dead[1], ray.exceptions.RayActorError)


def test_a_death_a_feed_met_first_is_named_by_the_next_look_and_reported_once(ray_session):
    """A feed's call into a dead replica fails (``ActorDiedError``) and hands the death to the
    watch (``Liveness.name``): the next look names that actor with the feed's error, whether or
    not its watch has ended yet, and never again when the watch ends. An error of an actor not
    watched, or without an actor id, is not named (the feed's error then fails the job). A named
    death whose actor a rescale retired before the look is left unclaimed: the job fails with the
    feed's error, which nothing else would report."""
    actor, other = Watched.remote(), Watched.remote()
    liveness = Liveness({"watched": actor, "other": other})
    assert liveness.check() is None
    liveness.next_look = time.monotonic() + 60  # only the alarm lets the next look happen now
    watch = liveness.watches["watched"]
    ray.kill(actor)
    with pytest.raises(ray.exceptions.RayActorError) as met:
        ray.get(actor.watch.remote(), timeout=30)  # the feed's call
    stranger = Watched.remote()
    ray.kill(stranger)
    with pytest.raises(ray.exceptions.RayActorError) as unwatched:
        ray.get(stranger.watch.remote(), timeout=30)
    failure = RuntimeError("feeding input 'numbers' failed")
    assert not liveness.name(unwatched.value, failure) and not liveness.name(ray.exceptions.RayActorError(), failure)
    assert liveness.name(met.value, failure)
    assert liveness.check() == ("watched", met.value) and liveness.unclaimed() == []
    assert ray.wait([watch], timeout=30)[0], "the dead actor's watch did not end"
    liveness.next_look = 0.0
    assert liveness.check() is None, "the death was reported twice"  # the watch's own end: not a second report
    assert liveness.unclaimed() == [], "a death its watch reported was reported again"

    retiring = Watched.remote()
    before = Liveness({"retiring": retiring, "other": other})
    assert before.check() is None
    ray.kill(retiring)
    with pytest.raises(ray.exceptions.RayActorError) as met:
        ray.get(retiring.watch.remote(), timeout=30)
    assert before.name(met.value, failure)
    after = Liveness({"other": other}, before)  # a rescale retired it before the driver's next look
    after.next_look = 0.0
    assert after.check() is None and after.unclaimed() == [failure] and after.unclaimed() == []


@pytest.mark.timeout(240)
def test_a_consumer_taking_a_backlog_still_pumps_a_death_is_recovered_before_it_catches_up(ray_session, tmp_path):
    """The job's events are taken by its consumer's calls. One that takes epochs shown already (a backlog)
    pumps as one that waits: a replica SIGKILLed meanwhile is recovered while epochs shown before the
    kill are still to be taken (a consumer slower than its job held off every recovery, and the end of a
    stepped rescale's steps with the snapshots it pauses, until it caught up: CI, 2026-12-01); exact."""
    feed = SequenceFeed(64, 2, 0.005)
    flow = rt.Dataflow("backlog-pumps")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    with rt.run(flow, {"records": feed.epochs()}, parallelism=2, recovery=rt.Recovery(str(tmp_path), interval=0.5)) as job:
        results = job.results("out", timeout=120)
        out = [next(results)]
        time.sleep(1.5)  # the job runs on: its epochs wait at the progress actor until the next call takes them
        out.append(next(results))
        backlog_end = job._outputs.latest()["out"]
        assert backlog_end - out[-1][0] > 30, (out[-1][0], backlog_end)
        os.kill(job.hosts()[f"{job.name}/check+out/0"], signal.SIGKILL)
        pause = 3.0 / (backlog_end - out[-1][0])  # the backlog taken in about 3 s: time to notice the death
        while out[-1][0] < backlog_end - 10:  # epochs shown before the kill: taken without a wait
            time.sleep(pause)
            out.append(next(results))
        assert job.stats()["recoveries"]["count"] == 1, f"not recovered by epoch {out[-1][0]} of {backlog_end}"
        out.append(next(results))
        feed.stop()
        job.wait(timeout=120)
        out += list(results)
    assert_exactly_once(feed.reference(), {"out": out})
