"""Pacing the in-process runtime by what its actors' work costs: a model of time.

The seeded scheduler picks one mailbox at a time, every mailbox alike. That is what
exploring interleavings needs, but it makes a poor clock: the progress actor takes one
call per pick however many replicas deliver meanwhile, as if it were as fast as the sum
of them. How much a node's relay gathers per call, and so how many calls the central
actor takes, depends on how long its calls take next to the replicas' events.

With a :class:`Pacing`, each actor (a replica, the progress actor, the driver) is a server
of its own, and the next one to act is chosen with probability proportional to its rate,
one over its mean cost per action so far: the jump chain of a continuous-time Markov model
of parallel servers, each with a core to itself. The model's clock advances by the
expected time to the next action, one over the sum of the busy actors' rates. An action
costs its CPU time in this process (garbage collection off, as the simulation's heap holds
every actor's state) plus Ray's own prices: one call received, and one call submitted per
message it sent (``Mailboxes.sent``). A relay's merge of what it gathered, which the
progress actor's call does here, is the relay's host's work on Ray, and is charged to it
(``Mailboxes.relayed``).

>>> pacing = Pacing(receive_ms=0.3, submit_ms=0.3)
>>> pacing.rate("replica")  # no action priced yet: the price of receiving one call
3333.33...
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
from raytide.testing.mailboxes import Mailboxes
from raytide.testing.outcome import DRIVER, Target

Link = tuple[ReplicaKey, ReplicaKey]  # from one replica to another

#: The least an action costs in the model (no actor is infinitely fast).
MIN_COST_S = 1e-6


def actor_of(action: Callable[[], None]) -> Target:
    """Which actor does ``action``: the one it delivers ``to`` (a replica, or the progress
    actor), else the driver (polls, consumers, the coordinator's steps)."""
    return action.keywords.get("to", DRIVER) if isinstance(action, functools.partial) else DRIVER


def _one_of(deliver: Callable[[Link, ReplicaKey], None], rng: random.Random, links: list[Link], to: ReplicaKey) -> None:
    deliver(rng.choice(links), to)


@dataclass
class Pacing:
    """Which actor acts next, by its rate; and the model's clock and each actor's busy time.

    Args:
        receive_ms, submit_ms: Ray's CPU per call received and per call submitted, as
            :mod:`bench.baselines.ray_call_cost` measures them on plain actors.
    """

    receive_ms: float
    submit_ms: float
    clock_s: float = 0.0
    busy_s: dict[Hashable, float] = field(default_factory=lambda: collections.defaultdict(float))
    actions: dict[Hashable, int] = field(default_factory=lambda: collections.defaultdict(int))

    def rate(self, actor: Hashable) -> float:
        """Actions per second of ``actor``: one over its mean priced cost so far."""
        done = self.actions[actor]
        return 1.0 / max(self.busy_s[actor] / done if done else self.receive_ms / 1000, MIN_COST_S)

    def per_receiver(self, links: Sequence[Link], deliver: Callable[[Link, ReplicaKey], None],
                     rng: random.Random) -> list[Callable[[], None]]:
        """One action per replica that ``links`` (replica to replica, each with something on
        it) go to, which ``deliver``-s the next message of one of them: a replica is one
        server, whatever its links."""
        by_receiver: dict[ReplicaKey, list[Link]] = collections.defaultdict(list)
        for link in links:
            by_receiver[link[1]].append(link)
        return [functools.partial(_one_of, deliver, rng, group, to=to) for to, group in by_receiver.items()]

    def choose(self, actions: Sequence[Callable[[], None]], rng: random.Random, mail: Mailboxes) -> Callable[[], None]:
        """The next action: its actor by rate, then one of that actor's uniformly; the clock
        moves on. The action returned prices itself when run (by what it sent into ``mail``)."""
        by_actor: dict[Hashable, list[Callable[[], None]]] = collections.defaultdict(list)
        for action in actions:
            by_actor[actor_of(action)].append(action)
        actors = list(by_actor)
        rates = [self.rate(actor) for actor in actors]
        self.clock_s += 1.0 / sum(rates)
        actor = rng.choices(actors, rates)[0]
        return functools.partial(self._priced, actor, rng.choice(by_actor[actor]), mail)

    def _priced(self, actor: Hashable, action: Callable[[], None], mail: Mailboxes) -> None:
        before, collecting = mail.sent, gc.isenabled()
        gc.disable()
        try:
            started = time.process_time()
            action()
            cpu = time.process_time() - started
        finally:
            if collecting:
                gc.enable()
        for relay, merging in mail.relayed or ():
            self.busy_s[relay] += merging
            cpu -= merging
        mail.relayed = []
        self.busy_s[actor] += cpu + (self.receive_ms + (mail.sent - before) * self.submit_ms) / 1000
        self.actions[actor] += 1

    def utilisation(self, actor: Hashable) -> float:
        """The share of the model's time ``actor`` was busy."""
        return self.busy_s[actor] / self.clock_s if self.clock_s else 0.0
