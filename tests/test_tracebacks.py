"""Failures keep their traceback: stored, shown by ``runs show`` and the dashboard, logged.

``ErrorInfo.traceback`` holds the formatted traceback of what a run (or a
failed attempt) raised, chained causes and group members included, bounded;
a group's members are named in ``ErrorInfo.members``. Records stored before
the field existed read as ``None``, and the checksums of their entries still
verify.
"""

from __future__ import annotations

import html
import io
import json
import logging
import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

import tether
from tether._cli._main import main
from tether._core._error_info import error_info
from tether._errors import MAX_MESSAGE, MAX_TRACEBACK, ErrorInfo, storable_text
from tether._ui._app import dashboard_app, open_dashboard
from tether.stores import (
    Entry,
    EntryStatus,
    RecordDecodeError,
    RunRecord,
    RunStatus,
    Store,
    dumps_record,
    loads_record,
)
from tether.stores._records import load_entry, load_run_record
from tether.stores._rows import encode_entry, generic_encode_entry

from ._poll import apoll

#: A journal entry of a failed attempt exactly as tether wrote it before errors
#: had a traceback (format version 5), checksum included.
OLD_ENTRY = (
    '{"run_id":"old-1","seq":1,"key":"charge#0","kind":"step","status":"failed",'
    '"value":"{\\"next_at\\":null}","error":{"type":"ValueError","message":"declined",'
    '"key":"charge#0"},"args_digest":"d","started_at":"2030-01-01T00:00:00+00:00",'
    '"finished_at":"2030-01-01T00:00:00+00:00","attempt":1,"token":1,"position":0,'
    '"checksum":"ae84d51931f59df3bd819cf9ca0481045841b010b67539505ca00e95476bab6a"}'
)
#: A failed run's record as tether wrote it then.
OLD_RUN = (
    '{"run_id":"old-1","workflow":"shop.charge","args":"[]","status":"failed","result":null,'
    '"error":{"type":"ValueError","message":"declined","key":"charge#0"},"requests":[],'
    '"created_at":"2030-01-01T00:00:00+00:00","updated_at":"2030-01-01T00:00:00+00:00",'
    '"owner":null,"token":1,"cancel_requested":false,"dispatches":0,"version":null,'
    '"wake_at":null,"format_version":5}'
)

TOKEN = "test-token-0123456789"

