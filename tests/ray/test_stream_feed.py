"""A stream input's feed on a real local Ray, with a producer of its own (no Spark): each
batch is held by a committed snapshot without waiting for the driver's other threads."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import ray

import raytide as rt
from raytide.sources.base import BlockRefs
from raytide.sources.stream import StreamReader, StreamSource

pytestmark = pytest.mark.ray

#: Seconds the consumer's polls for events last in the test below: long enough that waiting
#: for one cannot pass for the hold's own time on a slow machine.
LONG_POLL = 30.0


class ListStream(StreamSource):
    """Batches of words, one epoch each, replayed from the position asked; records when each was held."""

    def __init__(self, batches: list[list[str]]) -> None:
        self.batches = batches
        self.handed: dict[int, float] = {}
        self.held_at: dict[int, float] = {}

    def reader(self) -> StreamReader:
        return _ListReader(self)


class _ListReader(StreamReader):
    def __init__(self, source: ListStream) -> None:
        self.source = source

    def read_from(self, position: int) -> Iterator[tuple[int, Any, int]]:
        for batch_id in range(position, len(self.source.batches)):
            self.source.handed[batch_id] = time.monotonic()
            yield batch_id, BlockRefs((ray.put(self.source.batches[batch_id]),)), batch_id + 1

    def held(self, epoch: int) -> None:
        self.source.held_at[epoch] = time.monotonic()

    def stop(self) -> None:
        pass


def test_a_stream_batch_is_held_while_a_consumer_waits_for_events(ray_session, tmp_path):
    """The feed syncs with the coordinator (a pump) to learn that a snapshot holds its batch.
    A consumer of ``job.results`` waiting for an epoch used to hold the job's lock through
    each of its long polls, so every hold waited for the consumer's poll to end (a tenth of
    a second each by default, and often several in a row). Here the consumer's polls last
    :data:`LONG_POLL` and no epoch completes while the batches are fed (the output also
    waits for input ``other``): each batch must still be held at once."""
    batches = [[f"w{i}", "x", "x"] for i in range(4)]
    source = ListStream(batches)
    flow = rt.Dataflow("held-while-consumed")
    flow.input("lines").concat(flow.input("other")).count_by_key(lambda word: word).output("counts")
    with rt.run(flow, inputs={"lines": source}, parallelism=1, recovery=rt.Recovery(str(tmp_path))) as job:
        job._poll_s = LONG_POLL
        got: dict[int, list] = {}
        consumer = threading.Thread(target=lambda: got.update(job.results("counts", timeout=120)), daemon=True)
        consumer.start()
        deadline = time.monotonic() + LONG_POLL / 2
        while len(source.held_at) < len(batches) and time.monotonic() < deadline:
            time.sleep(0.01)
        holds = {batch: round(source.held_at[batch] - source.handed[batch], 2) for batch in source.held_at}
        assert len(holds) == len(batches), f"held within {LONG_POLL / 2:g} s: {holds} (seconds from hand-out)"
        job.close("other")
        consumer.join(timeout=120)
    counted = {epoch: Counter(dict(records)) for epoch, records in got.items() if records}
    assert counted == {epoch: Counter(batch) for epoch, batch in enumerate(batches)}
