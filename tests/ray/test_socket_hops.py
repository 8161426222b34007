"""Socket hops on a real local Ray (:mod:`raytide.actors.socket_hops`): a channel switched from
Ray calls to its socket mid-stream stays FIFO, and the data went by socket."""

from __future__ import annotations

import sys
import time as _time

import pytest

import raytide as rt

pytestmark = pytest.mark.ray


class ArrivalOrder(rt.Vertex):
    """Records the order its records arrived in, per epoch; emits it when the epoch is complete."""

    def __init__(self) -> None:
        self.arrived: dict = {}

    def arrive(self, message, time) -> None:
        if time not in self.arrived:
            self.arrived[time] = []
            self.notify_at(time)
        self.arrived[time].extend(message)

    def on_notify(self, time):
        self.send_by(0, [self.arrived.pop(time)], time)


class InOrder(ArrivalOrder):
    """Busy at its first batch (holding the GIL, so its socket's address is answered late, on
    another thread), so that the sender's Ray calls queue up behind it before it could switch."""

    def on_recv(self, edge, message, time):
        if not self.arrived:  # the GIL held for 0.3 s: no other thread of this process runs meanwhile
            interval = sys.getswitchinterval()
            sys.setswitchinterval(1.0)
            try:
                until = _time.perf_counter() + 0.3
                while _time.perf_counter() < until:
                    pass
            finally:
                sys.setswitchinterval(interval)
        self.arrive(message, time)


def _per_sender(arrived: list[int]) -> list[list[int]]:
    """The records as each input replica sent them: the driver deals a push's batches of
    :data:`BATCH` records to the two replicas in turn."""
    return [[x for x in arrived if x // BATCH % 2 == replica] for replica in (0, 1)]


#: Records per batch the driver deals.
BATCH = 20


def test_a_channel_switched_to_its_socket_mid_stream_stays_fifo(ray_session, monkeypatch):
    """Two senders, one receiver: the first batches go by Ray call while the receiver's socket
    address is asked, the rest by socket once every Ray call ran. A switch that did not wait for
    them (a frame overtaking a Ray call still queued) shows as a sender's records out of order."""
    monkeypatch.setenv("RAYTIDE_SOCKET_HOPS", "1")  # on whatever the environment says (raytide.actors.socket_hops.SETTING)
    flow = rt.Dataflow("fifo-switch")
    flow.input("numbers").exchange(lambda x: 0).unary(InOrder).output("out")
    numbers = list(range(6000))
    with rt.run(flow, parallelism=2, batch_size=BATCH) as job:
        job.push("numbers", numbers, 0)
        job.close("numbers")
        job.wait(timeout=120)
        (arrived,) = job.collect("out")[0]
        frames = job.stats()["socket_frames"]
    assert sorted(arrived) == numbers
    assert _per_sender(arrived) == _per_sender(numbers)
    assert frames > 0, "no batch went by socket"


class SlowInOrder(ArrivalOrder):
    """Takes 2 ms a batch (asleep, the GIL free, the host's lock of the replica's calls held):
    frames queue up at its socket."""

    def on_recv(self, edge, message, time):
        _time.sleep(0.002)
        self.arrive(message, time)


def test_a_connect_mid_stream_keeps_every_channel_fifo(ray_session, monkeypatch):
    """Every replica told its peers again while frames wait at a slow receiver's socket
    (as a job without ``recovery=`` does at its first rescale), then more batches: none may
    overtake the frames written before. A ``connect`` that closed the sockets sent them by
    Ray call, which took the receiver's lock between two frames (failed 8 runs of 8)."""
    monkeypatch.setenv("RAYTIDE_SOCKET_HOPS", "1")
    flow = rt.Dataflow("fifo-connect")
    flow.input("numbers").exchange(lambda x: 0).unary(SlowInOrder).output("out")
    numbers = list(range(3200))
    with rt.run(flow, parallelism=2, batch_size=BATCH) as job:
        placement = job.placement
        job.push("numbers", numbers[:800], 0)
        _time.sleep(1.0)
        job.push("numbers", numbers[800:1600], 0)
        for key in placement.peers:
            placement.peers[key].connect.remote(placement.peers_of(key), placement.unbounded, placement.route(key), None)
        job.push("numbers", numbers[1600:], 0)
        job.close("numbers")
        job.wait(timeout=120)
        (arrived,) = job.collect("out")[0]
        frames = job.stats()["socket_frames"]
    assert sorted(arrived) == numbers
    for got, sent in zip(_per_sender(arrived), _per_sender(numbers)):
        first = next((i for i, (a, b) in enumerate(zip(got, sent)) if a != b), None)
        assert first is None, f"record {got[first]} arrived where {sent[first]} was due"
    assert frames > 0, "no batch went by socket"


def test_the_drivers_calls_switch_to_an_input_replicas_socket_in_order(ray_session, monkeypatch):
    """The driver's pushes into an input replica go by Ray call while its socket's address is
    asked (the replica busy at its first batch, holding the GIL, answers it late, on another
    thread), then by socket once every Ray call to it ran (:mod:`raytide.driver.input_links`).
    A switch that did not wait shows as the records out of the order pushed."""
    monkeypatch.setenv("RAYTIDE_SOCKET_HOPS", "1")
    flow = rt.Dataflow("driver-switch")
    flow.input("numbers").unary(InOrder).output("out")
    numbers = list(range(4000))
    with rt.run(flow, parallelism=1, batch_size=BATCH) as job:
        for start in range(0, len(numbers), 100):
            job.push("numbers", numbers[start:start + 100], 0)
        job.close("numbers")
        job.wait(timeout=120)
        (arrived,) = job.collect("out")[0]
        stats = job.stats()
    assert arrived == numbers
    assert stats["input_frames"] > stats["input_calls"] // 2, "the driver's calls did not go by socket"
