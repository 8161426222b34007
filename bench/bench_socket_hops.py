"""A hop between two replicas: a Ray actor call against raytide's socket hop (issue 76).

The prototype's measurement, inside Ray actors on this machine: a small batch (10
integers) relayed around a ring of three Ray actors for six hops, one message after the
other, timed inside the first actor (send to return, ``time.perf_counter``). At every hop
the actor does raytide's per-message Python of a ``receive_many`` call: the frame taken
apart (``unframe``), its batch unpacked (``unpack_for``), packed again (``pack``) and framed
(``frame``) with its header (incarnation, channel, vertex, timestamp), as a replica does
with a batch it receives and one it sends.

* ``ray_6_hops``: each hop a fire-and-forget Ray actor call (``forward.remote``), as
  :class:`~raytide.actors.ray_transport.RayTransport` makes them;
* ``socket_6_hops``: each hop a frame on a Unix socket through the code the transport uses
  (:mod:`raytide.actors.socket_hops`: the receiver's reader thread on a selector, its
  delivery thread taking the host's lock of the replica's calls, an acknowledgement per
  frame read back by the sender);
* ``socket_floor_6_hops``: the same sockets and threads, the per-message Python left out.

Metrics are in microseconds per message of six hops (median and p99 of ``messages``), and
per hop (the median over six).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import ray

from bench.harness import ensure_ray
from raytide.actors.socket_hops import Inbound, Outbound
from raytide.physical.frames import DATA, Frame
from raytide.physical.pickled import Packed, frame
from raytide.physical.protocol import ChannelId
from raytide.physical.wire import pack, unframe, unpack_for
from raytide.progress.timestamps import Timestamp

PARAMS = {"messages": 2000, "hops": 6, "ring": 3}
RATIOS = [("Ray call / socket hop, with raytide's per-message Python (median)", "ray_hop_us", "socket_hop_us"),
          ("socket hop with the per-message Python / without (median)", "socket_hop_us", "socket_floor_hop_us")]
REPEAT = 3
WARMUP = 100
#: Seconds the ring's first actor waits for a message to come back before it gives up.
ROUND_TIMEOUT_S = 30.0


def _first_frame() -> Packed:
    header = (0, ChannelId("stage1", 0, 0, 0), "stage2", Timestamp(1))
    return frame([(header, *pack(list(range(10))))], [])


def _work(framed: Packed) -> Packed:
    """A replica's Python for one batch in and one out (see the module docstring)."""
    calls, riding = unframe(framed)
    (header, payload, packed), = calls
    batch = unpack_for(payload, packed, lambda: "bench")
    return frame([(header, *pack(batch))], riding)


@ray.remote(num_cpus=0, concurrency_groups={"drive": 1})
class RingMember:
    """One actor of the ring: forwards a message to the next, by Ray call or by socket."""

    def __init__(self, work: bool) -> None:
        self.work = work
        self.lock = threading.RLock()  # the host's lock of the replica's calls
        self.inbound = Inbound("bench", self._delivered)
        self.back = threading.Event()
        self.following: Any = None
        self.out: Outbound | None = None

    def path(self) -> str:
        return self.inbound.path

    def link(self, following: Any, path: str) -> None:
        self.following = following
        self.out = Outbound("next", path)

    def forward(self, framed: Packed, hops_left: int) -> None:
        """The Ray hop."""
        framed = _work(framed) if self.work else framed
        if hops_left:
            self.following.forward.remote(framed, hops_left - 1)
        else:
            self.back.set()

    def _delivered(self, got: Frame) -> None:
        """The socket hop: the hop count rides as the first byte of the blob's copy."""
        with self.lock:
            hops_left, framed = got.packed[0], got.packed[1:]  # type: ignore[index]  # bytes
            framed = _work(framed) if self.work else framed
            if hops_left:
                assert self.out is not None
                self.out.send(DATA, bytes([hops_left - 1]) + framed, None)  # type: ignore[operator]  # bytes
            else:
                self.back.set()

    @ray.method(concurrency_group="drive")
    def drive(self, messages: int, hops: int, by_socket: bool) -> list[float]:
        """Seconds for each message to go round ``hops`` hops, one after the other."""
        times = []
        framed = _first_frame()
        for _ in range(WARMUP + messages):
            self.back.clear()
            started = time.perf_counter()
            if by_socket:
                assert self.out is not None
                self.out.send(DATA, bytes([hops - 1]) + framed, None)  # type: ignore[operator]  # bytes
            else:
                self.following.forward.remote(framed, hops - 1)
            if not self.back.wait(ROUND_TIMEOUT_S):
                raise TimeoutError(f"a message did not come back round the ring within {ROUND_TIMEOUT_S} s")
            times.append(time.perf_counter() - started)
        return times[WARMUP:]


def _ring(size: int, work: bool) -> list[Any]:
    members = [RingMember.remote(work) for _ in range(size)]
    paths = ray.get([member.path.remote() for member in members])
    ray.get([member.link.remote(members[(i + 1) % size], paths[(i + 1) % size]) for i, member in enumerate(members)])
    return members


def _us(times: list[float], hops: int, name: str) -> dict[str, float]:
    ordered = sorted(times)
    median = statistics.median(ordered)
    return {f"{name}_{hops}_hops_median_us": median * 1e6, f"{name}_{hops}_hops_p99_us": ordered[int(len(ordered) * 0.99)] * 1e6,
            f"{name}_hop_us": median * 1e6 / hops}


def measure(messages: int, hops: int, ring: int) -> dict[str, float]:
    ensure_ray()
    results: dict[str, float] = {}
    for name, work, by_socket in (("ray", True, False), ("socket", True, True), ("socket_floor", False, True)):
        members = _ring(ring, work)
        try:
            results.update(_us(ray.get(members[0].drive.remote(messages, hops, by_socket)), hops, name))
        finally:
            for member in members:
                ray.kill(member)
    return results
