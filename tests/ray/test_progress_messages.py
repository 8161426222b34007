"""Progress messages on a real local Ray: how many an epoch costs (the rounds through the
progress actor are most of an epoch's latency, so their number is pinned here), and output
parts too large to travel inline reaching the driver."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import raytide as rt
from raytide.core.keygroups import KeyGroupAssignment
from raytide.core.routing import column_key_groups
from raytide.graph import connected_components, edge_columns

pytestmark = pytest.mark.ray

EPOCHS = 30
#: Per epoch of the keyed pipeline below, at parallelism 2: a batch from each input replica
#: as it moves on and one from each merge replica with its counts, and no declaration: a
#: merge replica that has had a token on every channel leaves its wait to them (4.0
#: measured; 4.5-5.1 when a merge replica that got one input replica's records first
#: declared its wait, 6 before epoch tokens).
BATCHES_PER_EPOCH = 4.2
#: Per epoch: no status push. The merge replicas are notified by the input replicas' epoch
#: tokens (``raytide.engine.epoch_tokens``), and neither their waits nor the progress they
#: hold back until then are declared (0 measured; 0.4-0.9 while they were, 2 before the tokens).
PUSHES_PER_EPOCH = 0.2
#: Per epoch: Ray calls into the progress actor. The input replica with the epoch's records
#: sends its batch along with its tokens and data to a merge replica, which sends it on with
#: its own notified batch (``epoch_tokens.riders_may_wait``); the other input replica moves
#: quietly (its peer's proxy tokens close its channels: ``epoch_tokens.ProxyPlan``) and
#: sends its batch itself: one call per merge replica and one from the quiet replica, 3.0
#: measured. (2.0 while the quiet replica sent its batch with tokens of its own, two Ray calls
#: between replicas more; 2.66-3.0 and more before the merge replicas kept such batches,
#: 3.8-4.7 while they declared waits or every batch went in a call of its own.)
CALLS_PER_EPOCH = 3.1
#: Per epoch: Ray calls between replicas, the data and tokens of the input replica with the
#: records to each merge replica (2.0 measured; 4.0 while the other input replica sent each
#: its own token).
DATA_CALLS_PER_EPOCH = 2.1
#: Per epoch: the driver's Ray calls to the input replicas. The push is held back in the
#: driver and goes with the advance to its replica; the other replica gets the advance alone
#: (2.0 measured; 3.0 while the push had a call of its own).
INPUT_CALLS_PER_EPOCH = 2.0


def keyed() -> rt.Dataflow:
    flow = rt.Dataflow("rounds")
    flow.input("x").map(lambda x: x % 5).count_by_key(lambda k: k).output("counts")
    return flow


def run_epochs(job: rt.Job, results, epochs: range, expected: Callable[[int], list]) -> None:
    """Push, close and take each small epoch in turn, as a user waiting on each would."""
    for epoch in epochs:
        job.push("x", list(range(10)), epoch)
        job.advance("x", epoch + 1)
        got, records = next(results)
        assert (got, sorted(records)) == (epoch, expected(epoch))


def counts(epoch: int) -> list:
    """Each epoch's counts: ten records, two per key."""
    return [(k, 2) for k in range(5)]


def test_a_small_epoch_of_a_keyed_pipeline_takes_one_round_through_the_progress_actor(ray_session):
    with rt.run(keyed(), parallelism=2) as job:
        results = job.results("counts", timeout=120)
        run_epochs(job, results, range(1), counts)
        before = job.stats()
        run_epochs(job, results, range(1, 1 + EPOCHS), counts)
        after = job.stats()
        job.close("x")
    batches = after["progress_batches"] - before["progress_batches"]
    pushes = after["progress_pushes"] - before["progress_pushes"]
    calls = after["progress_calls"] - before["progress_calls"]
    input_calls = after["input_calls"] - before["input_calls"]
    data_calls = after["data_calls"] - before["data_calls"]
    assert input_calls <= INPUT_CALLS_PER_EPOCH * EPOCHS, f"{input_calls / EPOCHS:.2f} driver calls to the inputs per epoch"
    assert batches <= BATCHES_PER_EPOCH * EPOCHS, f"{batches / EPOCHS:.2f} progress batches per epoch"
    assert pushes <= PUSHES_PER_EPOCH * EPOCHS, f"{pushes / EPOCHS:.2f} status pushes per epoch"
    assert calls <= CALLS_PER_EPOCH * EPOCHS, f"{calls / EPOCHS:.2f} calls to the progress actor per epoch"
    assert data_calls <= DATA_CALLS_PER_EPOCH * EPOCHS, f"{data_calls / EPOCHS:.2f} calls between replicas per epoch"


