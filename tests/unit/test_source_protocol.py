"""The Source protocol without Ray: positions and resume of every reader, as_source, the epoch-column check."""

from __future__ import annotations

from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raytide.errors import EpochColumnError, GraphError, SourceError
from raytide.sources import ArrowDatasetSource, TextFileSource
from raytide.sources import text as text_module
from raytide.sources.base import Placement, Source
from raytide.sources.epoch_column import EpochColumn
from raytide.sources.iterable import IterableSource, as_source
from tests.positions import check_resume_everywhere

line = st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=8)
FIXTURES = [HealthCheck.function_scoped_fixture]


def lines_of(epoch, batch):
    return [(epoch, text) for text in batch]


def ids_of(epoch, table):
    return [(epoch, row_id) for row_id in table.column("id").to_pylist()]


# --------------------------------------------------------------------------- text files


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURES)
@given(st.lists(st.lists(line, max_size=25), min_size=1, max_size=3), st.integers(1, 3), st.booleans(),
       st.one_of(st.none(), st.integers(1, 6)), st.integers(1, 4), st.sampled_from([1, 2, 5, 16, 4 << 20]))
def test_a_text_reader_resumes_exactly_from_any_position(tmp_path_factory, files, readers, trailing, per_epoch, batch,
                                                         chunk):
    """Tiny chunks move the resume anchor often and split lines and characters between reads."""
    tmp = tmp_path_factory.mktemp("text")
    paths = []
    for i, lines in enumerate(files):
        path = tmp / f"f{i}.txt"
        path.write_text("\n".join(lines) + ("\n" if trailing and lines else ""), encoding="utf-8")
        paths.append(str(path))
    source = TextFileSource(paths, lines_per_epoch=per_epoch, batch_lines=batch)
    got = []
    with mock.patch.object(text_module, "CHUNK_BYTES", chunk):
        for index in range(readers):
            got += check_resume_everywhere(lambda index=index: source.readers(readers)[index], lines_of)
    written = [open(p, encoding="utf-8", newline="").read() for p in paths]
    assert len(got) == sum(text.count("\n") + (not text.endswith("\n") and text != "") for text in written)


def test_a_text_position_is_a_byte_offset_within_the_readers_range(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    size = path.stat().st_size
    reader = TextFileSource(str(path), batch_lines=10).readers(2)[1]
    iterator = iter(reader)
    next(iterator)
    position = reader.position()
    assert size // 2 <= position.offset <= size and position.skip == 10
    with pytest.raises(SourceError, match="is not one of its positions"):
        TextFileSource(str(path)).readers(2)[1].seek(type(position)(0, 0, 0, 0))  # reader 0's range, not 1's


# --------------------------------------------------------------------------- Arrow datasets


def write_dataset(directory, sizes, row_group, epochs):
    paths, next_id = [], 0
    for f, size in enumerate(sizes):
        ids = list(range(next_id, next_id + size))
        next_id += size
        epoch_column = pa.array([epochs[i % len(epochs)] for i in ids], pa.int64())
        table = pa.table({"id": pa.array(ids, pa.int64()), "epoch": epoch_column})
        path = directory / f"part{f}.parquet"
        pq.write_table(table, path, row_group_size=row_group)
        paths.append(str(path))
    return paths


def expected_epoch(rule, per, sizes, epochs):
    """The brute-force epoch of every row id under each rule."""
    file_of = [f for f, size in enumerate(sizes) for _ in range(size)]
    return {"file": lambda i: file_of[i], "rows": lambda i: i // per, "column": lambda i: epochs[i % len(epochs)]}[rule]


@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURES)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=3), st.integers(1, 9), st.integers(1, 7),
       st.sampled_from(["file", "rows", "column"]), st.integers(1, 11),
       st.lists(st.integers(0, 4), min_size=1, max_size=5), st.integers(1, 3))
