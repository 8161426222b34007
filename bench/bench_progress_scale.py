"""The central progress actor's load at cluster scale, simulated in one process.

Run with ``python -m bench progress_scale`` (``--param nodes=64 --param per_node=8``). Two
jobs run in :class:`raytide.testing.LocalJob` (the same replica and progress cores as on
Ray, under the seeded scheduler) with ``nodes * per_node`` replicas in all:

* ``keyed``: a three-stage keyed pipeline, ``input -> map -> exchange -> map -> exchange
  -> map -> output``, its two keyed stages at a quarter of the replicas each (at most 128,
  the number of key groups) and its input stage at the rest;
* ``loop``: halving to a fixed point, exchanged every round, its three stages at a third
  of the replicas each (at most 128; five stages before a stream read twice was fused).

Each epoch carries ``records_per_replica`` records per replica. Each job runs five times:

* ``direct`` (one node, and every job before the relays): every replica calls the central
  actor itself, one call per message (a batch carries the output records it retires);
* ``relayed`` (a cluster): the replicas are spread over ``nodes`` nodes, and each node's
  relay delivers everything it gathered in one call, each replica's consecutive messages
  merged into one run (``LocalJob(nodes=)``, as :mod:`raytide.actors.progress_relay` does
  while its previous call is in flight); on more than
  :data:`~raytide.physical.relay_tree.RELAY_FANIN` nodes, each node's relay forwards to its
  group's relay, which forwards to the central actor (two levels of relays);
* ``paced``: relayed, and the next actor to act is chosen by what its actions cost
  (:mod:`raytide.testing.pacing`), not one mailbox at a time uniformly;
* ``fed``: paced, its epochs fed at a steady rate, its replicas made faster (below);
* ``fed_one_level``: ``fed`` with every node's relay calling the central actor itself (the
  design before the groups' relays), in the same run.

Per job and design it reports what the central actor took per epoch: messages (a relay's
run counts as one), calls, calls per node, status pushes and the calls they took (with
relays, a call per relay at the top of the pushes' paths), and its CPU time: the progress
core's, the unpickling of the calls' messages (as the Ray actor does: a relay's call one
blob, as the relay sends it, and without relays each replica's messages of a call one),
and Ray's own work per call taken and per call made, measured on plain actors in the same
run (:mod:`bench.baselines.ray_call_cost`); whence the epochs per second the central actor
sustains with one core to itself. Garbage collection is off while the CPU is
timed: the simulation's heap holds every replica's state, the actor's does not.

How much a relay gathers per call depends on how long the central actor takes a call next
to how fast the replicas send, and the two scheduled designs model that differently. In
``relayed`` the progress actor takes one call per pick of the uniform scheduler, among
every link that has something to deliver, so it is as fast as one delivery while all the
replicas go on. In ``paced`` each actor is a server
with a core of its own, busy for each action's priced cost (CPU here plus Ray's per-call
prices), the next to act the one that can start first: a list schedule, whose clock gives
the job's epochs per second in the model and the share of that time the central actor was
busy. In ``fed`` (paced too) the driver feeds an epoch every ``1 / feed_eps`` seconds of the
model's time, and every actor but the central one is ``others_scale`` times as costly as
measured: the replicas are then not what limits the job (``busiest_other_share`` says
whether one does), and a central actor busy all the time with the job behind the feed is at
its limit. The default scale is 1/1000: at 1/100 the loop's pace was set by the replica its
hot key goes to (every number halves through 1), busy nearly all the time whatever the
central actor cost (``docs/benchmarks.md``). Neither design is a measurement of a cluster.
Issue 31 asks for at most 2 calls per node per epoch and at least 50 epochs/s at 64 nodes
x 8 replicas.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import raytide as rt
import raytide.testing.local as local_runtime
import raytide.testing.world as world_runtime
from bench.baselines.ray_call_cost import actor_call_cpu_ms
from bench.harness import ensure_ray
from raytide.core.keygroups import DEFAULT_KEY_GROUPS
from raytide.engine.progress_core import ProgressCore, ProgressEffects
from raytide.physical.protocol import EpochComplete, Sequenced, decode, encode
from raytide.physical.relay_tree import bundled
from raytide.testing.outcome import PROGRESS
from raytide.testing.pacing import Pacing
from tests.sim.scenarios import halvings

PARAMS = {"nodes": 64, "per_node": 8, "epochs": 3, "records_per_replica": 4, "seed": 0,
          "feed_eps": 50.0, "others_scale": 0.001, "fed_epochs": 20}
RATIOS: list = []
REPEAT = 1


class CountingCore(ProgressCore):
    """The progress core, counting the messages and calls it takes, the status pushes it
    sends, and the CPU time it spends on them: applying them, and unpickling them as the
    Ray actor does (a relay's call as one :func:`encode` blob, as the relay sends it; without
    relays each replica's messages of a call as one)."""

    messages = 0
    calls = 0
    pushes = 0
    push_calls = 0  # the calls the pushes took: with relays, one per bundle (:mod:`raytide.physical.relay_tree`)
    paths: dict = {}  # each replica's path down the relays, if the job has them
    cpu = 0.0
    decode_cpu = 0.0
    relayed = False  # whether each call the simulator makes is a relay's (one call, all it gathered)
    pacing: Pacing | None = None  # the paced design's: the blobs encoded to time their unpickling are not the actor's work
    completed: list[float] = []  # paced: when (the model's time) the central actor completed each epoch of an output

    def receive_all(self, calls: Sequence[Sequenced]) -> ProgressEffects:
        """A relay's call is applied as one. Without relays each message is applied as a call
        of its own: the in-process runtime hands the core a random few of a replica's messages
        at a time, more than one Ray call may carry, so applying them together would flatter
        the central actor."""
        effects = ProgressEffects()
        for call in [calls] if CountingCore.relayed else [[call] for call in calls]:
            effects.extend(self._timed(call))
            CountingCore.messages += len(call)
            CountingCore.calls += 1
        return effects

    def _timed(self, calls: Sequence[Sequenced]) -> ProgressEffects:
        """Everything here but the unpickling and the core's work is the bench's (grouping, encoding, counting):
        a paced action is not charged for it."""
        entered = time.process_time()
        by_sender: dict[Any, list[Sequenced]] = {}
        for call in calls:
            by_sender.setdefault(0 if CountingCore.relayed else call.sender, []).append(call)
        blobs = [encode((0, tuple(sent))) for sent in by_sender.values()]
        collecting = gc.isenabled()  # off already in a paced action: leave it so (a pause would be charged to the actor)
        gc.disable()  # the simulation's heap holds every replica's; the actor's collections are small
        try:
            started = time.process_time()
            for blob in blobs:
                decode(blob)
            decoded = time.process_time()
            effects = super().receive_all(calls)
            applied = time.process_time()
            CountingCore.decode_cpu += decoded - started
            CountingCore.cpu += applied - decoded
        finally:
            if collecting:
                gc.enable()
        CountingCore.pushes += len(effects.pushes)
        direct, bundles = bundled(effects.pushes, CountingCore.paths)
        CountingCore.push_calls += len(direct) + len(bundles)
        if CountingCore.pacing is not None:
            CountingCore.completed += [CountingCore.pacing.now_s for event in effects.events if isinstance(event, EpochComplete)]
            CountingCore.pacing.untimed_s += time.process_time() - entered - (applied - started)
        return effects


def keyed_expected(records: list[int]) -> Counter:
    """What the keyed pipeline outputs for one epoch's ``records``, in plain Python."""
    return Counter(((r % 1009) % 101, 1) for r in records)


def loop_expected(records: list[int]) -> Counter:
    """What the halving loop outputs for one epoch's ``records``, in plain Python."""
    return Counter(h for r in records for h in halvings(r))


def keyed_pipeline(replicas: int) -> tuple[rt.Dataflow, int]:
    """Three stages: the input, then two keyed stages (exchanges) at a quarter of ``replicas`` each
    (at most the number of key groups); the input stage has the rest. Also the width of the
    vertices that do not say (the output's)."""
    keyed = min(DEFAULT_KEY_GROUPS, replicas // 4)
    first = replicas - 2 * keyed
    flow = rt.Dataflow("keyed-at-scale")
    (flow.input("records", parallelism=first).map(lambda r: (r % 1009, 1), parallelism=first)
     .exchange(lambda kv: kv[0], name="by_key", parallelism=keyed).map(lambda kv: (kv[0] % 101, kv[1]), parallelism=keyed)
     .exchange(lambda kv: kv[0], name="by_bucket", parallelism=keyed).map(lambda kv: kv, parallelism=keyed)
     .output("out"))
    return flow, keyed


def halving_loop(replicas: int) -> tuple[rt.Dataflow, int]:
    """Halving to a fixed point, exchanged every round: three stages at a third of ``replicas``
    each (the input's, the round's, and the rest fused behind the exchange; at most the number
    of key groups); also that width."""
    width = min(DEFAULT_KEY_GROUPS, replicas // 3)
    flow = rt.Dataflow("loop-at-scale")
    lp = flow.loop("halve")
    back = lp.feedback(name="back")
    rounds = lp.enter(flow.input("records", parallelism=width), name="enter").concat(back.stream, name="round")
    halved = rounds.exchange(lambda x: x, name="spread", parallelism=width).map(lambda x: x // 2, name="half")
    back.connect(halved.filter(lambda x: x > 0, name="positive"))
    lp.leave(halved, name="leave").output("out")
    return flow, width


def simulate(flow: rt.Dataflow, width: int, expected: Callable[[list[int]], Counter], epochs: int, records: int,
             nodes: int, seed: int, relayed: bool, ray_ms: dict[str, float], paced: bool = False,
             feed_every_s: float = 0.0, others_scale: float = 1.0, relay_fanin: int | None = None) -> dict[str, float]:
    """Run ``flow`` (``width``: the replicas of a vertex that does not say) for ``epochs``
    epochs of ``records`` records, its progress ``relayed`` per node or not (a group's relay
    per ``relay_fanin`` nodes: ``LocalJob(relay_fanin=)``); the central actor's load per
    epoch, Ray's share priced at ``ray_ms`` (:func:`actor_call_cpu_ms`). Its output must be
    what ``expected`` computes from each epoch's records."""
    CountingCore.messages = CountingCore.calls = CountingCore.pushes = CountingCore.push_calls = 0
    CountingCore.cpu = CountingCore.decode_cpu = 0.0
    CountingCore.completed = []
    CountingCore.relayed = relayed
    inputs = {"records": [[1 + (e * records + i) % 997 for i in range(records)] for e in range(epochs)]}
    started = time.perf_counter()
    pacing = CountingCore.pacing = Pacing(ray_ms["receive"], ray_ms["submit"], feed_every_s, others_scale) if paced else None
    job = local_runtime.LocalJob(flow, inputs, parallelism=width, seed=seed, nodes=nodes if relayed else None,
                                 pacing=pacing, relay_fanin=relay_fanin)
    CountingCore.paths = dict(job.mail.paths(job.replica_keys()))
    run = job.run(max_steps=100_000_000)
    outputs = {epoch: Counter(found) for epoch, found in run.outputs["out"].items()}
    if not run.finished or outputs != {epoch: expected(fed) for epoch, fed in enumerate(inputs["records"])}:
        raise AssertionError(f"{flow.name} did not finish with the expected output")
    calls, pushes, push_calls = (count / epochs for count in (CountingCore.calls, CountingCore.pushes, CountingCore.push_calls))
    core, unpickling = CountingCore.cpu / epochs * 1000, CountingCore.decode_cpu / epochs * 1000
    ray_share = calls * ray_ms["receive"] + push_calls * ray_ms["submit"]
    return {"replicas": float(len(job.replicas)), "messages_per_epoch": CountingCore.messages / epochs,
            "calls_per_epoch": calls, "calls_per_node_per_epoch": calls / nodes, "pushes_per_epoch": pushes,
            "push_calls_per_epoch": push_calls,
            "core_ms_per_epoch": core, "unpickle_ms_per_epoch": unpickling, "ray_ms_per_epoch": ray_share,
            "central_ms_per_epoch": core + unpickling + ray_share,
            "central_epochs_per_s": 1000 / (core + unpickling + ray_share),
            "simulated_s": time.perf_counter() - started, **(paced_figures(pacing, epochs) if pacing else {})}


def paced_figures(pacing: Pacing, epochs: int) -> dict[str, float]:
    """What the paced model's clock says (:mod:`raytide.testing.pacing`): the job's epochs per
    second, from the first epoch fed to the last complete; the rate at which the central
    actor completed them, from the first completion to the last (without the first epoch's
    start: epochs may complete in bursts, so no shorter span); how long after it was fed the
    last epoch was complete; and the share of the time the central actor was busy (below 1: the replicas,
    not it, set the pace, and its calls per epoch are those of that load, not of its limit),
    and the busiest other actor's share (near 1: that actor, a replica with a hot key say,
    sets the job's pace, whatever the central actor's; the central actor then takes its
    calls as they come, busy all the time with small ones, and its figures are not its limit)."""
    done = sorted(CountingCore.completed)
    sustained = (len(done) - 1) / (done[-1] - done[0]) if len(done) >= 2 and done[-1] > done[0] else 0.0
    last_fed = (epochs - 1) * pacing.feed_every_s
    return {"model_s": pacing.clock_s, "job_epochs_per_s": epochs / pacing.clock_s, "sustained_epochs_per_s": sustained,
            "last_epoch_after_fed_ms": (done[-1] - last_fed) * 1000 if done else 0.0,
            "central_busy_share": pacing.utilisation(PROGRESS),
            "busiest_other_share": max(pacing.utilisation(actor) for actor in pacing.busy_s if actor != PROGRESS)}


def measure(nodes: int, per_node: int, epochs: int, records_per_replica: int, seed: int, feed_eps: float,
            others_scale: float, fed_epochs: int) -> dict[str, Any]:
    ensure_ray()
    ray_ms = actor_call_cpu_ms()
    return {"ray_receive_ms_per_call": ray_ms["receive"], "ray_submit_ms_per_call": ray_ms["submit"],
            **central_load(nodes, per_node, epochs, records_per_replica, seed, ray_ms,
                           fed=(feed_eps, others_scale, fed_epochs))}


def central_load(nodes: int, per_node: int, epochs: int, records_per_replica: int, seed: int,
                 ray_ms: dict[str, float], fed: tuple[float, float, int]) -> dict[str, Any]:
    """Both jobs in each design (:func:`simulate`), Ray's work priced at ``ray_ms``; the
    ``fed`` design is paced, fed ``(epochs per second, others_scale, epochs)``: every other
    actor faster than measured by that scale, so that the central actor's own limit shows."""
    feed_eps, others_scale, fed_epochs = fed
    replicas = nodes * per_node
    original = world_runtime.ProgressCore  # the simulated world makes the job's progress core
    world_runtime.ProgressCore = CountingCore  # type: ignore[misc]
    try:
        metrics: dict[str, Any] = {}
        for name, build, expected in (("keyed", keyed_pipeline, keyed_expected), ("loop", halving_loop, loop_expected)):
            for design in ("direct", "relayed", "paced", "fed", "fed_one_level"):
                steady = design.startswith("fed")
                found = simulate(*build(replicas), expected, fed_epochs if steady else epochs, records_per_replica * replicas,
                                 nodes, seed, relayed=design != "direct", ray_ms=ray_ms, paced=design not in ("direct", "relayed"),
                                 feed_every_s=1 / feed_eps if steady else 0.0, others_scale=others_scale if steady else 1.0,
                                 relay_fanin=nodes if design == "fed_one_level" else None)
                metrics.update({f"{name}_{design}_{key}": value for key, value in found.items()})
        return metrics
    finally:
        world_runtime.ProgressCore = original  # type: ignore[misc]
