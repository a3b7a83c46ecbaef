"""The dashboard's app without a browser: pages, escaping, writes and their checks.

Requests go through httpx's ASGI transport, in the test's trio loop, to the
app over a real SQLite store seeded with a run of every status
(``tests/_dashboard_flows.py``).
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

import tether
from tether._cli._main import main
from tether._cli._ui import INSTALL_HINT
from tether._errors import Request
from tether._ui._app import Dashboard, dashboard_app, open_dashboard
from tether._ui._layout import SCRIPT_HASH, execution
from tether.stores import EntryKind, RunRecord, RunStatus, utcnow
from tether.stores._records import request_to_json

from . import _dashboard_flows as flows

TOKEN = "test-token-0123456789"
BASE = "http://127.0.0.1:8700"
ASK = flows.RUNS["paused"]


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    await flows.seed(tether.SQLiteStore(path))
    return path


@asynccontextmanager
async def client(
    db: Path, *, read_only: bool = False, login: bool = True
) -> AsyncIterator[tuple[httpx.AsyncClient, Dashboard]]:
    """A client of a dashboard on *db* (with the token's cookie when *login*)."""
    async with open_dashboard(
        tether.SQLiteStore(db),
        shown=f"sqlite:{db}",
        token=TOKEN,
        read_only=read_only,
        modules=[flows],
    ) as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            if login:
                response = await http.get("/", params={"token": TOKEN})
                assert response.status_code == 303 and response.headers["location"] == "/"
            yield http, dash


class _Texts(HTMLParser):
    """The visible text of a page, and every element's tag."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(html: str) -> _Texts:
    texts = _Texts()
    texts.feed(html)
    return texts


def answer(**fields: str) -> dict[str, str]:
    good = {"approved": "true", "amount": "4200", "note": "fine", "priority": '"high"'}
    data = {"run_id": ASK, "key": "ask#0", "token": TOKEN}
    data.update({f"answer.{k}": v for k, v in {**good, **fields}.items()})
    return data


async def entries(dash: Dashboard, run_id: str) -> list[tuple[str, EntryKind]]:
    info = await dash.engine.get_run(run_id)
    assert info is not None
    return [(e.key, e.kind) for e in info.entries]


# -- reading --------------------------------------------------------------------------


async def test_the_runs_list_shows_every_status_and_filters(db: Path) -> None:
    async with client(db) as (http, _):
        page = await http.get("/")
        assert page.status_code == 200
        rows = re.findall(r'<tr data-run="([^"]+)" data-status="([^"]+)"', page.text)
        assert {status: run for run, status in rows} == {
            **{s: r for s, r in flows.RUNS.items() if s != "interrupted"},
            "running": flows.RUNS["interrupted"],
        }
        failed = await http.get("/", params={"status": "failed"})
        assert re.findall(r'data-run="([^"]+)"', failed.text) == [flows.RUNS["failed"]]
        broken = await http.get("/", params={"workflow": "dash.broken"})
        assert re.findall(r'data-run="([^"]+)"', broken.text) == [flows.RUNS["failed"]]
        assert (await http.get("/", params={"status": "nonsense"})).status_code == 400


async def test_the_runs_list_pages_by_keyset(db: Path) -> None:
    async with client(db) as (http, _):
        seen: list[str] = []
        url = "/?limit=3"
        for _ in range(5):
            page = await http.get(url)
            seen += re.findall(r'data-run="([^"]+)"', page.text)
            more = re.search(r'<a href="([^"]+)">next page →</a>', page.text)
            if more is None:
                break
            url = more.group(1).replace("&amp;", "&") + "&limit=3"
        everything = re.findall(r'data-run="([^"]+)"', (await http.get("/")).text)
        assert seen == everything and sorted(seen) == sorted(flows.RUNS.values())
        assert (await http.get("/", params={"after": "no-such-run"})).status_code == 404


async def test_the_live_part_refreshes_while_runs_are_active(db: Path) -> None:
    async with client(db) as (http, _):
        page = await http.get("/")
        assert 'data-live="1"' in page.text  # queued and running runs are listed
        fragment = await http.get("/", params={"fragment": "1"})
        assert fragment.headers["x-tether-live"] == "1"
        # Nothing changed: the same digest, so the script leaves the page alone.
        shown = re.search(r'data-digest="([0-9a-f]+)"', page.text)
        assert shown is not None and fragment.headers["x-tether-digest"] == shown.group(1)
        assert "<html" not in fragment.text and "<table>" in fragment.text
        done = await http.get("/", params={"status": "completed", "fragment": "1"})
        assert done.headers["x-tether-live"] == "0"
        run = await http.get("/run", params={"id": ASK, "fragment": "1"})
        assert run.headers["x-tether-live"] == "0" and "<html" not in run.text


async def test_a_run_page_shows_its_journal_timeline_error_and_result(db: Path) -> None:
    async with client(db) as (http, _):
        failed = await http.get("/run", params={"id": flows.RUNS["failed"]})
        text = " ".join(parsed(failed.text).text)
        assert "address of o-bad is invalid: " + flows.SCRIPT in text  # in full
        assert re.search(r"from step\s*explode#0", text)
        assert '<svg xmlns="http://www.w3.org/2000/svg"' in failed.text
        assert 'data-key="fetch#0"' in failed.text
        done = await http.get("/run", params={"id": flows.RUNS["completed"]})
        text = " ".join(parsed(done.text).text)
        assert f"shipped o-done (4200 cents) {flows.SCRIPT}" in text
        for key in ("fetch#0", "charge#0", "reserve#0", "ask#0", "ship#0"):
            assert f'<tr data-key="{key}">' in done.text
        assert 'data-attempt="3"' in done.text  # charge#0 needed two retries
        dead = await http.get("/run", params={"id": flows.RUNS["dead_letter"]})
        assert "set aside after 5 dispatches" in dead.text
        cut = await http.get("/run", params={"id": flows.RUNS["interrupted"]})
        assert "interrupted (no live owner)" in cut.text
        assert f"tether resume o-cut --store sqlite:{db} --import MODULE" in cut.text
        svg = await http.get("/run/timeline.svg", params={"id": flows.RUNS["completed"]})
        assert svg.headers["content-type"].startswith("image/svg+xml")
        assert svg.text.startswith("<svg") and 'data-key="ship#0"' in svg.text
        assert (await http.get("/run", params={"id": "nope"})).status_code == 404


async def test_an_executing_run_shows_its_owner_and_lease(db: Path) -> None:
    async with flows.open_live_run(tether.SQLiteStore(db)) as live, client(db) as (http, _):
        page = await http.get("/run", params={"id": flows.LIVE})
        assert f"executing on <code>{live.owner}</code>, lease until " in page.text
        assert 'data-live="1"' in page.text


async def test_no_stored_value_is_rendered_as_markup(db: Path) -> None:
    async with client(db) as (http, _):
        pages = [await http.get("/")] + [
            await http.get("/run", params={"id": run_id}) for run_id in flows.RUNS.values()
        ]
        for page in pages:
            assert "<script>alert" not in page.text
            assert parsed(page.text).tags.count("script") == 1  # the page's own
            csp = page.headers["content-security-policy"]
            assert f"script-src {SCRIPT_HASH};" in csp and "frame-ancestors 'none'" in csp
        shown = " ".join(parsed(pages[1].text).text)
        assert flows.SCRIPT in shown  # ... but shown, as text


# -- writing --------------------------------------------------------------------------


async def test_a_bad_answer_shows_its_error_next_to_the_field_and_journals_nothing(
    db: Path,
) -> None:
    async with client(db) as (http, dash):
        before = await entries(dash, ASK)
        response = await http.post("/run/answer", data=answer(amount="ten"))
        assert response.status_code == 422
        error = re.search(r'<p class="error" data-error="answer.amount">([^<]*)</p>', response.text)
        assert error is not None and "does not decode as int" in error.group(1)
        assert 'value="ten"' in response.text  # what was typed is kept
        assert await entries(dash, ASK) == before
        info = await dash.engine.get_run(ASK)
        assert info is not None and info.status is RunStatus.PAUSED


async def test_a_good_answer_queues_the_run_for_a_worker(db: Path) -> None:
    async with client(db) as (http, dash):
        page = await http.get("/run", params={"id": ASK})
        assert f'<input type="hidden" name="token" value="{TOKEN}">' in page.text
        response = await http.post("/run/answer", data=answer())
        assert response.status_code == 303
        info = await dash.engine.get_run(ASK)
        assert info is not None and info.status is RunStatus.QUEUED  # executed nothing
        assert [e.key for e in info.entries][-1] == "ask#0"
        page = await http.get(response.headers["location"])
        assert "responded to ask#0 and queued the run for the workers" in page.text
        assert "stranded: no live worker serves workflow" in page.text  # none runs yet
        again = await http.post("/run/answer", data=answer())  # answered already
        assert again.status_code == 409 and "has no pending request" in again.text
        async with tether.open_worker(dash.engine):
            with trio.fail_after(60):
                result = await dash.engine.wait(ASK)
        assert result == f"shipped o-ask (4200 cents) {flows.SCRIPT}"
        page = await http.get(response.headers["location"])
        assert "stranded" not in page.text and "s-completed" in page.text


async def test_writes_need_the_token_a_same_origin_form_post_and_the_right_host(db: Path) -> None:
    async with client(db, login=False) as (http, dash):
        page = await http.get("/run", params={"id": ASK})
        assert 'type="password" name="token"' in page.text  # no cookie: the form asks
        refused = [
            await http.post("/run/answer", data={**answer(), "token": "guess"}),
            await http.post("/run/answer", data={**answer(), "token": ""}),
            await http.post(
                "/run/answer", data=answer(), headers={"Origin": "http://evil.example"}
            ),
            await http.post("/run/answer", data=answer(), headers={"Host": "evil.example:8700"}),
            await http.post("/run/answer", json=answer()),
            await http.post("/run/cancel", data={"run_id": ASK, "token": "x" * 100_000}),
            await http.post("/run/cancel", data={"run_id": ASK, "token": ""}),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403, 403, 403, 413, 403]
        assert "wrong token" in refused[0].text
        assert await entries(dash, ASK) == [
            ("fetch#0", EntryKind.STEP),
            ("charge#0", EntryKind.STEP),
            ("reserve#0", EntryKind.STEP),
        ]
        info = await dash.engine.get_run(ASK)
        assert info is not None and info.status is RunStatus.PAUSED
        wrong = await http.get("/", params={"token": "guess"})
        assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
        # Same origin, right token, no cookie needed: accepted.
        ok = await http.post(
            "/run/cancel", data={"run_id": ASK, "token": TOKEN}, headers={"Origin": BASE}
        )
        assert ok.status_code == 303


async def test_read_only_offers_and_takes_no_writes(db: Path) -> None:
    async with client(db, read_only=True) as (http, dash):
        page = await http.get("/run", params={"id": ASK})
        assert "<form" not in page.text.split("</header>", 1)[1]
        assert "read-only" in page.text and "ask#0" in page.text
        response = await http.post("/run/cancel", data={"run_id": ASK, "token": TOKEN})
        assert response.status_code == 403 and "read-only" in response.text
        info = await dash.engine.get_run(ASK)
        assert info is not None and info.status is RunStatus.PAUSED


async def test_cancel(db: Path) -> None:
    async with flows.open_live_run(tether.SQLiteStore(db)) as live, client(db) as (http, dash):
        response = await http.post(
            "/run/cancel", data={"run_id": flows.RUNS["failed"], "token": TOKEN}
        )
        assert response.status_code == 303
        info = await dash.engine.get_run(flows.RUNS["failed"])
        assert info is not None and info.status is RunStatus.CANCELLED
        done = await http.post(
            "/run/cancel", data={"run_id": flows.RUNS["completed"], "token": TOKEN}
        )
        assert done.status_code == 409 and "completed" in done.text
        response = await http.post("/run/cancel", data={"run_id": flows.LIVE, "token": TOKEN})
        page = await http.get(response.headers["location"])
        assert f"cancel recorded; its owner {live.owner} stops the run" in page.text
        with pytest.raises(tether.RunCancelledError):  # its owner stops it (real time)
            await live.wait(flows.LIVE, timeout=30)
        assert (
            await http.post("/run/cancel", data={"run_id": "nope", "token": TOKEN})
        ).status_code == 404


async def test_without_the_workflows_code_the_page_says_so_and_answers_are_refused(
    db: Path,
) -> None:
    store = tether.SQLiteStore(db)
    await store.open()
    now = utcnow()
    asked = Request(key="ask#0", payload={"q": "?"}, response_type="bool")
    await store.create_run(
        RunRecord(
            run_id="o-alien",
            workflow="not.imported",
            args="[]",
            status=RunStatus.PAUSED,
            requests=(request_to_json(asked),),
            created_at=now,
            updated_at=now,
        )
    )
    await store.close()
    async with client(db) as (http, dash):
        page = await http.get("/run", params={"id": "o-alien"})
        assert "restart tether ui with --import MODULE" in page.text
        assert 'action="/run/answer"' not in page.text and 'action="/run/cancel"' in page.text
        data = {"run_id": "o-alien", "key": "ask#0", "token": TOKEN, "answer": "true"}
        response = await http.post("/run/answer", data=data)
        assert response.status_code == 409
        assert await entries(dash, "o-alien") == []


# -- the command line -----------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def seeded(tmp_path: Path) -> Path:
    """A seeded store, for the tests that run the command line (which runs its own loop)."""
    path = tmp_path / "runs.db"
    trio.run(flows.seed, tether.SQLiteStore(path))
    return path


def test_runs_show_writes_the_timeline(tmp_path: Path) -> None:
    db = seeded(tmp_path)
    picture = tmp_path / "done.svg"
    out, err = io.StringIO(), io.StringIO()
    args = ["runs", "show", flows.RUNS["completed"], "--store", f"sqlite:{db}"]
    assert main([*args, "--timeline", str(picture)], out=out, err=err) == 0, err.getvalue()
    assert f"timeline: {picture}" in out.getvalue()
    root = ET.fromstring(picture.read_text(encoding="utf-8"))
    keys = sorted(e.get("data-key", "") for e in root.iter() if e.get("data-key"))
    assert keys == ["ask#0", "charge#0", "fetch#0", "reserve#0", "ship#0"]
    out = io.StringIO()
    assert main([*args, "--json", "--timeline", str(picture)], out=out, err=err) == 0
    assert json.loads(out.getvalue())["run_id"] == flows.RUNS["completed"]  # still JSON only
    nowhere = tmp_path / "missing" / "t.svg"
    err = io.StringIO()
    assert main([*args, "--timeline", str(nowhere)], out=io.StringIO(), err=err) == 1
    assert "cannot write the timeline" in err.getvalue()


def test_tether_ui_never_creates_a_store(tmp_path: Path) -> None:
    err = io.StringIO()
    missing = tmp_path / "none.db"
    assert main(["ui", "--store", f"sqlite:{missing}"], out=io.StringIO(), err=err) == 1
    assert "never creates a store" in err.getvalue() and not missing.exists()


def test_tether_ui_refuses_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:{seeded(tmp_path)}"
    for bad in (["--port", "70000"], ["--token", ""], ["--import", "no_such_module_here"]):
        with pytest.raises(SystemExit) as exited:
            main(["ui", "--store", store, *bad], out=io.StringIO(), err=io.StringIO())
        assert exited.value.code == 2, bad
    assert "--port must be 0 to 65535" in capsys.readouterr().err


def test_tether_ui_without_its_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "starlette", None)  # as if not installed
    err = io.StringIO()
    assert main(["ui", "--store", f"sqlite:{tmp_path / 'x.db'}"], out=io.StringIO(), err=err) == 1
    assert INSTALL_HINT in err.getvalue()


def test_tether_ui_serves_until_interrupted(tmp_path: Path) -> None:
    """The real command, in its own process: it prints its URL and token, serves, stops."""
    db = seeded(tmp_path)
    store = f"sqlite:{db}"
    flows_module = "tests._dashboard_flows"
    command = [sys.executable, "-m", "tether", "ui", "--store", store, "--port", "0"]
    command += ["--import", flows_module]
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            lines = [process.stdout.readline() for _ in range(4)]
            url = re.search(r"at (http://127\.0\.0\.1:\d+)/", lines[0])
            token = re.search(r"\?token=(\S+)", lines[1])
            assert url and token, lines
            assert lines[3].strip() == "Ctrl-C stops it"
            with httpx.Client(base_url=url.group(1), timeout=30) as http:
                listed = http.get("/")
                assert listed.status_code == 200 and 'data-run="o-ask"' in listed.text
                data = {"run_id": flows.RUNS["failed"], "token": token.group(1)}
                assert http.post("/run/cancel", data=data).status_code == 303
            process.send_signal(signal.SIGINT)
            rest, errors = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, errors
    assert "tether ui: stopped" in rest
    info = trio.run(_status, db, flows.RUNS["failed"])
    assert info is RunStatus.CANCELLED


async def _status(db: Path, run_id: str) -> RunStatus:
    async with tether.open_engine(tether.SQLiteStore(db)) as engine:
        info = await engine.get_run(run_id)
        assert info is not None
        return info.status


async def test_a_run_parked_in_receive_says_it_waits_for_a_message() -> None:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        run_id = await engine.submit(flows.checkout, "o-1", run_id="parked")
        info = await engine.get_run(run_id)
    assert info is not None
    due = utcnow()
    on_timer = attrs.evolve(info, status=RunStatus.WAITING, wake_at=due)
    on_message = attrs.evolve(info, status=RunStatus.WAITING, wake_at=None)
    assert "parked on its timers until" in str(execution(on_timer, "memory:"))
    assert str(execution(on_message, "memory:")) == "parked, waiting for a message"
    scheduled = attrs.evolve(on_timer, scheduled=True)
    assert str(execution(scheduled, "memory:")).startswith("scheduled to start at ")
