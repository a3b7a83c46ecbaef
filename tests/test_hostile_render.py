"""Hostile strings on a terminal and a page: escaped everywhere, exact in JSON.

Stored strings often come from outside (a run id is an order id, a webhook's
field): control characters in them must not reach an operator's terminal
raw (``ESC ]0;...`` retitles it, ``ESC [2J`` clears it), nor a lone
surrogate, which no terminal encoding can write. Every human-readable output
shows them escaped, as a Python ``repr`` does; ``--json`` keeps them exact.
Also the wording of a run's journal: entries counted in words, a timer's own
duration, each attempt's own start, and retries in the live progress.
"""

from __future__ import annotations

import html
import io
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import attrs
import httpx
import pytest
import trio
import trio.testing

import tether
from tether._cli._text import json_text
from tether._terminal import abbrev, escape_controls, escaped, table
from tether._ui._app import dashboard_app, open_dashboard
from tether.stores import EntryStatus, Store
from tether.testing import ClockHoldingStore, TrioWallClock

from . import _hostile_flows as flows
from ._cli import cli
from ._wall_clock import START

EVIL_ID = "evil-\x1b]0;pwned\x07\x1b[2J-id"
PAUSED_ID = EVIL_ID + "-paused"
FAILED_ID = EVIL_ID + "-failed"
ARG = "ask \x1b[31mred\x9b<b>"
RESULT = "x\ud800y\x1b]0;title\x07"
ERROR = "boom \x1b[2J\x7f\r\nforged line"
RESPONSE = "yes\x85\udfff"
MESSAGE = "note \x1b[5m\u2028"
#: what ``flows.hostile`` returns with these
RETURNED = [ARG, RESULT, RESPONSE, MESSAGE]
FLOWS = "tests._hostile_flows"
DAY = 24 * 3600.0
#: C0 controls but newline, DEL, C1 controls and surrogates: never on a terminal
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
#: the same on a page, where tabs may stay too
RAW_ON_A_PAGE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def assert_terminal_safe(text: str) -> None:
    assert RAW.search(text) is None, ascii(text)
    text.encode("utf-8")  # strict: a lone surrogate cannot be written


# -- the one function ------------------------------------------------------------------


def test_every_control_character_is_escaped_as_repr_writes_it() -> None:
    controls = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))] + ["\ud800", "\udfff"]
    for char in controls:
        assert escape_controls(char) == repr(char)[1:-1]
    kept = "plain é 😀 \\x1b is text \\ ' \" \u2028 <>"
    assert escape_controls(kept) is kept
    assert escape_controls("a\nb\tc\x1b", keep="\n") == "a\nb\\tc\\x1b"


def test_json_text_stays_json_that_reads_back_exactly() -> None:
    value = {"k\x1b": ["a\ud800b", "\x85\x7f", "\x00"]}
    text = json_text(value)
    assert_terminal_safe(text)
    assert json.loads(text) == value


def test_an_escaped_stream_keeps_newlines_only() -> None:
    raw = io.StringIO()
    out = escaped(raw)
    print("line one \x1b[2J\r", file=out)
    print(EVIL_ID, file=out)
    assert raw.getvalue() == "line one \\x1b[2J\\r\nevil-\\x1b]0;pwned\\x07\\x1b[2J-id\n"
    assert escaped(out) is out


def test_a_table_counts_escapes_as_shown_and_a_newline_breaks_no_row() -> None:
    out = io.StringIO()
    table(out, ("ID", "WHAT", "VALUE"), [("a\x1bb", "x\ny", "v\x9b"), ("plain", "z", "w")], None)
    assert out.getvalue().splitlines() == [
        "ID      WHAT  VALUE",
        "a\\x1bb  x\\ny  v\\x9b",
        "plain   z     w",
    ]


def test_an_abbreviation_never_cuts_an_escape_in_two() -> None:
    assert abbrev("ab\x1bcd", 5) == "ab…"
    assert abbrev("ab\x1bcd", 7) == "ab\\x1b…"
    assert abbrev("ab\x1bcd", None) == "ab\\x1bcd"


# -- the command line ------------------------------------------------------------------


