"""Sources with ``event_time=``: a reader's clock (``windows/source_clock.py``) and the reader
that wraps a source's reader (``sources/event_time.py``), against a brute-force reference over
random timestamps, batchings and out-of-order arrival; a position taken after any item
resumes to exactly what the straight read gives; bad columns are refused naming the source
and the column, before data moves."""

from __future__ import annotations

import datetime
import math
import pickle
import random
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raytide as rt
from raytide.errors import GraphError, SourceError
from raytide.sources.arrow import ArrowDatasetSource
from raytide.sources.base import Reader
from raytide.sources.event_time import EventTimeReader, event_time_readers, stamps
from raytide.sources.text import TextFileSource
from raytide.windows.event_time import LateRecords


class Batches(Reader[int]):
    """A reader of fixed batches (records ``{"t": seconds, "n": number}``); its position: batches read."""

    def __init__(self, batches: list[list[dict]]) -> None:
        self.batches = batches

    def start(self) -> int:
        return 0

    def read_from(self, position: int) -> Iterator[tuple[int, list, int]]:
        for index in range(position, len(self.batches)):
            yield 0, self.batches[index], index + 1


def random_batches(rng: random.Random, delay: float) -> list[list[dict]]:
    """Records in time order, shuffled within about ``delay`` and some of them far beyond it, cut into random batches."""
    records = [{"t": round(i * 0.37 + rng.choice([0.0] * 8 + [3 * delay + 2.0]) * -rng.random(), 2), "n": i}
               for i in range(rng.randrange(1, 160))]
    arrival = sorted(records, key=lambda r: r["t"] + rng.uniform(0, delay))
    cuts = sorted(rng.sample(range(1, len(arrival)), min(len(arrival) - 1, rng.randrange(0, 12)))) if len(arrival) > 1 else []
    return [arrival[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrival)])]


def reference(batches: list[list[dict]], granularity: float, delay: float) -> tuple[list[list[int]], list[int]]:
    """From scratch: per batch, the records late against the epoch before it; and the epoch after each batch."""
    late, after, epoch, highest = [], [], 0, -math.inf
    for batch in batches:
        late.append([r["n"] for r in batch if math.floor(r["t"] / granularity) < epoch])
        highest = max(highest, *(r["t"] for r in batch))
        epoch = max(epoch, math.floor((highest - delay) / granularity))
        after.append(epoch)
    return late, after


def read_all(reader: EventTimeReader) -> list[tuple[int, list]]:
    return [(epoch, list(batch) if not isinstance(batch, LateRecords) else batch) for epoch, batch in reader]


@pytest.mark.parametrize("seed", range(60))
def test_a_reader_sends_every_record_once_at_its_epoch_and_exactly_the_late_ones_to_the_late_output(seed):
    rng = random.Random(seed)
    granularity, delay = rng.choice([0.5, 1.0, 2.0]), rng.choice([0.0, 1.0, 4.0])
    batches = random_batches(rng, delay)
    spec = rt.EventTime("t", granularity=granularity, max_delay=delay)
    reader = EventTimeReader(Batches(batches), spec, "test", late_out=True)
    items = read_all(reader)
    want_late, _ = reference(batches, granularity, delay)
    epochs = [epoch for epoch, _ in items]
    assert epochs == sorted(epochs), "epochs go back"
    late = [r["n"] for _, batch in items if isinstance(batch, LateRecords) for r in batch]
    assert sorted(late) == sorted(n for ns in want_late for n in ns)
    sent = [(epoch, r) for epoch, batch in items if not isinstance(batch, LateRecords) for r in batch]
    assert all(epoch == math.floor(r["t"] / granularity) for epoch, r in sent), "a record at another epoch"
    assert sorted(r["n"] for _, r in sent) == sorted(set(r["n"] for b in batches for r in b) - set(late)), "lost or twice"
    assert reader.late.records == len(late)
    assert reader.late.by_epoch == Counter(math.floor(r["t"] / granularity) for b in batches for r in b if r["n"] in late)


@pytest.mark.parametrize("seed", range(30))
def test_the_reader_moves_as_far_as_its_watermark_after_each_batch(seed):
    rng = random.Random(seed)
    batches = random_batches(rng, 2.0)
    _, after = reference(batches, 1.0, 2.0)
    inner = Batches(batches)
    reader = EventTimeReader(inner, rt.EventTime("t", max_delay=2.0), "test")
    reached, done = -1, 0
    for epoch, _ in reader:  # the items of batch k all come before batch k + 1 is read
        read = inner.position() - 1
        while done < read:
            assert reached >= after[done] or after[done] == 0, (done, reached, after)
            done += 1
        reached = max(reached, epoch)


