"""A growing stepped rescale whose switch adds the new replicas while the job runs: no new
incarnation, no hold (docs/rescaling.md, "A growing switch without a new incarnation").

The world of tests/sim/stepped_world.py (senders, the keyed vertex's replicas, FIFO channels,
frontiers from the outstanding pointstamps, a crash rolling everything back to the snapshot),
but the ``q - p`` new replicas are not there when the rescale starts. After the snapshot the
job keeps running at width ``p`` while the driver adds them, each part one action of the
seeded scheduler, interleaved with the records' ones::

    place b      the new replica's process takes its role in the job's incarnation, owning
                 no key group (the routing table has no column for it yet)
    register b   the progress actor learns of b: it pushes b the statuses of what b reads and
                 counts b's pointstamps from then on (b holds none yet: it owns nothing)
    connect x b  a link from x to b, and from b to x, for every sender x of the exchange (each
                 input, each replica: loop rounds go back through it, hand-overs too)
    install      once every new replica is registered and linked: with the inputs held (one
                 action: nothing else moves meanwhile), the plan at width q from the epoch
                 after the latest any input has reached, and its holds; the inputs go on

Then the steps, as in a stepped rescale: the new replicas receive their groups at the plan's
epochs. A shrinking trial is the mirror: the plan is installed while the job runs (no replica
joins), and each retiring replica leaves (``leave r``: its process gone, its links and what
was on its way to it dropped) once its hand-overs are done, while the job runs.

A message over a link not made is lost, and a pointstamp of a replica the progress actor
does not count is not in the frontier; so each ordering the install waits for has teeth
(tests/sim/test_joining_switch_sim.py plants each away).
"""

from __future__ import annotations

import copy
import dataclasses
import random

from raytide.core.keygroups import KeyGroupAssignment
from raytide.progress.timestamps import Timestamp
from raytide.rescale.migration import ReplicaSteps, TimedRouter
from raytide.rescale.steps import StepPlan, plan_steps
from tests.sim.stepped_world import KEY_GROUPS, Rec, SteppedWorld, Trial


def _later(trial: Trial, rng: random.Random) -> dict:
    """Steps of 4 to 8 groups and 6 more epochs of records, so that the steps end before the
    feeds do in many trials."""
    feeds = [list(feed) for feed in trial.feeds]
    seqs = {rec.key: rec.seq + 1 for feed in feeds for rec in feed}
    last = max((rec.time.epoch for feed in feeds for rec in feed), default=0)
    for epoch in range(last + 1, last + 7):
        for key in rng.sample(sorted(seqs), min(len(seqs), 4)):
            sender = next(at for at, feed in enumerate(feeds) if any(rec.key == key for rec in feed))
            feeds[sender].append(Rec(key, seqs[key], Timestamp(epoch, (0,)), rng.choice((0, 1))))
            seqs[key] += 1
    return {"feeds": feeds, "groups_per_step": rng.randint(4, 8)}


def growing_trial(seed: int, crashes: bool) -> Trial:
    """A stepped world's trial whose rescale grows the vertex by 1 to 3 replicas."""
    trial, rng = Trial.draw(seed, crashes), random.Random(f"{seed}-grow")
    width = rng.randint(trial.old.parallelism + 1, trial.old.parallelism + 3)
    return dataclasses.replace(trial, width=width, **_later(trial, rng))


def shrinking_trial(seed: int, crashes: bool) -> Trial:
    """A stepped world's trial whose rescale shrinks the vertex from 2 to 5 replicas by 1 or more."""
    trial, rng = Trial.draw(seed, crashes), random.Random(f"{seed}-shrink")
    old = rng.randint(2, 5)
    return dataclasses.replace(trial, old=KeyGroupAssignment.contiguous(old, KEY_GROUPS),
                               width=rng.randint(1, old - 1), **_later(trial, rng))


