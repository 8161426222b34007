"""The runtime's protocols in one process (raytide.testing.local): many seeded interleavings of
the same replica and progress cores that run on Ray, each checked against a plain-Python
reference, plus an oracle for the hold-back rule and injected crashes."""

from __future__ import annotations

import functools
import random
from collections import Counter

import pytest

import raytide as rt
from raytide.engine import settling as settling_module
from raytide.engine.holdback import HeldProgress
from raytide.engine.progress_runs import last_number
from raytide.physical.protocol import Cause, Marker, ReplicaKey
from raytide.progress.publisher import answers
from raytide.testing.local import LocalJob, ReplicaDied
from tests.sim.frontier_oracle import check_frontiers_cover_the_truth
from tests.sim.scenarios import SCENARIOS, Scenario, as_counters
from tests.sim.seeds import seeds

SEEDS = range(200)
#: Of those, the first seeds per scenario also run the hold-back rule's oracle at every step.
ORACLE_SEEDS = range(25)


def run_scenario(make, seed: int, **options) -> tuple[Scenario, LocalJob]:
    rng = random.Random(seed)
    scenario = make(rng)
    job = LocalJob(scenario.flow, scenario.inputs, parallelism=rng.randint(1, 3), seed=seed,
                   chaining=rng.random() < 0.8, **options)
    return scenario, job


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_interleaving_gives_the_reference_output(name):
    """Every seed's interleaving gives the plain-Python output; in the first
    :data:`ORACLE_SEEDS`, no frontier passes work that still exists at any step (the
    hold-back rule against an oracle of the true pointstamps)."""
    for seed in SEEDS:
        scenario, job = run_scenario(SCENARIOS[name], seed)
        run = job.run(after_step=check_frontiers_cover_the_truth if seed in ORACLE_SEEDS else None)
        assert run.failure is None and run.finished, f"seed {seed}: {run.failure}"
        assert as_counters(run.outputs) == scenario.expected, f"{name}, seed {seed}"


#: Seeds of the runs whose progress goes through a relay per node (1 to 4 nodes, a group's
#: relay per two nodes: on 3 and 4 nodes, two relays forward to others).
RELAYED_SEEDS = range(150)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_progress_relayed_per_node_gives_the_reference_output(name):
    """The replicas spread over nodes, each node's progress through one relay that delivers
    all it gathered in one call, in any order (as on a Ray cluster), some through a group's
    relay: every seed gives the plain-Python output, and in the first ten no frontier passes
    work that still exists."""
    for seed in RELAYED_SEEDS:
        scenario, job = run_scenario(SCENARIOS[name], seed, nodes=1 + seed % 4, relay_fanin=2)
        run = job.run(after_step=check_frontiers_cover_the_truth if seed < 10 else None)
        assert run.failure is None and run.finished, f"seed {seed}: {run.failure}"
        assert as_counters(run.outputs) == scenario.expected, f"{name}, seed {seed}"


def test_a_relay_gathers_its_nodes_messages_into_fewer_calls():
    """On one node, the progress core takes the replicas' messages in fewer calls through a
    relay than without (where the simulator already lets a call take a random few of one
    replica's messages, more than Ray would), over eight seeds."""
    totals = {None: [0, 0], 1: [0, 0]}  # calls, messages
    for seed in range(8):
        for nodes, total in totals.items():
            scenario, job = run_scenario(SCENARIOS["keyed"], seed, nodes=nodes)
            assert job.progress is not None
            applied = job.progress.receive_all
            taken: list[int] = []
            job.progress.receive_all = lambda batch, applied=applied, taken=taken: taken.append(len(batch)) or applied(batch)
            run = job.run()
            assert run.finished and as_counters(run.outputs) == scenario.expected
            total[0], total[1] = total[0] + len(taken), total[1] + sum(taken)
    (direct_calls, _), (relayed_calls, relayed_messages) = totals[None], totals[1]
    assert relayed_calls < 0.75 * direct_calls and relayed_calls < relayed_messages / 1.5, totals