async def _seed(store: Store) -> None:
    """Three runs under hostile ids: completed, paused (a message pending), failed."""
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(flows.hostile, ARG, RESULT, ERROR, uuid.uuid4().hex, run_id=EVIL_ID)
        await engine.send(EVIL_ID, "note", MESSAGE)
        assert await engine.resume(EVIL_ID, {"ask#0": RESPONSE}) == RETURNED
        with pytest.raises(tether.Paused):
            await engine.run(flows.hostile, ARG, RESULT, ERROR, uuid.uuid4().hex, run_id=PAUSED_ID)
        await engine.send(PAUSED_ID, "note", MESSAGE)
        with pytest.raises(RuntimeError):
            await engine.run(flows.failing, ERROR, run_id=FAILED_ID)


@attrs.frozen
class Seeded:
    store: tuple[str, str]  # --store SPEC


@pytest.fixture(params=["sqlite", "file"])
def seeded(request: pytest.FixtureRequest, tmp_path: Path) -> Seeded:
    """A store of each kind the command line reads, seeded with :func:`_seed`."""
    if request.param == "sqlite":
        trio.run(_seed, tether.SQLiteStore(tmp_path / "runs.db"))
        return Seeded(("--store", f"sqlite:{tmp_path / 'runs.db'}"))
    trio.run(_seed, tether.FileStore(tmp_path / "runs"))
    return Seeded(("--store", f"file:{tmp_path / 'runs'}"))


def test_runs_list_escapes_a_hostile_run_id_and_json_keeps_every_string_exact(
    seeded: Seeded,
) -> None:
    done = cli("runs", "list", *seeded.store)
    assert done.status == 0, done.err
    assert_terminal_safe(done.out)
    lines = done.out.splitlines()
    row = next(line for line in lines if line.startswith(escape_controls(EVIL_ID) + " "))
    # The WORKFLOW column starts where its header does: widths count escapes as shown.
    assert row.index(flows.hostile.name) == lines[0].index("WORKFLOW")
    # --json keeps the ids exact.
    listed = json.loads(cli("runs", "list", "--json", *seeded.store).out)
    assert {r["run_id"] for r in listed} == {EVIL_ID, PAUSED_ID, FAILED_ID}
    done = json.loads(cli("runs", "show", EVIL_ID, "--json", *seeded.store).out)
    assert done["run_id"] == EVIL_ID and done["result"] == RETURNED
    values = {e["key"]: e["value"] for e in done["entries"]}
    assert values["echo#0"] == RESULT and values["ask#0"] == RESPONSE
    errors = [e["error"]["message"] for e in done["entries"] if e["error"] is not None]
    assert errors == [ERROR]
    assert [m["value"] for m in done["messages"]] == [MESSAGE]
    paused = json.loads(cli("runs", "show", PAUSED_ID, "--json", *seeded.store).out)
    assert [r["payload"] for r in paused["requests"]] == [ARG]
    failed = json.loads(cli("runs", "show", FAILED_ID, "--json", *seeded.store).out)
    assert failed["error"]["message"] == ERROR