class JoiningWorld(SteppedWorld):
    """The stepped world with the new replicas joining the running job before the plan (and
    the retiring ones leaving it after their steps)."""

    def __init__(self, trial: Trial, seed: int) -> None:
        self.placed: set[int] = set()
        self.registered: set[int] = set()
        self.links: set[tuple[str, int]] = set()
        self.installed = False
        self.left: set[int] = set()
        #: The first snapshot after the steps: per replica taken, its groups; the records in
        #: flight; the senders' positions; the outputs handed out and the epochs complete then.
        self.later: tuple[dict[int, dict], dict, list[int], int, int] | None = None
        self.crashed_after_steps = 0
        #: Records delivered between the snapshot and the install: the job ran while the replicas joined.
        self.during_join = 0
        self.crashed_joining = 0
        self._crashes_seen = 0
        super().__init__(trial, seed)

    @property
    def _new(self) -> range:
        return range(self.trial.old.parallelism, self.trial.width)

    def _is_new(self, origin: str) -> bool:
        return origin.startswith("r") and int(origin[1:]) in self._new

    @property
    def _retiring(self) -> range:
        return range(self.trial.width, self.trial.old.parallelism)

    def _linked(self, origin: str, replica: int) -> bool:
        if replica in self.left or (origin.startswith("r") and int(origin[1:]) in self.left):
            return False
        if origin != f"r{replica}" and (replica in self._new or self._is_new(origin)):
            return (origin, replica) in self.links
        return True

    def _counted(self) -> list[int]:
        return [r for r in range(self.plan.width) if r not in self._new or r in self.registered]

    def _needed(self) -> set[tuple[str, int]]:
        """Every link a new replica needs: from each sender, to each replica, both ways."""
        origins = [f"s{s}" for s in range(len(self.trial.feeds))] + [f"r{r}" for r in range(self.trial.width)]
        return {(origin, replica) for origin in origins for replica in range(self.trial.width)
                if origin != f"r{replica}" and (replica in self._new or self._is_new(origin))}

    def _ends_placed(self, link: tuple[str, int]) -> bool:
        origin, replica = link
        ends = [replica] + ([int(origin[1:])] if origin.startswith("r") else [])
        return all(end not in self._new or end in self.placed for end in ends)

    def _ready(self) -> bool:
        """Whether the plan may be installed: every new replica registered, every link made."""
        return self.registered == set(self._new) and self._needed() <= self.links

    def _actions(self) -> list[tuple]:
        acts = [act for act in super()._actions() if not (act[0] in ("look", "notify") and act[1] in self.left)]
        if self.installed:
            acts += [("snapshot", None)] if self._later_due() else []
            return acts + [("leave", r) for r in self._retiring if r not in self.left and self.steps[r].done]
        if self.snapshot is None:
            return acts
        acts += [("place", b) for b in self._new if b not in self.placed]
        acts += [("register", b) for b in sorted(self.placed - self.registered)]
        acts += [("connect", link) for link in sorted(self._needed() - self.links) if self._ends_placed(link)]
        return acts + ([("install", None)] if self._ready() else [])

    def _act(self, action: tuple) -> None:
        kind, where = action
        if kind == "place":
            self.placed.add(where)
        elif kind == "register":
            self.registered.add(where)
        elif kind == "connect":
            self.links.add(where)
        elif kind == "install":
            self._install()
        elif kind == "leave":
            self._leave(where)
        elif kind == "snapshot":
            taken = [r for r in range(self.plan.width) if r not in self.left]  # the joined replicas too
            self.later = ({r: copy.deepcopy(self.states[r]) for r in taken}, copy.deepcopy(self.data),
                          list(self.positions), len(self.outputs), self.complete)
            if self.trial.crashes:  # a trial that crashes crashes once more, soon after this snapshot
                later = [self.actions_since_snapshot + self.rng.randint(1, 40)] if self.actions_since_snapshot else []
                self.trial = dataclasses.replace(self.trial, crashes=self.trial.crashes[:self.crashed] + later)
        else:
            self.during_join += self.snapshot is not None and not self.installed and kind == "data"
            super()._act(action)

    def _later_due(self) -> bool:
        """Whether the snapshots may resume: every step done and every retiring replica gone
        (the snapshot is the world's state at one action, the records in flight included)."""
        return self.later is None and all(steps.done for steps in self.steps) and self.left == set(self._retiring)

    def _leave(self, replica: int) -> None:
        """A retiring replica's process is gone: what it held, and what was on its way to it, is lost."""
        self.left.add(replica)
        self.states[replica] = {}
        for channels in (self.data, self.handed):
            for channel in [channel for channel in channels if channel[1] == replica]:
                del channels[channel]

    def _install(self) -> None:
        """The inputs held: the plan from the epoch after the latest any input has reached
        (a record of it may have gone by the old table), at every sender and replica."""
        sent = [feed[at - 1].time.epoch for feed, at in zip(self.trial.feeds, self.positions) if at]
        first = max([self.trial.snapshot_at - 1, *sent]) + 1 + self.rng.randint(0, 1)
        plan = plan_steps(self.trial.old, self.trial.width, first, self.trial.groups_per_step,
                          self.trial.epochs_per_step)
        self.plan, self.router = plan, TimedRouter(lambda rec: rec.key, plan)
        self.states += [{} for _ in range(plan.width - len(self.states))]
        self.steps = [ReplicaSteps("count", r, plan) for r in range(plan.width)]
        self.installed = True

    def _restart(self) -> None:
        """At the snapshot, and after a crash: the job at its old width from the snapshot (a
        new replica placed is let go), the join started (again)."""
        if self.crashed > self._crashes_seen:
            self.crashed_joining += not self.installed
            self._crashes_seen = self.crashed
        if self.later is not None:
            self._back_to_later()
            return
        states, positions = self._rollback()
        self.placed, self.registered, self.links, self.installed, self.left = set(), set(), set(), False, set()
        self._start(StepPlan(self.trial.old, (), self.trial.old), states, positions)

    def _back_to_later(self) -> None:
        """A crash after the snapshot taken after the steps: the job at its new width from it."""
        assert self.later is not None
        saved, data, positions, handed_out, complete = self.later
        del self.outputs[handed_out:]
        self.complete = complete
        after = self.plan.after
        self._start(StepPlan(after, (), after), [copy.deepcopy(saved.get(r, {})) for r in range(len(self.states))],
                    list(positions))
        self.data = copy.deepcopy(data)
        self.crashed_after_steps += 1

    def run(self, limit: int = 20_000) -> tuple:
        """As the stepped world's, with a lower bound on the actions (at most 569 in 400 trials):
        a world stuck by a planted bug fails sooner."""
        return super().run(limit)
