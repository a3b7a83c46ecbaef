"""``tether runs list`` / ``show`` / ``cancel`` (``run`` and ``resume``: ``test_cli_exec.py``).

The tests are synchronous, as the command line is: ``main`` calls ``trio.run``.
A test that needs a run held by a live engine while the command line reads it
runs the engine in its own ``trio.run`` and the command line in a worker
thread (:func:`cli_beside`).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

import tether
from tether._cli._main import main
from tether.stores import RunRecord, Store

from ._cli import Result, cli, run_tether, usage_error


@attrs.frozen
class Parcel:
    order_id: str
    weight_grams: int


@tether.step
async def weigh(order_id: str) -> Parcel:
    await trio.lowlevel.checkpoint()
    return Parcel(order_id, 1250)


@tether.step
async def label(parcel: Parcel) -> str:
    await trio.lowlevel.checkpoint()
    if parcel.order_id.startswith("bad"):
        raise ValueError(f"no address for {parcel.order_id}")
    return f"LABEL-{parcel.order_id}-" + "x" * 300  # long: abbreviated in the table


@tether.workflow(name="tests.cli.dispatch")
async def dispatch(order_id: str) -> Parcel:
    parcel = await weigh(order_id)
    async with tether.parallel() as p:
        p.start_soon(label, parcel)
    return parcel


def sqlite_store(path: Path) -> Store:
    return tether.SQLiteStore(path)


def file_store(path: Path) -> Store:
    return tether.FileStore(path)


@attrs.frozen
class Populated:
    spec: str  # what --store takes
    path: Path


async def populate(store: Store) -> None:
    async with tether.open_engine(store) as engine:
        await engine.run(dispatch, "o-1", run_id="o-1")
        with pytest.raises(ExceptionGroup):
            await engine.run(dispatch, "bad-2", run_id="bad-2")


@pytest.fixture(params=["sqlite", "file"])
def populated(request: pytest.FixtureRequest, tmp_path: Path) -> Populated:
    """A store holding a completed run ``o-1`` and a failed run ``bad-2``."""
    kind: str = request.param
    if kind == "sqlite":
        path = tmp_path / "runs.db"
        trio.run(populate, sqlite_store(path))
    else:
        path = tmp_path / "runs"
        path.mkdir()
        trio.run(populate, file_store(path))
    return Populated(f"{kind}:{path}", path)


# -- runs list ---------------------------------------------------------------------------


def test_list_shows_every_run(populated: Populated) -> None:
    r = cli("runs", "list", "--store", populated.spec)
    assert r.status == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == [
        "RUN",
        "ID",
        "WORKFLOW",
        "STATUS",
        "CREATED",
        "(UTC)",
        "UPDATED",
        "(UTC)",
        "PENDING",
        "EXECUTION",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["o-1"][1:3] == ["tests.cli.dispatch", "completed"]
    assert rows["bad-2"][1:3] == ["tests.cli.dispatch", "failed"]
    assert rows["o-1"][-2:] == ["0", "-"]  # no pending requests, not executing
    assert lines[1].split()[0] == "o-1"  # oldest first
    assert f"2 runs in {populated.spec}" in r.out
    assert r.err == ""


async def open_and_close(store: Store) -> None:
    async with tether.open_engine(store):
        pass


def test_list_of_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    trio.run(open_and_close, sqlite_store(path))
    r = cli("runs", "list", "--store", f"sqlite:{path}")
    assert (r.status, r.out) == (0, f"no runs in sqlite:{path}\n")


# -- runs show ---------------------------------------------------------------------------


def test_show_a_completed_run(populated: Populated, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    r = cli("runs", "show", "o-1", "--store", populated.spec)
    assert r.status == 0, r.err
    lines = r.out.splitlines()
    assert lines[:3] == ["run:       o-1", "workflow:  tests.cli.dispatch", "status:    completed"]
    # The workflow is defined here, so the result decodes; it is shown as its JSON.
    assert 'result:    {"order_id": "o-1", "weight_grams": 1250}' in lines
    assert "pending requests: none" in lines
    assert "journal (2 entries):" in lines
    header = lines.index("journal (2 entries):") + 1
    assert lines[header].split()[:5] == ["SEQ", "KEY", "KIND", "STATUS", "ATTEMPT"]
    journal = {line.split()[1]: line for line in lines[header + 1 :]}
    assert set(journal) == {"weigh#0", "label#0"}
    assert journal["weigh#0"].split()[2:5] == ["step", "completed", "1"]
    assert '{"order_id": "o-1", "weight_grams": 1250}' in journal["weigh#0"]
    # the long value is abbreviated to the terminal's width
    assert '"LABEL-o-1-xxx' in journal["label#0"]
    assert journal["label#0"].endswith("…")
    assert all(len(line) <= 120 for line in lines[header:])


def test_show_a_failed_run(populated: Populated) -> None:
    r = cli("runs", "show", "bad-2", "--store", populated.spec)
    assert r.status == 0, r.err
    assert "status:    failed" in r.out
    error = next(line for line in r.out.splitlines() if line.startswith("error:"))
    assert "no address for bad-2" in error
    assert "result:" not in r.out
    assert "weigh#0" in r.out  # the journal of the steps that completed


async def store_paused_run(store: Store) -> None:
    """A paused run of a workflow this process does not define, as a store holds it."""
    now = tether.stores.utcnow()
    requests = (
        '{"key": "approve#0", "payload": {"total": 4200}, "response_type": "bool"}',
        '{"key": "approve#1", "payload": {"total": 99}, "response_type": "bool"}',
    )
    async with tether.open_engine(store):
        await store.create_run(
            tether.stores.RunRecord(
                run_id="p-1",
                workflow="elsewhere.approval",
                args="[]",
                status=tether.RunStatus.PAUSED,
                requests=requests,
                created_at=now,
                updated_at=now,
            )
        )


def test_pending_requests_are_counted_and_shown(tmp_path: Path) -> None:
    path = tmp_path / "paused.db"
    trio.run(store_paused_run, sqlite_store(path))
    r = cli("runs", "list", "--store", f"sqlite:{path}")
    assert r.status == 0, r.err
    assert r.out.splitlines()[1].split() == [
        "p-1",
        "elsewhere.approval",
        "paused",
        *r.out.splitlines()[1].split()[3:7],
        "2",
        "-",
    ]
    r = cli("runs", "show", "p-1", "--store", f"sqlite:{path}")
    assert r.status == 0, r.err
    assert "status:    paused" in r.out
    assert "result:" not in r.out
    assert "pending requests (2):" in r.out
    assert '  - approve#0 -> bool: {"total": 4200}' in r.out
    assert '  - approve#1 -> bool: {"total": 99}' in r.out
    assert "journal: empty" in r.out


def test_unknown_run_id_exits_1_without_a_traceback(populated: Populated) -> None:
    r = cli("runs", "show", "nope", "--store", populated.spec)
    assert r.status == 1
    assert r.err == f"tether: no run 'nope' in {populated.spec}\n"
    assert r.out == ""


# -- which store ---------------------------------------------------------------------------


def test_the_store_comes_from_the_environment(
    populated: Populated, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_STORE", populated.spec)
    r = cli("runs", "show", "o-1")
    assert r.status == 0, r.err
    assert "status:    completed" in r.out
    # --store wins over the variable
    monkeypatch.setenv("TETHER_STORE", "sqlite:elsewhere.db")
    assert cli("runs", "list", "--store", populated.spec).status == 0


async def run_one(store: Store, order_id: str) -> None:
    async with tether.open_engine(store) as engine:
        await engine.run(dispatch, order_id, run_id=order_id)


def test_the_default_store_is_tether_db_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    trio.run(run_one, sqlite_store(tmp_path / "tether.db"), "o-9")
    r = cli("runs", "list")
    assert r.status == 0, r.err
    assert "o-9" in r.out
    assert "1 run in sqlite:tether.db" in r.out


def test_a_missing_sqlite_file_is_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    for argv in (["runs", "list"], ["runs", "show", "o-1"]):
        r = cli(*argv)
        assert r.status == 1
        assert "the SQLite file tether.db does not exist" in r.err
        assert "Traceback" not in r.err
    missing = tmp_path / "sub" / "x.db"
    r = cli("runs", "list", "--store", f"sqlite:{missing}")
    assert r.status == 1
    assert f"the SQLite file {missing} does not exist" in r.err
    assert sorted(os.listdir(tmp_path)) == []  # nothing created


def test_an_empty_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    path.touch()
    r = cli("runs", "list", "--store", f"sqlite:{path}")
    assert r.status == 1
    assert f"the SQLite file {path} is empty: it is not a tether store" in r.err
    assert path.stat().st_size == 0  # no schema written into it
    assert sorted(os.listdir(tmp_path)) == ["tether.db"]  # no -wal or -shm either


def test_a_missing_file_store_directory_is_not_created(tmp_path: Path) -> None:
    r = cli("runs", "list", "--store", f"file:{tmp_path / 'nowhere'}")
    assert r.status == 1
    assert "does not exist" in r.err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("spec", ["postgres:x", "sqlite:", "tether.db", "file"])
def test_a_bad_store_spec_is_a_usage_error(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error("runs", "list", "--store", spec, capsys=capsys)
    assert f"--store: {spec!r} is not a store: use sqlite:PATH" in err


def test_a_bad_store_in_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_STORE", "redis:6379")
    err = usage_error("runs", "show", "o-1", capsys=capsys)
    assert "$TETHER_STORE: 'redis:6379' is not a store" in err


def test_help_documents_the_store(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["runs", "list", "--help"],
        ["runs", "show", "--help"],
        ["runs", "cancel", "--help"],
        ["--help"],
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
        text = capsys.readouterr().out
        assert "TETHER_STORE" in text
        assert "sqlite:tether.db" in text
        assert "file:DIR" in text


def test_cli_refuses_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    usage_error("frobnicate", capsys=capsys)
    usage_error("runs", "delete", "x", capsys=capsys)
    usage_error("runs", "show", capsys=capsys)  # no run id
    usage_error("runs", "cancel", capsys=capsys)


# -- corrupt stores ------------------------------------------------------------------------


def test_a_file_that_is_not_sqlite_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are not the runs you are looking for\n" * 100)
    r = cli("runs", "list", "--store", f"sqlite:{path}")
    assert r.status == 1
    assert r.err.startswith(f"tether: sqlite:{path}: StoreError: ")
    assert "not a database" in r.err
    assert "Traceback" not in r.err


def corrupt_run_record(p: Populated) -> None:
    if p.spec.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(p.path)) as db, db:
            db.execute("UPDATE runs SET data = '{\"run_id\": ' WHERE run_id = 'o-1'")
    else:
        (p.path / "o-1" / "run.json").write_text('{"run_id": ', encoding="utf-8")


def corrupt_first_entry(p: Populated) -> None:
    if p.spec.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(p.path)) as db, db:
            db.execute("UPDATE entries SET data = '[]' WHERE run_id = 'o-1' AND seq = 1")
    else:
        (p.path / "o-1" / "entries" / "000000000001.json").write_text("[]", encoding="utf-8")


def test_a_corrupt_run_record_is_reported_not_skipped(populated: Populated) -> None:
    corrupt_run_record(populated)
    for argv in (["runs", "list"], ["runs", "show", "o-1"]):
        r = cli(*argv, "--store", populated.spec)
        assert r.status == 1
        assert r.err.startswith(f"tether: {populated.spec}: CheckpointCorruptError: run 'o-1'")
        assert "Traceback" not in r.err
        assert r.out == ""  # not a partial listing
    assert cli("runs", "show", "bad-2", "--store", populated.spec).status == 0


def test_a_corrupt_journal_entry_is_reported(populated: Populated) -> None:
    corrupt_first_entry(populated)
    r = cli("runs", "show", "o-1", "--store", populated.spec)
    assert r.status == 1
    assert r.err.startswith(f"tether: {populated.spec}: CheckpointCorruptError: run 'o-1'")
    assert "seq 1" in r.err or "000000000001.json" in r.err  # names the entry
    assert cli("runs", "list", "--store", populated.spec).status == 0  # lists need no journal


# -- runs cancel -----------------------------------------------------------------------


@attrs.define
class Gate:
    """Where :func:`at_gate` waits: it returns once the gate is open."""

    started: trio.Event = attrs.Factory(trio.Event)  # a step reached the gate
    opened: trio.Event = attrs.Factory(trio.Event)


GATE = Gate()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    """A new closed gate for this test (the module's own one is never opened)."""
    fresh = Gate()
    monkeypatch.setattr(sys.modules[__name__], "GATE", fresh)
    return fresh


@tether.step
async def at_gate(order_id: str) -> str:
    GATE.started.set()
    await GATE.opened.wait()
    return f"through {order_id}"


@tether.workflow(name="tests.cli.gated")
async def gated(order_id: str) -> str:
    parcel = await weigh(order_id)
    return await at_gate(parcel.order_id)


@tether.workflow(name="tests.cli.approve")
async def approve(order_id: str) -> bool:
    parcel = await weigh(order_id)
    return await tether.ask({"grams": parcel.weight_grams}, bool)


async def interrupt(engine: tether.Engine, run_id: str) -> None:
    """Leave *run_id* ``running`` with no live owner: its caller gave up on it."""
    with trio.move_on_after(0.2) as scope:
        await engine.run(gated, run_id, run_id=run_id)
    assert scope.cancelled_caught


async def unfinished_runs(store: Store) -> None:
    """A paused ``p-1``, a failed ``bad-2`` and an interrupted ``i-3``."""
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.Paused):
            await engine.run(approve, "p-1", run_id="p-1")
        with pytest.raises(ExceptionGroup):
            await engine.run(dispatch, "bad-2", run_id="bad-2")
        await interrupt(engine, "i-3")


