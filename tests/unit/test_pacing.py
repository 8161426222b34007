"""Pacing the in-process runtime (:mod:`raytide.testing.pacing`): actors as parallel servers
in a list schedule, the model's clock, and what an action is charged; and a paced job's
output is the same exact output."""

from __future__ import annotations

import functools
import random
import time
from collections import Counter

import pytest

import raytide as rt
from raytide.physical.protocol import ReplicaKey
from raytide.testing import LocalJob
from raytide.testing.mailboxes import Mailboxes
from raytide.testing.outcome import DRIVER, PROGRESS
from raytide.testing.pacing import Pacing, actor_of

FAST, SLOW = ReplicaKey("a", 0), ReplicaKey("a", 1)


def _work(to: object, mail: Mailboxes, sends: int = 0) -> None:
    mail.sent += sends


def test_an_action_is_done_by_the_actor_it_delivers_to_else_by_the_driver():
    assert actor_of(functools.partial(_work, to=FAST)) == FAST
    assert actor_of(functools.partial(_work, to=PROGRESS)) == PROGRESS
    assert actor_of(functools.partial(_work, "x")) == DRIVER and actor_of(lambda: None) == DRIVER


def test_an_action_is_charged_its_cpu_a_received_call_and_a_submitted_one_per_message_it_sent():
    mail, pacing = Mailboxes(), Pacing(receive_ms=0.5, submit_ms=0.25)
    pacing.choose([functools.partial(_work, to=FAST, mail=mail, sends=4)], random.Random(0), mail)()
    assert pacing.actions[FAST] == 1
    assert 0.0015 <= pacing.busy_s[FAST] < 0.0015 + 0.001  # 0.5 + 4 x 0.25 ms, and a little CPU


def test_a_relays_merge_is_charged_to_the_relay_not_to_the_progress_actor():
    mail, pacing = Mailboxes(nodes=1, relayed=[]), Pacing(receive_ms=0.0, submit_ms=0.0)

    def take_call(to: object) -> None:  # as Mailboxes.take_progress does: merge, and record what it cost
        started = time.process_time()
        sum(range(200_000))
        mail.relayed.append((FAST, time.process_time() - started))

    pacing.choose([functools.partial(take_call, to=PROGRESS)], random.Random(0), mail)()
    assert pacing.busy_s[FAST] > 0.001 and 0 <= pacing.busy_s[PROGRESS] < pacing.busy_s[FAST] / 10
    assert pacing.free_at[FAST] == pacing.busy_s[FAST]  # the relay's host was busy merging
    assert mail.relayed == []


def test_actors_work_in_parallel_each_one_action_at_a_time_whatever_its_mailboxes():
    mail, pacing = Mailboxes(), Pacing(receive_ms=1.0, submit_ms=1.0)
    fast = [functools.partial(_work, to=FAST, mail=mail) for _ in range(3)]  # three mailboxes: still one actor
    slow = functools.partial(_work, to=SLOW, mail=mail, sends=2)  # 1 + 2 ms an action
    rng = random.Random(5)
    while pacing.clock_s < 0.3:
        pacing.choose([*fast, slow], rng, mail)()
    assert pacing.clock_s == pytest.approx(0.3, abs=0.004)
    # each was busy all the time, one action at a time: 1 ms and 3 ms each (a little CPU besides)
    assert pacing.utilisation(FAST) == pytest.approx(1.0, abs=0.02) and pacing.utilisation(SLOW) == pytest.approx(1.0, abs=0.02)
    assert 2.7 < pacing.actions[FAST] / pacing.actions[SLOW] < 3.1  # by cost (and, here, by mailboxes too: the next test)


def test_an_actor_with_more_mailboxes_gets_no_more_time():
    mail, pacing = Mailboxes(), Pacing(receive_ms=1.0, submit_ms=1.0)
    actions = [functools.partial(_work, to=FAST, mail=mail) for _ in range(3)]
    actions.append(functools.partial(_work, to=SLOW, mail=mail))
    rng = random.Random(5)
    for _ in range(400):
        pacing.choose(actions, rng, mail)()
    # the same 1 ms an action each, so about 200 each (a choice by mailboxes would give 300 to 100); each
    # action is also charged the CPU it took, which a loaded machine inflates now and then (CI: 199 to 201)
    assert abs(pacing.actions[FAST] - pacing.actions[SLOW]) <= 8 and pacing.clock_s == pytest.approx(0.2, abs=0.003)


