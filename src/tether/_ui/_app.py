"""The dashboard: a Starlette app over one engine, served by Hypercorn in trio.

Layer: the dashboard (``_ui``).

:func:`open_dashboard` opens an engine on the store (the dashboard executes
no run: a response is recorded for the workers, ``engine.respond``);
:func:`dashboard_app` is the ASGI app;
:func:`serve` runs it with Hypercorn's trio worker, in the caller's trio loop.

Every request needs a ``Host`` this server answers to, when it is bound to a
loopback address: ``127.0.0.1``, ``localhost``, ``[::1]`` or the address it
is bound to, at its port. Any
other name leads here only by DNS rebinding (a page of another site whose
name now resolves to 127.0.0.1): it is refused with 403 and a line of plain
text, pages and writes alike, so such a page can read no run.

Pages (GET, open to whoever reaches the port): ``/`` the runs list,
``/run?id=RUN`` a run, ``/run/timeline.svg?id=RUN`` its timeline; with
``fragment=1``, the part of the page that refreshes itself.

Writes (POST ``/run/answer`` and ``/run/cancel``) are refused in read-only
mode, and otherwise need all of:

- the **token** in the form's ``token`` field, compared with
  ``hmac.compare_digest``. A browser that opened ``/?token=TOKEN`` (the URL
  ``tether ui`` prints) keeps it in an HttpOnly, SameSite=Strict cookie, and
  its forms carry it in a hidden field; other browsers' forms ask for it. A
  page of another site cannot read the token, so cannot forge a write;
- an ``Origin`` header, when sent (browsers send one with every POST), equal
  to this server's own origin;
- a form-encoded body of at most 64 KiB.

Every response forbids framing and allows no script but the page's own.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from types import ModuleType
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .._engine._engine import Engine, internals, open_engine
from .._engine._info import RunInfo
from .._engine._serving import is_stranded, stranded_text
from .._errors import RunNotFoundError, TetherError, UsageError
from ..stores import Served, Store
from ..stores._records import RunStatus
from ._actions import Actions
from ._html import Markup, join, tag
from ._layout import SCRIPT_HASH, Page, digest, live_box, page, run_link
from ._pages import run_body, runs_body, runs_table
from ._timeline import timeline_svg

__all__ = ("Dashboard", "dashboard_app", "is_loopback", "open_dashboard", "serve")

PAGE_SIZE: Final = 50
MAX_BODY: Final = 64 * 1024
_HEADERS: Final = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {SCRIPT_HASH}; style-src 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it, browsers send "Origin: null" with a form post.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@attrs.define(eq=False)
class Dashboard:
    """One dashboard: its engine, settings, and its writes (:class:`Actions`)."""

    engine: Engine
    actions: Actions
    shown: str  #: the store as shown (no password)
    token: str
    read_only: bool = False


@asynccontextmanager
async def open_dashboard(
    store: Store,
    *,
    shown: str,
    token: str | None = None,
    read_only: bool = False,
    modules: Sequence[ModuleType] = (),
) -> AsyncIterator[Dashboard]:
    """Open an engine on *store* and yield a :class:`Dashboard` on it.

    *modules* are the imported modules of workflow code (their types give
    forms their fields). The dashboard executes no run: responses are
    recorded for the workers (``engine.respond``). *token* defaults to a
    random one.
    """
    async with open_engine(store) as engine:
        yield Dashboard(
            engine=engine,
            actions=Actions(engine, tuple(modules)),
            shown=shown,
            token=token or secrets.token_urlsafe(24),
            read_only=read_only,
        )


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def _fragment(content: Markup, live: bool) -> HTMLResponse:
    """The live part of a page, for its refresh script (see ``live_box``)."""
    headers = {
        **_HEADERS,
        "X-Tether-Live": "1" if live else "0",
        "X-Tether-Digest": digest(content),
    }
    return HTMLResponse(str(content), headers=headers)


def _cookie(request: Request) -> str:
    # Cookies are per host, not per port: one per port keeps dashboards apart.
    return f"tether_token_{request.url.port or 80}"


def _known_token(dash: Dashboard, request: Request) -> str | None:
    given = request.cookies.get(_cookie(request), "")
    return dash.token if hmac.compare_digest(given.encode(), dash.token.encode()) else None


def _ctx(dash: Dashboard, request: Request) -> Page:
    return Page(store=dash.shown, read_only=dash.read_only, token=_known_token(dash, request))


def _problem(dash: Dashboard, request: Request, status: int, title: str, text: str) -> Response:
    body = tag("div", tag("h1", title), tag("p", text), tag("p", tag("a", "← runs", href="/")))
    return _html(page(_ctx(dash, request), title, body), status)


def _token_login(dash: Dashboard, request: Request) -> Response | None:
    """``?token=`` in a URL: remember a good one in a cookie, and drop it from the URL."""
    given = request.query_params.get("token")
    if given is None:
        return None
    if not hmac.compare_digest(given.encode(), dash.token.encode()):
        return _problem(dash, request, 403, "Wrong token", "That token is not this dashboard's.")
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
    response = RedirectResponse(request.url.path + (f"?{query}" if query else ""), 303)
    response.set_cookie(_cookie(request), dash.token, httponly=True, samesite="strict")
    return response


async def _runs(dash: Dashboard, request: Request) -> Response:
    login = _token_login(dash, request)
    if login is not None:
        return login
    q = request.query_params
    statuses = [s for s in q.getlist("status") if s]
    workflow = q.get("workflow", "").strip()
    after = q.get("after") or None
    try:
        limit = min(500, max(1, int(q.get("limit", PAGE_SIZE))))
        found = await dash.engine.list_runs(
            status=statuses or None, workflow=workflow or None, after=after, limit=limit + 1
        )
    except (ValueError, UsageError) as exc:
        return _problem(dash, request, 400, "Bad filter", str(exc))
    except RunNotFoundError as exc:
        return _problem(dash, request, 404, "No such page", str(exc))
    runs, more = found[:limit], len(found) > limit
    live = any(r.status in (RunStatus.RUNNING, RunStatus.QUEUED) for r in runs)
    ctx = attrs.evolve(_ctx(dash, request), served=await internals(dash.engine).served())
    shown_status = statuses[0] if len(statuses) == 1 else ""
    table = runs_table(
        runs,
        ctx=ctx,
        next_after=runs[-1].run_id if more else None,
        paged=after is not None,
        status=shown_status,
        workflow=workflow,
    )
    if q.get("fragment"):
        return _fragment(table, live)
    query = [(k, v) for k, v in q.multi_items() if k != "fragment"]
    body = runs_body(
        table,
        status=shown_status,
        workflow=workflow,
        workflows=sorted(dash.engine.workflow_names() | {r.workflow for r in runs}),
        fragment_url="/?" + urlencode([*query, ("fragment", "1")]),
        live=live,
    )
    return _html(page(ctx, "Runs", body))


async def _run(
    dash: Dashboard,
    request: Request,
    *,
    run_id: str | None = None,
    status: int = 200,
    answer: Mapping[str, Any] | None = None,
    cancel: Mapping[str, str] | None = None,
) -> Response:
    """A run's page; after a refused write, *run_id*'s, with what was wrong (by form).

    *answer* maps the request's key to its errors by field, and ``values``
    to what was submitted; *cancel* has the cancel form's errors.
    """
    if run_id is None:
        login = _token_login(dash, request)
        if login is not None:
            return login
        run_id = request.query_params.get("id", "")
    info = await dash.engine.get_run(run_id) if run_id else None
    if info is None:
        return _problem(dash, request, 404, "No such run", f"There is no run {run_id!r}.")
    ctx = attrs.evolve(_ctx(dash, request), served=await internals(dash.engine).served())
    asked = dash.actions.asked(info, answer)
    body = run_body(
        info,
        ctx=ctx,
        asked=asked,
        no_code=dash.actions.no_code(info),
        note=_note(dash, info, ctx.served),
        cancel_problems=cancel or {},
    )
    live = info.status in (RunStatus.RUNNING, RunStatus.QUEUED)
    if request.query_params.get("fragment"):
        return _fragment(body, live)
    url = run_link(run_id) + "&fragment=1"
    title = tag("h1", "Run ", tag("code", run_id))
    content = live_box(body, url, live)
    return _html(page(ctx, f"run {run_id}", join([title, content])), status)


def _note(dash: Dashboard, info: RunInfo, served: frozenset[Served] | None) -> str | None:
    """What an action here left to say of the run, and whether it is stranded (no live
    worker, of those that serve *served*, serves it)."""
    note = dash.actions.notes.get(info.run_id)
    if info.status.wants_worker and is_stranded(info, served):
        stranded = stranded_text(info)
        note = stranded if note is None else f"{note}. {stranded}"
    return note


async def _timeline(dash: Dashboard, request: Request) -> Response:
    run_id = request.query_params.get("id", "")
    info = await dash.engine.get_run(run_id) if run_id else None
    if info is None:
        return _problem(dash, request, 404, "No such run", f"There is no run {run_id!r}.")
    return Response(timeline_svg(info.entries), media_type="image/svg+xml", headers=_HEADERS)


def _refused(dash: Dashboard, request: Request) -> str | None:
    """Why a write must be refused before its body is read, or ``None``."""
    if dash.read_only:
        return "this dashboard is read-only (tether ui --read-only)"
    host = request.headers.get("host", "")  # one this server answers to (_HostCheck)
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{host}":
        return f"cross-origin request from {origin!r} refused"
    if request.headers.get("content-type", "").split(";")[0] != "application/x-www-form-urlencoded":
        return "a write is a form post (application/x-www-form-urlencoded)"
    return None


async def _form(request: Request) -> dict[str, str] | None:
    """The posted form (the first value of each name); ``None`` when too large."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY:
        return None  # refused unread
    body = b""
    async with aclosing(request.stream()) as chunks:  # closed now, not by the GC
        async for chunk in chunks:
            body += chunk
            if len(body) > MAX_BODY:
                return None
    return dict(reversed(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)))


