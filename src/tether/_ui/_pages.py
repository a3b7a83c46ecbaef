"""The dashboard's two pages: the runs list, and a run (built on :mod:`._layout`).

Layer: the dashboard (``_ui``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any
from urllib.parse import urlencode

import attrs

from .._engine._info import RunInfo
from .._errors import ErrorInfo
from ..stores._records import Entry, RunStatus
from ._forms import Form
from ._html import Markup, join, tag
from ._layout import (
    Page,
    badge,
    execution,
    json_text,
    live_box,
    run_link,
    shown_status,
    token_field,
    value_cell,
    when,
)
from ._request_form import render_form
from ._timeline import entries_count, format_duration, own_duration, timeline_svg

__all__ = ("Asked", "run_body", "runs_body", "runs_table")


# -- the runs list --------------------------------------------------------------------


def runs_body(
    table: Markup,
    *,
    status: str,
    workflow: str,
    workflows: Sequence[str],
    fragment_url: str,
    live: bool,
) -> Markup:
    """The runs page: filters, then the *table* (which refreshes itself while *live*)."""
    options = [tag("option", "any status", value="")] + [
        tag("option", s.value, value=s.value, selected=s.value == status) for s in RunStatus
    ]
    filters = tag(
        "form",
        tag("label", "status", tag("select", *options, name="status")),
        tag(
            "label",
            "workflow",
            tag(
                "input",
                type="text",
                name="workflow",
                value=workflow,
                list="workflows",
                placeholder="any workflow",
            ),
        ),
        tag("datalist", *(tag("option", value=w) for w in workflows), id="workflows"),
        tag("button", "Filter", type="submit"),
        tag("a", "clear", href="/") if status or workflow else None,
        method="get",
        action="/",
        class_="filters",
    )
    refreshed = live_box(table, fragment_url, live)
    return join([tag("h1", "Runs"), filters, refreshed])


def runs_table(
    runs: Sequence[RunInfo],
    *,
    ctx: Page,
    next_after: str | None,
    paged: bool,
    status: str,
    workflow: str,
) -> Markup:
    """The table of runs and the page links (the part that refreshes)."""
    if not runs:
        return tag("p", "No runs match." if status or workflow else "No runs yet.", class_="card")
    head = tag(
        "tr",
        *(
            tag("th", h)
            for h in (
                "run",
                "workflow",
                "status",
                "created (UTC)",
                "updated (UTC)",
                "pending",
                "execution",
            )
        ),
    )
    rows = [
        tag(
            "tr",
            tag("td", tag("a", r.run_id, href=run_link(r.run_id)), class_="nw"),
            tag("td", r.workflow, class_="nw"),
            tag("td", badge(shown_status(r))),
            tag("td", when(r.created_at), class_="nw"),
            tag("td", when(r.updated_at), class_="nw"),
            tag("td", str(len(r.requests)) if r.requests else ""),
            tag("td", execution(r, ctx.store, ctx.served)),
            data_run=r.run_id,
            data_status=r.status.value,
        )
        for r in runs
    ]
    links: list[Markup] = []
    query = {k: v for k, v in (("status", status), ("workflow", workflow)) if v}
    if paged:
        links.append(tag("a", "← first page", href="/?" + urlencode(query)))
    if next_after is not None:
        after = urlencode({**query, "after": next_after}, errors="surrogatepass")
        links.append(tag("a", "next page →", href="/?" + after))
    pager = tag("div", *links, class_="pager") if links else None
    return join([tag("table", tag("thead", head), tag("tbody", *rows)), pager])


# -- a run ----------------------------------------------------------------------------


def _facts(info: RunInfo, ctx: Page) -> Markup:
    items: list[tuple[str, Markup | str]] = [
        ("workflow", tag("code", info.workflow)),
        ("status", badge(shown_status(info))),
    ]
    doing = execution(info, ctx.store, ctx.served)
    if doing:
        items.append(("execution", doing))
    if info.owner is not None and not info.executing:
        items.append(("last owner", tag("code", info.owner)))
    items += [
        ("created", f"{when(info.created_at)} UTC"),
        ("updated", f"{when(info.updated_at)} UTC"),
    ]
    if info.dispatches:
        items.append(("dispatches", str(info.dispatches)))
    return tag("dl", *(join([tag("dt", k), tag("dd", v)]) for k, v in items), class_="facts")


def _journal(entries: Sequence[Entry]) -> Markup:
    if not entries:
        return tag("p", "The journal is empty.", class_="muted")
    head = tag(
        "tr",
        *(
            tag("th", h)
            for h in (
                "seq",
                "key",
                "kind",
                "status",
                "attempt",
                "started (UTC)",
                "duration",
                "value / error",
            )
        ),
    )
    rows = []
    for e in entries:
        if e.error is not None:
            outcome = join([tag("pre", str(e.error)), _traceback(e.error, open_=False)])
        else:
            outcome = value_cell(e.value)
        started = e.started_at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
        took = format_duration(own_duration(e).total_seconds())
        rows.append(
            tag(
                "tr",
                *(tag("td", c) for c in ("?" if e.seq is None else e.seq, tag("code", e.key))),
                *(tag("td", c) for c in (e.kind.value, badge(e.status.value), e.attempt)),
                *(tag("td", c, class_="nw") for c in (started, took)),
                tag("td", outcome),
                data_key=e.key,
            )
        )
    return tag("table", tag("thead", head), tag("tbody", *rows), class_="journal")


def _members(error: ErrorInfo) -> Markup | None:
    """The errors inside an exception group, one item each (``None``: not a group)."""
    if not error.members:
        return None
    items = [tag("li", tag("code", str(m))) for m in error.members]
    return join([tag("p", "The errors inside it:"), tag("ul", *items)])


def _traceback(error: ErrorInfo, *, open_: bool) -> Markup | None:
    """The error's stored traceback, folded (``None``: stored without one)."""
    if error.traceback is None:
        return None
    return tag(
        "details",
        tag("summary", "Traceback"),
        tag("pre", error.traceback, class_="traceback"),
        open=open_,
        class_="traceback",
    )


