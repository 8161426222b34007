"""The bookkeeping of a pool of warm hosts, as pure logic: which host does what, which to
lease, which to release, how many to start.

A host is ``starting`` (created, not yet answering), ``idle`` (clean, waiting for a job),
``leased`` (a job's), or ``resetting`` (given back, its reset not confirmed yet). Only an
idle host is leased again: a host whose reset failed or never answered is dropped (the
shell kills it), so a job never inherits a host in an unknown state. Idle hosts are
released once the pool has not been used for ``idle_timeout`` seconds; while it is in
use it keeps ``spares`` idle vertex hosts started, for the next job (or, later, a
recovery or a scale-out) to take without starting a process.

:class:`~raytide.driver.pool.HostPool` performs what this decides, on Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

HostKind = Literal["vertex", "progress", "coordinator"]
HostState = Literal["starting", "idle", "leased", "resetting"]


@dataclass
class HostRecord:
    """One host of the pool."""

    number: int
    kind: HostKind
    state: HostState
    since: float  # when it entered its state


class PoolBook:
    """The states of a pool's hosts, and the decisions taken on them."""

    def __init__(self, idle_timeout: float, spares: int) -> None:
        self.idle_timeout, self.spares = idle_timeout, spares
        self.hosts: dict[int, HostRecord] = {}
        self.next_number = 0
        self.last_used = float("-inf")

    def _new(self, kind: HostKind, state: HostState, now: float) -> int:
        number = self.next_number
        self.next_number += 1
        self.hosts[number] = HostRecord(number, kind, state, now)
        return number

    def _set(self, number: int, state: HostState, now: float) -> None:
        record = self.hosts[number]
        record.state, record.since = state, now

    def of(self, kind: HostKind, state: HostState) -> list[int]:
        """The hosts of ``kind`` in ``state``, oldest first."""
        return [n for n, r in self.hosts.items() if r.kind == kind and r.state == state]

    def lease(self, kind: HostKind, count: int, now: float) -> tuple[list[int], list[int]]:
        """Lease ``count`` hosts of ``kind``: ``(reused, new)``, idle hosts first (the most
        recently used, whose caches are warmest), then new ones the shell must start."""
        self.last_used = now
        idle = sorted(self.of(kind, "idle"), key=lambda n: self.hosts[n].since, reverse=True)[:count]
        for number in idle:
            self._set(number, "leased", now)
        new = [self._new(kind, "leased", now) for _ in range(count - len(idle))]
        return idle, new

    def give_back(self, numbers: list[int], now: float) -> None:
        """A job is done with these hosts; the shell resets them."""
        self.last_used = now
        for number in numbers:
            if number in self.hosts:
                self._set(number, "resetting", now)

    def started(self, number: int, now: float) -> None:
        """A spare answered its first ping: it is idle."""
        if number in self.hosts and self.hosts[number].state == "starting":
            self._set(number, "idle", now)

    def reset_done(self, number: int, clean: bool, now: float) -> None:
        """A reset answered: clean hosts become idle, others are dropped (the shell kills them)."""
        if number not in self.hosts or self.hosts[number].state != "resetting":
            return
        if clean:
            self._set(number, "idle", now)
        else:
            del self.hosts[number]

    def drop(self, number: int) -> None:
        """The host died or was killed."""
        self.hosts.pop(number, None)

    def to_release(self, now: float) -> list[int]:
        """Idle and starting hosts to kill: all of them once the pool has been unused for
        ``idle_timeout`` (spares included); they leave the book."""
        if now - self.last_used < self.idle_timeout:
            return []
        gone = [n for n, r in self.hosts.items() if r.state in ("idle", "starting")]
        for number in gone:
            del self.hosts[number]
        return gone

    def spares_to_start(self, now: float) -> list[int]:
        """New vertex hosts to start so that ``spares`` are idle or starting (while the pool is in use)."""
        if now - self.last_used >= self.idle_timeout:
            return []
        ready = len(self.of("vertex", "idle")) + len(self.of("vertex", "starting"))
        return [self._new("vertex", "starting", now) for _ in range(self.spares - ready)]

    def stuck(self, now: float, timeout: float) -> list[int]:
        """Hosts whose reset or start has not answered within ``timeout``: they leave the book
        (the shell kills them: a host busy in user code since its job ended is not reused)."""
        late = [n for n, r in self.hosts.items() if r.state in ("resetting", "starting") and now - r.since > timeout]
        for number in late:
            del self.hosts[number]
        return late
