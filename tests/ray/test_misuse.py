"""What users get wrong, on a real Ray: each a raytide error naming the vertex (or input),
the epoch and what was wrong; nothing hangs, nothing is half-sent (docs/errors.md lists
every case and the test that covers it)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import raytide as rt
from tests.ray.jobs import run_collect

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def _identity_flow(name: str) -> rt.Dataflow:
    flow = rt.Dataflow(name)
    flow.input("numbers").output("out")
    return flow


def test_a_push_with_a_record_that_does_not_pickle_names_it_and_sends_nothing(ray_session):
    with rt.run(_identity_flow("unpicklable"), parallelism=2, batch_size=1) as job:
        with pytest.raises(rt.RecordError, match="input 'numbers' epoch 0: record 2, of type tuple "
                                                 "\\(\\(3, <unlocked _thread.lock.*cannot be pickled.*nothing"):
            job.push("numbers", [1, 2, (3, threading.Lock()), 4])
        job.push("numbers", [5])
        job.close("numbers")
        job.wait(timeout=60)
        assert job.collect("out") == {0: [5]}, "the records before the bad one were not sent either"


def test_a_string_pushed_as_records_is_refused_not_split_into_characters(ray_session):
    with rt.run(_identity_flow("stringpush"), parallelism=1) as job:
        with pytest.raises(rt.RecordError, match="input 'numbers' epoch 0: push got a builtins.str, not records"):
            job.push("numbers", "hello")
        job.push("numbers", ("hello", "world"))  # any other iterable of records is fine
        job.close("numbers")
        job.wait(timeout=60)
        assert job.collect("out") == {0: ["hello", "world"]}


def bad_key(x):
    if x == 7:
        raise KeyError("no key for seven")
    return x


def test_a_failing_key_function_names_the_vertex_it_belongs_to_not_the_sender(ray_session):
    flow = rt.Dataflow("badkey")
    flow.input("numbers").map(lambda x: x, name="before").exchange(bad_key, name="shuffle").output("out")
    with rt.run(flow, inputs={"numbers": [[1], list(range(10))]}, parallelism=2) as job:
        with pytest.raises(rt.UserCodeError) as info:
            job.wait(timeout=60)
    error = info.value
    assert error.vertex == "shuffle" and error.time.epoch == 1 and "no key for seven" in error.original
    assert "run where 'before' sends" in str(error) and "in bad_key" in str(error)

    flow = rt.Dataflow("badkey2")  # count_by_key combines before it exchanges: its combiner runs the key
    flow.input("words").count_by_key(key=lambda word: {}[word], name="counts").output("out")
    with rt.run(flow, inputs={"words": [["a"]]}, parallelism=2) as job:
        with pytest.raises(rt.UserCodeError, match="vertex 'counts.combine' replica . failed at epoch 0: KeyError"):
            job.wait(timeout=60)


@pytest.mark.parametrize(("returned", "described"), [("text", "a builtins.str"), (None, "None")])
def test_map_batches_must_return_a_batch(ray_session, returned, described):
    flow = rt.Dataflow("badbatch")
    flow.input("numbers").map_batches(lambda batch: returned, name="vectorised").output("out")
    with rt.run(flow, inputs={"numbers": [[], [1, 2]]}, parallelism=1) as job:
        with pytest.raises(rt.UserCodeError, match=f"vertex 'vectorised' replica 0 failed at epoch 1: "
                                                   f"TypeError\\('the map_batches function returned {described}; "
                                                   "a batch is a list of records"):
            job.wait(timeout=60)


def test_map_batches_returning_a_batch_of_another_kind_works(ray_session):
    flow = rt.Dataflow("okbatch")
    flow.input("numbers").map_batches(lambda batch: {"double": batch * 2}, name="vectorised").output("out")
    assert run_collect(flow, {"numbers": [[1, 2]]}, parallelism=1) == {0: [{"double": 2}, {"double": 4}]}


def test_a_cancelled_job_says_it_was_cancelled_when_waited_for_read_or_fed(ray_session):
    job = rt.run(_identity_flow("cancelled"), parallelism=1)
    job.push("numbers", [1])
    job.advance("numbers", 1)
    deadline = time.monotonic() + 60
    while job.collect("out") != {0: [1]}:  # epoch 0 completes (collect keeps it; results would consume it)
        assert time.monotonic() < deadline, "epoch 0 did not complete"
        time.sleep(0.05)
    job.cancel()
    job.cancel()  # twice is fine
    assert job.collect("out") == {0: [1]}, "what completed before the cancel stays readable"
    for attempt in (lambda: job.wait(timeout=30), lambda: list(job.results("out", timeout=30)),  # yields epoch 0 first
                    lambda: job.push("numbers", [2]), lambda: job.close("numbers")):
        with pytest.raises(rt.JobCancelled, match="job 'cancelled-[0-9a-f]+' was cancelled by the driver \\(job.cancel\\(\\)"):
            attempt()


def test_a_job_used_after_its_with_block_refuses_input(ray_session):
    with rt.run(_identity_flow("afterwith"), parallelism=1) as job:
        job.push("numbers", [1])
    with pytest.raises(rt.JobCancelled, match="end of its with block"):
        job.push("numbers", [2])


def test_a_job_that_finished_stays_finished_after_its_with_block(ray_session):
    with rt.run(_identity_flow("finished"), inputs={"numbers": [[1]]}, parallelism=1) as job:
        job.wait(timeout=60)
    job.wait(timeout=1)  # finished before the cancel: nothing to raise
    assert job.collect("out") == {0: [1]}


class Sender(rt.Vertex):
    def __init__(self, port, shift):
        self.port, self.shift = port, shift

    def on_recv(self, edge, message, time):
        self.send_by(self.port, message, rt.Timestamp(time.epoch + self.shift))


def test_a_send_into_the_past_raises_the_progress_error_users_catch(ray_session):
    flow = rt.Dataflow("past")
    flow.input("numbers").unary(lambda: Sender(0, -1), name="timetraveller").output("out")
    with rt.run(flow, inputs={"numbers": [[], [1]]}, parallelism=1) as job:
        with pytest.raises(rt.ProgressError, match="vertex 'timetraveller' replica 0 sent at .*0.* while processing .*1"):
            job.wait(timeout=60)


def test_send_by_on_a_port_the_vertex_does_not_have_names_the_vertex_and_its_ports(ray_session):
    flow = rt.Dataflow("badport")
    flow.input("numbers").unary(lambda: Sender("badport", 0), name="sender").output("out")
    with rt.run(flow, inputs={"numbers": [[1]]}, parallelism=1) as job:
        with pytest.raises(rt.GraphError, match="vertex 'sender' replica 0 called send_by at .*0.* on output port "
                                                "'badport', which it does not have; its output ports are \\[0\\]"):
            job.wait(timeout=60)


def slow(x):
    time.sleep(0.5)
    return x


def test_a_timeout_names_the_vertex_holding_the_earliest_pending_work(ray_session):
    flow = rt.Dataflow("slowjob")
    flow.input("numbers").map(lambda x: x, name="fast").exchange(lambda x: x, name="shuffle").map(
        slow, name="sluggish").output("out")
    with rt.run(flow, inputs={"numbers": [list(range(40))]}, parallelism=1, batch_size=1, chaining=False) as job:
        with pytest.raises(rt.JobTimeout) as info:
            job.wait(timeout=3)
    message = str(info.value)
    assert f"slowest (busy, furthest downstream): vertex 'sluggish' ({job.name}/sluggish/0)" in message, message
    assert "earliest pending work" in message and "inputs still open" in message


@pytest.mark.parametrize(("option", "value"), [("parallelism", 0), ("batch_size", 0), ("max_inflight", -1),
                                               ("num_cpus", -1), ("name", "")])
def test_run_refuses_bad_options_before_starting_anything(ray_session, option, value):
    """No host is leased (hosts are not named actors any more: the pool's book says what is leased)."""
    from raytide.driver.pool import host_pool

    def leased() -> int:
        return sum(len(hosts) for state, hosts in host_pool().describe().items() if state.endswith("leased"))

    before = leased()
    with pytest.raises(ValueError, match=f"{option}"):
        rt.run(_identity_flow("opts"), **{option: value})
    assert leased() == before


def test_a_large_array_pushed_as_a_record_arrives_whole(ray_session):
    array = np.arange(1_000_000, dtype=np.float64)
    flow = rt.Dataflow("bigrecord")
    flow.input("arrays").exchange(lambda a: 0, name="shuffle").output("out")
    result = run_collect(flow, {"arrays": [[array]]}, parallelism=2)
    assert len(result[0]) == 1 and np.array_equal(result[0][0], array)


class Unpicklable:
    def __reduce__(self):
        raise TypeError("this record refuses to be pickled")


def test_an_unpicklable_record_reaching_an_output_or_an_exchange_names_where_and_the_epoch(ray_session):
    flow = rt.Dataflow("badoutput")
    flow.input("numbers").map(lambda x: Unpicklable() if x == 3 else x, name="maker").output("out")
    with rt.run(flow, inputs={"numbers": [[1], [2, 3]]}, parallelism=1) as job:
        with pytest.raises(rt.RecordError, match="output 'out' epoch 1: record 1, of type Unpicklable .*refuses"):
            job.wait(timeout=60)

    flow = rt.Dataflow("badexchange")
    flow.input("numbers").map(lambda x: Unpicklable(), name="maker").exchange(lambda r: 0, name="shuffle").output("out")
    with rt.run(flow, inputs={"numbers": [[], [1]]}, parallelism=2) as job:
        with pytest.raises(rt.RecordError, match="vertex 'maker' sending to 'shuffle' at epoch 1: record 0, of type "
                                                 "Unpicklable"):
            job.wait(timeout=60)


def _cannot_rebuild():
    raise ValueError("this record cannot be rebuilt here")


class Fragile:
    """Pickles, but does not unpickle."""

    def __reduce__(self):
        return _cannot_rebuild, ()


def test_a_record_that_does_not_unpickle_where_it_arrives_fails_the_job_saying_where(ray_session):
    """Unpickled inside the replica's guard: without it the receiving Ray call failed alone,
    nobody was told, and the job waited for the batch until its timeout."""
    flow = rt.Dataflow("fragileexchange")
    flow.input("numbers").map(lambda x: Fragile(), name="maker").exchange(lambda r: 0, name="shuffle").output("out")
    with rt.run(flow, inputs={"numbers": [[], [1, 2]]}, parallelism=2) as job:
        with pytest.raises(rt.RecordError, match="vertex 'shuffle' input 0 at .*1.* \\(from replica [01] of 'maker'\\): "
                                                 "a batch sent there did not unpickle .*cannot be rebuilt here"):
            job.wait(timeout=60)
    with rt.run(_identity_flow("fragilepush"), parallelism=1) as job:
        job.push("numbers", [Fragile()])
        with pytest.raises(rt.RecordError, match="input 'numbers' epoch 0: a batch sent there did not unpickle .*cannot be "
                                                 "rebuilt here"):
            job.wait(timeout=60)
