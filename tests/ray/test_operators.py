"""Every operator on a real local Ray, each against a plain-Python reference per epoch."""

from __future__ import annotations

import json
import operator
import time
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pytest
import ray

import raytide as rt
from raytide.core.batches import to_records
from raytide.core.operators import COMBINER_MAX_KEYS
from tests.ray.jobs import as_multisets, run_collect

pytestmark = pytest.mark.ray

EPOCHS = [
    ["the quick brown fox", "jumps over the lazy dog", "the end"],
    ["a b c", "a b", "a"],
    [],
    ["lorem ipsum dolor sit amet", "the fox"],
]


def reference(fn):
    return {e: Counter(fn(lines)) for e, lines in enumerate(EPOCHS) if fn(lines)}


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_word_count_matches_reference(ray_session, parallelism):
    flow = rt.Dataflow("wordcount")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    result = run_collect(flow, {"lines": EPOCHS}, parallelism=parallelism)
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
    result = run_collect(flow, {"lines": epochs}, batch_size=500)
    assert {e: sorted(r) for e, r in result.items()} == {
        e: sorted(Counter(w for line in lines for w in line.split()).items()) for e, lines in enumerate(epochs)}


def test_a_job_can_wait_until_all_its_actors_are_up_before_any_input(ray_session):
    flow = rt.Dataflow("ready")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("out")
    with rt.run(flow, parallelism=2) as job:
        job.wait_ready(timeout=60)
        assert ray.get(job.placement.progress.ping.remote(), timeout=5), "the progress actor is up: it answers at once"
        job.push("lines", ["a b a"])
        job.close("lines")
        job.wait(timeout=60)
        assert sorted(job.collect("out")[0]) == [("a", 2), ("b", 1)]


def test_map_filter_flat_map(ray_session):
    flow = rt.Dataflow("records")
    flow.input("lines").flat_map(str.split).filter(lambda w: len(w) > 2).map(str.upper).output("out")
    result = run_collect(flow, {"lines": EPOCHS})
    assert as_multisets(result) == reference(lambda lines: [w.upper() for line in lines for w in line.split() if len(w) > 2])


def test_inspect_calls_its_function_once_per_record_and_passes_the_stream_on(ray_session, tmp_path):
    log = tmp_path / "inspected.jsonl"  # the replicas run in other processes: they append here

    def note(word):
        with open(log, "a") as f:
            f.write(json.dumps(word) + "\n")

    flow = rt.Dataflow("inspect")
    flow.input("lines").flat_map(str.split).inspect(note).output("out")
    result = run_collect(flow, {"lines": EPOCHS})
    words = [w for lines in EPOCHS for line in lines for w in line.split()]
    assert Counter(json.loads(line) for line in log.read_text().splitlines()) == Counter(words)
    assert as_multisets(result) == reference(lambda lines: [w for line in lines for w in line.split()])


def test_map_batches_is_vectorised_on_numpy(ray_session):
    flow = rt.Dataflow("vector")

    def square(batch):
        assert isinstance(batch, np.ndarray), type(batch)  # a failure here fails the job
        return batch * batch

    flow.input("numbers").map_batches(square).map(int).output("out")
    data = [list(range(10)), list(range(5, 8))]
    result = run_collect(flow, {"numbers": data})
    assert as_multisets(result) == {e: Counter(x * x for x in xs) for e, xs in enumerate(data)}


def test_map_batches_in_the_numpy_format_gets_arrow_batches_as_numpy_columns(ray_session):
    def add_columns(batch):
        assert isinstance(batch, dict) and all(isinstance(c, np.ndarray) for c in batch.values()), type(batch)
        return batch["x"] + batch["y"]

    flow = rt.Dataflow("numpy")
    flow.input("rows").map_batches(add_columns, batch_format="numpy").map(int).output("out")
    data = [pa.table({"x": list(range(20)), "y": [10 * i for i in range(20)]}), pa.table({"x": [7], "y": [1]})]
    result = run_collect(flow, {"rows": data})
    assert as_multisets(result) == {e: Counter(r["x"] + r["y"] for r in t.to_pylist()) for e, t in enumerate(data)}