def test_the_progress_actor_takes_one_call_at_a_time_so_busy_relays_gather_more():
    """The progress actor is one process: it takes one relay's call at a time while every
    replica goes on, so a relay gathers what its node sent meanwhile. At 8 nodes x 6
    replicas (three chains of 16) its calls carry 4.2 messages on average (3.7 at 8 x 8, before
    a stream read twice was fused; the simulator that served each relay's mailbox as if by a
    process of its own: 2.3), which the relay's runs merge into about 0.4 as many."""
    calls = messages = merged = 0
    for seed in range(3):
        scenario = SCENARIOS["keyed"](random.Random(seed))
        job = LocalJob(scenario.flow, scenario.inputs, parallelism=16, seed=seed, nodes=8)
        assert job.progress is not None and len(job.replicas) == 48  # 3 chains of 16: 6 replicas a node
        applied, taken = job.progress.receive_all, []
        job.progress.receive_all = lambda batch, applied=applied, taken=taken: taken.append(batch) or applied(batch)
        run = job.run()
        assert run.finished and as_counters(run.outputs) == scenario.expected
        calls += len(taken)
        messages += sum(last_number(call) - call.sequence + 1 for batch in taken for call in batch)
        merged += sum(map(len, taken))
    assert messages >= 3 * calls, (calls, messages)
    assert merged < 0.55 * messages, (merged, messages)


def test_with_groups_relays_the_progress_actor_takes_calls_from_them_alone_and_fewer(monkeypatch):
    """On 4 nodes with a group's relay per two, the progress core takes calls only from the
    two groups' relays (the first and third nodes'), fewer than from four relays, over 16 seeds."""
    from raytide.testing.mailboxes import Mailboxes

    take, callers = Mailboxes.take_progress, Counter()

    def counted(self, key, rng):
        callers[self.fanin, key] += 1
        return take(self, key, rng)

    monkeypatch.setattr(Mailboxes, "take_progress", counted)
    for seed in range(16):
        for fanin in (2, 4):
            scenario = SCENARIOS["keyed"](random.Random(seed))
            job = LocalJob(scenario.flow, scenario.inputs, parallelism=4, seed=seed, nodes=4, relay_fanin=fanin)
            run = job.run()
            assert run.finished and as_counters(run.outputs) == scenario.expected
    keys = job.replica_keys()
    grouped = {key for (fanin, key), count in callers.items() if fanin == 2 and count}
    assert grouped == {keys[0], keys[2]}, grouped
    calls = {fanin: sum(count for (f, _), count in callers.items() if f == fanin) for fanin in (2, 4)}
    assert calls[2] < 0.85 * calls[4], calls


def _loses_a_gathered_message(mailboxes):
    """A relay that drops one message of each call it makes to the progress actor (the last it gathered)."""
    take = mailboxes.take_progress

    def lossy(self, key, rng):
        taken = take(self, key, rng)
        return taken[:-1] if self.nodes is not None and len(taken) > 1 else taken
    return "take_progress", lossy


def _loses_a_forwarded_message(mailboxes):
    """A node's relay that drops the last message of each call it forwards to its group's relay."""
    def lossy(self, key, to):
        self.to_progress[to].extend(self._merged(key)[:-1])
    return "forward", lossy


def _loses_a_push(mailboxes):
    """A relay that drops the last push of each bundle of pushes it delivers."""
    fan_out = mailboxes.fan_out

    def lossy(self, to):
        incarnation, bundle = self.fan_outs[to][0]
        self.fan_outs[to][0] = (incarnation, bundle._replace(pushes=bundle.pushes[:-1]))
        fan_out(self, to)
    return "fan_out", lossy


#: Seeds of each planted relay's trials (the keyed scenario at widths 1 to 3).
TEETH_SEEDS = 12


