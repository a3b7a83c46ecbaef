"""Any string a run stores is shown safely and read back exactly: a property test.

Random Unicode, lone surrogates and control characters included, goes in
through a run id, a workflow argument (also an ``ask`` payload), a step
result, an error message (of a failed attempt, and of a failed run), a
message (``engine.send``) and a response (``engine.resume``), into every
store. Each run is then rendered as ``tether runs list`` and ``runs show``
render it (the command line itself on SQLite and FileStore; its printers,
through the same escaping stream, on MemoryStore and PostgreSQL, which the
command line cannot open here) and as the dashboard's pages. Properties:

- nothing crashes, and no raw control character (C0 but newline, DEL, C1)
  or lone surrogate reaches a terminal; the run id shows escaped;
- every page is served (200), valid UTF-8, with no raw control character
  but newlines and tabs;
- ``--json`` reads back every string exactly (an error message as it was
  stored: its lone surrogates as their escapes, ``storable_text``);
- a run id the store refuses is refused with ``UsageError`` naming it (then
  the example is skipped).
"""

from __future__ import annotations

import html
import io
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import httpx
import pytest
import trio
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st

import tether
from tether._cli._format import print_run_list, run_json
from tether._cli._show import print_run
from tether._errors import storable_text
from tether._terminal import escape_controls, escaped
from tether._ui._app import dashboard_app, open_dashboard
from tether.stores import Store, mailbox_of

from . import _hostile_flows as flows
from ._cli import cli
from .conftest import reopen_store

#: the characters worth trying most: controls, lone surrogates, markup, quotes
HOSTILE = "\x00\x07\x08\t\n\r\x1b\x7f\x85\x9b\u2028\ud800\udbff\udc00\udfff\\'\"<>&é😀"
#: C0 controls but newline, DEL, C1 controls and surrogates: never on a terminal
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
#: the same on a page, where tabs may stay too
RAW_ON_A_PAGE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def texts(min_size: int = 0) -> st.SearchStrategy[str]:
    """Short strings: of the hostile characters (and a few plain ones), or of any.

    Never a high surrogate right before a low one: JSON reads such a pair
    back as the one character it encodes in UTF-16, so no JSON store can
    keep it apart.
    """
    return st.one_of(
        st.text(st.sampled_from(HOSTILE + "ab -"), min_size=min_size, max_size=12),
        st.text(st.characters(exclude_categories=()), min_size=min_size, max_size=12),
    ).filter(lambda text: SURROGATE_PAIR.search(text) is None)


@attrs.frozen
class Hostile:
    run_id: str
    arg: str
    result: str
    error: str
    message: str
    response: str

    @property
    def ids(self) -> tuple[str, str, str]:
        """The completed run, the paused one (a message pending), the failed one."""
        return self.run_id, self.run_id + "-p", self.run_id + "-f"

    @property
    def returned(self) -> list[str]:
        return [self.arg, self.result, self.response, self.message]


hostile = st.builds(
    Hostile,
    run_id=texts(min_size=1),
    arg=texts(),
    result=texts(),
    error=texts(),
    message=texts(),
    response=texts(),
)


async def _store(store: Store, h: Hostile) -> bool:
    """Store the three runs of *h*; ``False`` when the store refuses its run id."""
    done, paused, failed = h.ids
    async with tether.open_engine(store) as engine:
        try:
            with pytest.raises(tether.Paused):
                await engine.run(flows.hostile, h.arg, h.result, h.error, _token(), run_id=done)
        except tether.UsageError as exc:
            assert repr(h.run_id)[1:-1][:20] in str(exc)  # it names the id, escaped
            return False
        await engine.send(done, "note", h.message)
        assert await engine.resume(done, {"ask#0": h.response}) == h.returned
        with pytest.raises(tether.Paused):
            await engine.run(flows.hostile, h.arg, h.result, h.error, _token(), run_id=paused)
        await engine.send(paused, "note", h.message)
        with pytest.raises(RuntimeError):
            await engine.run(flows.failing, h.error, run_id=failed)
    return True


def _token() -> str:
    return uuid.uuid4().hex


@attrs.frozen
class Shown:
    listed: str  # runs list
    shown: dict[str, list[str]]  # runs show, cut and --full, by run id
    listed_json: str
    shown_json: dict[str, str]


def _command_line(spec: str, h: Hostile, tmp: Path) -> Shown:
    """What the command line prints for the runs of *h* in the store *spec*."""
    listed = cli("runs", "list", "--store", spec)
    assert listed.status == 0, listed.err
    shown: dict[str, list[str]] = {}
    shown_json: dict[str, str] = {}
    for run_id in h.ids:
        outputs = []
        for how in ([], ["--full"], ["--timeline", str(tmp / "t.svg")]):
            done = cli("runs", "show", *how, "--store", spec, "--", run_id)  # ids may start "-"
            assert done.status == 0, done.err
            outputs.append(done.out + done.err)
        (tmp / "t.svg").read_text(encoding="utf-8")  # strict: valid UTF-8
        shown[run_id] = outputs
        shown_json[run_id] = cli("runs", "show", "--json", "--store", spec, "--", run_id).out
    listed_json = cli("runs", "list", "--json", "--store", spec).out
    return Shown(listed.out, shown, listed_json, shown_json)


