"""The layers of docs/architecture.md, pinned: which package may import which, which modules
stay free of Ray, and the public API of the package and of every subpackage."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "raytide"

#: Which raytide packages each package may import (besides itself). A top-level module
#: other than ``errors`` (``raytide/__init__.py`` and the old import paths kept working)
#: is the public face and may import anything; nothing may import it.
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "progress": frozenset({"errors"}),
    "differential": frozenset({"errors", "progress"}),
    "windows": frozenset({"errors", "progress"}),
    "core": frozenset({"errors", "progress", "differential", "windows"}),
    "physical": frozenset({"errors", "progress", "core"}),
    "snapshots": frozenset({"errors", "progress", "core", "physical"}),
    "autoscale": frozenset({"errors", "progress", "core"}),
    "sources": frozenset({"errors", "progress", "core", "windows"}),
    "rescale": frozenset({"errors", "progress", "core", "physical", "snapshots"}),
    "engine": frozenset({"errors", "progress", "core", "physical", "snapshots", "rescale"}),
    "supervisor": frozenset({"errors", "progress", "core", "physical", "snapshots", "rescale", "engine"}),
    "testing": frozenset({"errors", "progress", "core", "physical", "snapshots", "rescale", "engine", "supervisor"}),
    "actors": frozenset({"errors", "progress", "core", "physical", "snapshots", "rescale", "engine", "autoscale",
                         "sources"}),
    "driver": frozenset({"errors", "progress", "core", "physical", "snapshots", "rescale", "engine", "autoscale",
                         "sources", "actors", "windows", "ui", "supervisor"}),
    "integrations": frozenset({"errors", "progress", "core", "sources", "physical", "driver"}),
    "graph": frozenset({"errors", "progress", "core", "differential"}),
    "ui": frozenset({"errors", "progress", "core", "physical"}),
}
PUBLIC_FACE = "the public face"

#: Modules that must import without Ray: the logical model and every pure algorithm.
PURE = [
    "raytide",
    "raytide.core",
    "raytide.core.dataflow",
    "raytide.core.operators",
    "raytide.core.routing",
    "raytide.core.columnar",
    "raytide.graph",
    "raytide.progress",
    "raytide.progress.tracker",
    "raytide.progress.publisher",
    "raytide.progress.inorder",
    "raytide.progress.outputs",
    "raytide.engine.replica",
    "raytide.physical.plan",
    "raytide.physical.protocol",
    "raytide.engine.progress_core",
    "raytide.engine.holdback",
    "raytide.engine.notifications",
    "raytide.engine.outbox",
    "raytide.snapshots.replica_state",
    "raytide.snapshots.recovery",
    "raytide.testing.local",
    "raytide.rescale.rescaling",
    "raytide.rescale.steps",
    "raytide.rescale.migration",
    "raytide.snapshots",
    "raytide.snapshots.barriers",
    "raytide.snapshots.store",
    "raytide.snapshots.coordinator",
    "raytide.snapshots.config",
    "raytide.autoscale",
    "raytide.sources",
    "raytide.integrations.records",
    "raytide.ui.layout",
    "raytide.ui.svg",
    "raytide.ui.figures",
    "raytide.ui.document",
    "raytide.ui.server",
]


def layer_of(module: str) -> str:
    """``raytide.core.dataflow`` -> ``core``; top-level modules other than errors are the public face."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1]
    return "errors" if parts[-1] == "errors" else PUBLIC_FACE


