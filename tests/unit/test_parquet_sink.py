"""The Parquet sink: one file per epoch, committed by a move, never twice."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from raytide.errors import ArgumentError
from raytide.integrations.parquet import PART, ParquetSink


def read_back(root) -> dict[int, list]:
    table = ds.dataset(str(root), format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    out: dict[int, list] = {}
    for row in rows:
        out.setdefault(row.pop("epoch"), []).append(tuple(row.values()))
    return {epoch: sorted(records) for epoch, records in out.items()}


def test_epochs_land_in_hive_partitions_and_read_back(tmp_path):
    sink = ParquetSink(str(tmp_path))
    assert sink.write(0, [("a", 1), ("b", 2)]) and sink.write(3, [("c", 5)])
    assert read_back(tmp_path) == {0: [("a", 1), ("b", 2)], 3: [("c", 5)]}
    assert (tmp_path / "epoch=0" / PART).is_file()


def test_an_epoch_is_committed_once_and_a_leftover_temporary_file_is_not_read(tmp_path):
    sink = ParquetSink(str(tmp_path))
    assert sink.write(1, [("a", 1)])
    assert not sink.write(1, [("a", 1)]), "a replayed epoch is not written again"
    (tmp_path / "epoch=2").mkdir()
    (tmp_path / "epoch=2" / "_deadbeef.parquet").write_bytes(b"a crash mid-write")
    assert not sink.committed(2)
    assert read_back(tmp_path) == {1: [("a", 1)]}
    assert sink.write(2, [("b", 2)]) and read_back(tmp_path) == {1: [("a", 1)], 2: [("b", 2)]}


def test_a_sink_needs_a_place(tmp_path):
    with pytest.raises(ArgumentError, match="directory"):
        ParquetSink("")