@pytest.mark.parametrize("seed", range(25))
def test_a_position_taken_after_any_item_resumes_to_exactly_the_straight_read(seed):
    rng = random.Random(seed)
    batches = random_batches(rng, 3.0)
    spec = rt.EventTime("t", granularity=rng.choice([1.0, 2.5]), max_delay=3.0)
    straight = EventTimeReader(Batches(batches), spec, "test", late_out=True)
    items, positions = [], [straight.position()]
    for item in straight:
        items.append(item)
        positions.append(pickle.loads(pickle.dumps(straight.position())))
    for taken, position in enumerate(positions):
        resumed = EventTimeReader(Batches(batches), spec, "test", late_out=True)
        resumed.seek(position)
        assert list(resumed) == items[taken:], taken
        assert resumed.late.records == straight.late.records


def test_arrow_timestamps_dates_and_seconds_become_seconds():
    t = datetime.datetime(2024, 5, 1, 12, 0, 30, tzinfo=datetime.timezone.utc)
    table = pa.table({"ts": pa.array([t], pa.timestamp("ms", tz="UTC")), "d": pa.array([t.date()]),
                      "s": [t.timestamp()], "i": pa.array([int(t.timestamp())], pa.int32())})
    for column in ("ts", "s", "i"):
        assert stamps(rt.EventTime(column), table, "x").tolist() == [t.timestamp()]
    assert stamps(rt.EventTime("d"), table, "x").tolist() == [t.timestamp() - 43230]


def test_a_missing_or_mistyped_column_is_refused_naming_the_source_and_the_column(tmp_path):
    path = str(tmp_path / "clicks.parquet")
    pq.write_table(pa.table({"t": ["noon"], "page": ["a"]}), path)
    with pytest.raises(SourceError, match=r"Arrow dataset '.*clicks.parquet': event_time column 'when' is not a column"):
        event_time_readers(ArrowDatasetSource(path, event_time="when"), "clicks", None, [])
    with pytest.raises(SourceError, match=r"event_time column 't' has type string"):
        event_time_readers(ArrowDatasetSource(path), "clicks", rt.EventTime("t"), [])
    text = tmp_path / "lines.txt"
    text.write_text("1 a\n")
    with pytest.raises(SourceError, match="text source .*lines.txt.*: event_time column 't'.*without columns"):
        event_time_readers(TextFileSource(str(text), event_time="t"), "lines", None, [])
    with pytest.raises(SourceError, match="epoch_column, rows_per_epoch or event_time"):
        event_time_readers(ArrowDatasetSource(path, rows_per_epoch=5, event_time="t"), "clicks", None, [])
    with pytest.raises(GraphError, match="late output is part of the dataflow"):
        event_time_readers(ArrowDatasetSource(path, event_time=rt.EventTime("t", late_output="x")), "c", None, [])


def test_a_text_source_with_a_function_reads_each_line_at_its_time(tmp_path):
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"{t} w{t}\n" for t in [3, 1, 12, 2, 25, 11]))
    source = TextFileSource(str(text), event_time=lambda line: float(line.split()[0]))
    [reader] = event_time_readers(source, "lines", rt.EventTime("t", granularity=10, max_delay=20), source.readers(1))
    assert [(epoch, list(batch)) for epoch, batch in reader if batch] == [
        (0, ["3 w3", "1 w1", "2 w2"]), (1, ["12 w12", "11 w11"]), (2, ["25 w25"])]


def test_a_bad_timestamp_read_in_a_replica_names_the_source_the_reader_or_batch_the_record_and_what_was_wrong():
    """What a replica reads (a source's reader, a stream's share) is refused record by record:
    a record without the column, one of the wrong type, one whose timestamp function fails, and
    in Arrow columns a null or an infinite time, each named by its position in the batch."""
    from raytide.sources.clocked_stream import ClockedStream

    spec = rt.EventTime("t")
    for batch, problem in [
        ([{"t": 1.0}, {"x": 2}], r"record 1 of its batch \(\{'x': 2\}\) has no timestamp 't'"),
        ([{"t": 1.0}, {"t": 2.0}, {"t": "noon"}], r"record 2 of its batch .* has a bad timestamp: 'noon' \(str\) is not a timestamp"),
        (pa.table({"t": [1.0, None, None]}), r"event_time column 't' has 2 null value\(s\), the first in record 1 of its batch"),
        (pa.table({"t": [1.0, 2.0, math.inf]}), r"event_time column 't' has a value that is not finite \(inf\) in record 2 of its batch"),
    ]:
        with pytest.raises(SourceError, match=rf"^clicks reader 1: {problem}"):
            stamps(spec, batch, "clicks reader 1")
    failing = rt.EventTime(lambda record: 1 / record["d"])
    with pytest.raises(SourceError, match=r"record 0 of its batch \(\{'d': 0\}\) has no timestamp: the timestamp function "
                                          r"raised ZeroDivisionError"):
        stamps(failing, [{"d": 0}], "lines reader 0")
    [share, _] = ClockedStream(spec, "query 'clicks'", False).shares([[{"t": 5.0}, {"t": None}]], 4, 2)
    with pytest.raises(SourceError, match=r"^query 'clicks' batch 4 replica 0: record 1 of its batch \(\{'t': None\}\) has a "
                                          r"bad timestamp: None \(NoneType\) is not a timestamp"):
        share.clock(None).take(list(share.refs))
