"""Both worlds carry out every effect of both machines: the Ray driver's runtimes and the
simulator's implement each method of the runtime interface (:mod:`raytide.supervisor.runtime`),
one per effect, with its signature, so the one loop (:class:`~raytide.supervisor.execution.Execution`)
runs either. An effect added to a machine without a method in the interface, or a method
missing in a world, fails here."""

from __future__ import annotations

import inspect

import pytest

from raytide.driver.recovery_runtime import RayRecovery
from raytide.driver.rescale import RayRescale
from raytide.supervisor.runtime import INTERFACES, RecoveryRuntime, RescaleRuntime, effects_of
from raytide.testing.recovery import SimRecovery
from raytide.testing.rescaling import SimRescale

#: Per world, its runtime of each machine's interface.
WORLDS = {"Ray": {RecoveryRuntime: RayRecovery, RescaleRuntime: RayRescale},
          "simulator": {RecoveryRuntime: SimRecovery, RescaleRuntime: SimRescale}}


def methods(protocol: type) -> set[str]:
    """The interface's methods (its effects')."""
    return {name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")}


def not_implemented(runtime: type, protocol: type) -> list[str]:
    """The interface's methods ``runtime`` lacks, or has with other parameters."""
    wrong = []
    for name in sorted(methods(protocol)):
        mine = getattr(runtime, name, None)
        if mine is None or list(inspect.signature(mine).parameters) != list(inspect.signature(getattr(protocol, name)).parameters):
            wrong.append(name)
    return wrong


@pytest.mark.parametrize("union, protocol, table", INTERFACES, ids=["recovery", "rescale"])
def test_every_effect_of_a_machine_has_one_method_in_its_interface(union, protocol, table):
    assert effects_of(union) == set(table), "an effect without a method, or a method of no effect"
    assert methods(protocol) == set(table.values())
    assert len(set(table.values())) == len(table), "two effects share a method"


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("protocol", [RecoveryRuntime, RescaleRuntime], ids=["recovery", "rescale"])
def test_both_worlds_implement_every_effect(world, protocol):
    runtime = WORLDS[world][protocol]
    assert protocol not in runtime.__mro__, "a runtime implements the interface, it does not inherit its stubs"
    assert not_implemented(runtime, protocol) == []


def test_a_runtime_that_misses_an_effect_is_caught():
    class Planted(SimRescale):
        switch = None  # type: ignore[assignment]

    def rescaled(self, effect):  # the execution is not passed
        """Planted."""

    Planted.rescaled = rescaled  # type: ignore[method-assign]
    assert not_implemented(Planted, RescaleRuntime) == ["rescaled", "switch"]


def test_one_turn_of_the_supervisor_loop_fails_recovers_or_hands_the_death_over():
    """``supervise``, both worlds' turn: a failure that is no death fails the job; deaths
    start a recovery, or go to the recovery under way (which starts over)."""
    from raytide.errors import ActorLost, ReplicaLost, StoreFencedError
    from raytide.snapshots.recovering import Recovering
    from raytide.snapshots.recovery import RestartBudget
    from raytide.supervisor.deaths import supervise
    from raytide.supervisor.execution import Execution

    class Queued:  # a runtime that answers nothing at once: its machine stays under way
        def __getattr__(self, name):
            return lambda effect, run: None

    death, other = ReplicaLost("j/c/0", ("v",), "a test"), StoreFencedError("another driver took the store")
    failed, started = [], []
    assert supervise([death, other], True, (None, None), failed.append, started.append) is None
    assert failed == [death] and not started  # the first failure noticed, as the Ray driver always did
    assert supervise([death, ActorLost("progress died")], True, (None, None), failed.append, started.append)
    assert len(started) == 1 and "j/c/0" in started[0] and "progress died" in started[0]
    assert supervise([death], False, (None, None), failed.append, started.append) is None and failed[-1] is death
    under_way = Execution(Recovering.after_death("j", RestartBudget(5), 0, "first"), Queued())
    under_way.start()
    supervise([death], True, (under_way, None), failed.append, started.append)
    assert len(started) == 1 and under_way.machine.incarnation == 2, "the recovery under way starts over"


def test_both_worlds_answer_the_cut_of_a_job_that_has_finished_with_its_end():
    """Once the driver has seen the job finish, both runtimes answer the rescale's cut with
    ``JobEnded`` (the machine refuses the rescale): before asking for it, or, on Ray, in place
    of what came of it but a death. Stand-ins for the driver's state of the job (no Ray)."""
    from types import SimpleNamespace

    from raytide.driver.rescale import _RescaleRun
    from raytide.rescale.rescaling import Held, HoldAtCut, JobEnded
    from raytide.snapshots.recovering import Died

    outputs = SimpleNamespace(finished=True)
    ray_rescale = RayRescale(SimpleNamespace(outputs=outputs), None, _RescaleRun(float("inf")))  # type: ignore[arg-type]
    assert isinstance(ray_rescale.hold_at_cut(HoldAtCut(1, 2), None), JobEnded)  # type: ignore[arg-type]  # no coordinator asked
    world = SimpleNamespace(result=SimpleNamespace(finished=True), cut_asks=[])
    assert isinstance(SimRescale(world).hold_at_cut(HoldAtCut(1, 2), None), JobEnded)  # type: ignore[arg-type]
    assert world.cut_asks == [], "no cut asked of a finished job"

    def finishing(answer):
        def hold(effect):
            outputs.finished = True  # the driver took the job's last events while it waited
            return answer
        return hold

    for answer, expected in [(Held(3, {}), JobEnded), (Died("a/0 died"), Died)]:
        outputs.finished = False
        ray_rescale._hold = finishing(answer)  # type: ignore[method-assign]
        assert isinstance(ray_rescale.hold_at_cut(HoldAtCut(1, 1), None), expected)  # type: ignore[arg-type]