def _write(
    action: Callable[[Dashboard, Request, dict[str, str]], Awaitable[Response]],
) -> Callable[[Dashboard, Request], Awaitable[Response]]:
    """A POST handler behind the write checks (see the module docs)."""

    async def handler(dash: Dashboard, request: Request) -> Response:
        refused = _refused(dash, request)
        if refused is not None:
            return _problem(dash, request, 403, "Refused", refused)
        data = await _form(request)
        if data is None:
            return _problem(dash, request, 413, "Refused", "the form is too large")
        if not hmac.compare_digest(data.get("token", "").encode(), dash.token.encode()):
            bad = {"token": "wrong token: the one tether ui printed when it started"}
            run_id = data.get("run_id", "")
            if action is _answer:
                answer = {data.get("key", ""): bad, "values": data}
                return await _run(dash, request, run_id=run_id, status=403, answer=answer)
            return await _run(dash, request, run_id=run_id, status=403, cancel=bad)
        return await action(dash, request, data)

    return handler


async def _answer(dash: Dashboard, request: Request, data: dict[str, str]) -> Response:
    run_id, key = data.get("run_id", ""), data.get("key", "")
    outcome = await dash.actions.answer(run_id, key, data)
    if outcome.status != 303:  # refused: the page again, with why
        problems = {key: outcome.errors, "values": data}
        return await _run(dash, request, run_id=run_id, status=outcome.status, answer=problems)
    return RedirectResponse(run_link(run_id), 303)


