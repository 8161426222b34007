"""Pacing the in-process runtime (:mod:`raytide.testing.pacing`): actors picked by their
rates, the model's clock, and what an action is charged; and a paced job's output is the
same exact output."""

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
    assert mail.relayed == []


@pytest.mark.parametrize(("fast_ms", "slow_ms", "ratio"), [(1.0, 3.0, 3.0), (2.0, 2.0, 1.0)])
def test_actors_act_in_proportion_to_their_rates_whatever_their_mailboxes(fast_ms, slow_ms, ratio):
    mail, pacing = Mailboxes(), Pacing(receive_ms=1.0, submit_ms=1.0)
    pacing.busy_s.update({FAST: fast_ms / 1000, SLOW: slow_ms / 1000})  # one action each so far
    pacing.actions.update({FAST: 1, SLOW: 1})
    mailboxes = [functools.partial(_work, to=FAST, mail=mail) for _ in range(3)]  # three for FAST, one for SLOW
    mailboxes.append(functools.partial(_work, to=SLOW, mail=mail))
    rng, picked = random.Random(5), Counter()
    for _ in range(4000):
        before = pacing.clock_s
        picked[pacing.choose(mailboxes, rng, mail).args[0]] += 1  # not run: the means stay
        assert pacing.clock_s - before == pytest.approx(1 / (1000 / fast_ms + 1000 / slow_ms))  # the expected wait
    assert ratio * 0.9 < picked[FAST] / picked[SLOW] < ratio * 1.1


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
