"""The shape of the package, pinned: no import circle anywhere (imports under ``TYPE_CHECKING``
and inside functions count), no room holding more than a quarter of the lines, no module
over 500 lines, no function body over 40, the Ray shells (``actors/``) all Ray, and the
hosts forwarding exactly the calls their roles take from outside. Each rule has a planted
breach that it catches."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.test_layering import PACKAGE, package_sources, raytide_imports

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 40
MAX_ROOM_SHARE = 0.25


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the raytide modules it imports (``from package import module`` names the module)."""
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        targets = set()
        for target in raytide_imports(source, module):
            targets.add(target)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("raytide"):
                targets.update(f"{node.module}.{alias.name}" for alias in node.names
                               if f"{node.module}.{alias.name}" in sources)
        graph[module] = {target for target in targets if target in sources and target != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    assert circles(import_graph(package_sources())) == []


def test_a_planted_circle_is_caught():
    sources = package_sources()
    sources["raytide.physical.wire"] += "\n\ndef _planted():\n    from raytide.physical import plan\n"
    sources["raytide.physical.plan"] += "\n\nfrom raytide.physical.wire import pack\n"
    assert circles(import_graph(sources)) == [["raytide.physical.plan", "raytide.physical.wire"]]


def line_counts() -> dict[Path, int]:
    return {path: len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}


def rooms(counts: dict[Path, int]) -> dict[str, int]:
    """Lines per room (a top-level package; the top-level modules together)."""
    per_room: dict[str, int] = {}
    for path, lines in counts.items():
        parts = path.relative_to(PACKAGE).parts
        room = parts[0] if len(parts) > 1 else "(top level)"
        per_room[room] = per_room.get(room, 0) + lines
    return per_room


def oversized_rooms(per_room: dict[str, int]) -> list[str]:
    total = sum(per_room.values())
    return [f"{room}: {lines / total:.0%}" for room, lines in per_room.items() if lines > MAX_ROOM_SHARE * total]


def test_no_room_holds_more_than_a_quarter_of_the_package():
    assert oversized_rooms(rooms(line_counts())) == []
    assert oversized_rooms({"actors": 7_072, "core": 2_000, "progress": 1_300}) == ["actors: 68%"]


def test_no_module_is_over_500_lines():
    assert {str(p.relative_to(PACKAGE)): n for p, n in line_counts().items() if n > MAX_MODULE_LINES} == {}


#: The job handles' public methods and properties: the user's, nothing else (the event and
#: recovery loop is ``driver/supervisor.py``'s, the simulator's executor hooks its runtimes').
USER_METHODS = {
    "raytide.driver.job:Job": {
        "push", "push_refs", "advance", "close", "feed", "wait", "wait_ready", "results", "collect", "output_parts",
        "snapshot", "stop", "frontier", "stats", "parallelism", "rescale", "cancel", "hosts", "plan",
        "ui", "ui_snapshot", "plot_frontier", "progress_total", "epochs_total"},
    "raytide.testing.local:LocalJob": {"run", "rescale", "migrate", "crash", "slow_down", "replica_keys", "recovery_steps"},
}


def public_methods(cls: type) -> set[str]:
    """The public methods and properties of ``cls`` (inherited ones too)."""
    return {name for name in dir(cls) if not name.startswith("_")
            and (callable(getattr(cls, name)) or isinstance(getattr(cls, name), property))}


@pytest.mark.parametrize("handle", USER_METHODS)
def test_the_job_handles_expose_only_the_users_methods(handle):
    module, name = handle.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert public_methods(cls) == USER_METHODS[handle]


def test_a_hook_planted_on_a_handle_is_caught():
    from raytide.testing.local import LocalJob

    class Planted(LocalJob):
        def restore_replica(self) -> None:
            """An executor's hook, public on the user's handle."""

    assert public_methods(Planted) - USER_METHODS["raytide.testing.local:LocalJob"] == {"restore_replica"}


def long_functions(sources: Iterable[tuple[str, str]]) -> list[str]:
    """Functions whose body, the docstring left out, is over :data:`MAX_FUNCTION_LINES` lines."""
    found = []
    for name, source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                has_docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1
                first = body[1] if has_docstring else body[0]
                length = node.end_lineno - first.lineno + 1  # type: ignore[operator]
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.name} ({length} lines)")
    return found