@pytest.mark.parametrize(("planted", "nodes", "name"), [
    (_loses_a_gathered_message, {"nodes": 1}, "keyed"),
    (_loses_a_forwarded_message, {"nodes": 4, "relay_fanin": 2}, "keyed"),
    (_loses_a_push, {"nodes": 2}, "loop"),
], ids=lambda planted: getattr(planted, "__name__", ""))
def test_a_relay_that_loses_what_it_carries_is_caught(monkeypatch, planted, nodes, name):
    """Teeth: a relay that loses a message it carries, either way, leaves the job hanging
    or wrong, which the simulator reports in the first seeds already. A lost push shows
    where statuses drive the work, in a loop (1 of 12 keyed trials, its stream read twice
    fused since: in 12 of 12 loop trials)."""
    from raytide.testing.mailboxes import Mailboxes

    method, lossy = planted(Mailboxes)
    monkeypatch.setattr(Mailboxes, method, lossy)
    caught = 0
    for seed in range(TEETH_SEEDS):
        scenario, job = run_scenario(SCENARIOS[name], seed, **nodes)
        try:
            run = job.run()
            caught += not (run.finished and as_counters(run.outputs) == scenario.expected)
        except RuntimeError:  # "the job hangs"
            caught += 1
    assert caught >= TEETH_SEEDS * 2 // 3, caught


def test_seeds_choose_different_interleavings():
    traces = set()
    for seed in range(5):
        _, job = run_scenario(SCENARIOS["word count"], 0)
        job.rng.seed(seed)
        order: list[int] = []
        job.run(after_step=lambda j, order=order: order.append(sum(len(q) for q in j.mail.links.values())))
        traces.add(tuple(order))
    assert len(traces) == 5


# -- the hold-back rule, against an oracle of the true pointstamps -----------------------


def always_covered(cause, statuses, input_epochs):
    """A planted bug: the hold-back rule believes every cause is covered (deltas wait forever)."""
    return True


def covered_if_not_ready(cause, statuses, input_epochs):
    """A planted bug: a message counts as covered when its time is merely not ready (the
    status's first answer instead of its second), so a frontier held only by the held
    message itself never moves."""
    if cause.kind is Cause.CAPABILITY:
        return input_epochs.get(cause.location.vertex) == cause.time.epoch
    status = statuses.get(cause.location)
    return status is not None and not answers(status, cause.time)[0]


def take_retirements_only(held):
    """A planted bug: shipping a consumed message's -1 but holding back the +1s it caused."""
    held.causes.clear()
    held.forced = False
    changes = held.changes.drain()
    for pointstamp, delta in changes:
        if delta > 0:
            held.changes.update(pointstamp, delta)
    return [(pointstamp, delta) for pointstamp, delta in changes if delta < 0]


@pytest.mark.parametrize("plant", [
    lambda mp: mp.setattr(settling_module, "is_covered", always_covered),
    lambda mp: mp.setattr(settling_module, "is_covered", covered_if_not_ready),
    lambda mp: mp.setattr(HeldProgress, "take", take_retirements_only),
], ids=["always covered", "covered if not ready", "ships retirements only"])
def test_a_planted_bug_in_the_hold_back_rule_is_caught(monkeypatch, plant):
    plant(monkeypatch)
    caught = 0
    for seed in range(60):
        scenario, job = run_scenario(SCENARIOS["word count"], seed)
        try:
            run = job.run(after_step=check_frontiers_cover_the_truth, max_steps=20_000)
            caught += as_counters(run.outputs) != scenario.expected or not run.finished
        except (AssertionError, RuntimeError):  # a frontier passed real work, or the job hangs
            caught += 1
    assert caught > 0


# -- markers -------------------------------------------------------------------------------


class Tag(rt.Vertex):
    """Tags each record with the replica that processed it."""

    def on_recv(self, edge, message, time):
        self.send_by(0, [(r, self.replica) for r in message], time)