@pytest.mark.parametrize("full", [False, True])
def test_runs_show_escapes_every_stored_string(
    seeded: Seeded, full: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # cut nothing that is asserted on
    how = ["--full"] if full else []
    picture = tmp_path / "timeline.svg"
    shown = {}
    for run_id in (EVIL_ID, PAUSED_ID, FAILED_ID):
        done = cli("runs", "show", run_id, *how, "--timeline", str(picture), *seeded.store)
        assert done.status == 0, done.err
        assert_terminal_safe(done.out + done.err)
        assert f"run:       {escape_controls(run_id)}\n" in done.out
        assert "\\\\x" not in done.out  # nothing escaped twice
        picture.read_text(encoding="utf-8")  # strict: valid UTF-8, no lone surrogate
        shown[run_id] = done.out
    # One line each, escaped (whitespace folded to one space).
    assert f"result:    {abbrev(json_text(RETURNED), None)}\n" in shown[EVIL_ID]
    error = "RuntimeError: boom \\x1b[2J\\x7f forged line"
    assert f"fail_once#0 attempt 1: {error} (step fail_once#0); next attempt at" in shown[EVIL_ID]
    assert f"error:     {error}\n" in shown[FAILED_ID]
    assert f"  - ask#0 -> str: {json_text(ARG)}\n" in shown[PAUSED_ID]
    assert abbrev(json_text(MESSAGE), None) in shown[PAUSED_ID]


def test_commands_that_write_or_execute_escape_what_they_echo(seeded: Seeded) -> None:
    sent = cli("send", PAUSED_ID, "note", "again \x1b[2J", "--import", FLOWS, *seeded.store)
    assert sent.status == 0, sent.err
    assert_terminal_safe(sent.out)
    assert f'sent note to run {escape_controls(PAUSED_ID)}: "again \\u001b[2J"' in sent.out
    answer = "ok \x1b]0;x\x07"
    respond = ["--respond", f"ask#0={answer}", "--import", FLOWS]
    resumed = cli("resume", PAUSED_ID, *respond, *seeded.store)
    assert resumed.status == 0, resumed.err
    assert_terminal_safe(resumed.out + resumed.err)
    assert f"run {escape_controls(PAUSED_ID)}: completed" in resumed.out
    # The result is JSON still, escapes and all: it reads back exactly.
    last = resumed.out.split("\n")[-2]  # (not splitlines: MESSAGE holds U+2028)
    assert json.loads(last) == [ARG, RESULT, answer, MESSAGE]
    hostile_id = "run-\x1b[2J\x9b"
    failed = cli("run", f"{FLOWS}:failing", ERROR, "--run-id", hostile_id, *seeded.store)
    assert failed.status == 1
    assert_terminal_safe(failed.out + failed.err)
    assert f"run {escape_controls(hostile_id)}: started" in failed.out
    assert "failed: RuntimeError: boom \\x1b[2J\\x7f\\r\\nforged line; it is resumable" in (
        failed.err
    )
    cancelled = cli("runs", "cancel", FAILED_ID, *seeded.store)
    assert cancelled.status == 0, cancelled.err
    assert_terminal_safe(cancelled.out)
    assert f"run {escape_controls(FAILED_ID)} cancelled" in cancelled.out


# -- the dashboard ---------------------------------------------------------------------


async def test_the_dashboard_shows_hostile_strings_escaped(tmp_path: Path) -> None:
    await _seed(tether.SQLiteStore(tmp_path / "runs.db"))
    async with open_dashboard(tether.SQLiteStore(tmp_path / "runs.db"), shown="x") as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            pages = {"/": await http.get("/")}
            for run_id in (EVIL_ID, PAUSED_ID, FAILED_ID):
                pages[run_id] = await http.get("/run", params={"id": run_id})
                pages[f"{run_id}.svg"] = await http.get("/run/timeline.svg", params={"id": run_id})
    texts = {}
    for name, response in pages.items():
        assert response.status_code == 200, (name, response.text)
        texts[name] = response.content.decode("utf-8")  # strict
        assert RAW_ON_A_PAGE.search(texts[name]) is None, name
    shown_id = html.escape(escape_controls(EVIL_ID))
    assert shown_id in texts["/"] and shown_id in texts[EVIL_ID]
    result = json.dumps(RETURNED, indent=2, ensure_ascii=False)
    assert html.escape(escape_controls(result, keep="\n\t")) in texts[EVIL_ID]
    assert html.escape(escape_controls(ERROR, keep="\n\t")) in texts[FAILED_ID]


# -- wording ---------------------------------------------------------------------------


async def _live(store: Store, wf: tether.Workflow) -> list[tether.RunEvent]:  # type: ignore[type-arg]
    """Run *wf* as run ``timed`` on the engine clock (virtual time from START); its events."""
    events: list[tether.RunEvent] = []
    async with (
        tether.open_engine(store, clock=TrioWallClock(START), lease_ttl=DAY) as engine,
        engine.open_run(wf, uuid.uuid4().hex, run_id="timed") as run,
    ):
        async for event in run.events():
            events.append(event)
        await run.result()
    return events


def _virtual(path: Path, wf: tether.Workflow) -> list[tether.RunEvent]:  # type: ignore[type-arg]
    """:func:`_live` on a SQLite store at *path*, under trio's autojumping clock."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    store = ClockHoldingStore(tether.SQLiteStore(path))  # its threads hold the clock
    return trio.run(_live, store, wf, clock=clock)


def test_a_timer_shows_its_own_duration_and_each_attempt_its_own_start(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _virtual(path, flows.timed)
    done = cli("runs", "show", "timed", "--store", f"sqlite:{path}")
    assert "\njournal (4 entries):\n" in done.out
    rows = [line.split() for line in done.out.split("journal (4 entries):\n")[1].splitlines()]
    assert rows[1][1:3] == ["sleep#0", "timer"]
    assert rows[1][6:9] == ["00:00:00.000", "5.00", "s"]  # its start; to its due time, not 0 us
    # Each attempt started when it was due: 5 s after the timer began, then 5 s apart.
    assert [(r[1], r[4], r[6]) for r in rows[2:]] == [
        ("flaky#0", "1", "00:00:05.000"),
        ("flaky#0", "2", "00:00:10.000"),
        ("flaky#0", "3", "00:00:15.000"),
    ]
    info = trio.run(_info, tether.SQLiteStore(path), "timed")
    third = [e for e in info.entries if e.status is EntryStatus.COMPLETED and e.attempt == 3]
    assert [e.started_at for e in third] == [START + timedelta(seconds=15)]


async def test_the_dashboard_shows_a_timer_its_own_duration(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await trio.to_thread.run_sync(_virtual, path, flows.timed)
    async with open_dashboard(tether.SQLiteStore(path), shown="x") as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            page = (await http.get("/run", params={"id": "timed"})).text
    row = page.split('<tr data-key="sleep#0">', 1)[1].split("</tr>", 1)[0]
    assert '<td class="nw">5.00 s</td>' in row  # from its start to when it was due
    assert "5.00 s (timer)" in page  # its bar's tooltip on the timeline too
    assert "Journal (4 entries)" in page


async def _info(store: Store, run_id: str) -> tether.RunInfo:
    async with tether.open_engine(store) as engine:
        info = await engine.get_run(run_id)
    assert info is not None
    return info


def test_live_progress_shows_retries_and_their_backoff(tmp_path: Path) -> None:
    events = _virtual(tmp_path / "runs.db", flows.timed)
    retrying = [e for e in events if isinstance(e, tether.StepRetrying)]
    assert [(e.key, e.attempt, e.next_at) for e in retrying] == [
        ("flaky#0", 1, START + timedelta(seconds=10)),
        ("flaky#0", 2, START + timedelta(seconds=15)),
    ]
    assert isinstance(retrying[0].error, ConnectionError)
    lines = [tether.describe_event(e) for e in events]
    assert (
        "  step flaky#0: attempt 1 failed: ConnectionError: attempt 1 failed; "
        "attempt 2 at 2030-01-01T00:00:10+00:00"
    ) in lines
    assert lines.index("  step flaky#0: started") < lines.index(
        "  step flaky#0: attempt 2 failed: ConnectionError: attempt 2 failed; "
        "attempt 3 at 2030-01-01T00:00:15+00:00"
    )
    # retries= (no policy): the next attempt follows at once.
    quick = _virtual(tmp_path / "quick.db", flows.quick)
    assert [tether.describe_event(e) for e in quick if isinstance(e, tether.StepRetrying)] == [
        "  step hasty#0: attempt 1 failed: ConnectionError: first attempt failed; attempt 2 at once"
    ]


def test_a_progress_line_escapes_what_it_shows() -> None:
    started = tether.RunStarted(run_id=EVIL_ID, workflow="w")
    assert tether.describe_event(started) == f"run {escape_controls(EVIL_ID)}: started (w)"
    retrying = tether.StepRetrying(
        run_id="r", key="k#0", name="k", attempt=1, error=RuntimeError("a\nb\x1b")
    )
    assert tether.describe_event(retrying) == (
        "  step k#0: attempt 1 failed: RuntimeError: a\\nb\\x1b; attempt 2 at once"
    )


async def test_a_journal_of_one_entry_says_entry(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        await engine.run(flows.one_step, "x", run_id="one")
    shown = await trio.to_thread.run_sync(cli, "runs", "show", "one", "--store", f"sqlite:{path}")
    assert "\njournal (1 entry):\n" in shown.out
    async with open_dashboard(tether.SQLiteStore(path), shown="x") as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            page = (await http.get("/run", params={"id": "one"})).text
    assert "<h2>Journal (1 entry)</h2>" in page
