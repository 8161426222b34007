"""Watching a running job for its live view (``job.ui()``): a thread of the driver that reads the job
about once a second and keeps the page's document (:mod:`raytide.ui.document`), and the
process's web servers (:mod:`raytide.ui.server`) that serve the documents of every watched job.

The watcher reads what ``job.stats()`` reads, on its own thread: it never takes the job's
lock, so the job's threads never wait for it, and a replica's counters come from its
``inspect`` thread (off its events). The progress actor and the coordinator answer one short
``stats`` call a second each, in turn with their other calls. A reading that takes long
(an actor on a lost node: up to ``job.stats()``'s own timeouts) delays the next one only; the
page shows how old its document is. With ``publish``, each document also goes to the
cluster's board (:mod:`raytide.actors.ui_board`) for ``python -m raytide ui``, one post in
flight at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray

from raytide.actors.ui_board import board
from raytide.errors import ArgumentError, UserCodeError
from raytide.ui.document import JobBook, vertex_figures
from raytide.ui.figures import matplotlib_or_raise, save_graph_png
from raytide.ui.layout import layout
from raytide.ui.server import UIServer
from raytide.ui.svg import render

logger = logging.getLogger(__name__)

#: Seconds between two readings of a watched job.
PERIOD_S = 1.0
#: Longest wait for the cluster's board to answer (``python -m raytide ui``).
BOARD_TIMEOUT = 4.0
#: Watched jobs whose last document a process's servers keep serving after they end.
KEEP_ENDED = 20

_lock = threading.Lock()
_watchers: dict[str, Watcher] = {}
_servers: dict[str, UIServer] = {}


def _error_of(error: BaseException | None) -> list[dict[str, Any]]:
    """The job's failure as the page shows it: the vertex, replica, epoch (and iteration counters, inside a loop)
    and the user's traceback, if user code failed."""
    if error is None or type(error).__name__ == "JobCancelled":
        return []
    if isinstance(error, UserCodeError):
        time = error.time
        return [{"kind": "UserCodeError", "vertex": error.vertex, "replica": error.replica, "time": str(time),
                 "epoch": None if time is None else time.epoch, "iteration": None if time is None else list(time.counters),
                 "where": error.where, "message": error.original, "traceback": error.traceback}]
    return [{"kind": type(error).__name__, "message": str(error), "traceback": None}]


def facts(job: Any) -> dict[str, Any]:
    """What the driver knows of ``job`` besides its statistics: its state, the latest epoch of each output,
    its epoch latencies, its error, how many epochs its inputs have (if known)."""
    error = job._supervisor.error
    state = ("failed" if error is not None and type(error).__name__ != "JobCancelled" else
             "finished" if job._outputs.finished else "cancelled" if job._supervisor.torn_down else "running")
    return {"state": state, "latest": job._outputs.latest(), "latencies": list(job._outputs.latencies),
            "errors": _error_of(error), "epochs_total": job.progress_total()}


