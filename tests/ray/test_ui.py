"""The live view of a running job on a real Ray, read in a real headless Chromium (Debian's
``chromium``, which ``.ci/run`` installs, driven by Playwright without a browser download).

One job (an input, a loop, a keyed count, with recovery) runs while the driver feeds it; the
test opens ``job.ui()``'s page, reads the vertex names and rates from the DOM, sees the rates,
the frontier and the page's own polling move over two seconds while the graph, the table's rows and
the plot keep their nodes (updated in place, not drawn again), sees a hidden tab ask for nothing
and a shown one ask again, rescales the job and sees the
rescale on the page's timeline and the new width in its graph, saves the graph as SVG and PNG
with the page's buttons, SIGKILLs a replica and sees the recovery on the timeline, saves a
screenshot and checks it is not blank. Meanwhile a second job fails in user code, and its page
shows the vertex, replica, epoch and the user's traceback. It also holds ``/api/job`` against
``job.stats()`` read around it, a server bound off loopback against requests without its token,
``job.ui_snapshot`` (SVG and PNG), and ``python -m raytide ui`` serving, from the cluster's board, a
job whose driver runs with ``RAYTIDE_UI=1``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

import raytide as rt
from tests.ray.jobs import until

pytestmark = pytest.mark.ray

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def looped_counts() -> rt.Dataflow:
    flow = rt.Dataflow("ui")
    numbers = flow.input("numbers")
    halved = numbers.iterate(lambda s: s.map(lambda x: x // 2 if x > 1 else x, name="halve"), max_iterations=4)
    halved.map(lambda x: (x % 7, 1), name="pair").count_by_key(lambda kv: kv[0], name="count").output("counts")
    return flow


def explode(x: int) -> int:
    """The user's code of the failing job: fails at its record 2."""
    if x == 2:
        raise ValueError("the user's own error at record 2")
    return x


def failing_job() -> rt.Job:
    """A job that fails in user code (vertex ``explode``, replica 0, epoch 1), driven until it has."""
    flow = rt.Dataflow("ui-error")
    flow.input("numbers").map(explode, name="explode").output("out")
    job = rt.run(flow, inputs={"numbers": [[0, 1], [2, 3]]}, parallelism=1)
    with pytest.raises(rt.UserCodeError):
        job.wait(timeout=60, progress=False)
    return job


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


class Fed:
    """The driver's side of the running job: a thread pushing an epoch every 0.1 s, one consuming its output."""

    def __init__(self, job: rt.Job) -> None:
        self.job, self.stop = job, threading.Event()
        self.threads = [threading.Thread(target=self._feed, daemon=True), threading.Thread(target=self._consume, daemon=True)]
        for thread in self.threads:
            thread.start()

    def _feed(self) -> None:
        epoch = 0
        while not self.stop.is_set():
            self.job.push("numbers", list(range(500)), epoch)
            self.job.advance("numbers", epoch + 1)
            epoch += 1
            time.sleep(0.1)
        self.job.close("numbers")

    def _consume(self) -> None:
        for _ in self.job.results("counts", progress=False):
            pass

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def page_figures(page: Any) -> dict[str, Any]:
    """What the page shows now: the graph's vertex names and widths, each row's rates and frontier, its polls."""
    return page.evaluate("""() => ({
        names: [...document.querySelectorAll('svg.dataflow g.vertex')].map(g => g.dataset.vertex),
        widths: Object.fromEntries([...document.querySelectorAll('svg.dataflow g.vertex')].map(
            g => [g.dataset.vertex, g.querySelector('text.width').textContent])),
        rows: Object.fromEntries([...document.querySelectorAll('#vertices tbody tr')].map(tr => [tr.dataset.vertex,
            {in: tr.querySelector('td.in').textContent, out: tr.querySelector('td.out').textContent,
             frontier: tr.children[5].textContent}])),
        svgIn: Object.fromEntries([...document.querySelectorAll('svg.dataflow text.rates')].map(
            t => [t.parentNode.dataset.vertex, Number(t.dataset.in)])),
        updates: Number(document.body.dataset.updates),
        timeline: [...document.querySelectorAll('#timeline li')].map(li => li.dataset.kind),
        header: [document.getElementById('epochs').textContent, document.getElementById('latency').textContent],
        bars: Object.fromEntries([...document.querySelectorAll('#vertices tbody tr')].map(tr => [tr.dataset.vertex,
            [...tr.children[7].children].map(span => [...span.querySelectorAll('.bar')].map(b => b.title.split(' ')[0]))])),
    })""")


