"""In-band markers with routing-table swaps, and backpressure, on a real local Ray."""

from __future__ import annotations

import time

import pytest

import raytide as rt
from raytide.actors.markers import Marker
from raytide.core.keygroups import KeyGroupAssignment

pytestmark = pytest.mark.ray


class Tag(rt.Vertex):
    """Tags each record with the replica that processed it."""

    def on_recv(self, edge, message, time):
        self.send_by(0, [(r, self.replica) for r in message], time)


def test_marker_arrives_after_all_earlier_data_and_swaps_the_routing_table(ray_session):
    flow = rt.Dataflow("markers")
    flow.input("numbers").map(lambda x: x).exchange(lambda x: x % 16, name="route").unary(Tag, name="tag").output("out")
    everything_to_1 = KeyGroupAssignment(tuple([1] * 128), 2)
    before, after = list(range(0, 4000)), list(range(4000, 6000))
    with rt.run(flow, parallelism=2, batch_size=97) as job:
        job.push("numbers", before, epoch=0)
        job.inject_marker(Marker(1, reroute={("map_1", 0, "route"): everything_to_1}))
        job.push("numbers", after, epoch=0)
        job.close("numbers")
        job.wait(timeout=120)
        out = job.collect("out")[0]
        stats = job.replica_stats()
    seen_at_marker = sum(
        dict(s["markers"])[1]["route"] for key, s in stats.items() if "route" in key[0]
    )
    assert seen_at_marker == len(before), "records sent before the marker must all arrive before it"
    owners_before = {}
    for value, replica in out:
        if value >= 4000:
            assert replica == 1, "after the marker every key goes where the new table says"
        else:
            assert owners_before.setdefault(value % 16, replica) == replica
    assert set(owners_before.values()) == {0, 1}, "before the marker the contiguous table spreads keys"
    assert sorted(v for v, _ in out) == before + after


def test_backpressure_bounds_in_flight_batches(ray_session):
    class Slow(rt.Vertex):
        def on_recv(self, edge, message, t):
            time.sleep(0.002)
            self.send_by(0, [len(message)], t)

    flow = rt.Dataflow("backpressure")
    flow.input("numbers").map(lambda x: x, name="fast").unary(Slow, exchange=lambda x: 0, name="slow").output("out")
    bound = 4
    with rt.run(flow, parallelism=1, max_inflight=bound, batch_size=10) as job:
        job.push("numbers", list(range(3000)))
        job.close("numbers")
        job.wait(timeout=120)
        stats = job.stats()
        total = sum(n for records in job.collect("out").values() for n in records)
    assert total == 3000
    assert stats["backpressure_waits"] > 0, "the fast producer must have been held back"
    assert stats["max_inflight_seen"] <= bound
