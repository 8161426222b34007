"""The notebooks are committed executed, and run top to bottom in a fresh kernel of this interpreter.

They are committed with their outputs (tables, plots) so that they read as demos where
users browse them; the tests execute them again from scratch, outputs cleared first, so a
saved output never passes for a fresh one.

The kernel is this venv's Python (a kernel spec written to a temporary directory whose
``argv`` is ``sys.executable``), so the test works in a fresh venv without ``jupyter
kernelspec install``. Each notebook joins the test session's Ray, as a notebook on a
cluster does (its first cell takes ``RAY_ADDRESS``; the kernel gets ``session_ray_env``),
which saves every kernel a Ray start and stop of its own; the quickstart starts and stops
a Spark of its own on it. This file runs before the session's Spark starts, so the
session's CPUs are free for the autoscaling notebook's two replicas. (A notebook's other
branch, a local Ray of its own, is what its committed outputs show.)
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest
import ray
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from tests.ray.jobs import until

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "raytide-test-venv"
CELL_TIMEOUT = 240


@pytest.fixture(scope="module")
def kernel_dirs(tmp_path_factory) -> Path:
    """A kernel spec that runs ipykernel with this very interpreter."""
    root = tmp_path_factory.mktemp("kernels")
    spec = root / KERNEL
    spec.mkdir()
    spec.joinpath("kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "raytide (test venv)",
        "language": "python",
    }))
    return root


def execute(name: str, kernel_dirs: Path, env: dict[str, str]):
    """Run notebook ``name`` in a new kernel, its committed outputs cleared first; return the executed notebook.

    It starts once every CPU of the session's Ray is free again (the quickstart's Spark
    executors give theirs back a moment after its ``stop_spark()``), so that the
    autoscaling notebook finds the second CPU it scales onto."""
    wait_for_free_cpus(timeout=60)
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for cell in code_cells(notebook):
        cell.outputs, cell.execution_count = [], None
    manager = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dirs)]))
    client = nbclient.NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    # cleanup_kc: shut the kernel down at the end (nbclient leaves a kernel it did not start
    # running, and with it the quickstart's idle Spark JVM, until the test session ends).
    client.execute(env={k: v for k, v in env.items() if k != "MPLBACKEND"}, cleanup_kc=True)
    return notebook


def wait_for_free_cpus(timeout: float) -> None:
    until(lambda: ray.available_resources().get("CPU", 0) >= ray.cluster_resources()["CPU"],
          "every CPU of the session's Ray free", timeout, every=0.2)


def code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def outputs(cell) -> list[dict]:
    return cell.get("outputs", [])


def text_of(cell) -> str:
    parts = []
    for output in outputs(cell):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif "data" in output and "text/plain" in output["data"]:
            parts.append(output["data"]["text/plain"])
    return "".join(parts)


def has_png(notebook) -> bool:
    return any("image/png" in output.get("data", {}) for cell in notebook.cells for output in outputs(cell))


def cell_with(notebook, fragment: str):
    return next(cell for cell in notebook.cells if cell.cell_type == "code" and fragment in cell.source)


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda path: path.stem)
def test_notebook_is_committed_executed_with_its_plot(path: Path):
    notebook = nbformat.read(path, as_version=4)
    counts = [cell.execution_count for cell in code_cells(notebook)]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: execution counts {counts}; run it top to bottom"
    assert any(outputs(cell) for cell in code_cells(notebook)) and has_png(notebook), f"{path.name} has no outputs"


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.spark
def test_quickstart_counts_words_like_python_and_plots_them(kernel_dirs, session_ray_env):
    notebook = execute("quickstart", kernel_dirs, session_ray_env)

    corpus: dict = {}
    exec(next(c.source for c in notebook.cells if "corpus" in c.metadata.get("tags", [])), corpus)
    reference = collections.Counter(word for line in corpus["LINES"] for word in line.split())
    expected = sorted(reference.items(), key=lambda item: (-item[1], item[0]))[:10]

    table = text_of(cell_with(notebook, "table.head(10)"))
    shown = [(word, int(count)) for word, count in re.findall(r"^\s*\d+\s+(\S+)\s+(\d+)\s*$", table, re.MULTILINE)]
    assert shown == expected, table
    assert f"raytide and Spark agree on all {len(reference)} words" in text_of(cell_with(notebook, "spark_counts"))
    assert has_png(notebook)


@pytest.mark.ray
@pytest.mark.slow
def test_vertex_api_notifies_once_per_epoch_after_all_records(kernel_dirs, session_ray_env):
    notebook = execute("vertex_api", kernel_dirs, session_ray_env)

    assert "before advance, epoch 0 reported: False" in text_of(cell_with(notebook, "before advance"))
    lines = text_of(cell_with(notebook, "per_epoch.append"))
    for epoch in range(6):
        distinct = len({i * i % (40 * (epoch + 1)) for i in range(3000)})
        assert (f"epoch {epoch}: pushed 3000, seen at notification 3000, notifications 2, "
                f"distinct {distinct} (expected {distinct})") in lines, lines
    assert has_png(notebook)
    graph = next(cell for cell in code_cells(notebook) if cell.source.strip() == "job")  # the job shown as its graph
    svg = "".join(output["data"]["image/svg+xml"] for output in outputs(graph) if "image/svg+xml" in output.get("data", {}))
    assert svg.startswith("<svg") and 'data-vertex="distinct"' in svg and "18.0k in" in svg, svg[:200]  # 6 epochs of 3,000
    assert any("image/png" in output.get("data", {}) for output in outputs(cell_with(notebook, "job.plot_frontier()")))


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.needs_both_cores  # the autoscaler decides from measured rates (tests/lanes.py)
def test_autoscaling_takes_both_workloads_from_one_replica_to_two_and_plots_it(kernel_dirs, session_ray_env):
    notebook = execute("autoscaling", kernel_dirs, session_ray_env)

    for vertex, policy in (("mandelbrot", "scale up by"), ("primes", "ceil(")):
        shown = text_of(cell_with(notebook, f'job.parallelism()["{vertex}"]'))
        assert "final parallelism: 2" in shown, shown
        assert re.search(rf"{vertex}: 1 -> 2 replicas: .*{re.escape(policy)}.*paused \d+\.\d+ s", shown), shown
    assert has_png(notebook)
