"""The driver's side of a running job, besides its inputs: the outputs it receives and the
liveness of the actors it watches.

* :class:`OutputCollector` takes the progress actor's job events with a long poll
  (``next_events``, one call in flight at a time, which any thread of the driver may wait
  for without holding the job's lock), keeps each completed output epoch's record parts, fetches the
  large ones (object refs) as soon as it is handed them, unpacks records when asked, and
  forgets an epoch once it is consumed (``job.results``).
* :class:`Liveness` keeps one pending ``watch`` call per actor, which fails when the actor
  dies, and reports the first one that did; its :class:`DeathAlarm` wakes the driver's wait
  for events the moment one ends.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.actors.host_base import Leased
from raytide.core.batches import BatchFormat
from raytide.driver.connected import ray_get, ray_wait, require_ray
from raytide.driver.event_link import EventLink
from raytide.physical.pickled import pack_records
from raytide.physical.protocol import EpochComplete, JobFailed, JobFinished, OutputFrontier
from raytide.physical.wire import as_batch, as_records, unpack_items
from raytide.snapshots.blame import Replaying
from raytide.snapshots.config import OutputCommit
from raytide.supervisor.outputs import ShownOutputs

#: Extra time a long poll's Ray call may take beyond the poll's own timeout.
POLL_SLACK = 30.0
#: The least time between two looks at the liveness watches: a driver taking one small
#: epoch after another pumps every few milliseconds, and a death is noticed as soon after.
LIVENESS_EVERY_S = 0.05
#: Epoch latencies kept for ``job.ui()``'s percentiles (the latest; a job that runs for weeks keeps no more).
LATENCIES_KEPT = 1000
#: Completions kept per output for ``job.plot_frontier()`` (the latest).
COMPLETIONS_KEPT = 10_000


class OutputCollector(ShownOutputs):
    """Completed output epochs as the progress actor reports them, held until they are taken.

    An epoch of inline parts is held in one form at a time: the blobs the sinks shipped
    until its records are asked for, then its records, the blobs dropped, so that the
    driver never holds both. An epoch with large parts (object refs, owned by the output
    replica that put them) is fetched when it is shown: its records are read-only views of
    the object store, not copies, and they outlive the replica (whose death would make the
    refs unreadable: Ray's ``OwnerDiedError``); its refs are kept beside them for
    :meth:`packed`. A part that is already lost when it is fetched (its replica died since
    the epoch completed) is not shown, nor is any later epoch of its output: the recovery
    that the death starts computes them again, since the driver was not handed them. An
    epoch :meth:`take` returned is forgotten: a job that runs for weeks holds on the driver
    only what was not consumed.

    An epoch that an input fed by the driver was at (:meth:`open`) and that completes with
    no records is shown too, with none (``job.results`` yields ``(epoch, [])``): a consumer
    that feeds an epoch and waits for it is never left waiting on an empty one. The
    progress actor reports how far each output is complete (:class:`OutputFrontier`) after
    the epochs with records, so the empty epochs take their places in order. Epochs of
    sources read in the replicas are not known here; their empty epochs are not shown.

    A completed epoch is shown once its :class:`~raytide.engine.output_gate.OutputGate`
    lets it pass: at once, or (``commit="snapshot"``) once a committed snapshot holds it.
    What was shown, handed out and acknowledged is kept in a
    :class:`~raytide.engine.delivery.Deliveries` (:attr:`book`): an epoch is shown at most
    once, in order, or the job fails with an :class:`~raytide.errors.InternalError`.
    """

    def __init__(self, progress: Any, outputs: list[str], commit: OutputCommit = "epoch", sockets: bool = False,
                 name: str = "job") -> None:
        """``sockets``: the progress actor on the driver's node pushes the events over a socket
        (:mod:`raytide.driver.event_link`) once subscribed; polled until then, and elsewhere."""
        super().__init__(outputs, commit)
        self.progress = progress
        self.link = EventLink(sockets, name)
        self.parts: dict[str, dict[int, list]] = {name: {} for name in outputs}  # in epoch order, as they complete
        self.fetched: dict[str, dict[int, list]] = {name: {} for name in outputs}
        self.batched: dict[str, set[int]] = {name: set() for name in outputs}  # fetched, BatchRows not made records
        self.refs: dict[str, dict[int, list]] = {name: {} for name in outputs}  # a fetched epoch's large parts
        self.lost_from: dict[str, int] = {}  # per output, the first epoch whose parts were lost (until a recovery)
        self.offered: dict[str, int] = dict.fromkeys(outputs, -1)  # the last epoch offered to the gate
        self.opened: set[int] = set()  # epochs the driver's inputs were at, not shown everywhere yet
        self.opened_lock = threading.Lock()  # inputs are fed from other threads than the one polling
        #: When the driver's inputs opened each epoch of :attr:`opened` (monotonic), and the seconds from that to each
        #: output's epoch shown, latest last (``job.ui()`` reads its epoch latency here; a bounded window).
        self.opened_at: dict[int, float] = {}
        self.latencies: collections.deque[float] = collections.deque(maxlen=LATENCIES_KEPT)
        #: The latest epoch the driver's inputs were at (-1: none yet): the epochs pushed, for the progress bar.
        self.most_opened = -1
        #: Per output, when (seconds since this collector began) each epoch was shown, and its frontier then
        #: (the epoch + 1): ``job.plot_frontier()``.
        self.started = time.monotonic()
        self.completions: dict[str, collections.deque[tuple[float, int]]] = {
            name: collections.deque(maxlen=COMPLETIONS_KEPT) for name in outputs}
        #: Told :meth:`durable` at each acknowledgement (a job with recovery records it in its store).
        self.on_consumed: Callable[[dict[str, int]], None] | None = None
        self.cursor = 0
        self.events = 0  # job events taken in (the supervisor's stall rule reads whether the job moved)
        self.finished = False
        #: The ``next_events`` call in flight (see :meth:`poll_call`) and when it is overdue.
        self.call: Any = None
        self.call_due = 0.0
        #: A call a thread has seen answered (:meth:`poll` need not look at it again).
        self.answered: Any = None
        #: What the latest recovery computes again: a user error there says so (set by ``JobRecovery``).
        self.replaying: Replaying | None = None

    def poll_call(self, timeout: float) -> Any:
        """The progress actor's ``next_events`` call in flight, made now (answered within
        ``timeout`` seconds, or at once if there are events) if there is none.

        A thread may wait for it without the job's lock, so that other threads (a stream's
        feed, a consumer of ``job.results``) take events and sync meanwhile; the thread that
        next polls with the lock takes its events in (:meth:`poll`). One call at a time, so
        no event is taken twice."""
        require_ray("polling the progress actor for the job's events")  # a wait for a call made before counts too
        self.link.ask(self.progress, self.cursor)
        if self.call is None and not self.link.on:
            self.call = self.progress.next_events.remote(self.cursor, timeout)
            self.call_due = time.monotonic() + timeout + POLL_SLACK
        return self.call

    def wait(self, call: Any, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``call`` (of :meth:`poll_call`) to answer, or for
        events pushed by socket (``call`` None); whether they are in."""
        return self.link.wait(timeout) if call is None else bool(ray_wait([call], timeout=timeout)[0])

    def poll(self, timeout: float) -> list[Any]:
        """Take new events: those of the call in flight once it has answered, waiting up to
        ``timeout`` seconds for it (a call is made if none is in flight, and then waited
        for until it answers); returns the failures among them.

        Raises:
            ray.exceptions.RayActorError: the progress actor died.
            ray.exceptions.GetTimeoutError: the call did not answer within its timeout and
                :data:`POLL_SLACK`.
        """
        made_now = self.call is None
        call = self.poll_call(timeout)
        if call is None:
            return self._pushed(timeout)
        wait = max(0.0, self.call_due - time.monotonic()) if made_now else timeout
        if call is not self.answered and not ray_wait([call], timeout=wait)[0]:
            if time.monotonic() < self.call_due:
                return []  # made by another thread with a longer wait: it answers later
            self.call = None
            raise ray.exceptions.GetTimeoutError(f"the progress actor did not answer a poll for events within "
                                                 f"{POLL_SLACK:g} s of its timeout")
        self.call = self.answered = None
        events, end = ray_get(call)
        return self._fresh(end - len(events), events)

    def _pushed(self, timeout: float) -> list[Any]:
        """Take the events pushed by socket (waiting up to ``timeout`` seconds for some); a hint's
        are fetched by a call from the cursor. Returns the failures among them."""
        self.link.wait(timeout)
        failures = []
        for first, count, events in self.link.take():
            if events is None and first + count > self.cursor:
                fetched, end = ray_get(self.progress.next_events.remote(self.cursor, 0.0), timeout=POLL_SLACK)
                first, events = end - len(fetched), fetched
            failures += self._fresh(first, events or [])
        return failures

    def _fresh(self, first: int, events: list[Any]) -> list[Any]:
        """Take in the events numbered from ``first`` that are new (from the cursor on); none if
        they start after it (a poll answered once the socket took over: its frames bring them)."""
        if first > self.cursor:
            return []
        new = events[self.cursor - first:]
        self.cursor += len(new)
        return self.apply(new)

    def drop_poll(self) -> None:
        """Forget the call in flight and the events pushed and not taken: the progress actor was
        restored or replaced, and what a call made before that answers is not this run's."""
        self.call = self.answered = None
        self.link.drop()

    def apply(self, events: list[Any]) -> list[Any]:
        """Take in job events (completed epochs, failures, the end); returns the failures among them."""
        failures = []
        self.events += len(events)
        for event in events:
            if isinstance(event, EpochComplete):  # an output's epochs complete in order
                self._offer_empty(event.output, event.epoch)
                self._offer(event.output, event.epoch, event.parts)
            elif isinstance(event, OutputFrontier):
                self._offer_empty(event.output, event.before)
            elif isinstance(event, JobFailed):
                failures.append(event.error if self.replaying is None else self.replaying.blame(event.error))
            elif isinstance(event, JobFinished):
                self.finish()
                self.finished = True
        return failures

    def open(self, epoch: int) -> None:
        """An input fed by the driver is at ``epoch``: it is an epoch of the job, shown once
        complete even if it has no records."""
        with self.opened_lock:
            self.opened.add(epoch)
            self.opened_at.setdefault(epoch, time.monotonic())
            self.most_opened = max(self.most_opened, epoch)

    def _offer(self, name: str, epoch: int, parts: list) -> None:
        self.offered[name] = epoch
        self.offer(name, epoch, parts)

    def _offer_empty(self, name: str, before: float) -> None:
        """Offer the opened epochs of output ``name`` after the last one offered and before
        ``before`` (complete, with no records, since none came), in order."""
        after = max(self.offered[name], self.book.handed_before[name])
        with self.opened_lock:
            empty = sorted(epoch for epoch in self.opened if after < epoch < before)
        for epoch in empty:
            self._offer(name, epoch, [])
        self._forget_opened()

    def _forget_opened(self) -> None:
        """Forget the opened epochs every output has shown (a rollback never needs them again)."""
        if not self.opened:  # nothing to forget (a job fed only from the replicas): no work per event
            return
        shown = min(self.delivered().values(), default=-1)
        with self.opened_lock:
            self.opened = {epoch for epoch in self.opened if epoch > shown}
            self.opened_at = {epoch: at for epoch, at in self.opened_at.items() if epoch in self.opened}

    def rollback(self) -> None:
        """A recovery: forget the completed epochs not shown yet (the restored job computes them
        again), and the parts lost since the last (the restored job's are new)."""
        super().rollback()
        self.lost_from.clear()
        self.offered = {name: -1 if epoch is None else epoch for name, epoch in self.book.shown.items()}

    def _show_all(self, released: list[tuple[str, int, Any]]) -> None:
        super()._show_all(released)
        self._forget_opened()

    def _keep(self, name: str, epoch: int, parts: list) -> bool:
        """Keep the epoch's parts (fetched now if large); not if an earlier epoch's or its own were lost."""
        if name in self.lost_from:
            return False
        if not any(isinstance(part, ray.ObjectRef) for part in parts):
            self.parts[name][epoch] = parts
        else:
            try:
                self.fetched[name][epoch], batched = fetch_items(parts)
            except ray.exceptions.ObjectLostError:  # its replica died: not handed over, so computed again
                self.lost_from[name] = epoch
                return False
            self.refs[name][epoch] = parts
            if batched:
                self.batched[name].add(epoch)
        now = time.monotonic()
        self.completions[name].append((now - self.started, epoch + 1))
        if (opened_at := self.opened_at.get(epoch)) is not None:
            self.latencies.append(now - opened_at)
        return True

    def epochs(self, name: str) -> list[int]:
        """The completed epochs of output ``name`` not taken yet, in order."""
        return sorted([*self.parts[name], *self.fetched[name]])

    def first(self, name: str) -> int | None:
        """The earliest completed epoch of output ``name`` not taken yet (None: there is none)."""
        return min([*itertools.islice(self.parts[name], 1), *self.fetched[name]], default=None)

    def records(self, name: str, epoch: int) -> list:
        """The records of a completed epoch not taken yet (fetched and unpacked once)."""
        fetched = self.fetched[name]
        if epoch not in fetched:
            fetched[epoch] = fetch_records(self.parts[name][epoch])
            del self.parts[name][epoch]
        elif epoch in self.batched[name]:
            fetched[epoch] = as_records(fetched[epoch])
            self.batched[name].discard(epoch)
        return fetched[epoch]

    def take(self, name: str, epoch: int, batch_format: BatchFormat | None = None) -> Any:
        """The records of a completed epoch (as one batch of ``batch_format``, if given),
        forgotten here: the caller consumes them."""
        if batch_format is None:
            taken = self.records(name, epoch)
        else:
            fetched = self.fetched[name]
            items = fetched[epoch] if epoch in fetched else fetch_items(self.parts[name][epoch])[0]
            try:
                taken = as_batch(items, batch_format)
            except ValueError as error:
                raise ValueError(f"output {name!r} epoch {epoch}: {error}") from error
        self.parts[name].pop(epoch, None)
        self.fetched[name].pop(epoch, None)
        self.batched[name].discard(epoch)
        self.refs[name].pop(epoch, None)
        return taken

    def hand(self, name: str, epoch: int, batch_format: BatchFormat | None = None) -> Any:
        """The records of a completed epoch, taken (:meth:`take`) for a ``job.results``
        consumer: delivered once it is acknowledged (see :meth:`durable`)."""
        taken = self.take(name, epoch, batch_format)
        self.book.hand(name, epoch)
        return taken

    def hand_first(self, name: str, batch_format: BatchFormat | None = None) -> tuple[int, Any] | None:
        """The earliest completed epoch of output ``name`` not taken yet, handed (:meth:`hand`): ``(epoch,
        records)``, or None if there is none."""
        epoch = self.first(name)
        return None if epoch is None else (epoch, self.hand(name, epoch, batch_format))

    def acknowledge(self, name: str, epoch: int) -> None:
        """The consumer of output ``name`` has epoch ``epoch`` (it asked for the next one)."""
        self.book.acknowledge(name, epoch)
        if self.on_consumed is not None:
            self.on_consumed(self.durable())

    def stream(self, name: str, batch_format: BatchFormat | None = None) -> None:
        """Output ``name`` is read with ``job.results`` from now on (see :meth:`durable`), as
        lists of records or batches of ``batch_format``."""
        if batch_format not in (None, "list", "numpy", "pyarrow"):
            raise ValueError(f"job.results({name!r}): batch_format must be 'numpy', 'pyarrow', 'list' or None, "
                             f"not {batch_format!r}")
        self.book.streamed.add(name)

    def durable(self) -> dict[str, int]:
        """Per output, the last epoch that counts as delivered in a snapshot (-1: none): what a
        new driver restored from it (``restore=``) does not hand out again
        (:meth:`~raytide.engine.delivery.Deliveries.durable`)."""
        return self.book.durable(self.first)

    def keep_locally(self) -> list[tuple[str, int]]:
        """Fetch every completed epoch now (the actors that own the parts are about to go);
        returns the epochs that could not be fetched."""
        lost = []
        for name, parts in self.parts.items():
            for epoch in list(parts):
                try:
                    self.records(name, epoch)
                except Exception:  # the owner may already be gone; nothing more to keep
                    lost.append((name, epoch))
        return lost

    def packed(self, name: str, kept: bool) -> dict[int, list]:
        """Record parts per completed epoch with records not taken yet: as the sinks shipped them, or
        re-packed from the driver's copy of the records once fetched (every epoch when
        ``kept``: after teardown, the object store no longer holds the parts)."""
        parts = {} if kept else {**self.refs[name], **self.parts[name]}
        return {epoch: parts[epoch] if epoch in parts else [pack_records(self.records(name, epoch))]
                for epoch in self.epochs(name) if epoch in parts or self.records(name, epoch)}

    def latest(self) -> dict[str, int | None]:
        """The latest completed epoch per output shown to the user, taken or not."""
        return dict(self.book.shown)



