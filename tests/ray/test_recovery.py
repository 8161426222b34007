"""Recovery on a real Ray: actors of a running job are really killed (``ray.kill``, or SIGKILL
of the actor's worker process, which is what a crash looks like) after at least two
committed snapshots, and the job's output must equal the failure-free reference exactly:
every epoch handed over once, with its records."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.dataset as ds
import pytest
import ray

import raytide as rt
from raytide.driver.recovery_runtime import RayRecovery
from raytide.integrations.parquet import write_parquet
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.store import SnapshotStore
from tests.delivery import Handed, assert_exactly_once, read_outputs
from tests.ray.jobs import Brake, as_multisets, committed_snapshots, counting_words, text_parts, wait_for_epoch
from tests.sim.scenarios import SCENARIOS, Scenario, with_input_width
from tests.sim.test_output_commit_sim import chain_breaks, chained_flow

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]

EPOCHS = 30
PACE = 0.02  # seconds between epochs fed (the kills wait at gates in the feed, see run_and_kill)


def sigkill(job: rt.Job, name: str) -> None:
    """SIGKILL the worker process of ``job``'s host ``name`` (``job/chain/replica``, ``job/progress``...)."""
    os.kill(job.hosts()[f"{job.name}/{name}"], signal.SIGKILL)


def a_replica(job: rt.Job, rng: random.Random) -> ReplicaKey:
    """A random replica among those that surely still get work (an input's: every epoch is
    dealt to all of them), so that the job cannot finish without noticing its death."""
    return rng.choice(sorted(key for key in job.placement.actors if any(name in key.chain for name in job.plan.inputs)))