def _cancel_form(info: RunInfo, ctx: Page, problems: Mapping[str, str]) -> Markup | None:
    """The cancel button; *problems* of the last try by field (``token``, ``""``)."""
    if ctx.read_only or info.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
        return None
    form = tag(
        "form",
        tag("input", type="hidden", name="run_id", value=info.run_id),
        token_field(ctx, problems.get("token")),
        tag("button", "Cancel this run", type="submit", class_="danger"),
        tag("p", problems[""], class_="error") if "" in problems else None,
        method="post",
        action="/run/cancel",
        class_="cancel",
    )
    what = "Final: the run never executes again (an owner executing it stops it within one "
    what += "lease renewal interval). Its journal is kept."
    return tag("div", tag("h2", "Cancel"), tag("p", what, class_="muted"), form, class_="card")


@attrs.frozen(kw_only=True)
class Asked:
    """A pending request on the run page, with its form and what went wrong last time."""

    form: Form
    payload: Any
    errors: Mapping[str, str] = attrs.field(factory=dict)  #: by field name; "token", "" too
    values: Mapping[str, str] = attrs.field(factory=dict)  #: what was submitted


def run_body(
    info: RunInfo,
    *,
    ctx: Page,
    asked: Sequence[Asked],
    no_code: str | None,
    note: str | None,
    cancel_problems: Mapping[str, str],
) -> Markup:
    """The live part of a run's page: facts, error, result, requests, timeline, journal."""
    parts: list[Markup | None] = [tag("div", _facts(info, ctx), class_="card")]
    if note:
        parts.append(tag("div", tag("strong", "From this dashboard: "), note, class_="card note"))
    if info.error is not None:
        where = [" from step ", tag("code", info.error.key)] if info.error.key else []
        parts.append(
            tag(
                "div",
                tag("h2", "Error"),
                tag("p", tag("code", info.error.type), *where),
                tag("pre", info.error.message, class_="error-message"),
                _members(info.error),
                _traceback(info.error, open_=True),
                class_="card problem",
                id="error",
            )
        )
    if info.status is RunStatus.COMPLETED:
        parts.append(
            tag("div", tag("h2", "Result"), tag("pre", json_text(info.result)), class_="card")
        )
    if asked:
        parts.append(tag("h2", f"Pending requests ({len(asked)})"))
        if no_code and not ctx.read_only:
            parts.append(tag("p", no_code, class_="card problem", id="no-code"))
        for a in asked:
            parts.append(
                render_form(
                    a.form,
                    a.payload,
                    run_id=info.run_id,
                    errors=a.errors,
                    values=a.values,
                    writable=not ctx.read_only and not no_code,
                    token=token_field(ctx, a.errors.get("token")),
                )
            )
    parts.append(_cancel_form(info, ctx, cancel_problems))
    parts.append(tag("h2", "Timeline"))
    parts.append(tag("div", Markup(timeline_svg(info.entries, width=1080)), class_="scroll card"))
    parts.append(tag("h2", f"Journal ({entries_count(len(info.entries))})"))
    parts.append(_journal(info.entries))
    return join(parts)