def test_a_marker_arrives_after_everything_sent_before_it():
    """Channels are FIFO for markers too (what snapshot barriers rely on): at a probe marker,
    the exchange's replicas together have received exactly the records sent before it."""
    for seed in SEEDS:
        rng = random.Random(seed)
        flow = rt.Dataflow("markers")
        flow.input("numbers").map(lambda x: x, name="copy").exchange(lambda x: x % 16, name="route") \
            .unary(Tag, name="tag").output("out")
        data = [[rng.randrange(1000) for _ in range(rng.randrange(8))] for _ in range(4)]
        switch = rng.randrange(len(data) + 1)  # the epoch before whose records the marker goes
        job = LocalJob(flow, {"numbers": data}, parallelism=2, seed=seed, chaining=rng.random() < 0.8,
                       markers={"numbers": [(switch, Marker(1))]})
        run = job.run()
        assert run.finished, f"seed {seed}: {run.failure}"
        for epoch, records in run.outputs["out"].items():
            assert Counter(v for v, _ in records) == Counter(data[epoch]), f"seed {seed} epoch {epoch}"
        before = sum(len(records) for records in data[:switch])
        seen = [dict((m.marker_id, m.records_in) for m in core.marker_log)
                for key, core in job.replicas.items() if "route" in key.chain]
        if switch < len(data):
            assert sum(s[1]["route"] for s in seen) == before, f"seed {seed}: records sent before the marker"


class DataAndControl(rt.Vertex):
    """Passes its data input on; its second input is bookkeeping (as a loop's tokens are)."""

    control_ports = frozenset({1})

    def on_recv(self, edge, message, time):
        if edge == 0:
            self.send_by(0, message, time)


def test_records_in_counts_a_vertexs_data_and_not_its_control_ports():
    """``records_in`` (job.stats(), the autoscaler's rates) leaves out batches on the ports a
    vertex names as control; they are still batches it received."""
    flow = rt.Dataflow("control")
    [out] = flow.vertex(DataAndControl, [flow.input("data"), flow.input("control")], name="mixed")
    out.output("out")
    job = LocalJob(flow, {"data": [[1, 2, 3], [4, 5]], "control": [[0] * 7, [0] * 11]}, parallelism=1, seed=0)
    assert job.run().finished
    [core] = [core for key, core in job.replicas.items() if "mixed" in key.chain]
    assert core.stats["mixed"].records_in == 5  # the 18 control records are not records
    assert core.stats["mixed"].batches_in == 5 + 18, "the simulator delivers a record a batch; both ports count"


# -- injected crashes ----------------------------------------------------------------------


def _note_finish(finished_at: list[int], job: LocalJob) -> None:
    if job.result.finished and not finished_at:
        finished_at.append(job.result.steps)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_crashed_replica_fails_the_job_and_the_epochs_completed_before_stay_right(name):
    crashed = 0
    for seed in seeds(100, f"crashed replica {name}"):
        scenario, job = run_scenario(SCENARIOS[name], seed)
        rng = random.Random(seed)
        victim, at_step = rng.choice(list(job.replicas)), rng.randrange(1, 60)
        job.crash(victim, at_step=at_step)
        finished_at: list[int] = []  # the step at which the driver saw the job finish
        run = job.run(after_step=functools.partial(_note_finish, finished_at))
        if run.finished and run.failure is None:
            assert finished_at[0] <= at_step, f"seed {seed}: the crash after step {at_step} did not come"
            continue  # the job finished before the crash came
        crashed += 1
        assert run.failure == ReplicaDied(victim, at_step), f"seed {seed}: {run.failure}"
        got = as_counters(run.outputs)
        for output, epochs in got.items():
            for epoch, counts in epochs.items():
                assert counts == scenario.expected[output][epoch], f"{name}, seed {seed}: completed epoch wrong"
    assert crashed >= 50, f"only {crashed} of 100 jobs were still running when their crash came"


def test_a_crash_drops_what_the_dead_replica_had_in_flight():
    _, job = run_scenario(SCENARIOS["word count"], 3)
    victim = ReplicaKey(job.plan.chain_of("lines").name, 0)
    job.crash(victim, at_step=10)
    run = job.run()
    assert isinstance(run.failure, ReplicaDied) and run.failure.key == victim
    # what was on its way to it is gone; what it sent stays on its way (and is dropped where it arrives)
    assert not any(receiver == victim and queue for (_, receiver), queue in job.mail.links.items())
    assert not job.mail.pushes[victim] and not job.mail.commands[victim]