def run_and_kill(scenario: Scenario, tmp_path, kills: list[Callable[[rt.Job], None]], *, after_snapshots: int = 2,
                 max_restarts: int = 3, interval: float = 0.1, then_committed: int = 0,
                 consume: Callable[[rt.Job, str], dict[int, list]] | None = None, store: str | None = None,
                 output_commit: str = "epoch", alone: bool = False, **settings: Any) -> tuple[dict[str, Handed], dict[str, Any]]:
    """Run ``scenario`` with recovery, feeding its inputs at a pace; at a third (and, for a
    second kill, two thirds) of the epochs the feeding waits until ``after_snapshots`` more
    snapshots are committed and makes the next kill, so that every kill strikes while the
    job still has work for every replica. Returns every output's ``(epoch, records)`` in the
    order ``job.results`` handed them over (:func:`tests.delivery.read_outputs`), and the
    job's stats at its end (once ``then_committed`` snapshots are).
    ``consume(job, output)`` takes the first output instead of ``job.results`` (a sink);
    ``store`` is where snapshots go (default: a directory under ``tmp_path``); ``alone``:
    ``Recovery(alone=)``, numbered sends where the plan has a replica the rule recovers alone;
    ``settings``: more ``rt.Recovery`` settings (``upstream_log_cap``)."""
    recovery = rt.Recovery(store or str(tmp_path / "store"), interval=interval, max_restarts=max_restarts,
                           output_commit=output_commit, alone=alone, **settings)  # type: ignore[arg-type]
    started = threading.Event()
    holder: list[rt.Job] = []
    pending = list(kills)
    gates = {EPOCHS * (i + 1) // (len(kills) + 1) for i in range(len(kills))}

    def committed() -> int:
        return committed_snapshots(holder[0])

    def feed(epochs: list[list[Any]], kills_here: bool) -> Iterator[list[Any]]:
        wanted = after_snapshots
        for epoch, records in enumerate(epochs):
            if kills_here and epoch in gates:
                assert started.wait(60)
                deadline = time.monotonic() + 60
                while committed() < wanted:
                    assert time.monotonic() < deadline, "no snapshot was committed in 60 s"
                    time.sleep(0.05)
                wanted = committed() + after_snapshots
                pending.pop(0)(holder[0])
            time.sleep(PACE)
            yield records

    first = sorted(scenario.inputs)[0]
    inputs = {name: feed(epochs, name == first) for name, epochs in scenario.inputs.items()}
    outputs = sorted(scenario.expected)
    with rt.run(scenario.flow, inputs=inputs, parallelism=2, recovery=recovery) as job:
        holder.append(job)
        started.set()
        got = {outputs[0]: sorted(consume(job, outputs[0]).items())} if consume is not None else {}
        got.update(read_outputs(job, [name for name in outputs if name not in got]))
        assert not pending, "not every kill was made"
        deadline = time.monotonic() + 60
        while committed_snapshots(job) < then_committed:
            assert time.monotonic() < deadline, f"fewer than {then_committed} snapshots committed in 60 s"
            time.sleep(0.05)
        return got, job.stats()


def check(scenario: Scenario, got: dict[str, Handed]) -> None:
    """Every output got every record of the reference once, its epochs in order."""
    assert_exactly_once(scenario.expected, got)


def scenario(name: str, seed: int = 1) -> Scenario:
    return SCENARIOS[name](random.Random(seed), epochs=EPOCHS)


@pytest.mark.parametrize("commit", ["epoch", "snapshot"])
def test_a_killed_replica_is_replaced_and_the_output_is_exactly_the_failure_free_one(ray_session, tmp_path, commit):
    keyed = scenario("keyed")
    rng = random.Random(3)
    got, stats = run_and_kill(keyed, tmp_path, [lambda job: ray.kill(job.placement.actors[a_replica(job, rng)])],
                              output_commit=commit)
    check(keyed, got)
    recoveries = stats["recoveries"]
    assert recoveries["count"] == 1 and recoveries["recoveries"][0]["snapshot_id"] >= 2
    assert len(recoveries["recoveries"][0]["replaced"]) == 1


def test_committed_at_snapshots_output_that_depends_on_arrival_order_survives_a_kill(ray_session, tmp_path):
    """Each record linked to the one a replica saw before it, which may differ in every run:
    committed at snapshots, the output stays one chain across a real kill. (On Ray a replay
    often sees the same order again, so this does not tell the two modes apart; the seeded
    trials in tests/sim/test_output_commit_sim.py show per-epoch commit breaking the chain.)"""
    numbers = iter(range(100_000))
    inputs = [[next(numbers) for _ in range(20)] for _ in range(EPOCHS)]
    chain = Scenario("chain", chained_flow(), {"records": inputs}, {"links": {}})
    rng = random.Random(5)
    got, stats = run_and_kill(chain, tmp_path, [lambda job: sigkill(job, "{}/{}".format(*a_replica(job, rng)))],
                              output_commit="snapshot")
    links = dict(got["links"])
    assert len(links) == len(got["links"]), "an epoch handed over twice"
    assert chain_breaks(links, inputs) is None, chain_breaks(links, inputs)
    assert stats["recoveries"]["count"] == 1


def coordinator_figures(job: rt.Job) -> dict[str, Any]:
    """The snapshot coordinator's figures alone (``job.stats()`` also asks every replica,
    which a stopped one does not answer)."""
    return ray.get(job._recovery.coordinator.stats.remote(), timeout=30)


@pytest.mark.parametrize("moment", ["before its part is written", "as a snapshot commits"])
def test_a_kill_while_a_snapshot_is_being_taken(ray_session, tmp_path, moment):
    """Killed before it wrote its part of the snapshot in flight, a replica takes that
    snapshot with it: it is abandoned, the job restores the one before, and the output is
    the failure-free one. (The replica is stopped first, SIGSTOP, and killed once the
    snapshot in flight has waited a second for it.) Killed the moment a snapshot commits,
    that snapshot is the one restored."""
    keyed = scenario("keyed", seed=4)
    rng = random.Random(6)
    struck: list[int] = []

    def kill_before_its_part(job: rt.Job) -> None:
        pid = job.hosts()["{}/{}/{}".format(job.name, *a_replica(job, rng))]
        os.kill(pid, signal.SIGSTOP)
        deadline, waiting, since = time.monotonic() + 60, None, time.monotonic()
        while waiting is None or time.monotonic() - since < 1.0:
            assert time.monotonic() < deadline, "no snapshot waited for the stopped replica within 60 s"
            if (flight := coordinator_figures(job)["in_flight"]) != waiting:
                waiting, since = flight, time.monotonic()
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        struck.append(waiting)

    def kill_as_a_snapshot_commits(job: rt.Job) -> None:
        before, deadline = coordinator_figures(job)["last_id"], time.monotonic() + 60
        while (last := coordinator_figures(job)["last_id"]) == before:
            assert time.monotonic() < deadline, "no snapshot committed within 60 s"
        sigkill(job, "{}/{}".format(*a_replica(job, rng)))
        struck.append(last)

    kill = kill_before_its_part if moment.startswith("before") else kill_as_a_snapshot_commits
    got, stats = run_and_kill(keyed, tmp_path, [kill])
    check(keyed, got)
    restored, snapshots = stats["recoveries"]["recoveries"][0]["snapshot_id"], stats["snapshots"]
    if kill is kill_before_its_part:
        assert restored is not None and restored < struck[0], (restored, struck)
        assert any(reason.startswith(f"snapshot {struck[0]}:") for reason in snapshots["abandoned_reasons"]), snapshots
    else:
        assert restored is not None and restored >= struck[0], (restored, struck)


def test_sigkill_of_a_replica_process_inside_a_loop(ray_session, tmp_path):
    loop = scenario("loop")
    got, stats = run_and_kill(loop, tmp_path, [lambda job: sigkill(job, next(
        f"{key.chain}/{key.replica}" for key in sorted(job.placement.actors) if "this_round" in key.chain))])
    check(loop, got)
    assert stats["recoveries"]["count"] == 1


def test_the_progress_actor_killed(ray_session, tmp_path):
    words = scenario("word count")
    got, stats = run_and_kill(words, tmp_path, [lambda job: sigkill(job, "progress")])
    check(words, got)
    assert "progress" in stats["recoveries"]["recoveries"][0]["cause"]


@pytest.mark.parametrize("victim", ["an input replica", "the progress actor"])
def test_a_death_while_two_threads_take_events_is_recovered_once(ray_session, tmp_path, victim):
    """The main thread consumes ``job.results`` while another waits in ``job.wait``: both take
    events. One progress-actor poll is in flight at a time, either thread may take its
    answer, and a recovery forgets the one made before it (an answer of the progress
    actor's old run would be its events again, or its death once more)."""
    words = scenario("word count")
    rng = random.Random(8)
    waited: list[BaseException | None] = []

    def wait(job: rt.Job) -> None:
        try:
            job.wait(timeout=120)
            waited.append(None)
        except BaseException as error:  # reported below, with the outputs
            waited.append(error)

    def wait_too_then_kill(job: rt.Job) -> None:
        threading.Thread(target=wait, args=(job,), daemon=True).start()
        time.sleep(0.3)  # both threads are taking events by now
        sigkill(job, "progress" if victim == "the progress actor" else "{}/{}".format(*a_replica(job, rng)))

    got, stats = run_and_kill(words, tmp_path, [wait_too_then_kill])
    check(words, got)
    deadline = time.monotonic() + 60
    while not waited and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waited == [None]
    assert stats["recoveries"]["count"] == 1, stats["recoveries"]


def test_an_input_replica_killed_while_peers_close_epochs_for_one_another(ray_session, tmp_path):
    """Small epochs pushed and closed back to back reach one input replica each: the other
    moves quietly while the first closes its channels with proxy tokens
    (``epoch_tokens.ProxyPlan``). An input replica killed mid-feed is recovered from with
    exactly the failure-free output (nothing lost, duplicated or out of order), and the
    replicas close epochs for one another again after the recovery."""
    flow = rt.Dataflow("proxied")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w, name="count").output("counts")
    rng = random.Random(5)
    lines = [" ".join(rng.choice(["ab", "cd", "ef"]) for _ in range(3)) for _ in range(2 * EPOCHS)]
    expected = {"counts": {e: Counter(Counter(line.split()).items()) for e, line in enumerate(lines)}}
    handed: Handed = []
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.1, max_restarts=3)
    with rt.run(flow, parallelism=2, recovery=recovery) as job:
        results = job.results("counts", timeout=120)

        def feed(epochs: range) -> None:
            for epoch in epochs:
                job.push("lines", [lines[epoch]], epoch)
                job.advance("lines", epoch + 1)
                handed.append(next(results))

        feed(range(EPOCHS))
        deadline = time.monotonic() + 60
        while committed_snapshots(job) < 1:
            assert time.monotonic() < deadline, "no snapshot was committed in 60 s"
            time.sleep(0.05)
        quiet_before = job.stats()["input_quiet_moves"]
        sigkill(job, "{}/{}".format(*a_replica(job, rng)))
        feed(range(EPOCHS, 2 * EPOCHS))
        job.close("lines")
        stats = job.stats()
    assert_exactly_once(expected, {"counts": handed})
    assert stats["recoveries"]["count"] == 1, stats["recoveries"]
    assert 0 < quiet_before < stats["input_quiet_moves"], (quiet_before, stats["input_quiet_moves"])


