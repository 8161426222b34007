"""Loop contexts on a real local Ray: iteration, nested loops, notifications per iteration."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

import raytide as rt
from tests.ray.jobs import run_collect
from tests.sim.scenarios import halvings

pytestmark = pytest.mark.ray


def test_a_loop_iterates_to_its_fixed_point(ray_session):
    flow = rt.Dataflow("halving")
    loop = flow.loop()
    back = loop.feedback()
    numbers = loop.enter(flow.input("numbers")).concat(back.stream)
    halved = numbers.map(lambda x: x // 2)
    back.connect(halved.filter(lambda x: x > 0))
    loop.leave(halved).output("out")
    data = [[100, 7, 1], [3], [], [1 << 20]]
    result = run_collect(flow, {"numbers": data})
    assert {e: Counter(r) for e, r in result.items()} == {
        e: Counter(h for x in xs for h in halvings(x)) for e, xs in enumerate(data) if xs
    }


def test_iterate_with_an_iteration_bound(ray_session):
    flow = rt.Dataflow("bounded")
    flow.input("n").iterate(lambda s: s.map(lambda x: x - 1).filter(lambda x: x > 0), max_iterations=3).output("out")
    result = run_collect(flow, {"n": [[5, 2], [10]]}, parallelism=1)
    assert {e: sorted(r) for e, r in result.items()} == {0: [1, 2, 3, 4], 1: [7, 8, 9]}


class IterationCounter(rt.Vertex):
    """Inside a loop: counts each iteration's records and reports them when the iteration completes."""

    def __init__(self):
        self.counts = defaultdict(int)

    def on_recv(self, edge, message, time):
        if time not in self.counts:
            self.notify_at(time)
        self.counts[time] += len(message)
        self.send_by(0, [x - 1 for x in message if x > 1], time)

    def on_notify(self, time):
        self.send_by(1, [(time.counters[-1], self.counts.pop(time))], time)


def test_notifications_per_iteration_see_the_whole_iteration(ray_session):
    flow = rt.Dataflow("per-iteration")
    loop = flow.loop()
    back = loop.feedback()
    entered = loop.enter(flow.input("numbers"))
    # The feedback is fused into the counter's actor and exchanges straight back to it,
    # so part of every iteration goes back to the replica that sent it (no Ray call).
    onward, report = flow.vertex(IterationCounter, [entered, back.stream], 2, exchange=[lambda x: x % 3] * 2)
    back.connect(onward)
    loop.leave(report).output("out")
    data = [[4, 2, 2, 9], [3, 3]]
    with rt.run(flow, inputs={"numbers": data}, parallelism=2, batch_size=1) as job:
        job.wait(timeout=120)
        result = job.collect("out")
        local_sends = sum(s["local_sends"] for s in job.placement.replica_stats().values())
    assert local_sends > 0, "some feedback batches went back to the replica that sent them, without Ray"
    for epoch, xs in enumerate(data):
        per_iteration = Counter()
        for i, n in result[epoch]:
            per_iteration[i] += n
        expected = Counter()
        for x in xs:
            for i in range(x):
                expected[i] += 1
        assert per_iteration == expected


def test_nested_loops_have_two_counters(ray_session):
    class Stamp(rt.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(0, [(x, time.counters) for x in message], time)

    flow = rt.Dataflow("nested")
    outer = flow.loop()
    outer_back = outer.feedback(max_iterations=3)
    at_outer = outer.enter(flow.input("numbers")).concat(outer_back.stream)
    inner = outer.loop()
    inner_back = inner.feedback()
    at_inner = inner.enter(at_outer).concat(inner_back.stream)
    stamped = at_inner.unary(Stamp)
    inner_back.connect(at_inner.map(lambda x: x // 2).filter(lambda x: x > 0))
    settled = inner.leave(stamped.filter(lambda pair: pair[0] == 1).map(lambda pair: pair[1]))
    outer_back.connect(at_outer.map(lambda x: x * 3))
    outer.leave(settled).output("out")
    result = run_collect(flow, {"numbers": [[5]]}, parallelism=1)
    expected = []
    x = 5
    for i in range(3):  # the outer iteration triples, the inner one halves down to 1
        j, y = 0, x
        while y != 1:
            y //= 2
            j += 1
        expected.append((i, j))
        x *= 3
    assert sorted(result[0]) == expected


def test_loop_misuse_is_rejected_when_the_job_is_built(ray_session):
    flow = rt.Dataflow("misuse")
    loop = flow.loop()
    outside = flow.input("numbers")
    inside = loop.enter(outside)
    with pytest.raises(rt.GraphError, match="inside loop .* leave the loop first"):
        inside.output("out")
    with pytest.raises(rt.GraphError, match="different loop contexts"):
        inside.concat(outside)
    with pytest.raises(rt.GraphError, match="can only leave with a stream inside it"):
        loop.leave(outside)
    back = loop.feedback()
    with pytest.raises(rt.GraphError, match="feedback of loop .* takes a stream inside that loop"):
        back.connect(outside)
    loop.leave(inside.concat(back.stream)).output("out")
    with pytest.raises(rt.GraphError, match="never connected: close the loop"):
        rt.run(flow, inputs={"numbers": [[1]]})


def test_a_vertex_fed_only_by_the_feedback_and_a_snapshot_barrier_in_a_loop(ray_session, tmp_path):
    flow = rt.Dataflow("feedback-only")
    loop = flow.loop()
    back = loop.feedback(max_iterations=3)
    body = loop.enter(flow.input("x")).concat(back.stream.map(lambda x: x))
    back.connect(body.map(lambda x: x + 1))
    loop.leave(body).output("out")
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        job.push("x", [1, 10])
        job.snapshot(timeout=60)
        job.push("x", [100])
        job.close("x")
        job.wait(timeout=120)
        result = job.collect("out")
        markers = [m for s in job.placement.replica_stats().values() for m in s["markers"]]
    assert sorted(result[0]) == [1, 2, 3, 10, 11, 12, 100, 101, 102]
    assert len(markers) == len(job.placement.actors), "the barrier passed every replica, around the loop too"
