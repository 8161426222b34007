"""Parallel sources read inside the input replicas, on a real local Ray."""

from __future__ import annotations

from collections import Counter

import pytest

import raytide as rt
from raytide.sources import TextFileSource
from tests.ray.jobs import run_collect

pytestmark = pytest.mark.ray


def test_word_count_from_a_text_file_in_epochs_of_n_lines(ray_session, tmp_path):
    lines = [f"w{i % 7} w{i % 3} x" for i in range(5000)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n")
    flow = rt.Dataflow("textwc")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    result = run_collect(flow, {"lines": TextFileSource(str(path), lines_per_epoch=1000, batch_lines=300)}, "counts")
    expected = {e: Counter(w for line in lines[e * 1000:(e + 1) * 1000] for w in line.split()) for e in range(5)}
    assert {e: dict(r) for e, r in result.items()} == expected


def write_parquet_files(tmp_path, n_files=3, rows=400):
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for f in range(n_files):
        ids = list(range(f * rows, (f + 1) * rows))
        table = pa.table({"id": ids, "epoch": [i % 4 for i in ids], "word": [f"w{i % 11}" for i in ids]})
        path = tmp_path / f"part{f}.parquet"
        pq.write_table(table, path, row_group_size=97)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("rule", ["file", "rows", "column"])
def test_parquet_dataset_epochs(ray_session, tmp_path, rule):
    from raytide.sources import ArrowDatasetSource

    paths = write_parquet_files(tmp_path)
    kwargs = {"file": {}, "rows": {"rows_per_epoch": 250}, "column": {"epoch_column": "epoch"}}[rule]
    flow = rt.Dataflow("parquet")
    flow.input("rows").map(lambda row: row["id"]).output("ids")
    result = run_collect(flow, {"rows": ArrowDatasetSource(paths, batch_rows=64, **kwargs)}, "ids")
    expected_epoch = {"file": lambda i: i // 400, "rows": lambda i: i // 250, "column": lambda i: i % 4}[rule]
    expected = {}
    for i in range(1200):
        expected.setdefault(expected_epoch(i), []).append(i)
    assert {e: sorted(ids) for e, ids in result.items()} == expected


def test_map_batches_sees_arrow_tables_from_a_dataset(ray_session, tmp_path):
    import pyarrow as pa
    import pyarrow.compute as pc

    from raytide.sources import ArrowDatasetSource

    paths = write_parquet_files(tmp_path, n_files=2)

    def total(table):
        assert isinstance(table, pa.Table), "map_batches gets the Arrow table itself"
        return [pc.sum(table.column("id")).as_py()]

    flow = rt.Dataflow("arrowbatches")
    flow.input("rows").map_batches(total, batch_format="pyarrow").output("sums")
    result = run_collect(flow, {"rows": ArrowDatasetSource(paths)}, "sums", parallelism=1)
    assert {e: sum(v) for e, v in result.items()} == {0: sum(range(400)), 1: sum(range(400, 800))}


def test_ray_dataset_source_with_epoch_column(ray_session):
    import ray

    from raytide.integrations.ray_data import from_dataset

    ds = ray.data.from_items([{"id": i, "epoch": i % 3} for i in range(300)], override_num_blocks=5)
    flow = rt.Dataflow("raydata")
    flow.input("rows").map(lambda row: (row["epoch"], row["id"])).output("out")
    result = run_collect(flow, {"rows": from_dataset(ds, epoch_column="epoch")})
    assert {e: sorted(i for _, i in r) for e, r in result.items()} == {e: list(range(e, 300, 3)) for e in range(3)}
    assert all(e == k for k, r in result.items() for e, _ in r)


def test_ray_dataset_source_without_an_epoch_column_is_all_epoch_0(ray_session):
    import ray

    from raytide.integrations.ray_data import from_dataset

    ds = ray.data.from_items([{"id": i, "epoch": i % 3} for i in range(300)], override_num_blocks=5)
    flow = rt.Dataflow("raydata-one-epoch")
    flow.input("rows").map(lambda row: row["id"]).output("out")
    result = run_collect(flow, {"rows": from_dataset(ds)})
    assert {e: sorted(r) for e, r in result.items()} == {0: list(range(300))}