def test_the_coordinator_killed(ray_session, tmp_path):
    join = scenario("join")
    got, stats = run_and_kill(join, tmp_path, [lambda job: sigkill(job, "coordinator")], then_committed=1)
    check(join, got)
    assert "coordinator" in stats["recoveries"]["recoveries"][0]["cause"]
    assert stats["snapshots"]["committed"] >= 1, "the new coordinator takes snapshots again"


def test_a_push_made_while_another_input_is_rewound_reaches_its_replicas_once_and_in_order(
        ray_session, tmp_path, monkeypatch):
    """A recovery sends each input's logged calls again, one input after the other. A push
    into one input from another thread while the other input's calls are sent again must
    wait for its own input's rewind. (It did not: it went out in the new incarnation at
    once, ahead of its input's replayed calls, which then sent it again. In about a third
    of the runs of ``test_the_coordinator_killed`` alone, the job failed with "input
    'right' is at epoch 20; it cannot go back to epoch 13".) Here the push is made at that
    moment every time: from inside the first input's rewind."""
    from raytide.driver import inputs as inputs_module

    flow = rt.Dataflow("two-inputs")
    flow.input("left").map(lambda r: r, name="l").output("lo")
    flow.input("right").map(lambda r: r, name="r").output("ro")
    expected = {out: {e: Counter([(out[0], e)]) for e in range(6)} for out in ("lo", "ro")}
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        def feed(epochs: range, name: str) -> None:
            for epoch in epochs:
                job.push(name, [(name[0], epoch)], epoch)
                job.advance(name, epoch + 1)

        for name in ("left", "right"):
            feed(range(3), name)
        job.snapshot(timeout=60)
        for name in ("left", "right"):
            feed(range(3, 5), name)
        original, pusher = inputs_module.CallLog.after, {}

        def after(log: Any, position: int, what: str) -> Any:
            if not pusher:  # the first input rewound: push into the other one from another thread
                pusher["into"] = "right" if "'left'" in what else "left"
                pusher["thread"] = threading.Thread(target=feed, args=(range(5, 6), pusher["into"]))
                pusher["thread"].start()
                pusher["thread"].join(2.0)  # done at once, before the fix; now it waits for the rewind
            return original(log, position, what)

        monkeypatch.setattr(inputs_module.CallLog, "after", after)
        sigkill(job, str(next(key for key in job.placement.actors if key.chain.startswith("left"))))
        deadline = time.monotonic() + 60
        while not pusher:  # job.collect takes the job's events: the death, then the recovery
            assert time.monotonic() < deadline, "no recovery rewound the inputs within 60 s"
            job.collect("lo")
            time.sleep(0.05)
        pusher["thread"].join(30)
        assert not pusher["thread"].is_alive(), "the push waited more than 30 s for the rewind"
        feed(range(5, 6), "left" if pusher["into"] == "right" else "right")
        job.close("left")
        job.close("right")
        got = read_outputs(job, ["lo", "ro"])
        assert job.stats()["recoveries"]["count"] == 1
    assert_exactly_once(expected, got)


