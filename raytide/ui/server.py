"""The web server of the live view: the page (static HTML, JS and CSS shipped with the package),
``/api/jobs`` (the jobs it serves), ``/api/job?name=...`` (a job's document, JSON),
``/api/graph.svg?name=...`` (its graph, drawn by :mod:`raytide.ui.svg`) and ``/api/view`` (what
the open page lacks: :func:`view`), on aiohttp, in an event loop on a thread of its own.

It serves on 127.0.0.1 unless told otherwise. Bound to another address it needs a token,
generated at start unless one is given, which every request must carry (``?token=...``, or
``Authorization: Bearer ...``); without it, or with a wrong one, the answer is 401::

    >>> authorized("s3cret", {"token": "s3cret"}, {}), authorized("s3cret", {}, {"Authorization": "Bearer s3cret"})
    (True, True)
    >>> authorized("s3cret", {}, {}), authorized("s3cret", {"token": "guess"}, {}), authorized(None, {}, {})
    (False, False, True)
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import secrets
import threading
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import quote

from aiohttp import web

from raytide.ui.document import changes
from raytide.ui.svg import boxes, render

#: The page's files, served under ``/static/`` (``index.html`` at ``/``).
STATIC = {"index.html": "text/html", "app.js": "application/javascript", "style.css": "text/css"}
#: How long a request waits for the documents (a cluster's board may be slow to answer).
DOCUMENTS_TIMEOUT = 5.0


def authorized(token: str | None, query: Mapping[str, str], headers: Mapping[str, str]) -> bool:
    """Whether a request with ``query`` and ``headers`` may be served when ``token`` is required
    (None: none is); compared in constant time."""
    if token is None:
        return True
    given = query.get("token") or ""
    bearer = headers.get("Authorization", "")
    if bearer.startswith("Bearer "):
        given = given or bearer[len("Bearer "):]
    return hmac.compare_digest(given.encode(), token.encode())


def view(document: dict[str, Any], since: float | None, graph_key: str | None) -> dict[str, Any]:
    """What a page that holds ``document``'s job as of ``since`` (the ``at`` of its document; None: nothing)
    with the graph ``graph_key`` drawn lacks: nothing but ``unchanged`` if no reading is newer, else the
    document's :func:`~raytide.ui.document.changes`, with the graph drawn as ``svg`` (only if it is another)
    and each box's texts and colours (``boxes``: :func:`~raytide.ui.svg.box`) to update the one drawn."""
    if since is not None and document["at"] <= since:
        return {"job": document["job"], "at": document["at"], "unchanged": True}
    update = changes(document, since, graph_key)
    if update.pop("graph", None) is not None:
        update["svg"] = render(document["graph"], document["vertices"])
    update["boxes"] = boxes(document["graph"], document["vertices"])
    return update


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class UIServer:
    """Serves the documents ``documents()`` returns (``{job name: document}``, called on a worker
    thread for each request) until :meth:`stop`."""

    def __init__(self, documents: Callable[[], dict[str, dict[str, Any]]], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None) -> None:
        """Bound to a ``host`` other than loopback, a token is required: ``token``, or a random one."""
        self.documents, self.host, self.port = documents, host, port
        self.token = token if token is not None or is_loopback(host) else secrets.token_urlsafe(24)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> str:
        """Start serving (on a daemon thread) and return the page's URL."""
        started = threading.Event()
        failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, args=(started, failed), name="raytide-ui", daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise TimeoutError(f"the raytide UI server did not start within {timeout:g} s")
        if failed:
            raise failed[0]
        return self.url()

    def url(self, job: str | None = None) -> str:
        """The page's URL (for ``job``, if given), with the token if one is required."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        params = [f"job={quote(job)}"] if job else []
        params += [f"token={self.token}"] if self.token else []
        return f"http://{host}:{self.port}/" + ("?" + "&".join(params) if params else "")

    def _serve(self, started: threading.Event, failed: list[BaseException]) -> None:
        self._loop = loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._open())
        except BaseException as error:  # the port is taken, say
            failed.append(error)
            started.set()
            return
        started.set()
        loop.run_forever()
        assert self._runner is not None
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    async def _open(self) -> None:
        app = web.Application(middlewares=[self._check_token])
        app.add_routes([web.get("/", self._page), web.get("/static/{file}", self._static),
                        web.get("/api/jobs", self._jobs), web.get("/api/job", self._job),
                        web.get("/api/graph.svg", self._graph), web.get("/api/view", self._view)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @web.middleware
    async def _check_token(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not authorized(self.token, request.query, request.headers):
            return web.Response(status=401, text="401: this raytide UI needs its token (?token=... or Authorization: Bearer)")
        return await handler(request)

    async def _page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["file"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        text = resources.files("raytide.ui").joinpath("static", name).read_text()
        return web.Response(text=text, content_type=STATIC[name], headers={"Cache-Control": "no-store"})

    async def _all(self) -> dict[str, dict[str, Any]]:
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, self.documents), DOCUMENTS_TIMEOUT)

    async def _one(self, request: web.Request) -> dict[str, Any]:
        documents = await self._all()
        name = request.query.get("name") or next(iter(sorted(documents)), None)
        if name not in documents:
            raise web.HTTPNotFound(text=f"no job {name!r} here; jobs: {sorted(documents)}")
        return documents[name]

    async def _jobs(self, request: web.Request) -> web.Response:
        return web.json_response({"jobs": _listed(await self._all())})

    async def _view(self, request: web.Request) -> web.Response:
        """The page's poll: :func:`view` of ``?name=`` (else the first job) for ``?since=`` and ``?graph=``,
        with the jobs' names; only the names while there is no job."""
        documents = await self._all()
        if not documents:
            return web.json_response({"jobs": []})
        name = request.query.get("name") or min(documents)
        if name not in documents:
            raise web.HTTPNotFound(text=f"no job {name!r} here; jobs: {sorted(documents)}")
        since = request.query.get("since")
        try:
            at = float(since) if since else None
        except ValueError:
            raise web.HTTPBadRequest(text=f"/api/view: since={since!r} is not a time (the 'at' of a document)") from None
        update = view(documents[name], at, request.query.get("graph"))
        return web.json_response({**update, "jobs": _listed(documents)}, dumps=_dumps)

    async def _job(self, request: web.Request) -> web.Response:
        return web.json_response(await self._one(request), dumps=_dumps)

    async def _graph(self, request: web.Request) -> web.Response:
        document = await self._one(request)
        return web.Response(text=render(document["graph"], document["vertices"]), content_type="image/svg+xml",
                            headers={"Cache-Control": "no-store"})

    def stop(self) -> None:
        """Stop serving (the thread ends)."""
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)


def _listed(documents: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs of ``documents``, each with its state, by name."""
    return [{"name": name, "state": document.get("state")} for name, document in sorted(documents.items())]


def _dumps(value: Any) -> str:
    """JSON of a document, without spaces; what JSON cannot say (a timestamp object, a set) as its text."""
    return json.dumps(value, default=str, separators=(",", ":"))