def test_map_batches_in_the_list_format_gets_records_of_arrow_batches(ray_session):
    def names(batch):
        assert isinstance(batch, list) and all(isinstance(r, dict) for r in batch), type(batch)
        return [f"{r['name']}:{r['n']}" for r in batch]

    flow = rt.Dataflow("list")
    flow.input("rows").map_batches(names, batch_format="list").output("out")
    data = [pa.table({"name": ["a", "b", "c"], "n": [1, 2, 3]}), pa.table({"name": ["d"], "n": [4]})]
    result = run_collect(flow, {"rows": data})
    expected = {e: Counter(f"{r['name']}:{r['n']}" for r in table.to_pylist()) for e, table in enumerate(data)}
    assert as_multisets(result) == expected


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


class TagColumns(rt.Vertex):
    """Tags each ``(k, v)`` row, whatever form its batch takes, with the replica that got it."""

    def on_recv(self, edge, message, time):
        self.send_by(0, [(row["k"], row["v"], self.replica) for row in to_records(message)], time)


@pytest.mark.parametrize("form", ["records", "arrow"])
def test_an_exchange_by_column_name_sends_equal_keys_to_one_replica(ray_session, form):
    rows = [[{"k": i % 23, "v": i} for i in range(200)], [{"k": i % 5, "v": -i} for i in range(40)]]
    data = rows if form == "records" else [pa.Table.from_pylist(epoch) for epoch in rows]
    flow = rt.Dataflow("column-exchange")
    flow.input("rows").exchange("k").unary(TagColumns).output("out")
    result = run_collect(flow, {"rows": data})
    owner = {}
    for records in result.values():
        for key, _, replica in records:
            assert owner.setdefault(key, replica) == replica, f"key {key} reached two replicas"
    assert set(owner.values()) == {0, 1}
    assert as_multisets({e: [(k, v) for k, v, _ in r] for e, r in result.items()}) == {
        e: Counter((r["k"], r["v"]) for r in epoch) for e, epoch in enumerate(rows)}


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
    flow.input("pairs").reduce_by_key(lambda kv: kv[0], operator.add, value=lambda kv: kv[1]).output("out")
    data = [[("a", 3), ("b", 1), ("a", 7), ("a", -2)], [("b", 5), ("b", 2)], [("c", 1)] * 9]
    result = run_collect(flow, {"pairs": data})
    assert as_multisets(result) == {0: Counter([("a", 8), ("b", 1)]), 1: Counter([("b", 7)]), 2: Counter([("c", 9)])}


def test_reduce_by_key_with_more_keys_than_a_combiner_holds_ships_early_and_sums_right(ray_session):
    keys = COMBINER_MAX_KEYS + 4_000
    pairs = [(k, 1) for k in range(keys)] * 2 + [(k, 5) for k in range(0, keys, 7)]
    flow = rt.Dataflow("early")
    flow.input("pairs").reduce_by_key(lambda kv: kv[0], operator.add, value=lambda kv: kv[1], name="sums").output("out")
    with rt.run(flow, inputs={"pairs": [pairs]}, parallelism=1) as job:
        job.wait(timeout=120)
        result = job.collect("out")
        shipped = job.stats()["vertices"]["sums.combine"]["records_out"]
    expected = Counter()
    for key, value in pairs:
        expected[key] += value
    assert sorted(result) == [0] and dict(result[0]) == dict(expected)
    assert shipped > keys, "the combiner sent some keys more than once: it shipped before the epoch ended"


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

    arrivals = tmp_path / "arrivals.txt"

    def arrived(record):
        with open(arrivals, "a") as f:
            f.write(f"{record[1]}\n")

    flow = rt.Dataflow("ordered")
    (flow.input("lines").map(parse).filter(lambda kv: kv[0] == "a")
        .exchange(lambda kv: kv[0]).inspect(arrived)  # at the replica that owns "a", as records arrive
        .stateful_map(lambda kv: kv[0], running_total).output("out"))
    result = run_collect(flow, {"lines": TextFileSource(str(path), lines_per_epoch=2001)})
    assert arrivals.read_text().split() == ["2", "1"], "the premise: epoch 1's record arrived first"
    assert as_multisets(result) == {0: Counter([("a", 1)]), 1: Counter([("a", 3)])}


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
    result = run_collect(flow, {"numbers": data}, batch_size=100)
    assert sorted(result) == [0, 1, 2], "every epoch completes, none is dropped"
    for epoch, records in result.items():
        assert sorted(v for v, _ in records) == sorted(set(data[epoch]))
        assert {n for _, n in records} == {len(data[epoch])}, "notified before every record of the epoch arrived"
