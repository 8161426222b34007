"""The calls a recovery or a rescale sends its input replicas again, sent after it returns
(:class:`InputReplay`): a rewind hands them over, and the rescale does not wait for them.

A rewind (:meth:`~raytide.driver.inputs.InputFeeds.rewind`) puts, per input replica, the
logged calls after its restored position (:meth:`~raytide.supervisor.replay.ReplayLog.after`)
into that replica's pending queue, under every input's lock, and returns: nothing waits for
the windows there. Before any new call into an input, the thread making it (a feeder, the
thread of held pushes, the user's) sends the pending calls of that input's replicas first,
under the input's lock, so every replica gets its replay in order and before the calls
after it; a thread of this module's sends them when no one feeds the input. The windows
bound what is in flight as for any call: the replay goes at the job's pace, while the job
runs. Before, the rewind sent them itself under every input's lock, and a saturated job's
rescale waited for all of them (23.7 s of a 28-s rescale whose pause was 0.7 s)::

    recovery executor          InputFeeds (every input's lock)            input replica i of x (incarnation n)
    rewind(n, positions) ─────▶ pending[(x, i)] = log.after(position)
         ◀── returns at once    replay thread started
    (coordinator restarted; job.rescale returns)
    feeder: push(x, ...) ─────▶ under x's lock: pending[(x, *)] first ──send, window waits──▶ replica
    replay thread ────────────▶ per input, under its lock: pending ─────send, window waits──▶ replica
    a death meanwhile ────────▶ rewind(n + 1): every pending dropped, taken again from the log

Exactly once holds because the pending calls are copies of logged ones: the log keeps every
call until a committed snapshot covers it, so a recovery that starts before the replay is done
computes its own replay from the log and drops what was pending (of an incarnation that
ended). A snapshot's marker may reach a replica while its replay is pending: its position is
then before the pending calls, which are after it in the log, as any call not yet consumed is.
``flush`` (before a snapshot the user asks for) and the keeping of calls for a rescale without
recovery send every pending call first (:meth:`InputReplay.drain_all`): what the user pushed
before them is in the snapshot, and none is left out of a log trimmed after a rescale.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from raytide.supervisor.replay import InputReplica

#: A call to send again: ``(method, args)``.
Call = tuple[str, tuple]


class InputReplay:
    """Per input replica, the calls a rewind handed over and not sent yet.

    ``locks``: each input's lock (the one its calls are made under); ``send(name, index,
    method, args)`` sends one call to the replica's current handle, waiting for room in its window.
    """

    def __init__(self, locks: dict[str, threading.Lock], send: Callable[[str, int, str, tuple], Any]) -> None:
        self.locks, self.send = locks, send
        #: Per input, per replica index, the calls to send (each input's entry touched under its lock only).
        self.pending: dict[str, dict[int, collections.deque[Call]]] = {}
        self.rewinds = 0  # a replay thread of an earlier rewind stops at its next input
        self.thread: threading.Thread | None = None  # the latest rewind's
        #: What stopped the replay thread (the job failed): the driver's next call raises it.
        self.error: BaseException | None = None

    def hand(self, calls: dict[InputReplica, list[Call]]) -> None:
        """A rewind's calls to send again, per input replica; drops what an earlier rewind
        left pending. Called under every input's lock."""
        self.rewinds += 1
        pending: dict[str, dict[int, collections.deque[Call]]] = {}
        for (name, index), mine in calls.items():
            if mine:
                pending.setdefault(name, {})[index] = collections.deque(mine)
        self.pending = pending
        names = sorted(pending)
        if names:
            self.thread = threading.Thread(target=self._run, args=(self.rewinds, names), name="raytide-input-replay",
                                           daemon=True)
            self.thread.start()

    def drain(self, name: str) -> None:
        """Send the pending calls of input ``name``'s replicas, each replica's in order (under
        the input's lock). A call whose send raises stays pending."""
        for index, queue in sorted(self.pending.get(name, {}).items()):
            while queue:
                self.send(name, index, *queue[0])
                queue.popleft()
        self.pending.pop(name, None)

    def drain_all(self) -> None:
        """Send every pending call (under every input's lock)."""
        for name in sorted(self.pending):
            self.drain(name)

    def _run(self, rewind: int, names: list[str]) -> None:
        """The replay thread of rewind number ``rewind``: each input's pending calls, under its lock."""
        try:
            for name in names:
                with self.locks[name]:
                    if self.rewinds != rewind:
                        return
                    self.drain(name)
        except Exception as error:  # the job failed or Ray ended: raised by the driver's next call
            self.error = error
