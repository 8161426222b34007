"""What one Ray actor call costs the actor at each end, in CPU time, on this machine.

The progress-load simulation (``bench progress_scale``) times the progress core in one
process; on Ray the central actor also pays, per call it takes, Ray's receiving of the
call, and per status push it sends, Ray's submitting of a call. Both are measured here on
plain actors, as the CPU time of the process (``time.process_time`` inside it, every
thread), over many calls after a warm-up.
"""

from __future__ import annotations

import time

import ray

#: Calls timed at each end, after as many of warm-up.
CALLS = 2_000


@ray.remote
class _Sink:
    """Takes calls carrying one bytes argument, and does nothing with them."""

    def take(self, blob: bytes) -> None:
        pass

    def cpu(self) -> float:
        return time.process_time()


@ray.remote
class _Source:
    """Sends fire-and-forget calls to a sink, as the progress actor sends status pushes."""

    def __init__(self, sink: ray.actor.ActorHandle) -> None:
        self.sink = sink

    def send(self, count: int, blob: bytes) -> float:
        """CPU seconds this process spent submitting ``count`` calls."""
        started = time.process_time()
        calls = [self.sink.take.remote(blob) for _ in range(count)]
        spent = time.process_time() - started
        ray.get(calls)
        return spent


def actor_call_cpu_ms(blob_bytes: int = 200) -> dict[str, float]:
    """Milliseconds of CPU an actor spends per call it takes (``receive``) and per
    fire-and-forget call it submits (``submit``), with a ``blob_bytes`` argument."""
    blob = b"x" * blob_bytes
    sink = _Sink.remote()  # type: ignore[attr-defined]
    source = _Source.remote(sink)  # type: ignore[attr-defined]
    try:
        ray.get([sink.take.remote(blob) for _ in range(CALLS)])  # warm-up
        ray.get(source.send.remote(CALLS, blob))
        before = ray.get(sink.cpu.remote())
        ray.get([sink.take.remote(blob) for _ in range(CALLS)])
        receive = (ray.get(sink.cpu.remote()) - before) / CALLS
        submit = ray.get(source.send.remote(CALLS, blob)) / CALLS
        return {"receive": receive * 1000, "submit": submit * 1000}
    finally:
        ray.kill(sink)
        ray.kill(source)