#: Per round of a two-replica loop, at each replica: a fraction of a Ray call to the
#: progress actor. A round's progress (the receipt that completed it and what it sent,
#: shipped at once on a cycle) rides with its rows to the peer, which adds its own round's
#: and sends them on with its rows, up to ``MAX_RIDING`` batches, then to the progress
#: actor: about 0.2 calls (was 1.1 when every round's batch went on its own, 0.6 when a
#: batch rode one hop) ...
CALLS_PER_ROUND = 0.3
#: ... and no status push: a round runs once its rows and every replica's token are in
#: (``epoch_gate.round_complete``), not at a notification. The epoch's pushes are those of
#: its entry and its end, a few whatever its number of rounds.
PUSHES_PER_EPOCH_OF_ROUNDS = 8
PATH = 40


def alternating_path(length: int) -> np.ndarray:
    """``length`` increasing node ids from 0, each held by the other replica of two than the one
    before it: a round runs to its local fixpoint, so only an edge between replicas costs one."""
    owners = np.array(KeyGroupAssignment.contiguous(2).owners)[column_key_groups(np.arange(64 * length))]
    nodes = [0]
    while len(nodes) < length:
        nodes.append(nodes[-1] + 1 + int(np.argmax(owners[nodes[-1] + 1:] != owners[nodes[-1]])))
    return np.array(nodes, dtype=np.int64)


def test_a_round_of_a_loop_waits_for_no_push_and_costs_each_replica_a_fraction_of_a_call_to_the_progress_actor(
        ray_session):
    """Connected components on a path whose every edge joins the two replicas: about one round
    per edge, with one or two rows each.
    Only the epoch's entry runs at a notification (one per replica); every later round runs
    on the receipt that completes it."""
    flow = rt.Dataflow("rounds-in-a-loop")
    connected_components(flow.input("edges").map_batches(edge_columns), name="cc").output("labels")
    nodes = alternating_path(PATH + 1)
    path = np.stack([nodes[:0:-1], nodes[-2::-1]], axis=1)
    with rt.run(flow, parallelism=2) as job:
        results = job.results("labels", timeout=120, batch_format="numpy")
        job.push("edges", path[:1], 0)
        job.advance("edges", 1)
        next(results)
        before = job.stats()
        job.push("edges", path[1:], 1)
        job.advance("edges", 2)
        epoch, labels = next(results)
        after = job.stats()
        job.close("edges")
    assert epoch == 1 and sorted(map(tuple, labels.tolist())) == [(node, 0) for node in nodes.tolist()]
    notified = after["vertices"]["cc"]["notifications"] - before["vertices"]["cc"]["notifications"]
    batches = after["vertices"]["cc"]["batches_in"] - before["vertices"]["cc"]["batches_in"]
    pushes = after["progress_pushes"] - before["progress_pushes"]
    calls = after["progress_calls"] - before["progress_calls"]
    calls = after["progress_calls"] - before["progress_calls"]
    rounds = 2 * PATH  # at least: the label of node 0 travels one edge a round, at both replicas
    assert batches >= 2 * rounds, batches  # a token from each replica every round, at both
    assert notified == 2, notified  # the entry, at each replica
    assert pushes <= PUSHES_PER_EPOCH_OF_ROUNDS, f"{pushes} status pushes in an epoch of {rounds} rounds"
    assert calls <= CALLS_PER_ROUND * rounds, f"{calls / rounds:.2f} progress calls per round and replica"


def padded(i: int) -> tuple[int, str]:
    return i, "y" * 50_000


def large(epoch: int) -> list:
    """An epoch's records: 500 KB, far beyond what travels inline to the progress actor."""
    return [padded(i) for i in range(10)]


def test_output_parts_that_stay_in_the_object_store_reach_the_driver(ray_session):
    """Such a part is an object ref: it must travel as a Ray argument, so that Ray keeps it
    while the progress actor and the driver hold it, after the sink let go of it."""
    flow = rt.Dataflow("large-parts")
    flow.input("x").map(padded).output("out")
    with rt.run(flow, parallelism=2) as job:
        results = job.results("out", timeout=120)
        run_epochs(job, results, range(3), large)


def test_a_batch_kept_for_another_inputs_token_would_hang_a_branch_of_one_input(ray_session):
    """Input ``a`` feeds a count and a join with input ``b``; ``b`` has sent one token and
    then stays at epoch 1 while the driver waits for each of ``a``'s epochs at the count.
    The join takes tokens from two chains, so it keeps none of ``a``'s batches for ``b``'s
    next token (``epoch_tokens.riders_may_wait``): were it to, ``a``'s moves would wait at
    the join and the count's epochs would never complete (with that rule dropped, the
    second epoch times out)."""
    flow = rt.Dataflow("two-inputs")
    a, b = flow.input("a"), flow.input("b")
    a.join(b, lambda x: x, name="joined").output("j")
    a.count_by_key(lambda x: x, name="count").output("ca")
    with rt.run(flow, parallelism=2) as job:
        job.advance("b", 1)
        results = job.results("ca", timeout=20)
        for epoch in range(5):
            job.push("a", list(range(10)), epoch)
            job.advance("a", epoch + 1)
            got, records = next(results)
            assert (got, sorted(records)) == (epoch, [(k, 1) for k in range(10)])
        job.close("a")
        job.close("b")
