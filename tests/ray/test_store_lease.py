"""Two real driver processes on one snapshot store, on a local directory and on S3 (moto):
the second is refused while the first lives; the first is paused (SIGSTOP), its lease
lapses and a third driver takes the store over (``restore="latest"``); resumed (SIGCONT),
the first's delayed writes are refused (fenced): it hands out no epoch more and fails with
a StoreFencedError. Every epoch reaches a consumer, and only the one the first consumer held
when it was paused may reach two.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raytide.snapshots.store import SnapshotStore
from tests.ray.jobs import until
from tests.ray.test_recovery_s3 import s3_uri  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore:skipping snapshot")]

EPOCHS = 40
LEASE = 1.5

DRIVER = textwrap.dedent("""
    import os, sys, time
    import raytide as rt

    store, log, restore, pause = sys.argv[1], sys.argv[2], sys.argv[3] == "restore", float(sys.argv[4])
    held = sys.argv[5] if len(sys.argv) > 5 else None  # while this file exists, the consumer waits at its first epoch
    flow = rt.Dataflow("fenced")
    flow.input("numbers").map(lambda n: n * 10, name="times-ten").output("out")

    def fed():  # the same feed from its start in every run: a restored run skips what its snapshot had
        for epoch in range(EPOCHS):
            time.sleep(0.02)
            yield [epoch]

    recovery = rt.Recovery(store, interval=0.2, lease=LEASE)
    options = {"restore": "latest"} if restore else {}
    with rt.run(flow, {"numbers": fed()}, parallelism=1, recovery=recovery, **options) as job:
        with open(log, "a") as consumed:
            for epoch, records in job.results("out", timeout=120):
                consumed.write(f"{os.getpid()} {epoch} {records}\\n")  # the consumer's side effect, made durable
                consumed.flush()
                os.fsync(consumed.fileno())
                time.sleep(pause)
                while held and os.path.exists(held):
                    time.sleep(0.05)
    print("finished", flush=True)
""").replace("EPOCHS", str(EPOCHS)).replace("LEASE", str(LEASE))


def driver(store: str, log: Path, mode: str, pause: float, out: Path, env: dict[str, str],
           held: Path | None = None) -> subprocess.Popen:
    """A driver process; its output goes to ``out`` (a pipe left unread would stop a chatty one).
    While ``held`` exists its consumer waits after its first epoch, so the job (and its lease)
    outlives whatever the test does meanwhile, however slowly that starts on a loaded machine."""
    with open(out, "w") as sink:
        return subprocess.Popen([sys.executable, "-c", DRIVER, store, str(log), mode, str(pause),
                                 *([str(held)] if held else [])], env=env,
                                stdout=sink, stderr=subprocess.STDOUT, text=True)


def consumed(log: Path) -> list[tuple[int, int, str]]:
    """``(pid, epoch, records)`` per line of the consumers' log."""
    return [(int(pid), int(epoch), records) for pid, epoch, records in
            (line.split(" ", 2) for line in log.read_text().splitlines())]


def wait_for(condition, what: str, timeout: float, driver: subprocess.Popen) -> None:
    """:func:`until` ``condition``, failing at once if ``driver`` exits meanwhile."""
    def met() -> bool:
        assert driver.poll() is None, f"a driver exited while the test waited for {what}"
        return bool(condition())
    until(met, what, timeout)


