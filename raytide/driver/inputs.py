"""The driver's side of a job's inputs: each input's current epoch, records spread over the
input's replicas, and a bounded window of unacknowledged calls per replica.

Records pushed from the driver are cut into batches of at most ``batch_size`` (a column
batch into one piece per replica: ``push_batches.push_pieces``) and dealt to the input's
replicas in turn; the turn carries over from one push to the next, so many small pushes
(or the small epochs of ``rt.run(inputs=...)``) spread as evenly as one large push.
Object refs of batches are dealt the same way. Each call waits, before it is sent, until
its replica has fewer than ``max_inflight`` calls unanswered (backpressure from the job
to the driver: :mod:`raytide.driver.input_sender`).

The last batch a push deals to a replica is held back in the driver until the next call
to that replica, and goes with it: an ``advance`` then takes it along in one call (the
replica pushes, then advances), which spares a small epoch's push its own Ray call, as
timely's input handles hold records until they are flushed or the epoch moves. Records
of an epoch that is still open cannot complete anything, so holding them changes no
output. A replica given no records since its last epoch token moves quietly while the
replica with records closes the epoch for it with a proxy token (``epoch_tokens.ProxyPlan``).
A push held for :data:`HOLD_S` goes on its own (:mod:`raytide.driver.held_pushes`: records pushed
into an epoch left open still reach the job at once, as Flink's buffer timeout sends a
partly filled buffer), and :meth:`InputFeeds.flush` sends what is held before a snapshot
the user asks for.

In a job with recovery the driver also keeps, per input replica, every call it made
(:class:`CallLog`) until committed snapshots cover it: a recovery rewinds each input
replica to the position its snapshot recorded (how many pushes and advances it had
consumed) and sends the rest again, after it returns (:mod:`raytide.driver.input_replay`:
each input's replay goes before its next call). Every call carries the job's incarnation. A
rewind holds every input's lock at once: a feeder of one input that pushed while another
input was being rewound would otherwise send its call in the new incarnation ahead of its
own input's replay (which then sent it again), and its replicas would run it twice, or fail
on an epoch that goes back.

A job restored from an earlier run's snapshot (``restore=``) knows, per input replica,
how many commands the snapshot had consumed and the epoch the input was at (:class:`Resume`):
calls at or before that epoch are replays of what it consumed and are not sent again (an
input fed again from its start), and a call past it is new data (an input continued where
the snapshot left it). A feed that replays part of what was consumed and then moves past
the epoch is refused with a RecoveryError that says what to push: never a silent drop.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raytide.driver.connected import ray_get
from raytide.driver.held_pushes import HOLD_S as HOLD_S
from raytide.driver.held_pushes import HeldPushes as HeldPushes
from raytide.driver.input_replay import InputReplay
from raytide.driver.input_sender import WINDOW_POLL as WINDOW_POLL
from raytide.driver.input_sender import InputSender
from raytide.driver.plan_gate import PlanGate
from raytide.driver.push_batches import as_epoch, offsets, packed, push_pieces
from raytide.driver.push_batches import pushed_batch as pushed_batch
from raytide.engine.epoch_tokens import ProxyPlan, proxying_inputs
from raytide.errors import GraphError, JobTimeout, RecoveryError
from raytide.physical.plan import PhysicalPlan
from raytide.sources.base import Reader
from raytide.supervisor.replay import CallLog as CallLog
from raytide.supervisor.replay import ReplayLog
from raytide.supervisor.replay import Resume as Resume

#: How long the input replicas may take to start their readers.
READER_TIMEOUT = 120.0


class InputFeeds:
    """Epochs, locks, turns and windows of every input of one job."""

    def __init__(self, plan: PhysicalPlan, replicas: dict[str, list[Any]], max_inflight: int, batch_size: int,
                 raise_if_failed: Callable[[], None], keep_calls: int = 0,
                 on_open: Callable[[int], None] | None = None, sockets: bool = False) -> None:
        """``plan``: the job's; ``replicas``: per input, the actor handles of its replicas in replica order.
        ``keep_calls``: keep every call for a recovery that may restore any of the last
        ``keep_calls`` committed snapshots (0: keep none; see the module docstring).
        ``on_open``: called with each epoch an input is at when the driver feeds it (its
        first, and each it moves to), before anything of that epoch is sent. ``sockets``: calls go by
        socket to the input replicas on this node (:mod:`raytide.driver.input_links`)."""
        self.flow_name, self.replicas, self.batch_size = plan.name, replicas, batch_size
        self.raise_if_failed = raise_if_failed
        self.on_open = on_open
        self.epochs: dict[str, int | None] = dict.fromkeys(replicas, 0)
        self.locks = {name: threading.Lock() for name in replicas}
        self.gate = PlanGate(plan.name)  # every epoch move passes it: a stepped rescale closes it ahead of its plan
        self.turns = dict.fromkeys(replicas, 0)
        self.sender = InputSender(max_inflight, raise_if_failed, bool(keep_calls), sockets)
        #: What ``job.stats()`` reads: per input and method, the calls made; the replicas' sockets.
        self.calls, self.links = self.sender.calls, self.sender.links
        #: Per input replica, the arguments of the last push dealt to it, not sent yet, and since when.
        self.held: dict[tuple[str, int], tuple[tuple, float]] = {}
        self.held_pushes = HeldPushes(self._send_old)
        self.replay = InputReplay(self.locks, lambda name, index, method, args: self.sender.send(
            self.replicas[name][index], method, args))
        self.resumes: dict[tuple[str, int], Resume] = {}
        #: Per input read in the replicas, the readers handed out (a recovery hands them out again).
        self.readers: dict[str, list[Reader[Any]]] = {}
        #: Per input replica, its command count in the latest committed snapshot (of id ``committed_id``).
        self.committed: dict[tuple[str, int], int] = {}
        self.committed_id = -1
        self.untrimmed: dict[tuple[str, int], int] = {}  # positions to trim at, their input busy at the commit (trim)
        #: Every call counted per input replica; kept in a job with recovery, and in one without
        #: only while a rescale may replay them (:meth:`keep_calls`).
        self.logs = ReplayLog([(name, index) for name, handles in replicas.items() for index in range(len(handles))],
                              keep_calls or 1)
        self.recovers = self.keeping = bool(keep_calls)
        #: Per input, which replicas a peer may close an epoch for (a proxy token).
        proxying = proxying_inputs(plan)
        self.proxy_plans = {name: ProxyPlan(len(handles), name in proxying) for name, handles in replicas.items()}

    def check(self, name: str) -> None:
        """Raise a GraphError naming the job's inputs if ``name`` is not one of them, or what
        stopped the thread that sends held pushes or the one that replays a rewind's calls."""
        for error in (self.held_pushes.error, self.replay.error):
            if error is not None:
                raise error
        if name not in self.replicas:
            raise GraphError(f"{name!r} is not an input of dataflow {self.flow_name!r}; inputs: {list(self.replicas)}")

    def push(self, name: str, records: Any, epoch: Any = None) -> None:
        """Send ``records`` into input ``name`` at ``epoch`` (default: its current epoch).

        Every batch is pickled before the first is sent, so a push that fails (a record
        that does not pickle) sends nothing.
        """
        self.check(name)
        with self.locks[name]:
            at = self._check_epoch(name, self.epochs[name] if epoch is None else epoch)
            pieces = push_pieces(pushed_batch(name, at, records), len(self.replicas[name]), self.batch_size)
            payloads = [packed(name, at, piece, offset) for piece, offset in zip(pieces, offsets(pieces))]
            self._move_to(name, at)
            self.gate.feed(name, at)
            for payload in payloads:
                index = self._next_index(name)
                self._release(name, index)
                self.held[(name, index)] = ((name, *payload, at), time.monotonic())
            self.held_pushes.held()

    def push_refs(self, name: str, refs: list, epoch: Any) -> None:
        """Send object refs of batches into input ``name``; the replicas read them."""
        self.check(name)
        with self.locks[name]:
            epoch = self._move_to(name, epoch)
            self.gate.feed(name, epoch)
            dealt: dict[int, list] = collections.defaultdict(list)
            for ref in refs:
                dealt[self._next_index(name)].append(ref)
            for index, mine in sorted(dealt.items()):
                self.proxy_plans[name].pushed(index)
                self._submit(name, index, "push_refs", name, mine, epoch, weight=len(mine))

    def advance(self, name: str, epoch: Any) -> None:
        """No more records will come into input ``name`` before ``epoch``."""
        self.check(name)
        with self.locks[name]:
            self._move_to(name, epoch)

    def close(self, name: str) -> None:
        """No more records will come into input ``name``."""
        self.check(name)
        with self.locks[name]:
            if self.epochs[name] is not None:
                self._send_advance(name, None)

    def hand_over(self, name: str, readers: list[Reader[Any]], timeout: float) -> None:
        """The input's replicas read it themselves from now on (a parallel source), each with
        its reader of ``readers``."""
        with self.locks[name]:
            self.epochs[name] = None
        self.readers[name] = readers
        self.start_readers(self.sender.incarnation, timeout, only=name)

    def push_batch(self, name: str, refs: list, epoch: Any) -> tuple[dict[int, int], list]:
        """Batch ``epoch`` of a stream input (:mod:`raytide.sources.stream`): each replica gets
        its share of ``refs`` and moves to epoch ``epoch + 1`` in one call, so that a snapshot
        never cuts the batch. Returns, per replica, the command count it is at once it has
        taken the call (what a snapshot that holds the batch records, at least), and the
        calls' object refs. The next epoch is not opened: it is the next batch's."""
        self.check(name)
        assert self.recovers, "a stream input needs a job with recovery"
        with self.locks[name]:
            epoch = self._move_to(name, epoch)
            dealt: dict[int, list] = {index: [] for index in range(len(self.replicas[name]))}
            for ref in refs:
                dealt[self._next_index(name)].append(ref)
            self.proxy_plans[name].reset()  # each replica's token follows its refs: none is quiet next
            calls = [self._submit(name, index, "push_refs", name, mine, epoch, epoch + 1, weight=len(mine) + 1)
                     for index, mine in dealt.items()]
            self.epochs[name] = epoch + 1
            return {index: self.logs[(name, index)].end for index in dealt}, [call for call in calls if call is not None]

    def continue_stream(self, name: str) -> int:
        """Where stream input ``name`` goes on: the epoch a restored snapshot left every one of
        its replicas at (0 in a fresh job). Its calls count from there, none is a replay: the
        stream's reader skips the batches the snapshot holds itself."""
        with self.locks[name]:
            resumes = [self.resumes.pop(key) for key in list(self.resumes) if key[0] == name]
            epochs = {resume.epoch for resume in resumes}
            if len(epochs) > 1 or None in epochs:
                raise RecoveryError(f"stream input {name!r}: the restored snapshot has its replicas at epochs "
                                    f"{sorted(map(str, epochs))}, not at one batch boundary")
            self.epochs[name] = epochs.pop() if epochs else 0
            return self.epochs[name]  # type: ignore[return-value]

    def push_shares(self, name: str, shares: list, upto: int) -> tuple[dict[int, int], list]:
        """A batch (or the end) of stream input ``name`` with event time (:mod:`raytide.sources.clocked_stream`):
        share ``i`` to replica ``i`` in one call each, counted as the commands up to ``upto`` (the next batch id;
        its replica sets its count to it). Returns, per replica, the count a snapshot that holds the batch
        records, and the calls' object refs. The replicas move the input's epochs themselves."""
        self.check(name)
        assert self.recovers, "a stream input needs a job with recovery"
        with self.locks[name]:
            calls = []
            for index, share in enumerate(shares):
                weight = upto - self.logs[(name, index)].end
                assert weight > 0, f"stream input {name!r}: batch {upto - 1} is not after the ones taken"
                calls.append(self._submit(name, index, "push_stream", name, share, weight=weight))
            return dict.fromkeys(range(len(shares)), upto), [call for call in calls if call is not None]

    def taken(self, name: str, answers: list) -> None:
        """The answers of the replicas of stream input ``name`` to a batch's calls (of those sent);
        only a stream with event time uses them (:meth:`EventTimeInputs.taken`)."""

    def continue_clocked(self, name: str) -> int:
        """Where stream input ``name`` with event time goes on: the batch count a restored snapshot left every
        one of its replicas at (0 in a fresh job); the input's epochs are its replicas' own from now on."""
        with self.locks[name]:
            resumes = [self.resumes.pop(key) for key in list(self.resumes) if key[0] == name]
            counts = {resume.consumed for resume in resumes}
            if len(counts) > 1 or any(resume.epoch is None for resume in resumes):
                raise RecoveryError(f"stream input {name!r}: the restored snapshot has its replicas at batch counts "
                                    f"{sorted(counts)} (epochs {[resume.epoch for resume in resumes]}), not at one "
                                    f"batch boundary")
            self.epochs[name] = None
            return counts.pop() if counts else 0

    def commit(self, snapshot_id: int, positions: dict[tuple[str, int], int]) -> None:
        """Snapshot ``snapshot_id`` committed with each input replica at ``positions`` (commands consumed):
        the calls the oldest snapshot a recovery may still restore covers are forgotten (:class:`ReplayLog`)."""
        self.committed.update(positions)
        self.committed_id = max(self.committed_id, snapshot_id)
        self.trim(self.logs.committed(positions))

    def holds(self, name: str, marks: dict[int, int]) -> bool:
        """Whether a committed snapshot has every replica of input ``name`` at ``marks`` or past them."""
        return all(self.committed.get((name, index), -1) >= mark for index, mark in marks.items())

    def start_readers(self, incarnation: int, timeout: float = READER_TIMEOUT, only: str | None = None) -> None:
        """Give each replica of the inputs read in the replicas (or of input ``only``) its
        reader, in ``incarnation``: again after a recovery, when each seeks to where its
        restored snapshot says it was.

        Raises:
            JobTimeout: the replicas did not all take their readers within ``timeout`` seconds.
        """
        for name, readers in self.readers.items():
            if only in (None, name):
                refs = [r.start_reader.remote(incarnation, name, reader) for r, reader in zip(self.replicas[name], readers)]
                try:
                    ray_get(refs, timeout=timeout)
                except ray.exceptions.GetTimeoutError as error:
                    raise JobTimeout(f"starting the readers of input {name!r} took longer than {timeout:.0f} s") from error

    def open_inputs(self) -> dict[str, int]:
        """The inputs still open, with their current epoch."""
        return {name: epoch for name, epoch in self.epochs.items() if epoch is not None}

    def _check_epoch(self, name: str, epoch: Any) -> int:
        """``epoch`` as an int, if the input is open and not past it; the input's current
        epoch counts as opened (the driver feeds it)."""
        current = self.epochs[name]
        if current is None:
            raise GraphError(f"input {name!r} is closed; it cannot take epoch {epoch!r}")
        epoch = as_epoch(name, epoch)
        if epoch < current:
            raise GraphError(f"input {name!r} is at epoch {current}; epoch {epoch} is in its past")
        self._opened(current)
        return epoch

    def _opened(self, epoch: int | None) -> None:
        if self.on_open is not None and epoch is not None:
            self.on_open(epoch)

    def _move_to(self, name: str, epoch: Any) -> int:
        """Check ``epoch`` against the input's and advance the input to it if it is later."""
        epoch = self._check_epoch(name, epoch)
        if epoch != self.epochs[name]:
            self._send_advance(name, epoch)
        return epoch

    def _send_advance(self, name: str, epoch: int | None) -> None:
        """Move every replica of input ``name`` to ``epoch``: those with a held push in one call
        with it, and those without records since their last epoch token quietly, while the first
        of the others sends a proxy token for them (``epoch_tokens.ProxyPlan``)."""
        self.gate.move(name, epoch)
        self._opened(self.epochs[name])
        self._opened(epoch)
        held = [index for index in range(len(self.replicas[name])) if (name, index) in self.held]
        carriers = [index for index in held if epoch is not None and self._may_join(name, index)]
        for index in set(held) - set(carriers):
            self.proxy_plans[name].pushed(index)  # its push goes first, in a call of its own
        moves = self.proxy_plans[name].close(epoch, carriers)
        for index, (quiet, proxies) in sorted(moves.items(), key=lambda move: move[0] not in carriers):  # records first
            if index in carriers:
                args, _ = self.held.pop((name, index))
                self._submit(name, index, "push", *args, proxies, epoch, weight=2)
            else:
                self._submit(name, index, "advance_quietly" if quiet else "advance", name, epoch)
        self.epochs[name] = epoch

    def _may_join(self, name: str, index: int) -> bool:
        """Whether a held push may go in one call with the advance after it: not while the
        replica's restored snapshot is being replayed, which may end between the two."""
        resume = self.resumes.get((name, index))
        return resume is None or not resume.left

    def _release(self, name: str, index: int) -> None:
        """Send the push held back for replica ``index`` of input ``name``, if any, as a call of its own."""
        held = self.held.pop((name, index), None)
        if held is not None:
            self.proxy_plans[name].pushed(index)
            self._submit(name, index, "push", *held[0])

    def flush(self) -> None:
        """Send every call a rewind left pending and every push held back (see the module docstring)."""
        for name in self.replicas:
            with self.locks[name]:
                self.replay.drain(name)
                for index in range(len(self.replicas[name])):
                    self._release(name, index)

    def run_out(self, timeout: float) -> None:
        """Send every call pending or held (:meth:`flush`) and wait until each call sent has run
        at its replica, so that a snapshot asked for next (``job.snapshot()``, ``job.stop()``'s
        savepoint) holds every push made before it: its markers come from the coordinator, and
        neither Ray nor a replica's socket orders them after the driver's own calls.

        Raises:
            JobTimeout: the calls had not all run within ``timeout`` seconds.
        """
        self.flush()
        with contextlib.ExitStack() as held:
            for name in sorted(self.locks):
                held.enter_context(self.locks[name])
            self.sender.links.settle(self.raise_if_failed)
            self.sender.run_out(timeout)

    def _send_old(self, age: float) -> bool:
        """Send the pushes held at least ``age`` seconds; whether any are still held. An input
        whose lock another thread holds is left alone: that thread is feeding it. Nothing is
        sent for a job that failed or was cancelled (raises its error)."""
        self.raise_if_failed()
        for name in self.replicas:
            if self.locks[name].acquire(blocking=False):
                try:  # this input's entries of `held` change only under its lock
                    now = time.monotonic()
                    for index in range(len(self.replicas[name])):
                        if (name, index) in self.held and now - self.held[(name, index)][1] >= age:
                            self._release(name, index)
                finally:
                    self.locks[name].release()
        return bool(self.held)

    def _next_index(self, name: str) -> int:
        index = self.turns[name]
        self.turns[name] = (index + 1) % len(self.replicas[name])
        return index

    def skip(self, positions: dict[tuple[str, int], int], epochs: dict[tuple[str, int], int | None]) -> None:
        """A job restored from a snapshot of an earlier run: each input replica had consumed
        ``positions[(input, replica)]`` commands and was at epoch ``epochs[(input, replica)]``
        (see :class:`Resume`: what is fed at or before that epoch replays them, what is fed
        past it is new). Each replica's own epoch: the replicas of an input took the
        snapshot's marker between different commands of theirs."""
        assert self.recovers
        for (name, index), position in positions.items():
            self.resumes[(name, index)] = Resume(name, index, position, epochs.get((name, index)), position)
            self.logs[(name, index)].skip_to(position)

    def _submit(self, name: str, index: int, method: str, *args: Any, weight: int = 1) -> Any:
        """Call ``method`` on replica ``index`` of input ``name`` once its window has room (and
        log it), after the push held back for it; the call's object ref (None: not sent, a replay
        of what a restored snapshot holds, or sent by socket). The calls a rewind left pending
        for the input's replicas go first."""
        self.replay.drain(name)
        self._release(name, index)
        resume = self.resumes.get((name, index))
        if resume is not None and weight and resume.replayed(args[-1], weight):  # a counted call's epoch comes last
            return None
        if weight:
            log = self.logs[(name, index)]
            log.append(weight, method, args)
            if not self.keeping:
                log.trim(log.end)  # counted, not kept
        return self.sender.send(self.replicas[name][index], method, args)

    def trim(self, positions: dict[tuple[str, int], int]) -> None:
        """Forget the calls that a committed snapshot's ``positions`` cover (per input replica). An input
        another thread holds is trimmed at a later call: the pump that calls this must not wait for it
        (a push waiting for its replica's window holds it, and a stopped replica opens none until the
        stall rule of that same pump has it killed)."""
        self.untrimmed.update(positions)
        for (name, index), position in list(self.untrimmed.items()):
            if self.locks[name].acquire(blocking=False):
                try:
                    self.logs[(name, index)].trim(position)
                    del self.untrimmed[(name, index)]
                finally:
                    self.locks[name].release()

    def keep_calls(self, timeout: float) -> None:
        """In a job without recovery: keep every call to the input replicas from now on, for a
        rescale to send those after its cut again (:meth:`forget_calls` when it is done). The
        calls made before are not kept, so the cut must come after them: this waits until each
        has run at its replica (:meth:`run_out`, the wait a snapshot the driver asks for makes
        too). With recovery every call is kept and nothing is waited for: a call after a cut is
        sent again from the log.

        Raises:
            JobTimeout: the calls made before had not all run within ``timeout`` seconds.
        """
        if not self.recovers:
            self._keeping(True)
            self.run_out(timeout)

    def forget_calls(self) -> None:
        """In a job without recovery: stop keeping the calls :meth:`keep_calls` kept."""
        if not self.recovers:
            self._keeping(False)

    def _keeping(self, keeping: bool) -> None:
        """Keep every call from now on, or forget those kept (under every input's lock)."""
        with contextlib.ExitStack() as held:
            for name in sorted(self.locks):
                held.enter_context(self.locks[name])
            self.keeping = keeping
            if not keeping:
                for log in self.logs.logs.values():
                    log.trim(log.end)

    def rewind(self, incarnation: int, replicas: dict[str, list[Any]], positions: dict[tuple[str, int], int],
               plan: PhysicalPlan) -> None:
        """After a recovery or a rescale: hand each input replica (of ``replicas``, the handles
        now, in ``plan``) the calls after its restored position, to send in incarnation
        ``incarnation`` before its input's next call (:class:`InputReplay`; nothing here waits
        for a window); the receivers' tokens start again, so every replica sends its own before
        a peer proxies it."""
        with contextlib.ExitStack() as held:
            for name in sorted(self.locks):  # a feeder holds one lock at a time: no order to deadlock on
                held.enter_context(self.locks[name])
            self.sender.reset(incarnation, [old for handles in self.replicas.values() for old in handles])
            proxying = proxying_inputs(plan)
            for name in self.replicas:
                self.replicas[name] = replicas[name]
                self.proxy_plans[name] = ProxyPlan(len(replicas[name]), name in proxying)
            self.replay.hand({(name, index): self.logs.after((name, index), positions.get((name, index), 0))
                              for name, handles in replicas.items() for index in range(len(handles))})
