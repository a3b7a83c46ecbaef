"""The dashboard's page layout and the pieces every page uses.

Layer: the dashboard (``_ui``).

:func:`page` wraps content in the one layout (header, inline CSS, the live
script). Every value from the store reaches a page through
:func:`~._html.tag` or :func:`~._html.esc`, the one escaping helper, so a
stored ``<script>`` is text. The only script is :data:`LIVE_SCRIPT`, allowed by
its hash in the Content-Security-Policy: it refreshes a ``[data-refresh]``
element from the URL it names while that URL says the content is live
(``X-Tether-Live: 1``): see :func:`live_box`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlencode

import attrs

from .._codec._values import codec
from .._engine._info import RunInfo, backing_off
from .._engine._serving import TAKEN_OVER, taken_over
from .._errors import TetherError
from .._terminal import shell_join
from .._terminal import when as shown_when
from ..stores._owners import Served
from ..stores._records import RunStatus
from ._html import Markup, esc, join, tag

__all__ = (
    "LIVE_SCRIPT",
    "SCRIPT_HASH",
    "Page",
    "badge",
    "execution",
    "digest",
    "json_text",
    "live_box",
    "page",
    "run_link",
    "shown_status",
    "token_field",
    "value_cell",
    "when",
)


#: Refreshes the ``[data-refresh]`` element every 2 s while its URL answers
#: ``X-Tether-Live: 1``, replacing it only when its ``X-Tether-Digest`` changed
#: (so what a reader is looking at, or clicking, is not replaced by itself).
LIVE_SCRIPT: Final = """\
(function () {
  var el = document.querySelector("[data-refresh]");
  if (!el || el.getAttribute("data-live") !== "1") return;
  var seen = el.getAttribute("data-digest");
  function tick() {
    fetch(el.getAttribute("data-refresh"), {cache: "no-store"}).then(function (r) {
      return r.text().then(function (text) {
        var digest = r.headers.get("X-Tether-Digest");
        if (r.ok && digest !== seen) { el.innerHTML = text; seen = digest; }
        if (r.headers.get("X-Tether-Live") === "1") setTimeout(tick, 2000);
      });
    }, function () { setTimeout(tick, 2000); });
  }
  setTimeout(tick, 2000);
})();
"""
_DIGEST = base64.b64encode(hashlib.sha256(LIVE_SCRIPT.encode()).digest()).decode()
SCRIPT_HASH: Final = f"'sha256-{_DIGEST}'"

_CSS: Final = """\
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1b1b1b;
background:#f4f5f7}
header{background:#20252b;color:#fff;padding:10px 24px;display:flex;gap:16px;align-items:baseline}
header a{color:#fff;text-decoration:none;font-weight:600;font-size:16px}
header .store{color:#c9d1d9;font:12px ui-monospace,monospace}
header .mode{margin-left:auto;color:#ffd479;font-size:12px}
main{max-width:1180px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:20px;margin:4px 0 14px}h2{font-size:15px;margin:22px 0 8px}
h3{font-size:14px;margin:0 0 6px}
a{color:#2c5a8a}
.card{background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:14px 16px;margin:0 0 14px}
.card>h2:first-child{margin-top:0}.nw{white-space:nowrap}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #e3e3e3}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e3e3e3;vertical-align:top}
th{font-weight:600;color:#666;font-size:11.5px;text-transform:uppercase;letter-spacing:.03em}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;background:#f6f8fa;padding:8px 10px;
border-radius:4px;max-height:24em;overflow:auto}
td pre{background:none;padding:0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
color:#fff;background:#8a8f98}
.s-completed{background:#3b8b5a}.s-failed{background:#c62828}.s-paused{background:#7b4fb0}
.s-running{background:#3a6ea5}.s-cancelled{background:#555}.s-dead_letter{background:#8d4e2a}
.s-waiting{background:#2f7f86}
.s-interrupted{background:#d99a00;color:#1b1b1b}
.muted{color:#666}.error{color:#b71c1c;margin:4px 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px;margin:0}
dl.facts dt{color:#666}dl.facts dd{margin:0}
.note{background:#eef4fb;border-color:#c8dbf0}.problem{background:#fff5f5;border-color:#f0c8c8}
form.filters{display:flex;gap:14px;align-items:flex-end;margin:0 0 12px;flex-wrap:wrap}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#666;gap:2px}
form.answer .field{margin:10px 0}form.answer .field>label,form.answer legend{font-weight:600}
fieldset{border:0;padding:0;margin:0}fieldset label{margin-right:16px;font-weight:normal}
small.type{color:#666;font-weight:normal;margin-left:6px}
input[type=text],input[type=password],select,textarea{font:inherit;padding:5px 8px;
border:1px solid #c4c8cf;border-radius:4px;min-width:280px;display:block;margin-top:3px;
font-weight:normal}
textarea{min-height:4em;font-family:ui-monospace,monospace}
.invalid{border-color:#c62828!important;background:#fff5f5}
button{font:inherit;padding:6px 14px;border-radius:4px;border:1px solid #2c5a8a;
background:#3a6ea5;color:#fff;cursor:pointer}
button.danger{background:#fff;color:#b71c1c;border-color:#d9a0a0}
form.filters button{padding:5px 12px}
.pager{margin-top:10px;display:flex;gap:18px}
.timeline{max-width:100%;height:auto}.scroll{overflow-x:auto}
"""


@attrs.frozen(kw_only=True)
class Page:
    """What every page shows or needs, besides its content."""

    store: str  #: the store, as shown (no password)
    read_only: bool
    #: the token, when this browser proved it has it (then forms carry it
    #: hidden); ``None``: forms ask for it
    token: str | None
    #: what the live workers serve (``None``: unknown, or not read for this page)
    served: frozenset[Served] | None = None


def page(ctx: Page, title: str, body: Markup) -> str:
    """A whole HTML page."""
    mode = tag("span", "read-only", class_="mode") if ctx.read_only else None
    head = join(
        [
            Markup('<meta charset="utf-8">'),
            tag("meta", name="viewport", content="width=device-width, initial-scale=1"),
            tag("title", f"{title} · tether"),
            tag("style", Markup(_CSS)),
        ]
    )
    top = tag("header", tag("a", "tether", href="/"), tag("span", ctx.store, class_="store"), mode)
    content = tag("main", body)
    script = tag("script", Markup(LIVE_SCRIPT))
    document = tag("html", tag("head", head), tag("body", top, content, script), lang="en")
    return f"<!doctype html>\n{document}\n"


# -- values ---------------------------------------------------------------------------


def when(moment: datetime | None) -> str:
    """A moment in UTC to the second (:func:`tether._terminal.when`); ``-`` for none."""
    return "-" if moment is None else shown_when(moment)


def json_text(value: Any) -> str:
    """A decoded or stored value as indented JSON (its repr when it has no JSON form)."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        pass
    try:
        primitive = codec.to_primitive(value, what="the value")
    except TetherError:
        return repr(value)
    return json.dumps(primitive, indent=2, sort_keys=True, ensure_ascii=False)


def value_cell(text: str | None) -> Markup:
    """A stored value (JSON text) in a table cell: on one line, or folded behind its start."""
    if text is None:
        return Markup("-")
    try:
        value = json.loads(text)
    except ValueError:
        return tag("code", text)
    line = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if len(line) <= 160:
        return tag("code", line)
    return tag(
        "details", tag("summary", tag("code", line[:100] + " …")), tag("pre", json_text(value))
    )


def badge(status: str) -> Markup:
    return tag("span", status, class_=f"badge s-{status}")


def shown_status(info: RunInfo) -> str:
    if info.status is RunStatus.RUNNING and not info.executing:
        return "interrupted"
    return info.status.value


def execution(info: RunInfo, store: str, served: frozenset[Served] | None = None) -> Markup:
    """Who executes the run, or what to do with it; empty when neither applies.

    *served* is what the live workers serve (``None``: unknown): an interrupted
    run one of them serves is taken over, not resumed by hand.
    """
    if info.executing:
        lease = f", lease until {when(info.lease_expires_at)} UTC" if info.lease_expires_at else ""
        cancel = "; cancel requested" if info.cancel_requested else ""
        return join(["executing on ", tag("code", info.owner), lease, cancel])
    if taken_over(info, cancel_requested=info.cancel_requested, served=served):
        return esc(f"interrupted (no live owner): {TAKEN_OVER}")
    if info.status is RunStatus.RUNNING:
        # Its owner vanished before it saw the cancel: finish the cancel; else resume it.
        words = ["runs", "cancel"] if info.cancel_requested else ["resume"]
        code = [] if info.cancel_requested else ["--import", "MODULE"]
        hint = shell_join(["tether", *words, info.run_id, "--store", store, *code])
        return join(["interrupted (no live owner): ", tag("code", hint)])
    if info.status is RunStatus.QUEUED:
        return esc("waiting for a worker")
    if info.status is RunStatus.WAITING:
        if info.wake_at is None:  # parked in tether.receive: a send makes it due
            return esc("parked, waiting for a message")
        if backing_off(info):
            return esc(
                f"backing off until {when(info.wake_at)} UTC: its outcome could not be stored"
            )
        if info.scheduled:
            return esc(f"scheduled to start at {when(info.wake_at)} UTC")
        return esc(f"parked on its timers until {when(info.wake_at)} UTC")
    if info.status is RunStatus.DEAD_LETTER:
        aside = f"set aside after {info.dispatches} dispatches without an outcome"
        return esc(f"{aside}; resume it once fixed")
    return Markup("")


def run_link(run_id: str) -> str:
    """The run page's URL; for any string (a lone surrogate, which no run id holds, is
    encoded as ``surrogatepass`` does, so that building a page never fails on it)."""
    return "/run?" + urlencode({"id": run_id}, errors="surrogatepass")


def token_field(ctx: Page, error: str | None) -> Markup:
    """The write token: hidden when this browser has it, else an input asking for it."""
    if ctx.token is not None and error is None:
        return tag("input", type="hidden", name="token", value=ctx.token)
    return tag(
        "div",
        tag(
            "label",
            "token",
            tag("small", "printed by tether ui when it started", class_="type"),
            tag(
                "input",
                type="password",
                name="token",
                autocomplete="off",
                class_="invalid" if error else None,
            ),
        ),
        tag("p", error, class_="error") if error else None,
        class_="field",
    )


def digest(content: str) -> str:
    """A short digest of a live part's content, to tell whether it changed."""
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def live_box(content: Markup, url: str, live: bool) -> Markup:
    """*content* in the element :data:`LIVE_SCRIPT` refreshes from *url* while *live*.

    *url* must answer with the same content, rendered the same way, and the
    headers ``X-Tether-Live`` and ``X-Tether-Digest`` (its :func:`digest`).
    """
    return tag(
        "div",
        content,
        id="live",
        data_refresh=url,
        data_live="1" if live else "0",
        data_digest=digest(content),
    )