def test_an_actor_waits_for_the_last_action_to_start_and_an_idle_one_starts_at_once():
    mail, pacing = Mailboxes(), Pacing(receive_ms=1.0, submit_ms=1.0)
    rng = random.Random(0)
    pacing.choose([functools.partial(_work, to=SLOW, mail=mail, sends=9)], rng, mail)()  # busy for 10 ms
    for _ in range(5):
        pacing.choose([functools.partial(_work, to=FAST, mail=mail)], rng, mail)()  # meanwhile, 1 ms each
    assert pacing.free_at[FAST] == pytest.approx(0.005, abs=0.001) and pacing.clock_s == pytest.approx(0.010, abs=0.001)
    pacing.choose([functools.partial(_work, to=SLOW, mail=mail), functools.partial(_work, to=FAST, mail=mail)], rng, mail)()
    assert pacing.actions[FAST] == 6  # free at 5 ms: before SLOW at 10


def test_cpu_spent_on_measuring_an_action_is_not_charged():
    mail, pacing = Mailboxes(), Pacing(receive_ms=0.0, submit_ms=0.0)

    def measured(to: object) -> None:
        started = time.process_time()
        sum(range(200_000))
        pacing.untimed_s += time.process_time() - started

    pacing.choose([functools.partial(measured, to=FAST)], random.Random(0), mail)()
    assert pacing.busy_s[FAST] < 0.0005 and pacing.untimed_s == 0


def test_a_paced_job_gives_the_exact_output_and_its_clock_covers_the_central_actors_work():
    flow = rt.Dataflow("paced")
    flow.input("n").map(lambda x: (x % 5, 1)).count_by_key(lambda kv: kv[0]).output("out")
    inputs = {"n": [list(range(40)), list(range(40, 70))]}
    pacing = Pacing(receive_ms=0.3, submit_ms=0.2)
    run = LocalJob(flow, inputs, parallelism=3, seed=2, nodes=2, pacing=pacing).run()
    assert run.finished
    expected = {e: Counter((k, sum(1 for x in records if x % 5 == k)) for k in range(5))
                for e, records in enumerate(inputs["n"])}
    assert {e: Counter(found) for e, found in run.outputs["out"].items()} == expected
    assert pacing.actions[PROGRESS] > 0 and 0 < pacing.utilisation(PROGRESS) <= 1
    assert pacing.clock_s > 0


def test_the_driver_sends_epoch_e_at_e_feed_intervals_and_a_fed_job_takes_that_long():
    pacing = Pacing(receive_ms=0.3, submit_ms=0.2, feed_every_s=0.05)
    assert [pacing.sent_at(c) for c in [("push", "n", [1], 3), ("advance", "n", 4), ("advance", "n", None), ("marker", 0)]] == [
        pytest.approx(0.15), pytest.approx(0.15), 0.0, 0.0]
    flow = rt.Dataflow("fed")
    flow.input("n").map(lambda x: x + 1).output("out")
    inputs = {"n": [[e, e + 10] for e in range(5)]}
    run = LocalJob(flow, inputs, parallelism=2, seed=1, pacing=pacing).run()
    assert {e: sorted(found) for e, found in run.outputs["out"].items()} == {e: [e + 1, e + 11] for e in range(5)}
    assert 0.2 < pacing.clock_s < 0.25  # the last epoch is sent at 0.2 s, and done soon after
    at_once = Pacing(receive_ms=0.3, submit_ms=0.2)
    LocalJob(flow, inputs, parallelism=2, seed=1, pacing=at_once).run()
    assert at_once.clock_s < 0.05


def test_other_actors_can_be_made_faster_than_measured_but_not_the_progress_actor():
    mail, pacing = Mailboxes(), Pacing(receive_ms=1.0, submit_ms=1.0, others_scale=0.1)
    rng = random.Random(0)
    pacing.choose([functools.partial(_work, to=FAST, mail=mail)], rng, mail)()
    pacing.choose([functools.partial(_work, to=PROGRESS, mail=mail)], rng, mail)()
    assert pacing.busy_s[FAST] == pytest.approx(0.0001, abs=0.0001) and pacing.busy_s[PROGRESS] == pytest.approx(0.001, abs=0.0005)
