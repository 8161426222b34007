"""The total of ``job.wait()``'s and ``job.results()``'s progress bar (raytide.driver.views): counted
from the sizes of the inputs where they say (lists, text and Parquet files, Parquet rows over
``rows_per_epoch``), from the epochs pushed and a stream's batches where the driver feeds the
input, unknown otherwise; and the bar itself, which appears once its total is known and follows
it as it grows. No Ray: a job is stood in for by the attributes the total reads."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from raytide.driver import views
from raytide.driver.views import EpochBar, JobViews, input_epochs
from raytide.integrations.ray_data import RayDatasetSource
from raytide.sources.arrow import ArrowDatasetSource
from raytide.sources.iterable import IterableSource
from raytide.sources.text import TextFileSource


@pytest.fixture
def parquet_files(tmp_path):
    """Three Parquet files of 4, 4 and 2 rows."""
    paths = []
    for index, rows in enumerate((4, 4, 2)):
        paths.append(str(tmp_path / f"part-{index}.parquet"))
        pq.write_table(pa.table({"x": list(range(rows)), "t": [index] * rows}), paths[-1])
    return paths


def test_the_sizes_of_sources_give_their_epochs(parquet_files, tmp_path):
    assert input_epochs([[1], [2], [3]]) == 3 and input_epochs(IterableSource([[1], [2]], "x")) == 2
    assert input_epochs(iter([[1]])) is None and input_epochs(IterableSource(iter([[1]]), "x")) is None
    assert input_epochs(TextFileSource(["a.txt", "b.txt"])) == 2 and input_epochs(TextFileSource("a.txt")) == 1  # one epoch per file
    assert input_epochs(TextFileSource("a.txt", lines_per_epoch=10)) is None  # its lines are not counted
    assert input_epochs(ArrowDatasetSource(parquet_files)) == 3  # one epoch per file
    assert input_epochs(ArrowDatasetSource(parquet_files, rows_per_epoch=3)) == 4  # 10 rows from the metadata
    assert input_epochs(ArrowDatasetSource(parquet_files, epoch_column="t")) is None
    pacsv.write_csv(pa.table({"x": [1, 2, 3]}), str(tmp_path / "rows.csv"))
    assert input_epochs(ArrowDatasetSource(str(tmp_path / "rows.csv"), format="csv", rows_per_epoch=2)) is None  # no metadata
    assert input_epochs(RayDatasetSource(None)) == 1 and input_epochs(RayDatasetSource(None, epoch_column="t")) is None


class Stream:
    def __init__(self, available):
        self.reader = SimpleNamespace(available=lambda: available)


def job(given, inputs, read_in_replicas=(), pushed=-1, streams=None, event_time=()):
    """What a job's progress total reads: its given inputs, plan inputs, readers, streams, most opened epoch."""
    stand_in = JobViews()
    stand_in.name, stand_in.plan = "job", SimpleNamespace(inputs=inputs)
    stand_in._given_inputs = given
    stand_in._inputs = SimpleNamespace(readers=dict.fromkeys(read_in_replicas), event_time=lambda name: name in event_time)
    stand_in._feeders = SimpleNamespace(streams=streams or {})
    stand_in._outputs = SimpleNamespace(most_opened=pushed)
    return stand_in


def test_the_total_of_a_job(parquet_files):
    assert job({"a": [[1]] * 5}, ["a"]).progress_total() == 5
    files = ArrowDatasetSource(parquet_files)
    assert job({"f": files}, ["f"], read_in_replicas=["f"]).progress_total() == 3
    assert job({"f": ArrowDatasetSource(parquet_files, epoch_column="t")}, ["f"], ["f"]).progress_total() is None
    assert job({}, ["p"], pushed=6).progress_total() == 7  # epochs 0-6 pushed or advanced to
    assert job({}, ["p"]).progress_total() is None  # nothing pushed yet
    assert job({"f": files}, ["f", "p"], ["f"], pushed=9).progress_total() == 10  # the larger
    assert job({}, ["s"], pushed=2, streams={"s": Stream(8)}).progress_total() == 8  # Spark planned 8 batches
    assert job({}, ["s"], pushed=2, streams={"s": Stream(8)}, event_time=["s"]).progress_total() == 3  # batches are no epochs


def test_the_bar_appears_once_its_total_is_known_and_follows_it(monkeypatch):
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    monkeypatch.setattr(views, "TOTAL_EVERY_S", 0.0)
    totals = iter([None, 3, 5, 5])
    bar = EpochBar(lambda: next(totals), "job")
    assert bar.bar is None  # not known yet
    bar.show({"out": 0})
    assert (bar.bar.total, bar.bar.n) == (3, 1)
    bar.show({"out": 3})
    assert (bar.bar.total, bar.bar.n) == (5, 4)
    bar.close()
    never = EpochBar(lambda: pytest.fail("read with progress=False"), "job", enabled=False)
    never.show({"out": 1})
    assert never.bar is None