def new_store(kind: str, tmp_path: Path) -> tuple[str, Store]:
    """A fresh store of *kind*: the ``--store`` spec and the store object."""
    if kind == "sqlite":
        return f"sqlite:{tmp_path / 'runs.db'}", sqlite_store(tmp_path / "runs.db")
    (tmp_path / "runs").mkdir()
    return f"file:{tmp_path / 'runs'}", file_store(tmp_path / "runs")


async def expect_cancelled(store: Store, run_id: str) -> None:
    async with tether.open_engine(store) as engine:
        with pytest.raises(tether.RunCancelledError):
            await engine.resume(run_id)


@pytest.mark.usefixtures("gate")
@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_cancel_paused_failed_and_interrupted_runs(kind: str, tmp_path: Path) -> None:
    spec, store = new_store(kind, tmp_path)
    trio.run(unfinished_runs, store)
    for run_id, was in (("p-1", "paused"), ("bad-2", "failed"), ("i-3", "interrupted")):
        r = cli("runs", "cancel", run_id, "--store", spec)
        assert (r.status, r.err) == (0, "")
        assert r.out == f"run {run_id} cancelled (it was {was}; its journal is kept)\n"
        r = cli("runs", "show", run_id, "--store", spec)
        assert r.status == 0, r.err
        assert "status:    cancelled" in r.out.splitlines()
        assert "weigh#0" in r.out  # the journal is kept
        assert "pending requests: none" in r.out  # p-1's request is cleared
        trio.run(expect_cancelled, store, run_id)
        r = cli("resume", run_id, "--store", spec)
        assert r.status == 1
        assert r.err.startswith(f"tether: run {run_id}: RunCancelledError: ")
        assert "failed" not in r.err
        assert r.out == ""  # never "started": it was refused before it executed
        # Cancelling again does nothing, and says so.
        r = cli("runs", "cancel", run_id, "--store", spec)
        assert (r.status, r.out, r.err) == (0, f"run {run_id} was already cancelled\n", "")
    rows = [line.split() for line in cli("runs", "list", "--store", spec).out.splitlines()[1:4]]
    assert [(row[0], row[2], row[-1]) for row in rows] == [
        ("p-1", "cancelled", "-"),
        ("bad-2", "cancelled", "-"),
        ("i-3", "cancelled", "-"),
    ]