def test_two_kills_in_a_row(ray_session, tmp_path):
    """Two deaths, each recovered from in its turn: the second kill waits for the first
    recovery (a snapshot may commit between a death and its detection; killed then, the
    second struck a host the recovery had not replaced yet, whose process was gone)."""
    keyed = scenario("keyed", seed=4)
    rng = random.Random(5)
    kills = [0]

    def kill(job: rt.Job) -> None:
        deadline = time.monotonic() + 60
        while job.stats()["recoveries"]["count"] < kills[0]:
            assert time.monotonic() < deadline, f"kill {kills[0]} was not recovered from in 60 s"
            time.sleep(0.05)
        sigkill(job, str(a_replica(job, rng)))
        kills[0] += 1

    got, stats = run_and_kill(keyed, tmp_path, [kill, kill], after_snapshots=1)
    check(keyed, got)
    assert stats["recoveries"]["count"] == 2


def test_two_replicas_killed_50_ms_apart(ray_session, tmp_path):
    """Probe: the second death may come while the first one's recovery runs; either way the
    job recovers (once or twice) and the output is the failure-free one."""
    keyed = scenario("keyed", seed=11)
    rng = random.Random(12)

    def two_kills(job: rt.Job) -> None:
        first, second = rng.sample(sorted(job.placement.peers, key=str), 2)
        sigkill(job, f"{first.chain}/{first.replica}")
        time.sleep(0.05)
        sigkill(job, f"{second.chain}/{second.replica}")

    got, stats = run_and_kill(keyed, tmp_path, [two_kills], max_restarts=4)
    check(keyed, got)
    assert 1 <= stats["recoveries"]["count"] <= 2, stats["recoveries"]