def test_no_function_body_is_over_40_lines():
    assert long_functions(package_sources().items()) == []
    planted = "def f():\n    '''doc'''\n" + "    x = 1\n" * 41
    assert long_functions([("planted", planted)]) == ["planted:f (41 lines)"]


def imports_ray(source: str) -> bool:
    """Whether ``source`` imports ``ray`` (or a module of it)."""
    return any(isinstance(node, (ast.Import, ast.ImportFrom))
               and ("ray" in [alias.name.split(".")[0] for alias in getattr(node, "names", [])]
                    if isinstance(node, ast.Import) else (node.module or "").split(".")[0] == "ray")
               for node in ast.walk(ast.parse(source)))


#: The modules of the roles a pooled host plays (``actors/hosts.py``): Ray actors' code that
#: makes Ray calls on the handles it is given, though it need not import ``ray`` itself.
ROLE_MODULES = {"vertex_actor.py", "vertex_inputs.py", "progress_actor.py", "coordinator_actor.py"}


def not_ray_shells(sources: dict[str, str]) -> list[str]:
    """The modules (file name -> source) that are not Ray shells: neither import ``ray`` nor
    are a role of a host that sends Ray calls."""
    return [name for name, source in sources.items()
            if not imports_ray(source) and not (name in ROLE_MODULES and ".remote(" in source)]


def test_every_module_under_actors_is_a_ray_shell():
    """``actors/`` holds the Ray shells only; the pure code they run lives in the rooms below.
    A shell imports ``ray``, or is a role a Ray host plays and sends Ray calls."""
    actors = PACKAGE / "actors"
    assert not_ray_shells({path.name: path.read_text() for path in actors.glob("*.py") if path.name != "__init__.py"}) == []
    planted = {"pure.py": "x = 1\n", "progress_actor.py": "def f():\n    return 1\n", "hosts.py": "import ray.util\n"}
    assert not_ray_shells(planted) == ["pure.py", "progress_actor.py"]


@pytest.mark.parametrize(("host", "role", "own"), [
    ("VERTEX_METHODS", "raytide.actors.vertex_actor:VertexActor", {"close", "ping"}),
    ("PROGRESS_METHODS", "raytide.actors.progress_actor:ProgressActor", {"close", "ping", "next_events"}),
    ("COORDINATOR_METHODS", "raytide.actors.coordinator_actor:CoordinatorActor", {"close"}),
])
def test_hosts_forward_every_call_their_roles_take(host, role, own):
    """A host forwards to its role every public method but those the host answers itself
    (``ping``; ``close`` at a reset; the progress host's long poll, in its own concurrency
    group): a method added to a role and not forwarded would fail only on Ray."""
    from raytide.actors import hosts

    module, cls = role.split(":")
    role_class = getattr(importlib.import_module(module), cls)
    public = {name for cls in role_class.__mro__[:-1] for name in vars(cls)  # its own and its parts' (RescaleCalls)
              if not name.startswith("_") and callable(getattr(role_class, name))}
    assert set(getattr(hosts, host)) == public - own


def test_old_import_paths_name_the_moved_modules():
    """``raytide.actors.<old>`` is the module that moved, not a copy: a class has one identity."""
    from raytide.actors import MOVED

    for old, new in MOVED.items():
        assert importlib.import_module(f"raytide.actors.{old}") is importlib.import_module(new)


@pytest.mark.parametrize("internal", ["plan", "runtime", "replica", "pool", "rescale", "recovery"])
def test_old_internal_paths_are_gone(internal):
    """Only the old paths users could have imported (the README's and docs') are kept: an
    internal module's old path under ``raytide.actors`` no longer imports."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"raytide.actors.{internal}")



def unnamed(modules: list[str], doc: str) -> list[str]:
    """The modules (paths under ``raytide/``) whose file name ``doc`` never mentions."""
    return [module for module in modules if module.rsplit("/", 1)[-1] not in doc]


def test_architecture_md_names_every_module():
    """docs/architecture.md names every module (by its file name, in its room's table)."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    modules = sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert unnamed(modules, doc) == []
    assert unnamed(["core/a_planted_module.py"], doc) == ["core/a_planted_module.py"]