async def _printers(store: Store, h: Hostile) -> Shown:
    """What the command line's printers print for the runs of *h*, through the command
    line's escaping stream (for a store the command line cannot open here)."""
    raw = {name: io.StringIO() for name in ("listed", "listed_json")}
    shown: dict[str, list[str]] = {}
    shown_json: dict[str, str] = {}
    async with tether.open_engine(store) as engine:
        runs = await engine.list_runs()
        print_run_list(runs, "the store", escaped(raw["listed"]))
        print(json.dumps([run_json(r) for r in runs], indent=2), file=escaped(raw["listed_json"]))
        mailbox = mailbox_of(engine.store)
        assert mailbox is not None
        for run_id in h.ids:
            info = await engine.get_run(run_id)
            assert info is not None
            messages = await mailbox.load_messages(run_id)
            shown[run_id] = []
            for width in (80, None):
                out = io.StringIO()
                print_run(info, escaped(out), width=width, messages=messages)
                shown[run_id].append(out.getvalue())
            out = io.StringIO()
            data = run_json(info, detail=True, messages=messages)
            print(json.dumps(data, indent=2), file=escaped(out))
            shown_json[run_id] = out.getvalue()
    return Shown(raw["listed"].getvalue(), shown, raw["listed_json"].getvalue(), shown_json)


def _check_terminal(h: Hostile, shown: Shown) -> None:
    for text in [shown.listed, *(t for ts in shown.shown.values() for t in ts)]:
        assert RAW.search(text) is None, ascii(text)
        text.encode("utf-8")  # strict: no lone surrogate
    for run_id in h.ids:
        assert escape_controls(run_id) in shown.listed
        for text in shown.shown[run_id]:
            assert f"run:       {escape_controls(run_id)}\n" in text


def _check_json(h: Hostile, shown: Shown) -> None:
    done, paused, failed = h.ids
    assert {r["run_id"] for r in json.loads(shown.listed_json)} == set(h.ids)
    data = json.loads(shown.shown_json[done])
    assert data["run_id"] == done and data["result"] == h.returned
    values = {e["key"]: e["value"] for e in data["entries"]}
    assert values["echo#0"] == h.result and values["ask#0"] == h.response
    errors = [e["error"]["message"] for e in data["entries"] if e["error"] is not None]
    assert errors == [storable_text(h.error)]  # (its lone surrogates stored escaped)
    assert [m["value"] for m in data["messages"]] == [h.message]
    data = json.loads(shown.shown_json[paused])
    assert [r["payload"] for r in data["requests"]] == [h.arg]
    assert [m["value"] for m in data["messages"]] == [h.message]
    assert json.loads(shown.shown_json[failed])["error"]["message"] == storable_text(h.error)


async def _check_dashboard(store: Store, h: Hostile) -> None:
    async with open_dashboard(store, shown="the store") as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            pages = [await http.get("/")]
            for run_id in h.ids:
                pages.append(await http.get("/run", params={"id": run_id}))
            pages.append(await http.get("/run/timeline.svg", params={"id": h.run_id}))
    for page in pages:
        assert page.status_code == 200, page.text
        text = page.content.decode("utf-8")  # strict
        assert RAW_ON_A_PAGE.search(text) is None, ascii(text)
    for page in pages[:4]:
        assert html.escape(escape_controls(h.run_id, keep="\n\t")) in page.text


def _example(kind: str, make: Callable[[], Store], h: Hostile, tmp: Path) -> None:
    store = make()
    if not trio.run(_store, store, h):
        reject()
    if kind == "sqlite":
        shown = _command_line(f"sqlite:{store.path}", h, tmp)  # type: ignore[attr-defined]
    elif kind == "file":
        shown = _command_line(f"file:{store.directory}", h, tmp)  # type: ignore[attr-defined]
    else:
        shown = trio.run(_printers, reopen_store(store), h)
    _check_terminal(h, shown)
    _check_json(h, shown)
    trio.run(_check_dashboard, reopen_store(store), h)


SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.tether_stores("memory", "sqlite", "file")
@settings(SETTINGS, max_examples=10)
@given(h=hostile)
@example(h=Hostile(run_id="-", arg="", result="", error="", message="", response=""))  # --p
def test_any_stored_string_renders_safely_and_reads_back_exactly(
    tether_store_kind: str,
    tether_raw_store_factory: Callable[[], Store],
    tmp_path: Path,
    h: Hostile,
) -> None:
    _example(tether_store_kind, tether_raw_store_factory, h, tmp_path)


@pytest.mark.slow
@pytest.mark.tether_stores("postgres")
@settings(SETTINGS, max_examples=5)
@given(h=hostile)
def test_any_string_stored_in_postgres_renders_safely_and_reads_back_exactly(
    tether_store_kind: str,
    tether_raw_store_factory: Callable[[], Store],
    tmp_path: Path,
    h: Hostile,
) -> None:
    _example(tether_store_kind, tether_raw_store_factory, h, tmp_path)
