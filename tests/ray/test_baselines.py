"""Small-size correctness of the benchmark baselines against plain-Python references."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import ray
from pyspark.sql import SparkSession

from bench.baselines import data, ray_call_cost
from bench.baselines.cc_pyspark import connected_components_pyspark
from bench.baselines.cc_ray import EdgeIndex, components_union_find, connected_components_ray
from bench.baselines.keyed_calls_ray import keyed_calls_latencies
from bench.baselines.mandelbrot_ray import mandelbrot_ray, mandelbrot_reference, mandelbrot_row
from bench.baselines.relay_ray import relay_latencies
from bench.baselines.soak_ray import plain_soak
from bench.baselines.wordcount_pyspark import local_spark, wordcount_pyspark
from bench.baselines.wordcount_ray import start_reducers, wordcount_ray, wordcount_reference

ODD_TEXT = "héllo wörld  héllo\n\n  tabs\tand\tspaces  \nπ π π\nlast line without newline"


@pytest.fixture(scope="module")
def zipf_text(tmp_path_factory) -> Path:
    """3,000 lines of 7 Zipf words over a 500-word vocabulary."""
    return data.write_zipf_text(tmp_path_factory.mktemp("text") / "zipf.txt", 3_000, 7, 500, seed=3)


@pytest.fixture(scope="module")
def odd_text(tmp_path_factory) -> Path:
    """Unicode words, blank lines, runs of whitespace and no final newline."""
    path = tmp_path_factory.mktemp("text") / "odd.txt"
    path.write_bytes(ODD_TEXT.encode("utf-8"))
    return path


@pytest.fixture(scope="module")
def small_graph() -> tuple[int, np.ndarray]:
    """A sparse graph with many components and isolated nodes."""
    return 400, data.random_graph_edges(400, 300, seed=5)


@pytest.fixture(scope="module")
def plain_spark():
    """A plain local Spark (or the session already active), stopped only if created here.

    The PySpark baselines run on Spark alone, not on Ray, so this is not the suite's ``spark``.
    """
    existing = SparkSession.getActiveSession()
    session = existing or local_spark(cores=2, shuffle_partitions=2, app_name="test-baselines")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if existing is None:
        session.stop()


# --- data generators (pure) -------------------------------------------------------


def test_zipf_text_shape_and_determinism(tmp_path: Path) -> None:
    a = data.write_zipf_text(tmp_path / "a.txt", 1_234, 5, 100, seed=1)
    b = data.write_zipf_text(tmp_path / "b.txt", 1_234, 5, 100, seed=1)
    assert a.read_bytes() == b.read_bytes()
    lines = a.read_text().split("\n")
    assert lines[-1] == "" and len(lines) == 1_235
    assert all(len(line.split(" ")) == 5 for line in lines[:-1])
    counts = Counter(a.read_text().split())
    assert set(counts) <= set(data.vocabulary_words(100))
    assert counts.most_common(1)[0][0] == "a"  # rank 0 is the most frequent word


def test_vocabulary_words_are_distinct_and_short_first() -> None:
    words = data.vocabulary_words(1_000)
    assert len(set(words)) == 1_000
    assert words[:3] == ["a", "b", "c"] and words[26] == "aa"
    assert [len(w) for w in words] == sorted(len(w) for w in words)


def test_random_graph_edges_are_distinct_undirected_without_self_loops() -> None:
    edges = data.random_graph_edges(50, 300, seed=2)
    assert edges.shape == (300, 2) and edges.dtype == np.int64
    assert (edges[:, 0] < edges[:, 1]).all() and edges.min() >= 0 and edges.max() < 50
    assert len({tuple(e) for e in edges.tolist()}) == 300
    assert (edges == data.random_graph_edges(50, 300, seed=2)).all()
    with pytest.raises(ValueError):
        data.random_graph_edges(4, 7)


def test_edges_round_trip(tmp_path: Path) -> None:
    edges = data.random_graph_edges(100, 80, seed=0)
    path = data.write_edges(tmp_path / "edges.txt", edges)
    assert path.read_text().splitlines()[0] == f"{edges[0, 0]} {edges[0, 1]}"
    assert (data.read_edges(path) == edges).all()


def test_epoch_bounds_cover_all_lines() -> None:
    assert data.epoch_bounds(10, 3) == [0, 3, 6, 10]
    bounds = data.epoch_bounds(3, 5)
    assert [data.epoch_of_line(bounds, i) for i in range(3)] == [1, 3, 4]


def test_wordcount_reference_by_hand(odd_text: Path) -> None:
    assert wordcount_reference(odd_text, n_epochs=2) == {
        0: {"héllo": 2, "wörld": 1},  # lines 0-1 of 5
        1: {"tabs": 1, "and": 1, "spaces": 1, "π": 3, "last": 1, "line": 1, "without": 1, "newline": 1},
    }


def test_union_find_by_hand() -> None:
    edges = np.array([[3, 4], [4, 5], [1, 2], [7, 6], [5, 3]])
    assert components_union_find(8, edges).tolist() == [0, 1, 1, 3, 3, 3, 6, 6]


def test_edge_index_proposes_only_lower_labels() -> None:
    index = EdgeIndex(np.array([[0, 1], [1, 2], [3, 2]]))
    nodes, labels = index.propose(np.array([5, 1, 9, 0]))
    assert dict(zip(nodes.tolist(), labels.tolist())) == {0: 1, 2: 0}


def test_mandelbrot_row_known_pixels() -> None:
    row = mandelbrot_row(5, width=12, height=11, max_iter=40)  # Im c = 0
    assert row.dtype == np.int32 and row.shape == (12,)
    assert row[6] == 40  # c = -0.375 is inside the main cardioid
    assert row[11] == 3  # c = 0.875: z = 0.875, 1.64..., 3.57... escapes at the third iteration


# --- Ray baselines -----------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.parametrize(
    ("n_mappers", "n_reducers", "block_bytes", "flush_lines", "n_epochs"),
    [(2, 2, 1 << 20, 200_000, 10), (3, 1, 1_000, 250, 7), (1, 3, 4_096, 100_000, 1)],
)
@pytest.mark.parametrize("counter", ["python", "arrow"])
def test_wordcount_ray_matches_reference(
    ray_session, zipf_text: Path, n_mappers: int, n_reducers: int, block_bytes: int, flush_lines: int, n_epochs: int,
    counter: str,
) -> None:
    got = wordcount_ray(zipf_text, n_epochs, n_mappers, n_reducers, block_bytes, flush_lines, counter=counter)
    assert got == wordcount_reference(zipf_text, n_epochs)


@pytest.mark.ray
def test_wordcount_ray_with_reducers_started_by_the_caller_leaves_them_running(ray_session, zipf_text: Path) -> None:
    reducers = start_reducers(2, 2)
    try:
        assert wordcount_ray(zipf_text, n_epochs=4, reducers=reducers) == wordcount_reference(zipf_text, 4)
        assert ray.get([r.close.remote(99) for r in reducers], timeout=30) == [None, None], "the caller owns them"
    finally:
        for reducer in reducers:
            ray.kill(reducer)


@pytest.mark.ray
@pytest.mark.parametrize("counter", ["python", "arrow"])
def test_wordcount_ray_odd_text_and_empty_epochs(ray_session, odd_text: Path, counter: str) -> None:
    got = wordcount_ray(odd_text, n_epochs=8, n_mappers=2, n_reducers=2, block_bytes=8, counter=counter)
    expected = wordcount_reference(odd_text, n_epochs=8)
    assert got == expected and list(got) == list(range(8)) and {} in got.values()


@pytest.mark.ray
def test_mandelbrot_ray_matches_reference(ray_session) -> None:
    got = mandelbrot_ray(width=40, height=30, max_iter=60, n_actors=2, rows_per_call=4)
    assert (got == mandelbrot_reference(40, 30, 60)).all()


@pytest.mark.ray
def test_cc_ray_matches_union_find(ray_session, small_graph: tuple[int, np.ndarray]) -> None:
    nodes, edges = small_graph
    labels, rounds, seconds = connected_components_ray(nodes, edges, n_actors=2)
    assert (labels == components_union_find(nodes, edges)).all()
    assert rounds == len(seconds) >= 2


@pytest.mark.ray
def test_cc_ray_path_needs_one_round_per_hop(ray_session) -> None:
    path = np.array([[i, i + 1] for i in range(9)])[::-1]
    labels, rounds, _ = connected_components_ray(12, path, n_actors=3)
    assert labels.tolist() == [0] * 10 + [10, 11]
    assert rounds == 10  # 9 hops for label 0 to reach node 9, plus the confirming round


# --- PySpark baselines -------------------------------------------------------------


@pytest.mark.spark
def test_wordcount_pyspark_matches_reference(plain_spark, zipf_text: Path, odd_text: Path) -> None:
    assert wordcount_pyspark(plain_spark, zipf_text, 10, min_partitions=3) == wordcount_reference(zipf_text, 10)
    assert wordcount_pyspark(plain_spark, odd_text, n_epochs=8) == wordcount_reference(odd_text, 8)


@pytest.mark.spark
def test_cc_pyspark_matches_union_find(plain_spark, tmp_path: Path) -> None:
    # A triangle, a pair, a 3-hop path written backwards and isolated nodes: few (slow) Spark rounds.
    edges = np.array([[3, 4], [4, 5], [1, 2], [7, 6], [5, 3], [12, 13], [11, 12], [10, 11]])
    path = data.write_edges(tmp_path / "edges.txt", edges)
    seconds: list[float] = []
    labels, rounds = connected_components_pyspark(plain_spark, path, 16, round_seconds=seconds)
    assert labels.tolist() == components_union_find(16, edges).tolist()
    assert labels.tolist() == [0, 1, 1, 3, 3, 3, 6, 6, 8, 9, 10, 10, 10, 10, 14, 15]
    assert rounds == len(seconds) == 4  # label 10 needs 3 hops to reach node 13, plus the confirming round


@pytest.mark.ray
def test_the_relay_times_every_message_through_the_hops_asked_for(ray_session):
    """Each message must reach the sink (the relay checks the sink's count) before the next
    goes: as many latencies as messages."""
    latencies = relay_latencies(hops=6, messages=15, warmup=2)
    assert len(latencies) == 15 and min(latencies) > 0
    with pytest.raises(ValueError, match="at least 3 hops"):
        relay_latencies(hops=2, messages=1)


@pytest.mark.ray
@pytest.mark.parametrize("parallelism", [2, 3])
def test_the_keyed_calls_baseline_makes_the_progress_calls_of_raytides_epoch(ray_session, parallelism):
    """One call per merge actor and one per quiet input actor: at parallelism 2 the three calls
    into the progress actor that raytide's keyed epoch makes (``tests/ray/test_progress_messages.py``),
    at 3 five."""
    latencies, progress_calls = keyed_calls_latencies(parallelism, epochs=12, warmup=2)
    assert len(latencies) == 12 and min(latencies) > 0
    assert progress_calls == 2 * parallelism - 1


@pytest.mark.ray
def test_the_ray_call_cost_is_the_cpu_of_the_actor_at_each_end(ray_session, monkeypatch):
    """Both ends' CPU per call is measured, positive and of the order a Ray call costs."""
    monkeypatch.setattr(ray_call_cost, "CALLS", 300)
    cost = ray_call_cost.actor_call_cpu_ms(blob_bytes=500)
    assert set(cost) == {"receive", "submit"}
    assert all(0.001 < ms < 50 for ms in cost.values()), cost


@pytest.mark.ray
def test_the_plain_ray_soak_checks_every_epoch_through_its_rescales_and_kills(ray_session):
    """The fault soak's plain-Ray baseline: every epoch fed completes with the sums of what
    was fed, across rescales (an actor started or killed, new handles handed out) and kills
    (an actor's process SIGKILLed, replaced, the epochs in flight fed again)."""
    samples: list[dict[str, int]] = []
    metrics = plain_soak(minutes=0.25, interval=0.5, pace=0.05, rescale_every_s=4, kill_every_s=5, sample_every_s=3,
                         seed=1, records=lambda epoch: [(key, epoch * 3 + i) for i in range(3) for key in range(12)],
                         widths=(3, 2), sample=samples.append, min_faults=(2, 1))
    # Faults made on until two rescales and a kill (one at load 40-90 made one rescale in the 15 s),
    # and enough epochs that they fell among them: a liveness check, not a throughput floor (a quiet
    # machine runs 150-200 in the 15 s, one at load 40-90 ran 81-90; speed is bench/'s).
    assert metrics["epochs"] >= 30 and metrics["rescales"] >= 2 and metrics["kills"] >= 1, metrics
    assert metrics["wrong"] == metrics["not_completed"] == 0, metrics
    assert len(samples) >= 3 and {"driver", "progress", "coordinator", "input/0", "keyed/1"} <= set(samples[-1])