def module_name(path: Path, root: Path) -> str:
    relative = path.relative_to(root.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def raytide_imports(source: str, module: str) -> set[str]:
    """Every ``raytide`` module ``source`` imports, lazy imports inside functions included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "raytide")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package (a package is its own)
                parts = module.split(".")
                is_package = PACKAGE.parent.joinpath(*parts).is_dir()
                base = parts[: len(parts) - node.level + is_package]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] == "raytide":
                found.add(target)
    return found


def violations(sources: dict[str, str]) -> list[str]:
    """Imports that run against :data:`ALLOWED`, for modules given as ``{name: source}``."""
    wrong = []
    for module, source in sorted(sources.items()):
        layer = layer_of(module)
        for target in sorted(raytide_imports(source, module)):
            target_layer = layer_of(target) if target != "raytide" else PUBLIC_FACE
            if layer == PUBLIC_FACE or target_layer == layer:
                continue
            if target_layer not in ALLOWED.get(layer, frozenset()):
                wrong.append(f"{module} ({layer}) imports {target} ({target_layer})")
    return wrong


def package_sources() -> dict[str, str]:
    return {module_name(p, PACKAGE): p.read_text() for p in PACKAGE.rglob("*.py")}


def test_imports_run_one_way():
    assert violations(package_sources()) == []


def test_every_package_has_a_row_in_the_table():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED) - {"errors"}


@pytest.mark.parametrize(("module", "planted"), [
    ("raytide.core.dataflow", "from raytide.driver.job import Job"),
    ("raytide.progress.tracker", "import raytide.core.batches"),
    ("raytide.core.routing", "from raytide.autoscale.policies import RatePolicy"),
    ("raytide.sources.text", "from raytide import Dataflow"),
    ("raytide.engine.replica", "from raytide.integrations import records"),
    ("raytide.core.keygroups", "from ..actors import plan"),
])
def test_a_planted_back_up_import_is_caught(module, planted):
    sources = package_sources()
    sources[module] += f"\n\ndef _planted():\n    {planted}\n"
    assert len(violations(sources)) == 1


@pytest.fixture(scope="module")
def pulled_in_ray() -> dict[str, bool]:
    """For each module of :data:`PURE`, imported one after the other in one fresh process:
    whether ``ray`` was imported by then. Ray comes in at the first module whose imports pull
    it in (the modules before it were imported without it), so that module's test fails
    first; one process instead of one per module saves 30 interpreter starts."""
    code = ("import importlib, json, sys\n"
            "seen = {}\n"
            "for name in sys.argv[1:]:\n"
            "    importlib.import_module(name)\n"
            "    seen[name] = 'ray' in sys.modules\n"
            "print(json.dumps(seen))\n")
    done = subprocess.run([sys.executable, "-c", code, *PURE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("module", PURE)
def test_pure_module_does_not_import_ray(module, pulled_in_ray):
    assert not pulled_in_ray[module], f"{module} pulls in ray (or a pure module imported before it does)"


def test_a_host_and_its_roles_start_without_pyarrow():
    """A host process imports raytide and its role's module at start-up, on the clock of a
    job's first start; raytide's modules bring pyarrow (40-80 ms there) only with Arrow data,
    a source that reads files, or a snapshot store that is opened. (Ray itself imports
    pyarrow, and NumPy with it, in any worker that takes or returns anything, to register
    its Arrow serializers at its first call with arguments or its first answer: see
    docs/benchmarks.md, "Start-up". This keeps raytide from adding it where Ray does not.)"""
    code = ("import sys, raytide, raytide.actors.hosts, raytide.actors.vertex_actor, raytide.actors.progress_actor, "
            "raytide.actors.coordinator_actor; print(sorted(m for m in sys.modules if m.startswith('pyarrow')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout


def _word_count_plan(tmp_path: Path) -> Path:
    """A file holding the pickled plan of a word count at parallelism 2, as a host unpickles it."""
    import cloudpickle

    import raytide as rt
    from raytide.physical.plan import compile_plan

    flow = rt.Dataflow("words")
    flow.input("lines").flat_map(str.split).count_by_key(lambda word: word).output("counts")
    plan = tmp_path / "plan.pickle"
    plan.write_bytes(cloudpickle.dumps(compile_plan(flow, 2)))
    return plan


def test_a_host_starts_without_the_builder_or_the_autoscaler(tmp_path):
    """A host process imports ``raytide.actors.hosts`` before it is given a role, on the clock
    of a job's first start: the package's and ``raytide.core``'s public names come on first
    use, so the dataflow builder, the autoscaler and NumPy (about 55 ms a host) stay out of it.
    A vertex role, and the plan it unpickles, bring in neither the autoscaler nor the builder
    (the plan keeps the logical graph's parts, ``raytide.core.logical``; about 40 ms a host)."""
    plan = _word_count_plan(tmp_path)
    code = ("import pickle, sys, raytide.actors.hosts; first = set(sys.modules); import raytide.actors.vertex_actor; "
            f"pickle.loads(open({str(plan)!r}, 'rb').read()); "
            "print(sorted(m for m in first if m == 'numpy' or m.startswith(('raytide.core.dataflow', 'raytide.autoscale')))); "
            "print(sorted(m for m in sys.modules if m.startswith(('raytide.autoscale', 'raytide.core.dataflow'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["[]", "[]"], done.stdout


#: What a vertex host does not import at its start (issue 76): the snapshot store, its lease and
#: manifest, the coordinator and the recovery layout (a job with recovery imports them when its
#: replicas take their roles), the checkpoint-interval model, the window specs and a stream's clock;
#: what a replica saves at a snapshot or a cut, a rescale's pieces and a stepped rescale's steps
#: (imported at a replica's first snapshot, cut, restore or step plan).
NOT_AT_A_HOSTS_START = ("raytide.snapshots.store", "raytide.snapshots.lease", "raytide.snapshots.lease_store",
                        "raytide.snapshots.manifest", "raytide.snapshots.coordinator", "raytide.snapshots.recovery",
                        "raytide.snapshots.config", "raytide.snapshots.interval", "raytide.windows.specs",
                        "raytide.windows.pending", "raytide.windows.event_time", "raytide.sources.clocked_stream",
                        "raytide.snapshots.replica_state", "raytide.rescale.layout", "raytide.rescale.migration",
                        "raytide.rescale.steps", "raytide.rescale.rescaling", "raytide.engine.stepping")


def test_a_vertex_host_starts_without_the_snapshot_store_or_the_clocks(tmp_path):
    """A vertex host imports its role's modules at start-up, on the clock of a job's first start,
    and unpickles its plan; what only a job with recovery, a rescale or a stream with event time
    uses comes when used (86 -> 60 ms of CPU, then 63 -> 57 modules and 44 -> 33 dataclasses)."""
    plan = _word_count_plan(tmp_path)
    code = ("import pickle, sys, raytide.actors.hosts, raytide.actors.vertex_actor; "
            f"pickle.loads(open({str(plan)!r}, 'rb').read()); "
            f"print(sorted(m for m in sys.modules if m in {NOT_AT_A_HOSTS_START!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_rt_run_imports_without_pyarrow_compute():
    """``rt.run``'s modules, imported on its first use in a fresh process, leave out what only a
    source read in the replicas or a stream with event time needs (``raytide.sources.event_time``
    and ``pyarrow.compute`` with it: 126 -> 80 ms of CPU)."""
    code = "import sys, raytide; raytide.run; print(sorted(m for m in sys.modules if m.startswith('pyarrow')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_the_progress_role_starts_without_numpy():
    """The progress actor packs outputs (``raytide.physical.pickled``) but never reads a batch,
    so its host starts without NumPy and the batch types (about 40 ms of its start-up)."""
    code = ("import sys, raytide.actors.hosts, raytide.actors.progress_actor; "
            "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('raytide.core.batches')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_public_api():
    import raytide

    assert sorted(raytide.__all__) == [
        "ArgumentError", "Arranged", "Autoscale", "Collection", "Dataflow", "EventTime", "GraphError", "Job", "JobCancelled", "JobTimeout",
        "Loop", "Probe", "ProgressError",
        "RaytideError", "RecordError", "Recovery", "RecoveryError", "ReplicaLost", "RescaleError", "Session", "Sliding",
        "SourceError", "SparkIntegrationError", "StoreFencedError", "StoreLeaseError", "Stream", "Timestamp", "Tumbling",
        "UserCodeError",
        "Vertex", "accumulate", "configure_pool", "run", "shutdown",
    ]
    assert callable(raytide.run)


@pytest.mark.parametrize("package", ["raytide", "raytide.core"])
def test_every_public_name_resolves_and_each_lazy_name_is_typed_from_where_it_is_imported(package):
    """A package that imports its public names on first use lists each twice: under
    ``TYPE_CHECKING`` for mypy, and in ``_LAZY`` for ``__getattr__``. The two must agree,
    and every name of ``__all__`` must resolve."""
    module = importlib.import_module(package)
    typed = {}
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            typed.update({alias.asname or alias.name: (imported.module, alias.name)
                          for imported in node.body for alias in imported.names})
    assert typed == module._LAZY
    for name in module.__all__:
        assert getattr(module, name) is not None, name


SUBPACKAGE_API = {
    "raytide.core": ["Dataflow", "Loop", "Probe", "Stream", "Vertex", "VertexContext"],
    "raytide.actors": ["Vertex", "VertexContext"],
    "raytide.progress": [
        "Antichain", "ChangeBatch", "Edge", "GraphBuilder", "Location", "MutableAntichain", "PathSummary",
        "ProgressGraph", "Timestamp", "Tracker", "VertexShape",
    ],
    "raytide.snapshots": [
        "BarrierAligner", "DEFAULT_PRIOR_FAILURES", "DEFAULT_PRIOR_RATE", "Decision", "DurationEstimator",
        "FailureRateEstimator", "ForwardBarrier", "IntervalTuner", "Manifest", "PartInfo", "Release",
        "SnapshotComplete", "SnapshotStore", "TakeSnapshot", "describe", "lambert_w0", "optimal_interval", "utilization",
    ],
    "raytide.autoscale": [
        "DEFAULT_KEY_GROUPS", "FilePolicy", "JobStats", "KeyGroupAssignment", "KeyGroupMove", "RatePolicy",
        "ReplicaStats", "ScalingDecision", "ScalingPolicy", "Streak", "ThresholdPolicy", "VertexStats",
        "apply_cooldown", "cap_by_free_cpus", "clamp", "combine", "ignore_small_changes", "key_group",
        "record_changes", "require_persistence",
    ],
    "raytide.sources": [
        "ArrowDatasetSource", "BlockRefs", "DriverSource", "Placement", "Reader", "RemoteBatch", "Source", "StreamReader",
        "StreamSource", "TextFileSource", "as_source",
    ],
}


@pytest.mark.parametrize("package", sorted(SUBPACKAGE_API))
def test_subpackage_api(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(SUBPACKAGE_API[package])
    for name in module.__all__:
        assert getattr(module, name) is not None


OLD_IMPORT_PATHS = [
    ("raytide.dataflow", "Dataflow"),
    ("raytide.dataflow", "Stream"),
    ("raytide.core.vertex", "Vertex"),
    ("raytide.autoscale.keygroups", "KeyGroupAssignment"),
    ("raytide.integrations.spark", "from_spark"),
    ("raytide.integrations.spark", "to_spark"),
    ("raytide.integrations.ray_data", "from_dataset"),
    ("raytide.physical.wire", "pack_records"),  # packing moved to raytide.physical.pickled
    ("raytide.physical.wire", "frame"),
    ("raytide.actors.wire", "packed_size"),
    ("raytide.actors.local", "LocalJob"),  # LocalJob moved to raytide.testing
    ("raytide.actors.vertex", "Vertex"),
    ("raytide.core.dataflow", "LogicalVertex"),  # the plan's types moved to raytide.core.logical
    ("raytide.core.dataflow", "Channel"),
]


@pytest.mark.parametrize(("module", "name"), OLD_IMPORT_PATHS)
def test_public_import_paths_keep_working(module, name):
    assert getattr(importlib.import_module(module), name) is not None


def test_no_two_classes_or_type_aliases_share_a_name():
    """One name, one meaning: a second ``Status`` or ``ChannelId`` elsewhere is a trap for readers."""
    homes: dict[str, list[str]] = {}
    for module, source in package_sources().items():
        if layer_of(module) == PUBLIC_FACE or module in ("raytide.autoscale.keygroups", "raytide.core.vertex"):
            continue  # re-exports of the old import paths
        for node in ast.parse(source).body:
            names = [node.name] if isinstance(node, ast.ClassDef) else []
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                names = [name] if name[:1].isupper() and not name.isupper() else []
            for name in names:
                homes.setdefault(name, []).append(module)
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}