KEEP_MARKS = """() => { for (const node of [document.querySelector('svg.dataflow'),
    document.querySelector('#vertices tbody tr'), document.querySelector('#frontier polyline')]) node.dataset.kept = 'yes'; }"""
KEPT = """() => [document.querySelector('svg.dataflow'), document.querySelector('#vertices tbody tr'),
    document.querySelector('#frontier polyline')].map(node => node.dataset.kept === 'yes')"""


def check_updated_in_place(page: Any) -> None:
    """Marked nodes (the graph, a table row, the frontier's line) are the page's still after two polls that
    moved the figures: it updates them, it does not draw them again; the plot's line has a point per sample."""
    assert page.evaluate(KEPT) == [True, True, True]
    points = page.get_attribute("#frontier polyline", "points").split()
    assert len(points) >= 2, points


def check_a_hidden_tab_asks_nothing(page: Any) -> None:
    """With the tab hidden (as the browser says it is: ``visibilityState``), the page stops asking; shown, it asks again."""
    def shown(state: str) -> None:
        page.evaluate("state => { Object.defineProperty(document, 'visibilityState', {value: state, configurable: true});"
                      " document.dispatchEvent(new Event('visibilitychange')); }", state)

    shown("hidden")
    time.sleep(1.2)  # an answer on its way when it was hidden still counts
    hidden = page.evaluate("Number(document.body.dataset.updates)")
    time.sleep(2.5)
    assert page.evaluate("Number(document.body.dataset.updates)") == hidden
    shown("visible")
    page.wait_for_function(f"Number(document.body.dataset.updates) >= {hidden + 2}", timeout=10_000)


def check_download(page: Any, button: str, path: str) -> bytes:
    """Click ``button`` on ``page``, save the download it makes at ``path``; its bytes."""
    with page.expect_download(timeout=15_000) as download:
        page.click(button)
    download.value.save_as(path)
    with open(path, "rb") as file:
        return file.read()


def check_png(path: str) -> None:
    """``path`` is a PNG matplotlib reads back, not blank: its pixels vary, and some are not white."""
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 50 and pixels.shape[1] > 200, pixels.shape
    rgb = pixels[..., :3]
    assert rgb.std() > 0.05 and (rgb < 0.9).any(axis=-1).mean() > 0.02, (rgb.std(), path)


def check_error_page(page: Any, url: str) -> None:
    """The failed job's page shows its user error: vertex, replica, epoch, and the user's traceback."""
    page.goto(url)
    page.wait_for_selector("#errors .error[data-kind=UserCodeError]", timeout=20_000)
    shown = page.evaluate("""() => { const e = document.querySelector('#errors .error');
        return {vertex: e.dataset.vertex, replica: e.dataset.replica, epoch: e.dataset.epoch,
                where: e.querySelector('.where').textContent, message: e.querySelector('.message').textContent,
                traceback: e.querySelector('pre.traceback').textContent}; }""")
    assert (shown["vertex"], shown["replica"], shown["epoch"]) == ("explode", "0", "1"), shown
    assert "vertex explode · replica 0 · epoch 1" in shown["where"] and "the user's own error" in shown["message"]
    assert "in explode" in shown["traceback"] and 'raise ValueError("the user\'s own error at record 2")' in shown["traceback"]
    assert page.evaluate("document.getElementById('state').textContent") == "failed"