def test_an_arrow_reader_resumes_exactly_from_any_position(tmp_path_factory, sizes, row_group, batch_rows, rule, per,
                                                           epochs, readers):
    paths = write_dataset(tmp_path_factory.mktemp("arrow"), sizes, row_group, epochs)
    rule_args = {"file": {}, "rows": {"rows_per_epoch": per}, "column": {"epoch_column": "epoch"}}[rule]
    source = ArrowDatasetSource(paths, batch_rows=batch_rows, **rule_args)
    got = []
    for index in range(readers):
        got += check_resume_everywhere(lambda index=index: source.readers(readers)[index], ids_of)
    epoch_of = expected_epoch(rule, per, sizes, epochs)
    assert sorted(got) == sorted((epoch_of(i), i) for i in range(sum(sizes)))


def test_an_arrow_dataset_without_its_epoch_column_is_refused_before_reading(tmp_path):
    paths = write_dataset(tmp_path, [3], 2, [0])
    with pytest.raises(EpochColumnError, match=r"Arrow dataset .*part0.parquet.*: epoch column 'day' is not a column"):
        ArrowDatasetSource(paths, epoch_column="day").readers(1)


# --------------------------------------------------------------------------- plain iterables


def test_a_list_resumes_from_any_epoch_count():
    source = as_source([[1, 2], [], [3]], "numbers")
    assert isinstance(source, IterableSource) and source.placement is Placement.DRIVER
    check_resume_everywhere(lambda: source.readers(4)[0], lambda epoch, batch: [(epoch, r) for r in batch])


def test_a_generator_goes_forward_but_cannot_be_rewound():
    source = as_source((records for records in [["a"], ["b"], ["c"], ["d"]]), "letters")
    reader = source.reader()
    reader.seek(1)  # forward: epoch 0 is skipped, not read
    iterator = iter(reader)
    assert next(iterator) == (1, ["b"]) and reader.position() == 2
    again = source.reader()
    with pytest.raises(SourceError, match=r"input 'letters' cannot be rewound to epoch 1: it reads a one-shot "
                                          r"generator, which has already given epochs 0 to 1"):
        again.seek(1)
    again.seek(2)  # where the generator is: nothing to rewind
    assert list(again) == [(2, ["c"]), (3, ["d"])]


@pytest.mark.parametrize("thing", ["abc", b"abc", {0: [1]}, 42, None])
def test_anything_else_is_refused_naming_the_input_and_the_type(thing):
    with pytest.raises(GraphError, match=rf"input 'x': cannot read a {type(thing).__name__}"):
        as_source(thing, "x")


def test_a_source_is_taken_as_it_is_and_a_position_of_another_kind_is_refused(tmp_path):
    source = TextFileSource(str(tmp_path))
    assert as_source(source, "x") is source and isinstance(source, Source)
    reader = as_source([[1]], "x").reader()
    with pytest.raises(SourceError, match="its positions are ints"):
        reader.seek("3")


# --------------------------------------------------------------------------- the epoch column


COLUMN = EpochColumn("day", "Test source")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), max_size=30), st.sampled_from([pa.int8(), pa.int32(), pa.int64(), pa.uint16()]))
def test_the_epochs_of_a_column_are_its_distinct_values_sorted(values, typ):
    values = [v % 2 ** (typ.bit_width - 1) for v in values]  # every value fits the type
    table = pa.table({"day": pa.array(values, typ)})
    assert COLUMN.epochs(table) == sorted(set(values))


@pytest.mark.parametrize(("table", "problem"), [
    (pa.table({"x": [1]}), r"is not a column \(columns: \['x'\]\)"),
    (pa.table({"day": ["1"]}), "has type string"),
    (pa.table({"day": [1.0]}), "has type double"),
    (pa.table({"day": pa.array([1, None, None], pa.int64())}), r"has 2 null value\(s\)"),
    (pa.table({"day": [3, -2, -7]}), "has the negative value -7"),
])
def test_an_unfit_epoch_column_is_one_error_with_one_message_shape(table, problem):
    with pytest.raises(EpochColumnError, match=rf"^Test source: epoch column 'day' {problem}; epochs must be "
                                               r"non-negative integers$"):
        COLUMN.epochs(table)