async def _cancel(dash: Dashboard, request: Request, data: dict[str, str]) -> Response:
    run_id = data.get("run_id", "")
    try:
        await dash.actions.cancel(run_id)
    except RunNotFoundError:
        return _problem(dash, request, 404, "No such run", f"There is no run {run_id!r}.")
    except TetherError as exc:
        return await _run(dash, request, run_id=run_id, status=409, cancel={"": str(exc)})
    return RedirectResponse(run_link(run_id), 303)


def dashboard_app(dash: Dashboard) -> Starlette:
    """The ASGI app of *dash*."""

    def bound(handler: Callable[[Dashboard, Request], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(dash, request)
            except TetherError as exc:  # a record that cannot be read, a store that failed
                return _problem(dash, request, 500, "Store error", f"{type(exc).__name__}: {exc}")

        return endpoint

    return Starlette(
        routes=[
            Route("/", bound(_runs), methods=["GET"]),
            Route("/run", bound(_run), methods=["GET"]),
            Route("/run/timeline.svg", bound(_timeline), methods=["GET"]),
            Route("/run/answer", bound(_write(_answer)), methods=["POST"]),
            Route("/run/cancel", bound(_write(_cancel)), methods=["POST"]),
        ],
        middleware=[Middleware(_HostCheck)],
    )


class _HostCheck:
    """Refuses every HTTP request whose ``Host`` this server does not answer to (see the
    module docs), before any page or write sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Request(scope).headers.get("host", "")
            server = scope.get("server") or ("", 0)
            bound, port = str(server[0]), int(server[1] or 80)
            if is_loopback(bound) and host not in _loopback_hosts(bound, port):
                text = (
                    f"tether ui: refused: unexpected Host header {host!r} (this dashboard "
                    f"answers to {bound}, 127.0.0.1, localhost or [::1], at port {port})"
                )
                await PlainTextResponse(text, 403, headers=_HEADERS)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def is_loopback(host: str) -> bool:
    """Whether *host* (an address, ``[::1]``, or ``localhost``) is this machine's loopback."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _loopback_hosts(bound: str, port: int) -> frozenset[str]:
    """The ``Host`` headers of this server, bound to the loopback address *bound* (any
    of 127/8, ``::1``) at *port*: that address and the usual loopback names (no port:
    port 80)."""
    address = f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound
    names = {address, "127.0.0.1", "localhost", "[::1]"}
    return frozenset([f"{n}:{port}" for n in names] + (list(names) if port == 80 else []))


async def serve(
    dash: Dashboard,
    *,
    host: str,
    port: int,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *dash* on *host*:*port* with Hypercorn until *shutdown_trigger* returns.

    Reports the URLs it listens on (``["http://127.0.0.1:8700"]``; port 0: a
    free port) through *task_status*. Cancelling it stops serving at once;
    when the trigger returns, requests in flight get 2 s to finish. Errors
    of requests are logged to stderr.

    Raises:
        OSError: the address cannot be bound (in an exception group).
    """
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    config.graceful_timeout = 2.0
    await hypercorn_serve(
        dashboard_app(dash),  # type: ignore[arg-type]
        config,
        shutdown_trigger=shutdown_trigger,
        task_status=task_status,
    )