def generation(store: SnapshotStore) -> int:
    record = store.leases.current()
    return record.fence.generation if record is not None and record.fenced_after is not None else 0


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_second_driver_is_refused_and_a_paused_one_is_fenced_after_a_takeover(session_ray_env, tmp_path,
                                                                                 where, request):
    uri = str(tmp_path / "store") if where == "local" else request.getfixturevalue("s3_uri")
    store, log, env = SnapshotStore(uri), tmp_path / "consumed.txt", session_ray_env
    log.touch()
    held = tmp_path / "hold-the-first-consumer"
    held.touch()  # until the second driver is refused: else the first may be done before the second starts
    first = driver(uri, log, "start", 0.3, tmp_path / "first.out", env, held)
    third = None
    try:
        wait_for(lambda: generation(store) == 1, "the first driver's lease", 60, first)
        # and its first snapshot: before it, a restoring driver is refused for want of one,
        # whoever holds the store (seen at a load of 20)
        wait_for(lambda: store.latest() is not None, "the first driver's first snapshot", 60, first)
        second = subprocess.run([sys.executable, "-c", DRIVER, uri, str(log), "restore", "0"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "StoreLeaseError" in second.stderr, second.stderr[-3000:]
        refusal = second.stderr[second.stderr.index("StoreLeaseError"):]
        assert f"process {first.pid} on host" in refusal and "job 'fenced-" in refusal, refusal
        assert "holding since" in refusal and "expires at" in refusal, refusal
        held.unlink()
        wait_for(lambda: len(consumed(log)) >= 4, "the first driver's consumer to have 4 epochs", 60, first)
        os.kill(first.pid, signal.SIGSTOP)  # paused: it renews nothing, its actors go on
        paused_at = len(consumed(log))
        third = driver(uri, log, "restore", 0.0, tmp_path / "third.out", env)
        wait_for(lambda: generation(store) == 2, "the third driver's takeover", 60, third)
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=60) != 0
        assert third.wait(timeout=120) == 0, (tmp_path / "third.out").read_text()[-3000:]
    finally:
        for process in (first, third):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    first_said = (tmp_path / "first.out").read_text()
    assert "StoreFencedError" in first_said and "another driver took the snapshot store" in first_said, first_said[-3000:]

    seen = consumed(log)
    by_first = [epoch for pid, epoch, _ in seen if pid == first.pid]
    assert len(by_first) <= paused_at + 1, f"the fenced driver handed out {by_first[paused_at:]} after its pause"
    epochs = [epoch for _, epoch, _ in seen]
    assert all(records == f"[{epoch * 10}]" for _, epoch, records in seen), "an epoch's records changed"
    assert sorted(set(epochs)) == list(range(EPOCHS)), f"lost: {sorted(set(range(EPOCHS)) - set(epochs))}"
    repeated = sorted(epoch for epoch in set(epochs) if epochs.count(epoch) > 1)
    assert repeated in ([], [by_first[-1]]), f"seen twice: {repeated} (only the one in the paused consumer's hands may be)"


DROPPED_AT_EXIT = textwrap.dedent("""
    import sys, types
    import ray
    import raytide as rt

    ray.init(log_to_driver=False)  # the session's Ray (RAY_ADDRESS); its workers' logs are not this driver's stderr
    flow = rt.Dataflow("in-hand")
    flow.input("xs", parallelism=1).map(lambda x: x + 1).output("out")
    # the iterators, kept to the interpreter's end in a module of their own that refers to
    # itself (as a failed test's traceback keeps one): collected by the interpreter's last
    # collection, once it has dropped its modules and imports fail
    in_hand = sys.modules["in_hand"] = types.ModuleType("in_hand")
    in_hand.kept, in_hand.itself = [], in_hand
    del in_hand

    def one_epoch_in_hand(job):
        job.push("xs", [1], epoch=0)
        job.push("xs", [2], epoch=1)
        results = job.results("out", timeout=60, progress=False)
        sys.modules["in_hand"].kept.append(results)
        return next(results)

    with rt.run(flow, parallelism=1, recovery=rt.Recovery(sys.argv[1], interval=None)) as job:
        print("torn down", one_epoch_in_hand(job), flush=True)
    job = rt.run(flow, parallelism=1, recovery=rt.Recovery(sys.argv[2], interval=None))
    print("left running", one_epoch_in_hand(job), flush=True)  # the driver exits without cancelling it
""")


def test_a_results_iterator_dropped_at_the_interpreters_exit_writes_nothing_and_prints_no_traceback(
        session_ray_env, tmp_path):
    """A driver that ends with a ``job.results`` iterator in hand, its job torn down (a failed
    test's ``with`` block) or left running: the iterator, closed as the interpreter shuts down,
    acknowledged its epoch and wrote the consumers' record, whose lease check imported
    ``pyarrow.fs`` after the interpreter's modules were gone: "Exception ignored in: <generator
    object Job.results>" and a traceback ending "ImportError: sys.meta_path is None" closed the
    output (seen in pytest runs of failing tests). A job that released its store's lease (at
    its teardown, or at the driver's exit) writes nothing more to it."""
    stores = [str(tmp_path / "torn-down"), str(tmp_path / "left-running")]
    child = subprocess.run([sys.executable, "-c", DROPPED_AT_EXIT, *stores], env=session_ray_env,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and child.stdout.splitlines() == ["torn down (0, [2])", "left running (0, [2])"], \
        child.stdout + child.stderr
    assert "Traceback" not in child.stderr and "Exception ignored" not in child.stderr, child.stderr
    for store in stores:  # epoch 0 was in the consumer's hands, never acknowledged: none delivered
        record = SnapshotStore(store).read_record("consumed") or {"delivered": {}}
        assert "out" not in record["delivered"], (store, record)