arrived: list[str] = []
gates: dict[str, trio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    arrived.clear()
    gates.clear()


@tether.step
async def fail_alone(order: str) -> str:
    raise ValueError(f"out of stock: {order}")


@tether.workflow(name="tests.tracebacks.sequential")
async def sequential(order: str) -> str:
    return await fail_alone(order)


async def _meet(run: str) -> None:
    """Wait until both members of *run*'s block are here, so both raise (none is cancelled)."""
    arrived.append(run)
    gate = gates.setdefault(run, trio.Event())
    if arrived.count(run) == 2:
        gate.set()
    else:
        await gate.wait()


@tether.step
async def fail_left(run: str) -> int:
    await _meet(run)
    raise ValueError(f"left failed in {run}")


@tether.step
async def fail_right(run: str) -> int:
    await _meet(run)
    raise KeyError(f"right failed in {run}")


@tether.workflow(name="tests.tracebacks.parallel")
async def in_parallel(run: str) -> None:
    async with tether.parallel() as p:
        p.start_soon(fail_left, run)
        p.start_soon(fail_right, run)


@tether.step(retry=tether.Retry(attempts=2, initial=0, jitter=False))
async def flaky(order: str) -> str:
    raise ConnectionError(f"card service timed out for {order}")


@tether.workflow(name="tests.tracebacks.retried")
async def retried(order: str) -> str:
    return await flaky(order)


def _frame(traceback: str, function: str, raised: str) -> bool:
    """Whether *traceback* shows the frame of *function* in this file, at its ``raise``."""
    # (a group's member's lines start with "| ")
    pattern = rf'File "[^"]*test_tracebacks\.py", line \d+, in {function}\n[\s|]+raise {raised}\('
    return re.search(pattern, traceback) is not None


def _assert_sequential(error: ErrorInfo | None) -> None:
    assert error is not None and error.type == "ValueError" and error.key == "fail_alone#0"
    assert error.traceback is not None and _frame(error.traceback, "fail_alone", "ValueError")
    assert error.traceback.rstrip().endswith("ValueError: out of stock: o-1")
    assert error.members == ()


def _assert_parallel(error: ErrorInfo | None) -> None:
    assert error is not None and error.type == "ExceptionGroup"
    assert error.traceback is not None
    assert _frame(error.traceback, "fail_left", "ValueError")
    assert _frame(error.traceback, "fail_right", "KeyError")
    named = sorted((m.type, m.message, m.key) for m in error.members)
    assert named == [
        ("KeyError", "'right failed in p-1'", "fail_right#0"),
        ("ValueError", "left failed in p-1", "fail_left#0"),
    ]
    assert all(m.traceback is None and not m.members for m in error.members)


async def _fail_both(engine: tether.Engine) -> None:
    with pytest.raises(ValueError):
        await engine.run(sequential, "o-1", run_id="s-1")
    with pytest.raises(ExceptionGroup):
        await engine.run(in_parallel, "p-1", run_id="p-1")


# -- stored --------------------------------------------------------------------------


async def test_a_failure_is_stored_with_its_traceback_and_a_groups_members(
    tether_store: Store,
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await _fail_both(engine)
    async with tether.open_engine(tether_store) as engine:  # as read back
        seq, par = await engine.get_run("s-1"), await engine.get_run("p-1")
    assert seq is not None and par is not None
    _assert_sequential(seq.error)
    _assert_parallel(par.error)


async def test_each_failed_attempt_is_journaled_with_its_traceback(tether_store: Store) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(ConnectionError):
            await engine.run(retried, "o-9", run_id="r-1")
        info = await engine.get_run("r-1")
    assert info is not None
    failed = [e for e in info.entries if e.status is EntryStatus.FAILED]
    assert [e.attempt for e in failed] == [1, 2]
    for entry in failed:
        assert entry.error is not None and entry.error.traceback is not None
        assert _frame(entry.error.traceback, "flaky", "ConnectionError")


def test_chained_causes_are_in_the_traceback() -> None:
    try:
        try:
            raise OSError("disk full")
        except OSError as exc:
            raise RuntimeError("saving the invoice failed") from exc
    except RuntimeError as exc:
        info = error_info(exc)
    assert info.traceback is not None
    assert "OSError: disk full" in info.traceback
    assert "direct cause of the following exception" in info.traceback
    assert info.traceback.rstrip().endswith("RuntimeError: saving the invoice failed")


def test_nested_groups_name_every_member() -> None:
    group = ExceptionGroup(
        "outer", [ValueError("a"), ExceptionGroup("inner", [KeyError("b"), OSError("c")])]
    )
    info = error_info(group)
    assert [(m.type, m.message) for m in info.members] == [
        ("ValueError", "a"),
        ("KeyError", "'b'"),
        ("OSError", "c"),
    ]
    assert info.traceback is not None and "inner" in info.traceback


def test_text_is_bounded_with_a_marker_saying_how_much_was_cut() -> None:
    huge = "x" * 100_000 + "END"
    info = error_info(ValueError("START" + huge))
    assert len(info.message) <= MAX_MESSAGE
    assert info.message.startswith("STARTxxx") and info.message.endswith("xxEND")
    cut = re.search(r"\[\.\.\. (\d+) characters cut \.\.\.\]", info.message)
    assert cut is not None and len(info.message) - len(cut[0]) - 2 + int(cut[1]) == 100_008
    assert info.traceback is not None and len(info.traceback) <= MAX_TRACEBACK
    assert "characters cut" in info.traceback
    assert storable_text("short", 100) == "short"


def test_an_exception_whose_str_fails_is_still_described() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    info = error_info(Broken())
    assert "str() of the Broken failed" in info.message and info.traceback is not None


# -- record format ---------------------------------------------------------------------


def test_records_stored_before_tracebacks_read_as_none_and_verify() -> None:
    entry = load_entry(OLD_ENTRY, "old-1", 1)  # its checksum verifies
    assert entry.error == ErrorInfo(type="ValueError", message="declined", key="charge#0")
    assert entry.error.traceback is None and entry.error.members == ()
    # Written again, it is the same text: the checksum is stable.
    assert dumps_record(entry.to_json()) == OLD_ENTRY
    assert encode_entry(entry) == generic_encode_entry(entry)
    record = load_run_record(OLD_RUN, "old-1")
    assert record.error is not None and record.error.traceback is None
    assert record.status is RunStatus.FAILED and record.format_version == 5


def test_a_traceback_and_members_round_trip_in_entries_and_run_records() -> None:
    info = error_info(ExceptionGroup("two", [ValueError("a"), KeyError("b")]))
    t = datetime(2030, 1, 1, tzinfo=UTC)
    entry = Entry(
        run_id="new-1",
        key="x#0",
        status=EntryStatus.FAILED,
        error=info,
        started_at=t,
        finished_at=t,
        token=1,
        position=0,
    ).stored_as(1)
    text = dumps_record(entry.to_json())
    assert load_entry(text, "new-1", 1) == entry
    # The rows' fast path writes what the reference writes.
    assert encode_entry(entry) == generic_encode_entry(entry)
    record = RunRecord(
        run_id="new-1",
        workflow="w",
        args="[]",
        status=RunStatus.FAILED,
        error=info,
        created_at=t,
        updated_at=t,
    )
    again = loads_record(dumps_record(record.to_json()), RunRecord.from_json)
    assert again.error == info and again.format_version == tether.stores.FORMAT_VERSION


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda e: e.update(traceback=None), "'traceback' must be a string"),
        (lambda e: e.update(traceback=3), "'traceback' must be a string"),
        (lambda e: e.update(members=[]), "'members' must be a non-empty list"),
        (lambda e: e.update(members="a"), "'members' must be a non-empty list"),
        (
            lambda e: e.update(
                members=[{"type": "A", "message": "", "key": None, "traceback": ""}]
            ),
            "unknown field",
        ),
        (lambda e: e.update(frames=[]), "unknown field"),
    ],
)
def test_a_bad_error_in_a_record_is_refused(change: object, problem: str) -> None:
    data = json.loads(OLD_RUN)
    assert callable(change)
    change(data["error"])
    with pytest.raises(RecordDecodeError, match=problem):
        loads_record(json.dumps(data), RunRecord.from_json)