def distinct_colours(png: str) -> tuple[int, float]:
    """How many colours a screenshot has, and the share of its pixels that are not white."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24) or []
    white = sum(count for count, colour in colours if colour == (255, 255, 255))
    return len(colours), 1 - white / (image.width * image.height)


def check_json_against_stats(job: rt.Job, url: str) -> None:
    """``/api/job`` read between two ``job.stats()``: the same vertices, each counter between the two."""
    before, read = job.stats(), time.time()

    def later() -> dict | None:
        document = json.loads(get(url)[1])
        return document if document["read_at"] > read else None

    doc = until(later, "a reading begun after job.stats() returned", 10)
    after = job.stats()
    assert set(doc["vertices"]) == set(after["vertices"]) == set(job.plan.vertices)
    for name, figures in doc["vertices"].items():
        for counter in ("records_in", "records_out"):
            assert before["vertices"][name][counter] <= figures[counter] <= after["vertices"][name][counter], (name, counter)
        assert figures["parallelism"] == after["parallelism"][name]


def check_token(job: rt.Job) -> None:
    """A server bound off loopback: 401 without its token or with a wrong one."""
    url = job.ui(host="0.0.0.0")
    assert "token=" in url
    base, token = url.split("?")[0].replace("0.0.0.0", "127.0.0.1"), url.split("token=")[1]
    assert get(base + "api/job")[0] == 401
    assert get(base + "api/job?token=not-it")[0] == 401
    assert get(base + "api/job", {"Authorization": "Bearer not-it"})[0] == 401
    status, body = get(f"{base}api/job?name={job.name}&token={token}")
    assert status == 200 and json.loads(body)["job"] == job.name


def test_the_live_view_of_a_running_job_in_chromium(ray_session, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    job = rt.run(looped_counts(), parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=1.0))
    fed = Fed(job)
    try:
        url = job.ui()
        api = url.replace("/?job=", "/api/job?name=")
        check_json_against_stats(job, api)
        with sync_playwright() as playwright:
            # Playwright gives each launch a fresh, empty profile (its own --user-data-dir)
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector("svg.dataflow g.vertex", timeout=20_000)
            page.wait_for_function("document.querySelectorAll('#vertices tbody tr').length > 0", timeout=20_000)
            first = page_figures(page)
            assert sorted(first["names"]) == sorted(job.plan.vertices)
            page.wait_for_selector("#frontier polyline", timeout=10_000)
            page.evaluate(KEEP_MARKS)
            time.sleep(2.2)
            second = page_figures(page)
            check_updated_in_place(page)
            assert second["updates"] >= first["updates"] + 2  # it polls by itself, at least once a second
            assert second["svgIn"]["count"] > 0 and second["svgIn"] != first["svgIn"]  # the rates move
            assert second["rows"]["count"]["in"] != "–"
            assert re.fullmatch(r"epochs completed: \d+ of \d+", second["header"][0]), second["header"]
            assert re.fullmatch(r"epoch latency p50 \d+ ms, p99 \d+ ms", second["header"][1]), second["header"]
            assert second["bars"]["count"] == [["busy", "blocked"]]  # a busy and a blocked bar per replica
            before = int(first["rows"]["counts"]["frontier"])  # so does the frontier (over 2 s an epoch at load 50)
            until(lambda: int(page_figures(page)["rows"]["counts"]["frontier"]) > before, f"the frontier past {before}")
            check_a_hidden_tab_asks_nothing(page)
            job.rescale({"count": 2})
            page.wait_for_selector("#timeline li[data-kind=rescale]", timeout=15_000)
            page.wait_for_function("document.querySelector('#vertices tr[data-vertex=count] td:last-child').children.length === 2",
                                   timeout=10_000)  # a replica's bars more
            assert page.evaluate("[...document.querySelectorAll('#timeline li[data-kind=snapshot]')].some("
                                 "li => / committed, epochs to \\d+ complete/.test(li.textContent))")  # the epochs it holds
            page.wait_for_function("[...document.querySelectorAll('svg.dataflow g.vertex')].some("
                                   "g => g.dataset.vertex === 'count' && g.querySelector('text.width').textContent === '×2')",
                                   timeout=15_000)
            os.kill(job.hosts()[f"{job.name}/{job.plan.vertex('count').chain}/1"], signal.SIGKILL)  # a replica's process
            saved_svg = check_download(page, "#save", str(tmp_path / "page.svg"))
            assert saved_svg.startswith(b"<svg") and b'data-vertex="count"' in saved_svg
            check_download(page, "#save-png", str(tmp_path / "page.png"))
            check_png(str(tmp_path / "page.png"))
            failed = failing_job()  # while the first job recovers
            page.wait_for_selector("#timeline li[data-kind=recovery]", timeout=30_000)
            assert "recovery from snapshot" in page.text_content("#timeline li[data-kind=recovery]")
            assert page.evaluate("document.querySelectorAll('#timeline-strip rect').length === "
                                 "document.querySelectorAll('#timeline li').length")  # a bar per entry
            page.screenshot(path=str(tmp_path / "ui.png"), full_page=True)
            check_error_page(page, failed.ui())
            browser.close()
        colours, ink = distinct_colours(str(tmp_path / "ui.png"))
        assert colours > 100 and ink > 0.05, (colours, ink)
        check_token(job)
        svg = (tmp_path / "graph.svg").read_text() if job.ui_snapshot(str(tmp_path / "graph.svg")) else ""
        assert svg.startswith("<svg") and all(f'data-vertex="{name}"' in svg for name in job.plan.vertices)
        check_png(job.ui_snapshot(str(tmp_path / "graph.png")))
    finally:
        fed.end()
        job.cancel()


def printed_url(process: subprocess.Popen, timeout: float) -> str:
    """The URL the command ``process`` prints on its first line, read on a thread (a wait with a timeout)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"python -m raytide ui printed no URL within {timeout} s") from None
    assert " at http://" in line, line
    return line.split(" at ")[1].split()[0]