def test_cancel_of_a_completed_run_fails_and_changes_nothing(populated: Populated) -> None:
    before = cli("runs", "show", "o-1", "--store", populated.spec)
    r = cli("runs", "cancel", "o-1", "--store", populated.spec)
    assert r.status == 1
    assert r.out == ""
    assert r.err == (
        "tether: run 'o-1' has completed; a completed run cannot be cancelled (nothing changed)\n"
    )
    assert cli("runs", "show", "o-1", "--store", populated.spec) == before


def test_cancel_of_an_unknown_run_fails(populated: Populated, tmp_path: Path) -> None:
    r = cli("runs", "cancel", "nope", "--store", populated.spec)
    assert (r.status, r.out) == (1, "")
    assert r.err == f"tether: no run 'nope' in {populated.spec}\n"
    # ... and a store that does not exist is not created to cancel in it.
    missing = tmp_path / "missing.db"
    r = cli("runs", "cancel", "o-1", "--store", f"sqlite:{missing}")
    assert r.status == 1
    assert f"the SQLite file {missing} does not exist" in r.err
    assert not missing.exists()


# -- executing or interrupted ----------------------------------------------------------

EXECUTING = re.compile(
    r"executing on (?P<owner>\S+), lease until \d\d:\d\d:\d\d UTC \(in (?P<secs>\d+) s\)"
)


