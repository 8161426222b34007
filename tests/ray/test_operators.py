"""Every operator on a real local Ray, each against a plain-Python reference per epoch."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import numpy as np
import pytest
import ray

import raytide as rt

pytestmark = pytest.mark.ray

EPOCHS = [
    ["the quick brown fox", "jumps over the lazy dog", "the end"],
    ["a b c", "a b", "a"],
    [],
    ["lorem ipsum dolor sit amet", "the fox"],
]


def run_collect(flow, inputs, parallelism=2, output="out"):
    with rt.run(flow, inputs=inputs, parallelism=parallelism) as job:
        job.wait(timeout=120)
        return job.collect(output)


def as_multisets(result):
    return {epoch: Counter(records) for epoch, records in result.items() if records}


def reference(fn):
    return {e: Counter(fn(lines)) for e, lines in enumerate(EPOCHS) if fn(lines)}


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_word_count_matches_reference(ray_session, parallelism):
    flow = rt.Dataflow("wordcount")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    result = run_collect(flow, {"lines": EPOCHS}, parallelism)
    expected = {e: sorted(Counter(w for line in lines for w in line.split()).items()) for e, lines in enumerate(EPOCHS) if lines}
    assert {e: sorted(r) for e, r in result.items()} == expected


def test_word_count_of_long_batches_counted_in_arrow_matches_reference(ray_session):
    # batches of 500 lines join into texts far above TALLY_MIN_CHARS: counted by the Arrow tally,
    # with every kind of whitespace str.split knows (\x1c only it, \u3000 Unicode's) and non-ASCII words
    words = ["the", "fox", "\u00e9t\u00e9", "\u4e2d\u6587", "a", "b"]
    spaces = [" ", "\t", "  ", "\x1c", "\u3000"]
    epochs = [[spaces[(i + e) % 5].join(words[(i * k + e) % 6] for k in range(1, 9)) for i in range(1500)]
              for e in range(3)]
    flow = rt.Dataflow("wordcount")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    with rt.run(flow, inputs={"lines": epochs}, parallelism=2, batch_size=500) as job:
        job.wait(timeout=120)
        result = job.collect("out")
    assert {e: sorted(r) for e, r in result.items()} == {
        e: sorted(Counter(w for line in lines for w in line.split()).items()) for e, lines in enumerate(epochs)}


def test_a_job_can_wait_until_all_its_actors_are_up_before_any_input(ray_session):
    flow = rt.Dataflow("ready")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    with rt.run(flow, parallelism=2) as job:
        job.wait_ready(timeout=60)
        assert ray.get(job.progress.ping.remote(), timeout=5), "the progress actor is up: it answers at once"
        job.push("lines", ["a b a"])
        job.close("lines")
        job.wait(timeout=60)
        assert sorted(job.collect("out")[0]) == [("a", 2), ("b", 1)]


def test_map_filter_flat_map_inspect(ray_session):
    flow = rt.Dataflow("records")
    seen = []
    (flow.input("lines")
        .flat_map(str.split)
        .filter(lambda w: len(w) > 2)
        .map(str.upper)
        .inspect(seen.append)  # runs in the actor: must not change the stream
        .output("out"))
    result = run_collect(flow, {"lines": EPOCHS})
    assert as_multisets(result) == reference(lambda ls: [w.upper() for l in ls for w in l.split() if len(w) > 2])


def test_map_batches_is_vectorised_on_numpy(ray_session):
    flow = rt.Dataflow("vector")
    kinds = []

    def square(batch):
        kinds.append(type(batch))
        assert isinstance(batch, np.ndarray)
        return batch * batch

    flow.input("numbers").map_batches(square).map(int).output("out")
    data = [list(range(10)), list(range(5, 8))]
    result = run_collect(flow, {"numbers": data})
    assert as_multisets(result) == {e: Counter(x * x for x in xs) for e, xs in enumerate(data)}


def test_exchange_sends_equal_keys_to_one_replica(ray_session):
    class Tag(rt.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(0, [(r, self.replica) for r in message], time)

    flow = rt.Dataflow("exchange")
    flow.input("numbers").exchange(lambda x: x % 5).unary(Tag).output("out")
    data = [list(range(50)), list(range(20, 70))]
    result = run_collect(flow, {"numbers": data})
    owner = {}
    for records in result.values():
        for value, replica in records:
            assert owner.setdefault(value % 5, replica) == replica
    assert as_multisets({e: [v for v, _ in r] for e, r in result.items()}) == {e: Counter(xs) for e, xs in enumerate(data)}


def test_broadcast_reaches_every_replica(ray_session):
    class Tag(rt.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(0, [(r, self.replica) for r in message], time)

    flow = rt.Dataflow("broadcast")
    flow.input("numbers", parallelism=1).broadcast(parallelism=3).unary(Tag, parallelism=3).output("out")
    result = run_collect(flow, {"numbers": [[1, 2], [3]]})
    assert as_multisets(result) == {0: Counter((v, r) for v in (1, 2) for r in range(3)), 1: Counter((3, r) for r in range(3))}


def test_concat_of_two_inputs(ray_session):
    flow = rt.Dataflow("concat")
    left = flow.input("left").map(lambda x: ("L", x))
    right = flow.input("right").map(lambda x: ("R", x))
    left.concat(right).output("out")
    result = run_collect(flow, {"left": [[1, 2], [3]], "right": [[9], [], [7]]})
    assert as_multisets(result) == {0: Counter([("L", 1), ("L", 2), ("R", 9)]), 1: Counter([("L", 3)]), 2: Counter([("R", 7)])}


def test_reduce_by_key_per_epoch(ray_session):
    flow = rt.Dataflow("reduce")
    flow.input("pairs").reduce_by_key(lambda kv: kv[0], max, value=lambda kv: kv[1]).output("out")
    data = [[("a", 3), ("b", 1), ("a", 7)], [("b", 5), ("b", 2)]]
    result = run_collect(flow, {"pairs": data})
    assert as_multisets(result) == {0: Counter([("a", 7), ("b", 1)]), 1: Counter([("b", 5)])}


def test_stateful_map_keeps_state_across_epochs(ray_session):
    def running_total(state, record):
        total = (state or 0) + record[1]
        return total, total

    flow = rt.Dataflow("stateful")
    flow.input("pairs").stateful_map(lambda kv: kv[0], running_total).output("out")
    data = [[("a", 1), ("b", 10)], [("a", 2)], [("a", 3), ("b", 1)]]
    result = run_collect(flow, {"pairs": data})
    assert as_multisets(result) == {0: Counter([("a", 1), ("b", 10)]), 1: Counter([("a", 3)]), 2: Counter([("a", 6), ("b", 11)])}


def test_stateful_map_applies_epochs_in_order_whichever_reader_delivers_first(ray_session, tmp_path):
    # Reader 1 starts at epoch 1 with ("a", 2) at once; reader 0 reaches ("a", 1) of epoch 0
    # only after 2,000 slow lines. Applied in arrival order, epoch 1 would see the total 2.
    lines = ["b 1"] * 2000 + ["a 1"] + ["a 2"] + ["c 1"] * 2000
    path = tmp_path / "pairs.txt"
    path.write_text("\n".join(lines) + "\n")
    from raytide.sources import TextFileSource

    def running_total(state, record):
        total = (state or 0) + record[1]
        return total, total

    def parse(line):
        if line.startswith("b"):
            time.sleep(0.0002)
        key, value = line.split()
        return key, int(value)

    flow = rt.Dataflow("ordered")
    (flow.input("lines").map(parse)
        .filter(lambda kv: kv[0] == "a").stateful_map(lambda kv: kv[0], running_total).output("out"))
    with rt.run(flow, inputs={"lines": TextFileSource(str(path), lines_per_epoch=2001)}, parallelism=2) as job:
        job.wait(timeout=120)
        assert as_multisets(job.collect("out")) == {0: Counter([("a", 1)]), 1: Counter([("a", 3)])}


def test_join_per_epoch(ray_session):
    flow = rt.Dataflow("join")
    users = flow.input("users")
    orders = flow.input("orders")
    users.join(orders, key=lambda u: u[0], other_key=lambda o: o[1]).map(lambda t: (t[1][1], t[2][0])).output("out")
    user_epochs = [[(1, "ann"), (2, "bob")], [(1, "ann")]]
    order_epochs = [[("o1", 1), ("o2", 2), ("o3", 1), ("o4", 3)], [("o5", 2), ("o6", 1)]]
    result = run_collect(flow, {"users": user_epochs, "orders": order_epochs})
    expected = {
        e: Counter((name, oid) for uid, name in us for oid, ouid in os if uid == ouid)
        for e, (us, os) in enumerate(zip(user_epochs, order_epochs))
    }
    assert as_multisets(result) == expected


def test_probe_reports_progress(ray_session):
    flow = rt.Dataflow("probe")
    stream = flow.input("numbers").map(lambda x: x + 1)
    probe = stream.probe()
    stream.output("out")
    with rt.run(flow, parallelism=1) as job:
        assert job.frontier(probe) == [rt.Timestamp(0)]
        job.push("numbers", [1, 2, 3], epoch=0)
        job.advance("numbers", 2)
        assert eventually(lambda: job.frontier(probe) == [rt.Timestamp(2)])
        job.close("numbers")
        job.wait(timeout=60)
        assert job.frontier(probe) == []


def eventually(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_driver_push_advance_close_and_results_iterator(ray_session):
    flow = rt.Dataflow("push")
    flow.input("words").count_by_key(lambda w: w).output("out")
    with rt.run(flow, parallelism=2) as job:
        job.push("words", ["a", "b", "a"], epoch=0)
        job.push("words", ["c"], epoch=1)
        job.push("words", ["c", "c"])
        job.advance("words", 5)
        job.push("words", ["z"])
        job.close("words")
        seen = [(epoch, sorted(records)) for epoch, records in job.results("out", timeout=60)]
    assert seen == [(0, [("a", 2), ("b", 1)]), (1, [("c", 3)]), (5, [("z", 1)])]


def test_custom_vertex_notifications_fire_after_every_record_of_the_epoch(ray_session):
    class DistinctAtNotify(rt.Vertex):
        """Per-epoch distinct that emits at notification, with how many records it had seen."""

        def __init__(self):
            self.seen = defaultdict(set)
            self.count = Counter()

        def on_recv(self, edge, message, time):
            if time not in self.seen:
                self.notify_at(time)
            self.seen[time].update(message)
            self.count[time] += len(message)

        def on_notify(self, time):
            self.send_by(0, [(value, self.count[time]) for value in sorted(self.seen.pop(time))], time)

    flow = rt.Dataflow("distinct")
    flow.input("numbers").unary(DistinctAtNotify, exchange=lambda x: 0).output("out")
    data = [[i % 7 for i in range(3000)], [1, 1, 2], [5] * 10]
    with rt.run(flow, inputs={"numbers": data}, parallelism=2, batch_size=100) as job:
        job.wait(timeout=120)
        result = job.collect("out")
    for epoch, records in result.items():
        assert sorted(v for v, _ in records) == sorted(set(data[epoch]))
        assert {n for _, n in records} == {len(data[epoch])}, "notified before every record of the epoch arrived"