# -- shown -----------------------------------------------------------------------------


def _failed_runs(path: Path) -> None:
    async def fail() -> None:
        async with tether.open_engine(tether.SQLiteStore(path)) as engine:
            await _fail_both(engine)
            with pytest.raises(ConnectionError):
                await engine.run(retried, "o-9", run_id="r-1")

    trio.run(fail)


def _show(spec: str, run_id: str, *more: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert main(["runs", "show", run_id, "--store", spec, *more], out=out, err=err) == 0, (
        err.getvalue()
    )
    return out.getvalue()


def _section(shown: str, title: str) -> str:
    """The indented lines under *title* in ``runs show``'s output, dedented."""
    lines = shown.split("\n")
    start = lines.index(f"{title}:") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        body.append(line[2:])
    return "\n".join(body)


def test_runs_show_prints_the_traceback_and_the_members(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _failed_runs(path)
    spec = f"sqlite:{path}"
    seq = _show(spec, "s-1")
    assert _frame(_section(seq, "traceback"), "fail_alone", "ValueError")
    par = _show(spec, "p-1")
    traceback = _section(par, "traceback")
    assert _frame(traceback, "fail_left", "ValueError")
    assert _frame(traceback, "fail_right", "KeyError")
    members = _section(par, "members")
    assert "- ValueError: left failed in p-1 (step fail_left#0)" in members
    assert "- KeyError: 'right failed in p-1' (step fail_right#0)" in members
    # --full also shows each failed attempt's traceback.
    retried_run = _show(spec, "r-1")
    assert retried_run.count("in flaky") == 1  # the run's error only
    full = _show(spec, "r-1", "--full")
    assert full.count("in flaky") == 3  # the run's error and both attempts


async def test_the_dashboard_run_page_shows_the_traceback(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with tether.open_engine(tether.SQLiteStore(path)) as engine:
        await _fail_both(engine)
    async with open_dashboard(
        tether.SQLiteStore(path), shown="sqlite:runs.db", token=TOKEN
    ) as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert (await http.get("/", params={"token": TOKEN})).status_code == 303
            seq = await http.get("/run", params={"id": "s-1"})
            par = await http.get("/run", params={"id": "p-1"})
    assert seq.status_code == 200 and par.status_code == 200
    shown = re.search(r'<details[^>]*class="traceback"[^>]*>(.*?)</details>', seq.text, re.S)
    assert shown is not None and "open" in shown[0].split(">")[0]
    assert _frame(html.unescape(shown[1]), "fail_alone", "ValueError")
    page = html.unescape(par.text)
    assert _frame(page, "fail_left", "ValueError") and _frame(page, "fail_right", "KeyError")
    assert "ValueError: left failed in p-1 (step fail_left#0)" in page


async def test_a_worker_logs_a_failure_at_warning_with_its_traceback(
    tether_store: Store, caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    caplog.set_level(logging.WARNING, "tether.worker")
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(sequential, "o-1", run_id="s-1")
        await engine.submit(in_parallel, "p-1", run_id="p-1")
        async with tether.open_worker(engine) as worker:
            for run_id in ("s-1", "p-1"):
                with pytest.raises(tether.RunFailedError):
                    await engine.wait(run_id, timeout=30)
            # (wait() may see the outcome before its execution has returned and logged it)
            await apoll(lambda: worker.outcomes.get("failed") == 2, "both failures logged")
    logged = {
        r.getMessage().split(" run ")[1].split(" ")[0]: r
        for r in caplog.records
        if r.name == "tether.worker" and "failed" in r.getMessage()
    }
    assert set(logged) == {"s-1", "p-1"}
    for record in logged.values():
        assert record.levelno == logging.WARNING and record.exc_info is not None
    formatter = logging.Formatter()
    seq = formatter.format(logged["s-1"])
    assert _frame(seq, "fail_alone", "ValueError")
    par = formatter.format(logged["p-1"])
    assert _frame(par, "fail_left", "ValueError") and _frame(par, "fail_right", "KeyError")