async def cli_beside(*argv: str) -> Result:
    """The command line, in a worker thread, while this trio run's engines hold runs."""
    return await trio.to_thread.run_sync(lambda: cli(*argv))


def row_of(listing: Result, run_id: str) -> str:
    return next(line for line in listing.out.splitlines() if line.startswith(f"{run_id} "))


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_run_a_live_engine_executes_shows_its_owner_until_cancelled(
    kind: str, tmp_path: Path, gate: Gate
) -> None:
    spec, store = new_store(kind, tmp_path)

    async def scenario() -> None:
        with trio.fail_after(20):
            await hold_and_cancel()

    async def hold_and_cancel() -> None:
        # The nursery waits for hold(): the owner stops the cancelled run at its
        # next renewal (every lease_ttl / 3 = 1 s), and engine.run raises.
        async with (
            tether.open_engine(store, lease_ttl=3.0) as engine,
            trio.open_nursery() as nursery,
        ):

            async def hold() -> None:
                with pytest.raises(tether.RunCancelledError):
                    await engine.run(gated, "h-1", run_id="h-1")

            nursery.start_soon(hold)
            await gate.started.wait()

            listing = await cli_beside("runs", "list", "--store", spec)
            assert listing.status == 0, listing.err
            row = row_of(listing, "h-1")
            assert row.split()[2] == "running"
            found = EXECUTING.search(row)
            assert found is not None, row
            assert found["owner"] == engine.owner
            assert 0 < int(found["secs"]) <= 3
            assert "interrupted" not in listing.out

            shown = await cli_beside("runs", "show", "h-1", "--store", spec)
            lines = shown.out.splitlines()
            assert "status:    running — executing" in lines
            assert f"owner:     {engine.owner}" in lines
            lease = next(line for line in lines if line.startswith("lease:"))
            assert re.fullmatch(r"lease: +until \S+ UTC \(in [123] s\)", lease), lease
            assert not any(line.startswith("cancel:") for line in lines)
            # Resuming it elsewhere is refused, and not reported as a failure of the run.
            r = await cli_beside("resume", "h-1", "--store", spec)
            assert (r.status, r.out) == (1, "")  # never "started" here
            assert r.err.startswith(
                f"tether: run h-1: RunConflictError: run 'h-1' is executing elsewhere: "
                f"owner {engine.owner} holds its lease"
            )

            r = await cli_beside("runs", "cancel", "h-1", "--store", spec)
            assert (r.status, r.err) == (0, "")
            assert r.out == (
                f"run h-1: cancel recorded; its owner {engine.owner} stops it within one "
                "lease renewal interval (unless it completes first)\n"
            )
            # Until the owner's next renewal, the run executes with a cancel requested.
            shown = await cli_beside("runs", "show", "h-1", "--store", spec)
            lines = shown.out.splitlines()
            if "status:    running — executing" in lines:
                assert (
                    "cancel:    requested; its owner stops the run within one lease "
                    "renewal interval (unless it completes first)"
                ) in lines
            else:
                assert "status:    cancelled" in lines

    trio.run(scenario)
    shown = cli("runs", "show", "h-1", "--store", spec)
    assert "status:    cancelled" in shown.out.splitlines()
    assert "owner:" not in shown.out
    assert row_of(cli("runs", "list", "--store", spec), "h-1").split()[-1] == "-"


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_run_whose_caller_gave_up_is_interrupted_and_resumable(
    kind: str, tmp_path: Path, gate: Gate
) -> None:
    spec, store = new_store(kind, tmp_path)

    async def leave_interrupted() -> None:
        async with tether.open_engine(store) as engine:
            await interrupt(engine, "i-1")

    trio.run(leave_interrupted)
    hint = f"`tether resume i-1 --import MODULE --store {spec}`"
    listing = cli("runs", "list", "--store", spec)
    row = row_of(listing, "i-1")
    assert row.split()[2] == "running"
    assert row.endswith(f"  interrupted — resume it with {hint}")
    assert "executing" not in listing.out
    shown = cli("runs", "show", "i-1", "--store", spec)
    lines = shown.out.splitlines()
    assert f"status:    running — interrupted: resume it with {hint}" in lines
    assert "owner:     none" in lines
    assert "executing" not in shown.out
    assert not any(line.startswith("lease:") for line in lines)
    # The hint works (this process defines the workflow: no --import needed here).
    gate.opened.set()
    r = cli("resume", "i-1", "--store", spec)
    assert r.status == 0, r.err
    assert r.out.splitlines()[-1] == '"through i-1"'
    assert row_of(cli("runs", "list", "--store", spec), "i-1").split()[2] == "completed"


