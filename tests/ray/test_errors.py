"""Failures surface as raytide errors naming the vertex, replica and epoch; nothing hangs."""

from __future__ import annotations

import re
import threading
import time

import pytest
import ray

import raytide as rt
from raytide.errors import InternalError, SnapshotError
from raytide.physical.protocol import ReplicaKey, Sequenced, encode
from tests.ray.jobs import hosts_given_back

pytestmark = pytest.mark.ray


def boom(x):
    if x == 13:
        raise ValueError("unlucky record")
    return x


def test_user_exception_names_vertex_replica_epoch_and_keeps_traceback(ray_session):
    flow = rt.Dataflow("failing")
    flow.input("numbers").map(boom, name="risky").output("out")
    job = rt.run(flow, inputs={"numbers": [[1, 2], list(range(20))]}, parallelism=2)
    with pytest.raises(rt.RaytideError) as info:
        job.wait(timeout=120)
    message = str(info.value)
    assert "vertex 'risky'" in message and "replica" in message and "epoch 1" in message
    assert "unlucky record" in message and "in boom" in message, "the original traceback is carried"
    assert hosts_given_back(job)


def test_sending_into_the_past_is_an_error_naming_the_vertex(ray_session):
    class BackInTime(rt.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(0, message, rt.Timestamp(time.epoch - 1))

    flow = rt.Dataflow("past")
    flow.input("numbers").unary(BackInTime, name="timetraveller").output("out")
    with rt.run(flow, inputs={"numbers": [[], [1]]}, parallelism=1) as job:
        with pytest.raises(rt.RaytideError, match="timetraveller.*earlier than the one it was called with"):
            job.wait(timeout=120)


def test_dead_actor_is_detected_and_reported(ray_session):
    flow = rt.Dataflow("victim")
    flow.input("numbers").map(lambda x: x, name="doomed").output("out")
    job = rt.run(flow, parallelism=1)
    job.push("numbers", [1, 2, 3])
    ray.kill(job.placement.actors[("numbers+doomed+out", 0)])
    with pytest.raises(rt.RaytideError, match="numbers\\+doomed\\+out.*died"):
        job.wait(timeout=60)


def test_a_call_the_progress_actor_cannot_apply_fails_the_job_instead_of_being_dropped(ray_session):
    """A progress call is fire and forget: if applying it raised, Ray only logged it, and a job
    whose progress was lost with it waited until its timeout. Now the job fails, naming it."""
    flow = rt.Dataflow("brokenprogress")
    flow.input("numbers").map(lambda x: x, name="same").output("out")
    with rt.run(flow, parallelism=1) as job:
        job.wait_ready()
        garbage = Sequenced(ReplicaKey("nosuch", 0), 0, "not a message")
        job.placement.progress.receive.remote(encode((0, (garbage,))))
        job.push("numbers", [1, 2, 3])
        job.close("numbers")
        with pytest.raises(InternalError, match="the progress actor could not apply a call from nosuch/0: "
                                                "TypeError.*not a progress message"):
            job.wait(timeout=60)


def test_wait_times_out_with_a_description_of_what_is_pending(ray_session):
    flow = rt.Dataflow("open")
    flow.input("numbers").output("out")
    with rt.run(flow, parallelism=1) as job:
        job.push("numbers", [1])
        with pytest.raises(rt.JobTimeout, match="inputs still open.*'numbers': 0.*pending work: .*numbers"):
            job.wait(timeout=2)


def test_invalid_graphs_are_rejected_when_the_job_is_built(ray_session):
    flow = rt.Dataflow("dangling")
    numbers = flow.input("numbers")
    numbers.map(str)
    numbers.output("out")
    with pytest.raises(rt.GraphError, match="map_[0-9a-f]{6}.*never connected"):
        rt.run(flow)

    flow = rt.Dataflow("unknown")
    flow.input("numbers").output("out")
    with pytest.raises(rt.GraphError, match="'nmbers'.*inputs are \\['numbers'\\]"):
        rt.run(flow, inputs={"nmbers": [[1]]})

    with pytest.raises(rt.GraphError, match="no input"):
        rt.run(rt.Dataflow("empty"))


def test_pushing_into_the_past_or_a_closed_input_is_refused(ray_session):
    flow = rt.Dataflow("epochs")
    flow.input("numbers").output("out")
    with rt.run(flow, parallelism=1) as job:
        job.advance("numbers", 3)
        with pytest.raises(rt.GraphError, match="'numbers' is at epoch 3; epoch 1 is in its past"):
            job.push("numbers", [1], epoch=1)
        job.close("numbers")
        with pytest.raises(rt.GraphError, match="'numbers' is closed"):
            job.push("numbers", [1])
        job.wait(timeout=60)


def keeps_a_lock(state, record):
    """``stateful_map``'s function whose state is a lock: it cannot be snapshotted."""
    return threading.Lock(), record


def test_state_that_does_not_pickle_fails_the_snapshot_and_the_job_naming_vertex_replica_and_snapshot(
        ray_session, tmp_path):
    """(Before: ``job.snapshot()`` raised Ray's ``RayTaskError(SnapshotError)`` with its
    ``ray::CoordinatorActor.snapshot_now()`` banner, and the job failed with "replica
    'locked+out' #0 failed: TypeError(...)", naming neither the vertex nor the snapshot.)"""
    flow = rt.Dataflow("locked")
    flow.input("numbers").stateful_map(lambda r: r % 2, keeps_a_lock, name="locked").output("out")
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        job.push("numbers", [1, 2], 0)
        job.advance("numbers", 1)
        deadline = time.monotonic() + 60
        while not job.collect("out"):  # epoch 0 done: the state holds locks
            assert time.monotonic() < deadline, "epoch 0 did not complete within 60 s"
            time.sleep(0.05)
        with pytest.raises(SnapshotError) as snapshot:
            job.snapshot(timeout=5)
        assert type(snapshot.value) is SnapshotError and "ray::" not in str(snapshot.value)
        assert f"job {job.name!r} (inputs at epochs {{'numbers': 1}}): snapshot 1 was not committed" in str(
            snapshot.value)
        with pytest.raises(SnapshotError, match=r"snapshot 1: the state of vertex 'locked' on replica locked\+out/0 "
                                                r"cannot be pickled"):
            job.wait(timeout=30)


@pytest.mark.parametrize("where", ["under a file", "/proc"])
def test_a_store_that_cannot_be_written_is_refused_at_run(ray_session, tmp_path, where):
    (tmp_path / "file").write_text("not a directory")
    store = str(tmp_path / "file" / "store") if where == "under a file" else "/proc/raytide-store"
    flow = rt.Dataflow("unwritable")
    flow.input("numbers").output("out")
    with pytest.raises(SnapshotError, match=rf"the snapshot store {re.escape(repr(store))} cannot be written .* no "
                                            r"fault tolerance"):
        rt.run(flow, recovery=rt.Recovery(store))


@ray.remote(num_cpus=0)
class _Owner:
    """Puts objects in the store, so that it owns them (as a Spark executor or a reader task would)."""

    def put(self, records: list) -> list:
        return [ray.put(records)]  # in a list: the caller gets the ref, this actor stays its owner


@ray.remote(num_cpus=0)
def _read(refs: list) -> list:
    return ray.get(refs)


def unreadable_everywhere(ref: ray.ObjectRef, timeout: float = 60) -> None:
    """Wait until a task cannot read ``ref`` any more: Ray tells a borrower that an object's
    owner died only after a while (about 2 s here), and until then the object reads."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(_read.remote([ref]), timeout=timeout)
        except ray.exceptions.RayTaskError as error:
            assert isinstance(error.cause, ray.exceptions.OwnerDiedError), error
            return
        time.sleep(0.2)
    raise AssertionError(f"{ref} could still be read {timeout} s after its owner was killed")


def test_a_pushed_ref_that_cannot_be_read_fails_the_job_naming_the_input_and_epoch(ray_session):
    """``job.push_refs`` of an object whose owner died: the input replica could not read it,
    the error stayed in Ray's log, and the epoch completed without those records (a silent
    loss). Now the job fails with a SourceError naming the input, the replica and the epoch."""
    flow = rt.Dataflow("lostref")
    flow.input("numbers").map(lambda x: x, name="same").output("out")
    owner = _Owner.remote()
    [ref] = ray.get(owner.put.remote([1, 2, 3]))
    ray.kill(owner)
    unreadable_everywhere(ref)
    with rt.run(flow, parallelism=1) as job:
        job.push_refs("numbers", [ref], 0)
        job.close("numbers")
        with pytest.raises(rt.SourceError, match=r"input 'numbers' replica 0 epoch 0: a pushed object ref could not "
                                                 r"be read: \w*(OwnerDied|ObjectLost)"):
            job.wait(timeout=60)
