"""A driver SIGKILLed while its consumer reads ``job.results``, then a new driver restored
from the latest snapshot: real processes on the session's Ray.

The consumer is slow (as a consumer with side effects is), so when the driver dies it has
received epochs its consumer has not had yet. An epoch counts as delivered only once its
consumer asked for the next one, so the restored run hands out again everything after
the last epoch consumed: nothing is lost, and at most the epoch in the consumer's hands
when the driver died is seen twice. The same holds for a driver killed in the middle of a
live rescale (issue 73), restored at the widths it was rescaling to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import raytide as rt
from raytide.snapshots import SnapshotStore

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

EPOCHS = 40

DRIVER = textwrap.dedent("""
    import os, sys, time
    import raytide as rt

    store, log, restore = sys.argv[1], sys.argv[2], sys.argv[3] == "restore"
    flow = rt.Dataflow("consumed")
    flow.input("numbers").map(lambda n: n * 10, name="times-ten").output("out")

    def fed():  # the same feed from its start in both runs: the restored run skips what its snapshot had
        for epoch in range(EPOCHS):
            time.sleep(0.02)
            yield [epoch]

    options = {"restore": "latest"} if restore else {}
    with rt.run(flow, {"numbers": fed()}, parallelism=2, recovery=rt.Recovery(store, interval=0.2), **options) as job:
        with open(log, "a") as consumed:
            for epoch, records in job.results("out", timeout=120):
                consumed.write(f"{epoch} {records}\\n")  # the consumer's side effect, made durable
                consumed.flush()
                os.fsync(consumed.fileno())
                time.sleep(0.15)  # a slow consumer: the driver receives epochs well ahead of it
    print("finished", flush=True)
""").replace("EPOCHS", str(EPOCHS))


def consumed(log: Path) -> list[tuple[int, str]]:
    return [(int(epoch), records) for epoch, records in (line.split(" ", 1) for line in log.read_text().splitlines())]


def test_a_driver_killed_while_its_consumer_lags_loses_no_epoch_when_a_new_driver_restores(session_ray_env, tmp_path):
    store, log = str(tmp_path / "store"), tmp_path / "consumed.txt"
    log.touch()
    first = subprocess.Popen([sys.executable, "-c", DRIVER, store, str(log), "start"], env=session_ray_env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(consumed(log)) < 12:  # the feed is done by then: the driver holds epochs its consumer has not had
            assert first.poll() is None, f"the first driver exited early:\n{first.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, "the first driver's consumer did not reach epoch 12 within 120 s"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.communicate()
    killed_at = len(consumed(log))
    second = subprocess.run([sys.executable, "-c", DRIVER, store, str(log), "restore"], env=session_ray_env,
                            capture_output=True, text=True, timeout=180)
    assert second.returncode == 0 and "finished" in second.stdout, second.stderr[-3000:]

    seen = consumed(log)
    epochs = [epoch for epoch, _ in seen]
    assert all(records == f"[{epoch * 10}]" for epoch, records in seen), "an epoch's records changed"
    assert sorted(set(epochs)) == list(range(EPOCHS)), f"lost epochs: {sorted(set(range(EPOCHS)) - set(epochs))}"
    repeated = [epoch for epoch in set(epochs) if epochs.count(epoch) > 1]
    assert len(repeated) <= 1, f"epochs seen twice: {sorted(repeated)} (only the one in the consumer's hands may be)"
    assert epochs[:killed_at] == list(range(killed_at)), "the first run's consumer read in order"
    restarted = epochs[killed_at:]
    assert restarted == list(range(restarted[0], EPOCHS)) and restarted[0] >= killed_at - 1, \
        f"the restored run starts at the epoch in hand or the next: {restarted[:3]} after {killed_at} consumed"


def test_an_epoch_taken_with_a_fresh_iterator_each_time_counts_as_consumed(ray_session, tmp_path):
    """``next(job.results(...))`` per epoch drops each iterator with its epoch in hand: that
    epoch is consumed (else the output replicas would keep every epoch for the snapshots,
    and a restore would hand them all out again)."""
    flow = rt.Dataflow("fresh-iterators")
    flow.input("numbers").map(lambda n: n + 1, name="plus-one").output("out")
    store = SnapshotStore(str(tmp_path))
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(str(tmp_path), interval=0.2)) as job:
        for epoch in range(5):
            job.push("numbers", [epoch], epoch)
            job.advance("numbers", epoch + 1)
            assert next(job.results("out", timeout=60)) == (epoch, [epoch + 1])
        assert store.read_record("consumed")["delivered"] == {"out": 4}


KEYS = [17 * k for k in range(8)]  # spread over the key groups: a rescale to 2 moves some of them

RESCALED = textwrap.dedent("""
    import os, sys, threading, time
    import raytide as rt
    from raytide.driver import rescale

    store, log, phase, announce = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

    def follows(last, record):  # each key's records in sequence: one lost, repeated or reordered fails the job
        key, number = record
        if number != (0 if last is None else last + 1):
            raise ValueError(f"key {key}: record {number} arrived where {0 if last is None else last + 1} was due")
        return number, record

    flow = rt.Dataflow("rescaled-driver")
    flow.input("records").stateful_map(lambda record: record[0], follows, name="check",  # restored at the new width
                                       parallelism=2 if phase == "restore" else None).output("out")

    def fed():  # a few epochs ahead of what the consumer had (in both runs): records still come after a restore
        for epoch in range(EPOCHS):
            while epoch > 3 + sum(1 for _ in open(log)):
                time.sleep(0.005)
            yield [(key, epoch) for key in KEYS]

    if phase == "rescale":  # killed in the middle of it: switched to the new widths, before they adopt the state
        switch = rescale.RayRescale.switch

        def switch_then_wait(self, effect, run):
            answer = switch(self, effect, run)
            open(announce, "w").close()
            time.sleep(120)
            return answer

        rescale.RayRescale.switch = switch_then_wait
    options = {"restore": "latest"} if phase == "restore" else {}
    with rt.run(flow, {"records": fed()}, parallelism=1, recovery=rt.Recovery(store, interval=0.1, lease=1.0),
                **options) as job:
        with open(log, "a") as consumed:
            for epoch, records in job.results("out", timeout=120):
                consumed.write(f"{epoch} {sorted(records)}\\n")
                consumed.flush()
                os.fsync(consumed.fileno())
                if phase == "rescale" and epoch == 6:  # a snapshot with state in it, then the rescale
                    job.snapshot()
                    # the whole job's switch is what the kill strikes (a stepped growth joins, no switch)
                    threading.Thread(target=job.rescale, args=({"check": 2},), kwargs={"stepped": False},
                                     daemon=True).start()
                time.sleep(0.03)
    print("finished", flush=True)