class Watcher:
    """Reads one job about once a second on a daemon thread, until the job is torn down."""

    def __init__(self, job: Any, publish: bool = False) -> None:
        self.job, self.plan = job, job.plan
        self.book = JobBook(job.name, layout(self.plan))
        self.document: dict[str, Any] | None = None
        self.board = board(create=True) if publish else None
        self._posted: Any = None
        self._stats: dict[str, Any] = {}
        self._read_at = 0.0  # when the last reading began (wall clock)
        self.thread = threading.Thread(target=self._run, name=f"raytide-watch-{job.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            ended = self.job._supervisor.torn_down
            try:
                self.sample(read=not ended)
            except Exception as error:  # a reading during a rescale or a recovery: the next one will do
                logger.debug("job %r: the live view's reading failed: %r", self.job.name, error)
            if ended:
                return
            time.sleep(max(0.0, PERIOD_S - (time.monotonic() - started)))

    def sample(self, read: bool = True) -> dict[str, Any]:
        """Read the job (unless ``read`` is False: its hosts are gone, so keep the last reading) and make the document."""
        plan = self.job.plan
        graph = layout(plan) if plan is not self.plan else None
        self.plan = plan
        if read:
            self._read_at = time.time()
            self._stats = self.job.stats()
        document = self.book.add(self._stats, time.monotonic(), time.time(),
                                 {**facts(self.job), "graph": graph, "read_at": self._read_at})
        self.document = document
        self._post(document)
        return document

    def _post(self, document: dict[str, Any]) -> None:
        if self.board is None or (self._posted is not None and not ray.wait([self._posted], timeout=0)[0]):
            return
        self._posted = self.board.post.remote(self.job.name, document)


def watch(job: Any, publish: bool = False) -> Watcher:
    """The watcher of ``job``, started if it is not yet (a later ``publish`` starts posting)."""
    with _lock:
        watcher = _watchers.get(job.name)
        if watcher is None or watcher.job is not job:
            watcher = _watchers[job.name] = Watcher(job, publish)
            ended = [name for name, w in _watchers.items() if w.job._supervisor.torn_down]
            for name in ended[:max(0, len(ended) - KEEP_ENDED)]:
                del _watchers[name]
        elif publish and watcher.board is None:
            watcher.board = board(create=True)
        return watcher


def _documents() -> dict[str, dict[str, Any]]:
    return {name: w.document for name, w in list(_watchers.items()) if w.document is not None}


def serve(job: Any, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> str:
    """Watch ``job`` and serve this process's watched jobs on ``host`` (one server per host,
    started on ``port`` by the first call: 0 for any free port); returns ``job``'s page's URL."""
    watcher = watch(job)
    if watcher.document is None:
        watcher.sample(read=not job._supervisor.torn_down)  # the page has something to show at once
    with _lock:
        server = _servers.get(host)
        if server is not None and port not in (0, server.port):
            raise ArgumentError(f"this process serves the live view on {host}:{server.port} already, not on port {port}")
        if server is None:
            server = UIServer(_documents, host, port, token)
            server.start()
            _servers[host] = server
    return server.url(job.name)


def graph_now(job: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``job``'s laid-out graph and each vertex's figures: its watcher's latest document, or else one
    reading of the job (counters and widths, no rates; none once the job is torn down)."""
    watcher = _watchers.get(job.name)
    if watcher is not None and watcher.job is job and watcher.document is not None:
        return watcher.document["graph"], watcher.document["vertices"]
    graph = layout(job.plan)
    return graph, vertex_figures(graph, job.stats() if not job._supervisor.torn_down else {}, {}, {})


def save_graph(job: Any, path: str) -> str:
    """Write ``job``'s graph, with its latest figures, to ``path``: SVG if it ends in ``.svg``, PNG
    (drawn by matplotlib, :mod:`raytide.ui.figures`) if in ``.png``; returns the path."""
    kind = str(path).lower().rsplit(".", 1)[-1]
    if kind not in ("svg", "png"):
        raise ArgumentError(f"job.ui_snapshot({path!r}): the graph is saved as SVG or PNG; give a path ending in .svg or .png")
    if kind == "png":
        matplotlib_or_raise(f"job.ui_snapshot({path!r})")  # before reading the job
    graph, vertices = graph_now(job)
    if kind == "png":
        save_graph_png(graph, vertices, str(path))
    else:
        with open(path, "w", encoding="utf-8") as file:
            file.write(render(graph, vertices))
    return str(path)


def serve_board(host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> UIServer:
    """Serve the documents on the cluster's board (:mod:`raytide.actors.ui_board`): every job whose driver
    posts there, read at each request (this process is connected to the cluster); ``python -m raytide ui``."""

    def documents() -> dict[str, dict[str, Any]]:
        handle = board(create=False)
        return {} if handle is None else ray.get(handle.read.remote(), timeout=BOARD_TIMEOUT)

    server = UIServer(documents, host, port, token)
    server.start()
    return server
