"""Pacing the in-process runtime by what its actors' work costs: a model of time.

The seeded scheduler picks one mailbox at a time, every mailbox alike. That is what
exploring interleavings needs, but it makes a poor clock: the progress actor takes one
call per pick however many replicas deliver meanwhile, as if it were as fast as the sum
of them. How much a node's relay gathers per call, and so how many calls the central
actor takes, depends on how long its calls take next to the replicas' events.

With a :class:`Pacing`, time is simulated as a list schedule of parallel servers: each
actor (a replica, the progress actor, the driver) has a core to itself and is busy for the
cost of each action it takes. At each step the actor with work that can start first (when
it is free, and not before the last action started) acts, ties broken at random, and is
then busy until that start plus the action's cost. An action costs its CPU time in this
process (garbage collection off, as the simulation's heap holds every actor's state) plus
Ray's own prices: one call received, and one call submitted per message it sent
(``Mailboxes.sent``). A relay's merge of what it gathered, which the progress actor's call
does here, is the relay's host's work on Ray and is charged to it (``Mailboxes.relayed``);
CPU an action spends on being measured (a bench's own bookkeeping) can be left out
(:attr:`Pacing.untimed_s`). Messages an action sends are seen by the others from its
start, not its end: the model is optimistic by at most one action's cost per hop.

>>> import functools, random
>>> pacing, mail = Pacing(receive_ms=1.0, submit_ms=1.0), Mailboxes()
>>> def work(to, sends): mail.sent += sends
>>> for _ in range(3):  # "a" takes 1 ms an action, "b" 3 ms (two calls sent): in parallel
...     pacing.choose([functools.partial(work, to="a", sends=0), functools.partial(work, to="b", sends=2)],
...                   random.Random(0), mail)()
>>> pacing.actions["a"], pacing.actions["b"], round(pacing.clock_s * 1000)
(2, 1, 3)
"""

from __future__ import annotations

import collections
import functools
import gc
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from raytide.physical.protocol import ReplicaKey
from raytide.testing.mailboxes import Command, Link, Mailboxes
from raytide.testing.outcome import DRIVER, PROGRESS, Target


def actor_of(action: Callable[[], None]) -> Target:
    """Which actor does ``action``: the one it delivers ``to`` (a replica, or the progress
    actor), else the driver (polls, consumers, the coordinator's steps)."""
    return action.keywords.get("to", DRIVER) if isinstance(action, functools.partial) else DRIVER


def _one_of(deliver: Callable[[Link, ReplicaKey], None], rng: random.Random, links: list[Link], to: ReplicaKey) -> None:
    """Replica ``to`` takes the next message of one of its ``links``, chosen at random."""
    deliver(rng.choice(links), to)


@dataclass
class Pacing:
    """Which action comes next, by when its actor can start it; each actor's busy time, and the model's clock.

    Args:
        receive_ms, submit_ms: Ray's CPU per call received and per call submitted, as
            :mod:`bench.baselines.ray_call_cost` measures them on plain actors.
        feed_every_s: the driver feeds one epoch every so many seconds of the model's time
            (0: every epoch at once), so that a job can be held at a steady rate.
        others_scale: every actor's costs but the progress actor's, times this: below 1,
            replicas faster than measured here, to find the progress actor's own limit.
    """

    receive_ms: float
    submit_ms: float
    feed_every_s: float = 0.0
    others_scale: float = 1.0
    now_s: float = 0.0  # when the last action started
    untimed_s: float = 0.0  # CPU the action under way spent on being measured: not charged
    free_at: dict[Hashable, float] = field(default_factory=lambda: collections.defaultdict(float))
    busy_s: dict[Hashable, float] = field(default_factory=lambda: collections.defaultdict(float))
    actions: dict[Hashable, int] = field(default_factory=lambda: collections.defaultdict(int))

    @property
    def clock_s(self) -> float:
        """The model's time so far: when the last actor is done."""
        return max(self.free_at.values(), default=0.0)

    def per_receiver(self, links: Sequence[Link], deliver: Callable[[Link, ReplicaKey], None],
                     rng: random.Random) -> list[Callable[[], None]]:
        """One action per replica that ``links`` (replica to replica, each with something on
        it) go to, which ``deliver``-s the next message of one of them: a replica is one
        server, whatever its links."""
        by_receiver: dict[ReplicaKey, list[Link]] = collections.defaultdict(list)
        for link in links:
            by_receiver[link[1]].append(link)
        return [functools.partial(_one_of, deliver, rng, group, to=to) for to, group in by_receiver.items()]

    def choose(self, actions: Sequence[Callable[[], None]], rng: random.Random, mail: Mailboxes,
               command: Callable[..., None] | None = None) -> Callable[[], None]:
        """The next action: the one that can start first (ties at random): when its actor is
        free, not before the last action started, and, for the driver's ``command`` to an input
        replica, not before the driver sends it (:meth:`sent_at`). The action returned prices
        itself when run (by what it sent into ``mail``)."""
        starts: dict[Callable[[], None], float] = {}
        for action in actions:
            fed = 0.0
            if isinstance(action, functools.partial) and action.func == command:
                fed = self.sent_at(mail.commands[action.keywords["to"]][0])
            starts[action] = max(self.free_at[actor_of(action)], self.now_s, fed)
        self.now_s = min(starts.values())
        chosen = rng.choice([action for action, start in starts.items() if start == self.now_s])
        return functools.partial(self._priced, actor_of(chosen), chosen, mail)

    def sent_at(self, command: Command) -> float:
        """When the driver sends ``command``: epoch ``e``'s records and its close at ``e``
        times :attr:`feed_every_s` (all at once if 0), anything else at once."""
        if command[0] == "push":
            return command[3] * self.feed_every_s
        if command[0] == "advance" and command[2]:  # None: the input closes, after all it fed
            return (command[2] - 1) * self.feed_every_s  # the close of the epoch before
        return 0.0

    def _priced(self, actor: Hashable, action: Callable[[], None], mail: Mailboxes) -> None:
        before, collecting = mail.sent, gc.isenabled()
        gc.disable()
        try:
            started = time.process_time()
            action()
            cpu = time.process_time() - started - self.untimed_s
        finally:
            self.untimed_s = 0.0
            if collecting:
                gc.enable()
        for relay, merging in mail.relayed or ():
            self._busy(relay, max(self.free_at[relay], self.now_s), merging)
            cpu -= merging
        mail.relayed = []
        self._busy(actor, self.now_s, max(cpu, 0.0) + (self.receive_ms + (mail.sent - before) * self.submit_ms) / 1000)
        self.actions[actor] += 1

    def _busy(self, actor: Hashable, start: float, cost: float) -> None:
        cost *= 1.0 if actor == PROGRESS else self.others_scale
        self.free_at[actor] = start + cost
        self.busy_s[actor] += cost

    def utilisation(self, actor: Hashable) -> float:
        """The share of the model's time ``actor`` was busy."""
        return self.busy_s[actor] / self.clock_s if self.clock_s else 0.0