""").replace("EPOCHS", str(EPOCHS // 2)).replace("KEYS", str(KEYS))


def test_a_driver_killed_in_the_middle_of_a_rescale_is_restored_from_its_last_snapshot_exactly(session_ray_env,
                                                                                               tmp_path):
    """SIGKILLed once the job switched to its new widths and before they adopted the state
    (the hosts already play their new replicas, the state is in the object store; the job's
    actors die with their driver): the new driver, run at the widths the rescale was going
    to, takes the store over once the lease lapses, restores the last snapshot committed
    before the rescale (in the old widths, written again for the new), and every record is
    seen once per key, in order, every epoch consumed once but the one in the consumer's
    hands (whose acknowledgement waited behind the rescale)."""
    store, log, announce = str(tmp_path / "store"), tmp_path / "consumed.txt", tmp_path / "switched"
    log.touch()
    args = [store, str(log)]
    first = subprocess.Popen([sys.executable, "-c", RESCALED, *args, "rescale", str(announce)], env=session_ray_env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not announce.exists():
            assert first.poll() is None, f"the first driver exited early:\n{first.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, "the first driver did not switch to the new widths within 120 s"
            time.sleep(0.01)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.communicate()
    killed_at = len(consumed(log))
    second = subprocess.run([sys.executable, "-c", RESCALED, *args, "restore", "-"], env=session_ray_env,
                            capture_output=True, text=True, timeout=180)
    assert second.returncode == 0 and "finished" in second.stdout, second.stderr[-3000:]
    seen = consumed(log)
    epochs = [epoch for epoch, _ in seen]
    assert all(records == str([(key, (key, epoch)) for key in KEYS]) for epoch, records in seen), seen
    assert sorted(set(epochs)) == list(range(EPOCHS // 2)), f"lost: {sorted(set(range(EPOCHS // 2)) - set(epochs))}"
    assert epochs[:killed_at] == list(range(killed_at)) and killed_at >= 7, (killed_at, epochs)
    assert epochs[killed_at:] == list(range(epochs[killed_at], EPOCHS // 2)) and epochs[killed_at] >= killed_at - 1, \
        f"the restored run starts at the epoch in hand or the next: {epochs[killed_at:][:3]} after {killed_at} consumed"
    assert SnapshotStore(store).committed(), "the restored run committed snapshots"