def dead_pid() -> int:
    """The pid of a process of this machine that has exited."""
    code = "import os; print(os.getpid())"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)


async def claim_as(store: Store, owner: str, run_id: str, cancel: bool = False) -> None:
    """Store *run_id* as held by *owner*, an engine elsewhere (with a 90 s lease)."""
    now = tether.stores.utcnow()
    async with tether.open_engine(store):
        await store.claim(
            run_id,
            owner,
            ttl=90,
            create=RunRecord(
                run_id=run_id, workflow="elsewhere.flow", args="[]", created_at=now, updated_at=now
            ),
        )
        if cancel:  # recorded before its owner vanished: it never saw it
            stored = await store.cancel_run(run_id)
            assert stored.cancel_requested


def test_runs_held_by_other_processes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    spec = f"sqlite:{path}"
    remote = "elsewhere.example:4242:1-abcdef12"  # another machine: live until its lease expires
    gone = f"{socket.gethostname()}:{dead_pid()}:1-deadbeef"  # this machine, its process gone
    trio.run(claim_as, sqlite_store(path), remote, "r-1")
    trio.run(claim_as, sqlite_store(path), gone, "g-2")
    trio.run(claim_as, sqlite_store(path), gone, "g-3", True)

    listing = cli("runs", "list", "--store", spec)
    assert listing.status == 0, listing.err
    found = EXECUTING.search(row_of(listing, "r-1"))
    assert found is not None and found["owner"] == remote
    assert 0 < int(found["secs"]) <= 90
    assert row_of(listing, "g-2").endswith(
        f"  interrupted — resume it with `tether resume g-2 --import MODULE --store {spec}`"
    )
    assert row_of(listing, "g-3").endswith(
        f"  interrupted, cancel requested — finish the cancel with "
        f"`tether runs cancel g-3 --store {spec}`"
    )
    shown = cli("runs", "show", "g-2", "--store", spec).out.splitlines()
    assert f"owner:     none (last: {gone}, no longer live)" in shown

    r = cli("runs", "cancel", "r-1", "--store", spec)
    assert r.out == (
        f"run r-1: cancel recorded; its owner {remote} stops it within one lease renewal "
        "interval (unless it completes first)\n"
    )
    r = cli("runs", "cancel", "r-1", "--store", spec)
    assert r.out.startswith(f"run r-1: cancel was already recorded; its owner {remote} stops")
    row = row_of(cli("runs", "list", "--store", spec), "r-1")
    assert row.split()[2] == "running" and row.endswith("; cancel requested")
    shown = cli("runs", "show", "r-1", "--store", spec).out.splitlines()
    assert "status:    running — executing" in shown
    assert any(line.startswith("cancel:    requested") for line in shown)

    # A dead owner on this machine is taken over at once: cancelled now, not in 90 s.
    for run_id in ("g-2", "g-3"):
        r = cli("runs", "cancel", run_id, "--store", spec)
        assert r.out == f"run {run_id} cancelled (it was interrupted; its journal is kept)\n"
        assert "status:    cancelled" in cli("runs", "show", run_id, "--store", spec).out