def fetch_records(parts: list) -> list:
    """The records of an epoch's parts: inline blobs and object refs, in order.

    Large buffers are not copied out of the object store: the records' arrays are
    read-only views of it (see :mod:`raytide.physical.wire`).
    """
    items, batched = fetch_items(parts)
    return as_records(items) if batched else items


def fetch_items(parts: list) -> tuple[list, bool]:
    """:func:`fetch_records` with each :class:`~raytide.physical.wire.BatchRows` left as it
    is, and whether there is any."""
    refs = [p for p in parts if isinstance(p, ray.ObjectRef)]
    loaded = dict(zip(map(id, refs), ray_get(refs))) if refs else {}  # ray_get([]) would start a Ray
    unpacked = [unpack_items(loaded.get(id(p), p)) for p in parts]
    return list(itertools.chain.from_iterable(items for items, _ in unpacked)), any(b for _, b in unpacked)


@dataclass
class DeathAlarm:
    """Rung on Ray's thread the moment a watched actor's ``watch`` call ends (its death, or its
    lease over): the driver's wait for events is woken (``wake``: the event link's, set by the
    job) and the next liveness look is not put off. Without it a death was seen at the wait's
    end, up to :data:`~raytide.driver.coordination.RECOVERY_POLL` later, unless some event woke
    the driver sooner, which a job whose senders drop what goes to the dead never sends
    (docs/recovery.md, "Recovered alone on Ray, measured")."""

    wake: Callable[[], None] = lambda: None
    rung: threading.Event = field(default_factory=threading.Event)
    #: Deaths another thread of the driver met first (a feed's call to a dead input replica):
    #: ``(actor id, error, failure)``, named by the next liveness look (:meth:`Liveness.name`).
    named: collections.deque[tuple[str, BaseException, BaseException]] = field(default_factory=collections.deque)
    #: The ``failure`` of each named death whose actor was no longer watched when looked at (a
    #: rescale retired it meanwhile): nothing else reports it, so the job fails with it.
    unclaimed: list[BaseException] = field(default_factory=list)

    def arm(self, ref: Any) -> None:
        """Ring when ``ref`` (a ``watch`` call) ends."""
        ref.future().add_done_callback(self._ring)

    def ring(self, actor_id: str, error: BaseException, failure: BaseException) -> None:
        """Ring for the death of actor ``actor_id`` that a call of the driver's met (``error``;
        ``failure`` fails the job if no watch of the actor is left to name it)."""
        self.named.append((actor_id, error, failure))
        self._ring(None)

    def _ring(self, _: Any) -> None:
        self.rung.set()
        self.wake()