def test_more_failures_than_max_restarts_fail_the_job_naming_what_died(ray_session, tmp_path):
    words = scenario("word count")
    victim: list[str] = []

    def kill(job: rt.Job) -> None:
        victim.append(str(a_replica(job, random.Random(6))))
        sigkill(job, victim[-1])

    with pytest.raises(rt.RecoveryError) as caught:
        run_and_kill(words, tmp_path, [kill], max_restarts=0)
    assert "max_restarts=0" in str(caught.value) and victim[0] in str(caught.value)


def test_job_snapshot_commits_one_now_and_the_store_lists_it(ray_session, tmp_path):
    store = str(tmp_path / "store")
    flow = rt.Dataflow("snap")
    flow.input("numbers").map(lambda x: x + 1).output("out")
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(store, interval=None)) as job:
        job.push("numbers", [1, 2, 3], epoch=0)
        first = job.snapshot(timeout=60)
        job.push("numbers", [4], epoch=1)
        second = job.snapshot(timeout=60)
        job.close("numbers")
        job.wait(timeout=60)
        assert as_multisets(job.collect("out")) == {0: Counter([2, 3, 4]), 1: Counter([5])}
        assert job.stats()["snapshots"]["committed"] == 2
    assert second > first
    assert [m.snapshot_id for m in SnapshotStore(store).committed()] == [first, second]
    assert set(SnapshotStore(store).latest().metadata["vertices"]) >= {"numbers", "out"}


def test_snapshot_needs_a_job_with_recovery(ray_session):
    flow = rt.Dataflow("plain")
    flow.input("lines").output("out")
    with rt.run(flow) as job:
        with pytest.raises(rt.RaytideError, match="recovery=rt.Recovery"):
            job.snapshot()