def test_python_m_raytide_ui_serves_the_jobs_that_post_to_the_clusters_board(ray_session, session_ray_env, monkeypatch, capsys):
    """``python -m raytide ui``, run as a user runs it (a process of its own, joining the cluster), serves
    a job whose driver runs with ``RAYTIDE_UI=1`` (which posts to the cluster's board without serving) and
    one started with ``ui=True`` (which also serves, and prints its URL): it lists both, serves the first's
    document and the page's poll; Ctrl-C stops it."""
    from raytide.actors.ui_board import board

    monkeypatch.setenv("RAYTIDE_UI", "1")
    inputs = {"numbers": [list(range(50))] * 100}
    job = rt.run(looped_counts(), inputs=inputs, parallelism=1)
    monkeypatch.delenv("RAYTIDE_UI")
    shown = command = None
    try:
        shown = rt.run(looped_counts(), inputs={"numbers": [[1, 2]]}, parallelism=1, ui=True)
        own_url = capsys.readouterr().err.split(f"the live view of job {shown.name!r} is at ")[1].split()[0]
        assert get(own_url.replace("/?job=", "/api/job?name="))[0] == 200
        command = subprocess.Popen([sys.executable, "-m", "raytide", "ui", "--address", session_ray_env["RAY_ADDRESS"],
                                    "--port", "0"], env=session_ray_env, stdout=subprocess.PIPE, text=True)
        assert job.epochs_total == 100
        url = printed_url(command, 60)
        until(lambda: {job.name, shown.name} <= {entry["name"] for entry in json.loads(get(url + "api/jobs")[1])["jobs"]},
              "both jobs on the board", 20)
        status, body = get(f"{url}api/job?name={job.name}")
        assert status == 200 and set(json.loads(body)["vertices"]) == set(job.plan.vertices)
        status, body = get(f"{url}api/view?name={job.name}")
        assert status == 200 and json.loads(body)["svg"].startswith("<svg")
        job.wait(timeout=120)
        command.send_signal(signal.SIGINT)
        assert command.wait(timeout=90) == 0  # its exit disconnects from Ray: 30 s ran out once at load 25-35
    finally:
        if command is not None:
            command.kill()
        for started in (shown, job):
            if started is not None:
                started.cancel()
        ray_session.kill(board(create=False))