class Liveness:
    """Notices the death of the actors it watches, at no cost while they live.

    Each actor is sent one ``watch()`` call that does not return while the job runs (a
    host's returns when its lease ends); Ray fails a pending call the moment the actor's
    process dies, so :meth:`check` only looks, without waiting, at which calls are done.
    """

    def __init__(self, actors: Mapping[Hashable, Any], before: Liveness | None = None) -> None:
        """``actors``: per key, a handle whose ``watch.remote()`` starts the watch (a host's
        :class:`~raytide.actors.hosts.Leased` handle passes its lease).

        ``before``: the watches of the configuration this one follows (a recovery's or a
        rescale's). An actor watched there under the same handle and lease keeps its pending
        call: a second one would wait behind it in the actor's one ``watch`` thread for as
        long as the lease lasts, and every rescale would add one per kept actor, in the
        driver and in the actor, for the rest of the job.
        """
        self.actors = dict(actors)
        kept: dict[Hashable, Any] = {} if before is None else {
            key: ref for key, ref in before.watches.items() if before.actors[key] == self.actors.get(key)}
        self.watches: dict[Hashable, Any] = {key: kept[key] if key in kept else actor.watch.remote()
                                             for key, actor in self.actors.items()}
        #: Rings at a watch's end (kept watches were armed with the same alarm before).
        self.alarm: DeathAlarm = before.alarm if before is not None else DeathAlarm()
        for key, ref in self.watches.items():
            if key not in kept:
                self.alarm.arm(ref)
        self.next_look = 0.0  # monotonic time of the next look (see LIVENESS_EVERY_S)
        #: Actors declared failed and killed by the supervisor's ping of a stalled job (:mod:`raytide.driver.stall_ping`):
        #: dead to a recovery, whatever a ping of them answers while Ray has not yet taken the kill in.
        self.declared: set[Hashable] = set()

    def name(self, error: BaseException, failure: BaseException) -> bool:
        """Whether ``error``, a Ray call's ``RayActorError`` met by another thread of the driver
        (a feed's), is the death of an actor watched here. If so, the alarm rings with it and
        the next :meth:`check` names that actor at once, before its watch may have ended: the
        death has one report, the watch's (its ``ReplicaLost``, or a rescale's verdict on it).
        If a rescale retired the actor before that look, nothing else reports the death:
        ``failure`` is then left in :meth:`unclaimed`."""
        actor_id = getattr(error, "actor_id", None)
        if actor_id is None or actor_id not in map(_actor_id, self.actors.values()):
            return False
        self.alarm.ring(actor_id, error, failure)
        return True

    def unclaimed(self) -> list[BaseException]:
        """The failures of named deaths no watch was left to report (taken: each is returned once)."""
        taken, self.alarm.unclaimed[:] = list(self.alarm.unclaimed), []
        return taken

    def check(self) -> tuple[Hashable, BaseException] | None:
        """The key of an actor that died, and the error; None if all live (or if the last
        look was less than :data:`LIVENESS_EVERY_S` ago and no watch ended since). A death
        named by :meth:`name` comes first, its watch forgotten (it is reported once)."""
        refs = list(self.watches.values())
        now = time.monotonic()
        if not refs or (now < self.next_look and not self.alarm.rung.is_set()):
            return None
        self.alarm.rung.clear()
        self.next_look = now + LIVENESS_EVERY_S
        while self.alarm.named:
            actor_id, error, failure = self.alarm.named.popleft()
            named = next((key for key in self.watches if _actor_id(self.actors[key]) == actor_id), None)
            if named is not None:
                del self.watches[named]
                return named, error
            if actor_id not in map(_actor_id, self.actors.values()):  # retired by a rescale: nobody else reports it
                self.alarm.unclaimed.append(failure)
            # else its watch ended first and reported the death
        done, _ = ray_wait(refs, num_returns=len(refs), timeout=0)
        for key, ref in list(self.watches.items()):
            if ref in done:
                del self.watches[key]  # ended: the actor died (or its lease is over: nothing to watch)
                try:
                    ray_get(ref)
                except ray.exceptions.RayActorError as error:
                    return key, error
        return None


def _actor_id(actor: Any) -> str:
    """The Ray actor id (hex) of a watched handle (a host's, under a lease: :class:`~raytide.actors.host_base.Leased`)."""
    return str((actor.handle if isinstance(actor, Leased) else actor)._actor_id.hex())