def test_a_source_read_in_the_replicas_resumes_where_the_snapshot_left_it(ray_session, tmp_path):
    rng = random.Random(8)
    paths, expected = text_parts(tmp_path, rng)
    brake = Brake(tmp_path)
    flow = counting_words("files", brake)
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.1)
    source = rt.sources.TextFileSource(paths, batch_lines=10)
    with rt.run(flow, inputs={"lines": source}, parallelism=2, recovery=recovery) as job:
        deadline = time.monotonic() + 60
        while committed_snapshots(job) < 2:
            assert time.monotonic() < deadline, "no two snapshots in 60 s"
            time.sleep(0.02)
        sigkill(job, str(a_replica(job, rng)))
        deadline = time.monotonic() + 120
        while job.collect("counts") is not None and job.stats()["recoveries"]["count"] < 1:  # collect drives it
            assert time.monotonic() < deadline, "no recovery in 120 s"
            time.sleep(0.05)
        brake.release()  # the restored readers read on, slowly until now
        job.wait(timeout=120)
        got = job.collect("counts")
        recoveries = job.stats()["recoveries"]
    assert brake.read_after_release, "the restored readers read nothing: the snapshot had them done"
    assert as_multisets(got) == expected
    assert recoveries["count"] == 1


@pytest.mark.parametrize("restored_at", [2, 3])
def test_stop_with_a_savepoint_then_a_fresh_job_restored_from_it_finishes_the_output(ray_session, tmp_path,
                                                                                      restored_at):
    """Restored at parallelism 3, the savepoint is first written again with the keyed
    state (the running totals of a ``stateful_map``, per-epoch sums) at the new owners of
    its key groups; the inputs keep their 2 replicas."""
    keyed = scenario("keyed", seed=7)
    flow = with_input_width(keyed.flow, 2)
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.1)
    outputs = sorted(keyed.expected)

    stopped = threading.Event()

    def fed(held_at: int | None) -> dict[str, Iterator[list[Any]]]:
        """The inputs at a pace; with ``held_at``, the feed waits there until the job has
        stopped, so that the stop always falls part way however slow the savepoint is."""
        def paced(epochs: list[list[Any]]) -> Iterator[list[Any]]:
            for epoch, records in enumerate(epochs):
                if epoch == held_at:
                    assert stopped.wait(120), f"the feed waited at epoch {epoch} for job.stop() in vain"
                time.sleep(PACE)
                yield records
        return {name: paced(epochs) for name, epochs in keyed.inputs.items()}

    with rt.run(flow, inputs=fed(held_at=2 * EPOCHS // 3), parallelism=2, recovery=recovery) as job:
        wait_for_epoch(job, outputs[0], EPOCHS // 3)
        savepoint = job.stop(timeout=60)
        stopped.set()
        before = {name: job.collect(name) for name in outputs}
    assert 0 < len(before[outputs[0]]) < len(keyed.expected[outputs[0]]), "stopped part way"
    with rt.run(flow, inputs=fed(held_at=None), parallelism=restored_at, recovery=recovery, restore=savepoint) as job:
        job.wait(timeout=120)
        after = {name: job.collect(name) for name in outputs}
        assert job.plan.width("seen") == restored_at
    check(keyed, {name: [*before[name].items(), *after[name].items()] for name in outputs})


def test_restore_is_refused_without_a_store_or_a_snapshot(ray_session, tmp_path):
    flow = rt.Dataflow("nothing")
    flow.input("numbers").output("out")
    with pytest.raises(rt.RaytideError, match="restore must be"):
        rt.run(flow, restore="latest")
    with pytest.raises(rt.RaytideError, match="no committed snapshot"):
        rt.run(flow, recovery=rt.Recovery(str(tmp_path / "empty")), restore="latest")


def test_a_parquet_sink_holds_every_epoch_once_across_a_recovery(ray_session, tmp_path):
    words = scenario("word count", seed=9)
    root = tmp_path / "counts"
    rng = random.Random(10)

    def to_parquet(job: rt.Job, output: str) -> dict[int, list]:
        committed = write_parquet(job, output, str(root))
        table = ds.dataset(str(root), format="parquet", partitioning="hive").to_table().to_pylist()
        files = {int(p.parent.name.split("=")[1]) for p in root.glob("epoch=*/part-0.parquet")}
        assert sorted(committed) == sorted(files), "each epoch committed once, by this job"
        by_epoch: dict[int, list] = {}
        for row in table:
            by_epoch.setdefault(row["epoch"], []).append((row["_1"], row["_2"]))
        return by_epoch

    got, stats = run_and_kill(words, tmp_path, [lambda job: sigkill(job, str(a_replica(job, rng)))],
                              consume=to_parquet)
    check(words, got)
    assert stats["recoveries"]["count"] == 1


def running_sum(total: int | None, record: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """``stateful_map``'s function: each key's running total after its record."""
    total = (total or 0) + record[1]
    return total, (record[0], total)


def keyed_numbers(epochs: int) -> list[list[tuple[int, int]]]:
    """Per epoch, one ``(key, number)`` for each of 3 keys."""
    return [[(key, epoch * 10 + key) for key in range(3)] for epoch in range(epochs)]


def running_sums(records: list[list[tuple[int, int]]]) -> dict[int, list[tuple[int, tuple[int, int]]]]:
    """The plain-Python output of a ``stateful_map`` of :func:`running_sum` over ``records``,
    per epoch (it emits ``(key, output)``)."""
    totals: Counter = Counter()
    expected: dict[int, list[tuple[int, tuple[int, int]]]] = {}
    for epoch, batch in enumerate(records):
        for key, n in batch:
            totals[key] += n
            expected.setdefault(epoch, []).append((key, (key, totals[key])))
    return expected


def test_a_run_on_a_store_an_earlier_run_used_recovers_from_its_own_snapshots_only(ray_session, tmp_path):
    """Users reuse a store path. The second run dies before it committed a snapshot of its
    own: it must start over from its own first input, not restore the first run's state and
    positions (it did: the run hung on the first run's pending epoch)."""
    flow = rt.Dataflow("reused-store")
    flow.input("numbers").stateful_map(lambda r: r[0], running_sum, name="sums").output("out")
    recovery = rt.Recovery(str(tmp_path / "store"), interval=None)
    with rt.run(flow, parallelism=1, recovery=recovery) as job:
        for epoch in range(20):
            job.push("numbers", [(epoch % 3, 1000)], epoch)
        job.snapshot(timeout=60)  # the first run's snapshot, with its state and positions
        job.close("numbers")
        job.wait(timeout=60)
    assert SnapshotStore(recovery.store).latest() is not None, "the first run left a snapshot"
    records = keyed_numbers(6)
    expected = running_sums(records)
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(recovery.store, interval=None)) as job:
        for epoch, batch in enumerate(records[:3]):
            job.push("numbers", batch, epoch)
        wait_for_epoch(job, "out", 1)
        sigkill(job, "sums+out/0")  # the keyed state; no snapshot of this run exists
        for epoch, batch in enumerate(records[3:], start=3):
            job.push("numbers", batch, epoch)
        job.close("numbers")
        job.wait(timeout=60)
        out, recoveries = job.collect("out"), job.stats()["recoveries"]
    assert recoveries["count"] >= 1 and recoveries["recoveries"][0]["snapshot_id"] is None, recoveries
    assert {epoch: sorted(records_) for epoch, records_ in out.items()} == expected


def stopped_after_three_epochs(flow: rt.Dataflow, records: list[list[tuple[int, int]]], recovery: rt.Recovery,
                               parallelism: int) -> tuple[int, dict[int, list]]:
    """Run ``flow`` on the first three epochs of ``records`` and stop it with a savepoint
    once epoch 1 is out: the savepoint's id and what the run handed out."""
    with rt.run(flow, parallelism=parallelism, recovery=recovery) as job:
        for epoch, batch in enumerate(records[:3]):
            job.push("numbers", batch, epoch)
        wait_for_epoch(job, "out", 1)
        savepoint = job.stop(timeout=60)
        return savepoint, job.collect("out")


def test_a_replica_killed_while_a_restored_job_restores_is_replaced_and_the_restore_made_again(
        ray_session, tmp_path, monkeypatch):
    """Probe: a job started from a savepoint (``restore=``) loses a replica (SIGKILLed from
    the driver as the replicas are told to restore): the restore starts over from the
    savepoint on a new host, and what both runs handed out is the reference, once."""
    flow = rt.Dataflow("killed-while-restoring")
    flow.input("numbers").stateful_map(lambda r: r[0], running_sum, name="sums").output("out")
    records = keyed_numbers(8)
    recovery = rt.Recovery(str(tmp_path / "store"), interval=None)
    savepoint, before = stopped_after_three_epochs(flow, records, recovery, parallelism=2)

    restore, killed = RayRecovery.restore_replicas, []

    def killing_restore(self: RayRecovery, effect: Any, run: Any) -> Any:
        placement = self.snapshots.placement
        if not killed:
            key = sorted(placement.peers, key=str)[-1]
            pid = placement.hosts()[f"{placement.name}/{key.chain}/{key.replica}"]
            os.kill(pid, signal.SIGKILL)
            killed.append(key)
        return restore(self, effect, run)

    monkeypatch.setattr(RayRecovery, "restore_replicas", killing_restore)
    with rt.run(flow, parallelism=2, recovery=recovery, restore=savepoint) as job:
        monkeypatch.undo()
        for epoch, batch in enumerate(records):
            job.push("numbers", batch, epoch)
        job.close("numbers")
        job.wait(timeout=120)
        after, recoveries = job.collect("out"), job.stats()["recoveries"]
    assert killed, "no replica was killed while restoring"
    assert recoveries["count"] == 1 and recoveries["recoveries"][0]["snapshot_id"] == savepoint, recoveries
    expected = {"out": {epoch: Counter(sums) for epoch, sums in running_sums(records).items()}}
    assert_exactly_once(expected, {"out": [*before.items(), *after.items()]})  # lost, repeated, reordered


def test_a_restored_run_that_dies_before_its_first_snapshot_goes_back_to_the_one_it_started_from(ray_session,
                                                                                                   tmp_path):
    """Started from a savepoint (``restore=``) and killed before it committed a snapshot of
    its own: the recovery restores the savepoint again, not the start (whose empty sums
    would be wrong) and not another run's."""
    flow = rt.Dataflow("restored-then-killed")
    flow.input("numbers").stateful_map(lambda r: r[0], running_sum, name="sums").output("out")
    records = keyed_numbers(8)
    expected = running_sums(records)
    recovery = rt.Recovery(str(tmp_path / "store"), interval=None)
    savepoint, before = stopped_after_three_epochs(flow, records, recovery, parallelism=1)
    with rt.run(flow, parallelism=1, recovery=recovery, restore=savepoint) as job:
        for epoch, batch in enumerate(records[:5]):  # fed from the start: what the savepoint consumed is skipped
            job.push("numbers", batch, epoch)
        wait_for_epoch(job, "out", 3)
        sigkill(job, "sums+out/0")
        for epoch, batch in enumerate(records[5:], start=5):
            job.push("numbers", batch, epoch)
        job.close("numbers")
        job.wait(timeout=60)
        after, recoveries = job.collect("out"), job.stats()["recoveries"]
    assert recoveries["count"] >= 1 and recoveries["recoveries"][0]["snapshot_id"] == savepoint, recoveries
    assert not set(before) & set(after), "an epoch handed out by both runs"
    assert {epoch: sorted(got) for epoch, got in {**before, **after}.items()} == expected