# -- as a real process, without the workflow's code ----------------------------------------


def test_python_dash_m_tether_runs_in_a_fresh_process(populated: Populated) -> None:
    # The child process never imports this module: the workflow is unknown there,
    # and the result is shown as the plain JSON it was stored as.
    proc = run_tether("runs", "list", "--store", populated.spec, cwd=populated.path.parent)
    assert proc.returncode == 0, proc.stderr
    assert "o-1" in proc.stdout and "bad-2" in proc.stdout
    proc = run_tether("runs", "show", "o-1", "--store", populated.spec, cwd=populated.path.parent)
    assert proc.returncode == 0, proc.stderr
    assert 'result:    {"order_id": "o-1", "weight_grams": 1250}' in proc.stdout
    proc = run_tether("runs", "show", "zzz", "--store", populated.spec, cwd=populated.path.parent)
    assert proc.returncode == 1
    assert proc.stderr == f"tether: no run 'zzz' in {populated.spec}\n"
    proc = run_tether("runs", "list", "--store", "mysql:x", cwd=populated.path.parent)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr
    proc = run_tether("runs", "cancel", "o-1", "--store", populated.spec, cwd=populated.path.parent)
    assert proc.returncode == 1
    assert "has completed; a completed run cannot be cancelled (nothing changed)" in proc.stderr
    proc = run_tether(
        "runs", "cancel", "bad-2", "--store", populated.spec, cwd=populated.path.parent
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "run bad-2 cancelled (it was failed; its journal is kept)\n"
