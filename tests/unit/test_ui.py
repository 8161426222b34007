"""The live view's pure parts: a plan laid out and drawn as SVG, the page's JSON document built from
``job.stats()`` readings (rates from two samples, shares, the bottleneck, the timeline, errors),
the token check of its server (a real aiohttp server on loopback, no Ray), the progress bar's total, and the
graph as PNG and the frontier plot drawn by matplotlib."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections import Counter

import pytest

import raytide as rt
from raytide.driver.views import EpochBar, epochs_done, epochs_total
from raytide.physical.plan import compile_plan
from raytide.ui.document import JobBook, rates, shares
from raytide.ui.figures import frontier_figure, save_graph_png
from raytide.ui.layout import layout
from raytide.ui.server import UIServer, authorized, is_loopback
from raytide.ui.svg import render


def looped_plan():
    """An input, a loop (halving), a keyed count: chains, an exchange and a back edge."""
    flow = rt.Dataflow("looped")
    nums = flow.input("numbers")
    halved = nums.iterate(lambda s: s.map(lambda x: x // 2, name="halve"), max_iterations=3)
    halved.map(lambda x: (x % 3, 1), name="pair").count_by_key(lambda kv: kv[0], name="count").output("counts")
    return compile_plan(flow, 2)


def test_the_layout_puts_vertices_in_columns_and_marks_loops_exchanges_and_chains():
    plan = looped_plan()
    graph = layout(plan)
    nodes = {n["name"]: n for n in graph["nodes"]}
    assert set(nodes) == set(plan.vertices)
    assert nodes["numbers"]["column"] == 0 and nodes["counts"]["column"] == max(n["column"] for n in nodes.values())
    back = [e for e in graph["edges"] if e["back"]]
    assert len(back) == 1 and plan.vertex(back[0]["source"]).role == "feedback"
    assert any(e["kind"] == "exchange" and e["target"] == "count" and not e["fused"] for e in graph["edges"])
    for edge in graph["edges"]:  # every edge but the loop's goes left to right
        assert edge["back"] or nodes[edge["source"]]["column"] < nodes[edge["target"]]["column"]
    for chain in graph["chains"]:  # a chain's box holds its vertices and no other's; a row per branch
        for name in nodes:
            node = nodes[name]
            inside = chain["x"] < node["x"] and node["x"] + node["w"] < chain["x"] + chain["w"] and \
                chain["y"] < node["y"] and node["y"] + node["h"] < chain["y"] + chain["h"]
            assert inside == (name in chain["vertices"]), (name, chain["name"])
        readers = Counter(e["source"] for e in graph["edges"] if e["fused"] and e["source"] in chain["vertices"])
        branches = sum(count - 1 for count in readers.values())  # halve's stream: the feedback's and the leave's
        assert len({nodes[name]["row"] for name in chain["vertices"]}) == 1 + branches
    boxes = {(n["x"], n["y"]) for n in nodes.values()}
    assert len(boxes) == len(nodes)  # no two vertices on one spot
    assert all(n["parallelism"] == 2 for n in nodes.values())


def test_the_svg_names_every_vertex_with_its_width_rates_and_the_bottleneck():
    graph = layout(looped_plan())
    figures = {"count": {"in_per_s": 1500.0, "out_per_s": 30.0, "queued": 4, "frontier_lag": 2, "busy": 0.9,
                         "bottleneck": True, "parallelism": 3}}
    svg = render(graph, figures)
    for node in graph["nodes"]:
        assert f'data-vertex="{node["name"]}"' in svg
    assert "×3" in svg and "in 1.5k/s · out 30/s" in svg and "queued 4 · lag 2" in svg
    assert svg.count('stroke="#c0392b" stroke-width="4"') == 1  # the one bottleneck
    assert 'class="edge loop"' in svg and 'class="edge exchange"' in svg
    assert 'class="chain"' in svg


def test_rates_and_shares_from_two_samples():
    assert rates({"v": {"records_in": 10, "records_out": 0}}, {"v": {"records_in": 40, "records_out": 20}}, 0.5) == {
        "v": {"in_per_s": 60.0, "out_per_s": 40.0}}
    assert rates({}, {"new": {"records_in": 8, "records_out": 8}}, 2.0) == {"new": {"in_per_s": 4.0, "out_per_s": 4.0}}
    share = shares({"j/c/0": {"busy_s": 1.0, "blocked_s": 0.0}}, {"j/c/0": {"busy_s": 1.5, "blocked_s": 0.25}}, 1.0)
    assert share == {"j/c/0": {"busy": 0.5, "blocked": 0.25}}


def reading(records: int, busy: float, frontier: int, parallelism: int = 1, **extra) -> dict:
    """A ``job.stats()`` reading of the looped plan: every vertex saw ``records``; chain ``count+counts``
    was busy ``busy`` seconds in all, the others a tenth of that."""
    plan = looped_plan()
    replicas = {f"job/{chain.name}/{r}": {"busy_s": busy if chain.vertices[0] == "count" else busy / 10, "blocked_s": 0.0,
                                          "vertices": {}} for chain in plan.chains for r in range(parallelism)}
    vertices = {name: {"records_in": records, "records_out": records, "queued": 0, "frontier": frontier,
                       "frontier_lag": 1} for name in plan.vertices}
    return {"vertices": vertices, "replicas": replicas, "parallelism": dict.fromkeys(plan.vertices, parallelism),
            "unreachable": [], **extra}


def test_the_document_has_every_vertex_its_rates_the_bottleneck_and_the_frontier_over_time():
    book = JobBook("job", layout(looped_plan()))
    first = book.add(reading(100, 1.0, 3), at=10.0, wall=1000.0, facts={"latest": {"counts": 2}})
    assert first["vertices"]["count"]["in_per_s"] is None  # one reading: no rates yet
    doc = book.add(reading(300, 1.8, 5), at=12.0, wall=1002.0,
                   facts={"latest": {"counts": 4}, "latencies": [0.1, 0.2, 0.3, 2.0], "epochs_total": 10})
    assert set(doc["vertices"]) == set(looped_plan().vertices)
    assert doc["vertices"]["count"]["in_per_s"] == 100.0 and doc["vertices"]["counts"]["out_per_s"] == 100.0
    assert [name for name, v in doc["vertices"].items() if v["bottleneck"]] == ["count", "counts"]  # busy 0.4 of the time
    assert doc["vertices"]["count"]["replicas"][0]["busy"] == 0.4
    assert [h["outputs"]["counts"] for h in doc["frontier_history"]] == [3, 5]
    assert doc["epochs_completed"] == 5 and doc["epochs_total"] == 10
    assert doc["epoch_latency_s"] == {"p50": 0.2, "p99": 2.0, "count": 4}
    assert json.loads(json.dumps(doc)) == doc  # plain JSON


def test_the_timeline_holds_snapshots_recoveries_rescales_and_the_autoscalers_reasons_once_each():
    book = JobBook("job", layout(looped_plan()))
    snapshots = {"committed": 1, "last_id": 7, "last_duration_s": 0.05, "last_size_bytes": 900, "abandoned_reasons": ["timeout"],
                 "last_complete": {"counts": 41}}
    rescale = {"finished_at": 1001.5, "before": {"count": 1}, "after": {"count": 2}, "pause_s": 0.2, "seconds": 0.4}
    recovery = {"incarnation": 2, "finished_at": 1001.0, "seconds": 1.5, "cause": "replica job/count+counts/0 died",
                "snapshot_id": 7, "replaced": ["job/count+counts/0"]}
    rounds = [{"at": 1001.2, "decisions": [{"vertex": "count", "current": 1, "target": 2, "reason": "rate 900 > 500"}],
               "changes": {"count": 2}, "rescale": rescale}]
    extra = {"snapshots": snapshots, "rescales": [rescale], "recoveries": {"recoveries": [recovery]}, "autoscaler": rounds}
    book.add(reading(1, 0.0, 0, **extra), at=1.0, wall=1002.0, facts={})
    doc = book.add(reading(2, 0.0, 0, **extra), at=2.0, wall=1003.0, facts={})
    kinds = [(e["kind"], e.get("committed")) for e in doc["timeline"]]
    assert sorted(kinds, key=str) == sorted([("recovery", None), ("autoscaler", None), ("rescale", None),
                                             ("snapshot", True), ("snapshot", False)], key=str)
    by_kind = {e["kind"]: e for e in doc["timeline"]}
    assert by_kind["rescale"]["pause_s"] == 0.2 and "rate 900 > 500" in by_kind["rescale"]["reason"]
    assert by_kind["recovery"]["reason"] == "replica job/count+counts/0 died" and by_kind["recovery"]["pause_s"] == 1.5
    assert "rate 900 > 500" in by_kind["autoscaler"]["reason"]
    committed = [e for e in doc["timeline"] if e.get("committed")]
    assert [(e["id"], e["epoch"], e["duration_s"], e["size_bytes"]) for e in committed] == [(7, 41, 0.05, 900)]
    assert committed[0]["label"] == "snapshot 7 committed, epochs to 41 complete"


def test_a_user_error_reaches_the_document_with_its_traceback():
    from raytide.driver.watch import _error_of

    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError as error:
        failure = rt.UserCodeError("count", 1, None, error)
    errors = _error_of(failure)
    assert errors[0]["vertex"] == "count" and errors[0]["replica"] == 1 and "ZeroDivisionError" in errors[0]["traceback"]
    book = JobBook("job", layout(looped_plan()))
    assert book.add(reading(1, 0.0, 0), 1.0, 1.0, {"errors": errors, "state": "failed"})["errors"] == errors
    assert _error_of(rt.JobCancelled("cancelled")) == [] and _error_of(None) == []


def test_the_token_check():
    assert authorized(None, {}, {})
    assert authorized("t0k", {"token": "t0k"}, {}) and authorized("t0k", {}, {"Authorization": "Bearer t0k"})
    assert not authorized("t0k", {}, {}) and not authorized("t0k", {"token": "t0"}, {})
    assert not authorized("t0k", {}, {"Authorization": "Bearer nope"}) and not authorized("t0k", {}, {"Authorization": "t0k"})
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def status(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_server_bound_off_loopback_refuses_requests_without_its_token():
    document = JobBook("job", layout(looped_plan())).add(reading(1, 0.0, 0), 1.0, 1.0, {})
    server = UIServer(lambda: {"job": document}, host="0.0.0.0", port=0)
    assert server.token  # generated: binding off loopback needs one
    url = server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert f"token={server.token}" in url
        for path in ("/", "/api/jobs", "/api/job", "/api/graph.svg", "/static/app.js"):
            assert status(base + path) == 401
            assert status(base + path + "?token=wrong") == 401
            assert status(base + path, {"Authorization": "Bearer wrong"}) == 401
            assert status(f"{base}{path}?token={server.token}") == 200
        assert status(base + "/api/job", {"Authorization": f"Bearer {server.token}"}) == 200
    finally:
        server.stop()


def test_a_loopback_server_serves_the_page_the_document_and_the_svg():
    document = JobBook("job", layout(looped_plan())).add(reading(1, 0.0, 0), 1.0, 1.0, {})
    server = UIServer(lambda: {"job": document})
    assert server.token is None
    url = server.start()
    try:
        with urllib.request.urlopen(url, timeout=10) as page:
            assert b"static/app.js" in page.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/job?name=job", timeout=10) as answer:
            assert set(json.load(answer)["vertices"]) == set(document["vertices"])
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/graph.svg", timeout=10) as answer:
            assert answer.read().startswith(b"<svg")
        assert status(f"http://127.0.0.1:{server.port}/api/job?name=nope") == 404
        assert status(f"http://127.0.0.1:{server.port}/static/secrets.txt") == 404
    finally:
        server.stop()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def test_the_pages_poll_gets_only_what_changed():
    """``/api/view``: whole at first (the graph as SVG, every sample and entry); then, for the document it holds,
    only the samples and entries made after it, no SVG while the graph's key is the same, nothing but
    ``unchanged`` when no reading is newer; the SVG again when a width changes; a bad ``since`` named."""
    book = JobBook("job", layout(looped_plan()))
    snapshots = {"committed": 1, "last_id": 1, "last_duration_s": 0.01, "last_size_bytes": 10, "abandoned_reasons": []}
    documents = {"job": book.add(reading(1, 0.0, 0, snapshots=snapshots), 1.0, 1000.0, {})}
    server = UIServer(lambda: documents)
    base = server.start() + "api/view?name=job"
    try:
        first = get_json(base)
        assert first["svg"].startswith("<svg") and len(first["frontier_history"]) == 1 and len(first["timeline"]) == 1
        assert first["boxes"]["count"]["width"] == "×1" and [j["name"] for j in first["jobs"]] == ["job"]
        key, since = first["graph_key"], first["at"]
        assert get_json(f"{base}&since={since}&graph={key}") == {"job": "job", "at": since, "unchanged": True, "jobs": first["jobs"]}
        documents["job"] = book.add(reading(5, 0.5, 1), 2.0, 1001.0, {})
        update = get_json(f"{base}&since={since}&graph={key}")
        assert "svg" not in update and "graph" not in update and update["timeline"] == []
        assert [s["at"] for s in update["frontier_history"]] == [1001.0] and update["boxes"]["count"]["rates"] == "in 4/s · out 4/s"
        documents["job"] = book.add(reading(9, 1.0, 2, parallelism=2), 3.0, 1002.0, {})
        rescaled = get_json(f"{base}&since={update['at']}&graph={key}")
        assert rescaled["graph_key"] != key and 'data-vertex="count"' in rescaled["svg"] and "×2" in rescaled["svg"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}&since=yesterday", timeout=10)
        assert refused.value.code == 400 and "since='yesterday' is not a time" in refused.value.read().decode()
    finally:
        server.stop()


def test_the_progress_bar_needs_a_known_total_and_a_terminal(monkeypatch):
    assert epochs_total({"numbers": [[1], [2]]}, ["numbers"]) == 2 and epochs_done({"counts": 1}) == 2
    assert EpochBar(2, "job").bar is None  # pytest's stderr is no terminal
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert EpochBar(None, "job").bar is None and EpochBar(2, "job", enabled=False).bar is None


@pytest.mark.parametrize("name", ["a" * 40])
def test_a_long_name_is_cut_in_its_box_and_whole_in_its_tooltip(name):
    graph = {"plan": "p", "nodes": [{"name": name, "role": "vertex", "chain": name, "parallelism": 1, "cyclic": False,
                                     "x": 0, "y": 0, "w": 170, "h": 62}], "edges": [], "chains": [], "width": 200, "height": 90}
    svg = render(graph, {})
    assert f"<title>{name}</title>" in svg and f'data-vertex="{name}"' in svg and ("a" * 20 + "…") in svg


def red_share(pixels) -> float:
    """The share of an RGB(A) image's pixels in the bottleneck's red (#c0392b)."""
    import numpy as np

    rgb = pixels[..., :3]
    return float((np.abs(rgb - np.array([0xC0, 0x39, 0x2B]) / 255).max(axis=-1) < 0.08).mean())


def test_the_graph_as_png_is_the_layout_drawn_by_matplotlib(tmp_path):
    from matplotlib import image

    graph = layout(looped_plan())
    figures = {"count": {"in_per_s": 1500.0, "busy": 0.9, "bottleneck": True, "parallelism": 3}}
    save_graph_png(graph, figures, str(tmp_path / "graph.png"), dpi=100)
    pixels = image.imread(str(tmp_path / "graph.png"))
    assert pixels.shape[:2] == (graph["height"], graph["width"])  # the SVG's pixels at 100 dpi
    assert pixels[..., :3].std() > 0.05 and red_share(pixels) > 0.001  # boxes, text, and the bottleneck's red border
    save_graph_png(graph, {}, str(tmp_path / "calm.png"), dpi=100)
    assert red_share(image.imread(str(tmp_path / "calm.png"))) < red_share(pixels) / 10  # no bottleneck: no red border


def test_the_frontier_plot_has_a_line_per_output():
    figure = frontier_figure({"counts": [(0.5, 1), (1.0, 2)], "other": [(0.7, 1)]}, "frontier of job 'x'")
    axes = figure.axes[0]
    assert [line.get_label() for line in axes.get_lines()] == ["counts", "other"]
    assert list(axes.get_lines()[0].get_ydata()) == [0, 1, 2] and axes.get_title() == "frontier of job 'x'"
    assert figure._repr_png_().startswith(b"\x89PNG")  # a notebook shows it inline, pyplot or not


def test_without_matplotlib_the_png_says_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ImportError, match="pip install matplotlib"):
        save_graph_png(layout(looped_plan()), {}, str(tmp_path / "graph.png"))
    with pytest.raises(ImportError, match=r"job.plot_frontier\(\) draws with matplotlib"):
        frontier_figure({}, "x")
