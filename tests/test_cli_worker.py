"""``tether submit``, ``tether runs list`` filters and pages, ``tether worker``.

- ``submit`` prints the run's id, and submitting it again changes nothing;
  other arguments under the same id are refused;
- ``runs list --json`` with ``--status``, ``--workflow``, and ``--limit`` /
  ``--after`` pages that add up to the whole listing;
- ``tether worker`` on SQLite executes submitted runs and drains on SIGTERM
  (exit 0, its summary printed): a run it held is released (no owner, still
  ``running``, its dispatch given back), and a second worker completes it;
- a bad ``--store`` is a usage error (exit 2);
- with a PostgreSQL URL holding a real password (the test server's
  password-only role), no command prints it: ``submit``, ``runs list``
  (also from ``$TETHER_STORE``), ``runs show``, connections that fail (a
  wrong database, password or port), and ``worker``, from its start line to
  its summary;
- a ``runs`` command on a port where nothing listens fails after
  ``READ_RETRY_TIMEOUT`` seconds of retries, not after the store's minute.

``submit`` and ``runs`` run in this process (``main``, as in
``tests/test_cli.py``); ``worker``, and everything whose whole output
matters (the password tests), run as ``python -m tether`` processes.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import tether
from tether._cli._main import main
from tether._cli._stores import READ_RETRY_TIMEOUT, StoreSpec
from tether._cli._worker import LogFormat
from tether.stores import RunStatus

from . import _fleet
from ._cli import cli, usage_error
from ._fleet import RawStore, TetherProcess
from ._poll import PATIENCE, poll
from ._postgres import SECRET_PASSWORD, SECRET_USER, PostgresServer

FIVE = "tests._fleet:five"
GATED = "tests._fleet:gated"


def listed(spec: str, *options: str) -> list[dict[str, Any]]:
    """``runs list --json OPTIONS``, parsed."""
    r = cli("runs", "list", "--json", *options, "--store", spec)
    assert r.status == 0, r.err
    runs: list[dict[str, Any]] = json.loads(r.out)
    return runs


def ids(runs: list[dict[str, Any]]) -> list[str]:
    return [r["run_id"] for r in runs]


def info(spec: str, run_id: str) -> tether.RunInfo:
    async def read() -> tether.RunInfo:
        async with tether.open_engine(StoreSpec.parse(spec).open_for_writing()) as engine:
            got = await engine.get_run(run_id)
            assert got is not None
            return got

    return trio.run(read)


# -- submit and runs list --------------------------------------------------------------------


def test_submit_prints_the_id_and_is_idempotent(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 'q.db'}"
    first = cli("submit", FIVE, "s-1", "0", "--run-id", "s-1", "--store", spec)
    assert (first.status, first.out) == (0, "s-1\n"), first.err
    again = cli("submit", FIVE, "s-1", "0", "--run-id", "s-1", "--store", spec)
    assert (again.status, again.out) == (0, "s-1\n"), again.err
    runs = listed(spec)
    assert ids(runs) == ["s-1"]
    assert runs[0]["status"] == "queued" and runs[0]["workflow"] == "tests.fleet.five"

    # Another run under the same id: refused, and nothing changes.
    other = cli("submit", FIVE, "s-1", "1", "--run-id", "s-1", "--store", spec)
    assert other.status == 1 and other.out == ""
    assert "RunConflictError" in other.err and "'s-1'" in other.err
    assert listed(spec) == runs

    fresh = cli("submit", FIVE, "s-2", "0", "--store", spec)
    assert fresh.status == 0, fresh.err
    new_id = fresh.out.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", new_id), fresh.out
    assert ids(listed(spec)) == ["s-1", new_id]


def test_submit_takes_a_queue_a_key_a_dedupe_id_and_a_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"sqlite:{tmp_path / 'q.db'}"
    letters = ("--queue", "tests._fleet:letters")
    first = cli("submit", FIVE, "a", "0", *letters, "--key", "k1", "--dedupe", "d", "--store", spec)
    assert first.status == 0, first.err
    again = cli("submit", FIVE, "b", "0", *letters, "--dedupe", "d", "--store", spec)
    assert (again.status, again.out) == (0, first.out), again.err
    (run,) = listed(spec)
    assert (run["queue"], run["key"], run["dedupe"]) == ("tests.letters", "k1", "d")
    assert ids(listed(spec, "--queue", "tests.letters", "--key", "k1")) == [run["run_id"]]
    assert listed(spec, "--queue", "default") == listed(spec, "--key", "k2") == []
    shown = cli("runs", "show", run["run_id"], "--store", spec)
    assert "queue:     queue tests.letters, key k1, dedupe id d\n" in shown.out, shown.out

    at = "2999-01-01T00:00:00+00:00"
    later = cli("submit", FIVE, "c", "0", *letters, "--not-before", at, "--store", spec)
    assert later.status == 0, later.err
    (scheduled,) = [r for r in listed(spec) if r["run_id"] == later.out.strip()]
    assert (scheduled["status"], scheduled["wake_at"]) == ("waiting", at)
    table = cli("runs", "list", "--store", spec)
    assert "scheduled to start at 2999-01-01 00:00:00 UTC" in table.out, table.out

    full = cli("submit", FIVE, "d", "0", *letters, "--run-id", "refused", "--store", spec)
    assert full.status == 1 and full.out == ""
    assert "QueueFullError" in full.err and "'tests.letters' holds 2 runs" in full.err
    assert "refused" not in ids(listed(spec))

    err = usage_error("submit", FIVE, "e", "0", "--not-before", "2999-01-01T00:00", capsys=capsys)
    assert "has no UTC offset" in err
    wrong = usage_error("submit", FIVE, "e", "0", "--queue", FIVE, "--store", spec, capsys=capsys)
    assert "not a tether.Queue" in wrong
    nope = ("--queue", "tests._fleet:nope")
    unknown = usage_error("submit", FIVE, "e", "0", *nope, "--store", spec, capsys=capsys)
    assert "its queues: letters" in unknown


def test_runs_list_filters_and_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = f"sqlite:{tmp_path / 'q.db'}"
    # `tether run` executes here: its steps look for their records in the store.
    monkeypatch.setenv(_fleet.STORE_ENV, spec)
    monkeypatch.setenv(_fleet.LOG_ENV, str(tmp_path))
    ran = cli("run", FIVE, "done", "0", "--run-id", "done", "--store", spec)
    assert ran.status == 0, ran.err
    queued = [f"q-{i}" for i in range(5)]
    for run_id in queued:
        assert cli("submit", FIVE, run_id, "0", "--run-id", run_id, "--store", spec).status == 0
    gated = ["g-0", "g-1"]
    for run_id in gated:
        path = str(tmp_path / run_id)
        assert cli("submit", GATED, path, "--run-id", run_id, "--store", spec).status == 0
    everything = ["done", *queued, *gated]  # oldest first

    waiting = listed(spec, "--status", "queued")
    assert ids(waiting) == [*queued, *gated]
    for run in waiting:
        assert run["status"] == "queued" and run["executing"] is False
        assert run["owner"] is None and run["error"] is None and run["pending"] == []
    assert ids(listed(spec, "--status", "completed")) == ["done"]
    assert ids(listed(spec, "--status", "completed,queued")) == everything
    assert ids(listed(spec, "--status", "failed")) == []
    assert ids(listed(spec, "--workflow", "tests.fleet.gated")) == gated
    assert ids(listed(spec, "--workflow", "tests.fleet.five", "--status", "queued")) == queued

    # Pages of 3, each after the last id of the one before, add up to all of them.
    pages: list[list[str]] = []
    after: tuple[str, ...] = ()
    while True:
        page = ids(listed(spec, "--limit", "3", *after))
        if not page:
            break
        pages.append(page)
        after = ("--after", page[-1])
    assert pages == [everything[0:3], everything[3:6], everything[6:8]]
    filtered = listed(spec, "--workflow", "tests.fleet.five", "--after", "q-1", "--limit", "2")
    assert ids(filtered) == ["q-2", "q-3"]
    unknown = cli("runs", "list", "--after", "nosuch", "--store", spec)
    assert unknown.status == 1 and "nosuch" in unknown.err
    assert not (tmp_path / "violations.log").exists()


# -- tether worker ---------------------------------------------------------------------------


def test_a_worker_executes_runs_and_drains_on_sigterm(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 'q.db'}"
    logs = tmp_path / "logs"
    logs.mkdir()
    raw = RawStore(spec)
    quick = [f"r-{i}" for i in range(3)]
    for run_id in quick:
        assert cli("submit", FIVE, run_id, "0.01", "--run-id", run_id, "--store", spec).status == 0
    gate = tmp_path / "gate"
    assert cli("submit", GATED, str(gate), "--run-id", "held", "--store", spec).status == 0
    env = _fleet.process_env(spec, logs)
    options = ("--grace", "0", "--poll-interval", "0.2", "--lease-ttl", "5")
    first = _fleet.worker("first", tmp_path, spec, env, *options)
    second: TetherProcess | None = None
    try:
        owner = first.owner(PATIENCE)
        assert f"tether worker {owner} serving tests.fleet.five, " in first.stdout()
        assert f" from {spec} (concurrency 16)" in first.stdout()

        def status(run_id: str) -> tuple[str, str | None]:
            ((s, o),) = raw.query("SELECT status, owner FROM {s}.runs WHERE run_id = ?", run_id)
            return s, o

        poll(
            lambda: (
                all(status(r)[0] == "completed" for r in quick)
                and status("held") == ("running", owner)
            ),
            "the quick runs to complete while the worker holds 'held'",
            first,
        )
        for run_id in quick:
            assert info(spec, run_id).result == _fleet.expected(run_id)

        first.signal(signal.SIGTERM)
        assert first.wait(PATIENCE) == 0, first.tail()
        out = first.stdout()
        assert f"tether worker {owner}: SIGTERM: draining (1 held, grace 0 s)\n" in out
        assert out.endswith(
            f"tether worker {owner}: stopped; claimed 4, 3 completed, 1 interrupted\n"
        ), first.tail()
        assert "Traceback" not in first.stderr(), first.tail()
        # Released at once, not left to expire: no owner, still running (for a
        # worker to take), and the drained claim gave its dispatch back.
        held = info(spec, "held")
        assert held.status is RunStatus.RUNNING and held.owner is None
        assert not held.executing and held.dispatches == 0

        gate.touch()
        second = _fleet.worker("second", tmp_path, spec, env, *options)
        poll(lambda: status("held")[0] == "completed", "a second worker to complete it", second)
        assert info(spec, "held").result == str(gate)
        second.signal(signal.SIGTERM)
        assert second.wait(PATIENCE) == 0, second.tail()
        assert second.stdout().endswith(": stopped; claimed 1, 1 completed\n"), second.tail()
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_park_after_decides_which_timers_park_a_run(tmp_path: Path) -> None:
    """``--park-after 1800``: a one-hour timer parks its run, a quarter-hour one holds it.

    With the default (60 s) both would park; so the option reached the worker.
    """
    spec = f"sqlite:{tmp_path / 'q.db'}"
    logs = tmp_path / "logs"
    logs.mkdir()
    raw = RawStore(spec)
    nap = "tests._fleet:nap"
    assert cli("submit", nap, "3600", "--run-id", "hour", "--store", spec).status == 0
    assert cli("submit", nap, "900", "--run-id", "quarter", "--store", spec).status == 0
    env = _fleet.process_env(spec, logs)
    options = ("--grace", "0", "--poll-interval", "0.2", "--park-after", "1800")
    started = time.time()
    w = _fleet.worker("w", tmp_path, spec, env, *options)
    try:
        owner = w.owner(PATIENCE)

        def row(run_id: str) -> tuple[str, str | None, float | None]:
            ((s, o, wake),) = raw.query(
                "SELECT status, owner, wake_at FROM {s}.runs WHERE run_id = ?", run_id
            )
            return s, o, wake

        def timer_journaled(run_id: str) -> bool:
            got = raw.query(
                "SELECT COUNT(*) FROM {s}.entries WHERE run_id = ? AND data LIKE '%timer%'", run_id
            )
            return bool(got[0][0])

        poll(
            lambda: row("hour")[0] == "waiting" and timer_journaled("quarter"),
            "the hour's run to park and the quarter's timer to start",
            w,
        )
        _, held_by, wake = row("hour")
        assert held_by is None and wake is not None
        assert started + 3600 <= wake <= time.time() + 3600
        assert row("quarter")[:2] == ("running", owner)
        w.signal(signal.SIGTERM)
        assert w.wait(PATIENCE) == 0, w.tail()
        assert w.stdout().endswith(": stopped; claimed 2, 1 interrupted, 1 waiting\n"), w.tail()
    finally:
        w.stop()


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--store", "mysql://db/x", "--import", "tests._fleet"],
        ["submit", FIVE, "x", "0", "--store", "nope"],
        ["runs", "list", "--status", "queued", "--store", "sqlite:"],
    ],
)
def test_a_bad_store_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "is not a store" in err


def test_a_worker_with_a_bad_store_exits_2(tmp_path: Path) -> None:
    env = _fleet.process_env("unused", tmp_path)
    env["TETHER_STORE"] = "redis://localhost"
    p = TetherProcess("bad", tmp_path, ["worker", "--import", "tests._fleet"], env)
    try:
        assert p.wait(PATIENCE) == 2, p.tail()
        assert "$TETHER_STORE: 'redis://localhost' is not a store" in p.stderr()
        assert p.stdout() == ""
    finally:
        p.stop()


# -- a password never shows ------------------------------------------------------------------


@pytest.fixture
def secret_database(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database owned by the password-only role; dropped after the test."""
    name = _fleet.new_database(postgres_server, owner=SECRET_USER)
    try:
        yield name
    finally:
        _fleet.drop_database(postgres_server, name)


def run_tether(tmp_path: Path, name: str, *args: str, env: dict[str, str]) -> TetherProcess:
    """``python -m tether ARGS`` to its end (within PATIENCE)."""
    p = TetherProcess(name, tmp_path, args, env)
    try:
        p.wait(PATIENCE)
    finally:
        p.stop()
    return p


def test_no_command_shows_the_password(
    tmp_path: Path, postgres_server: PostgresServer, secret_database: str
) -> None:
    server = postgres_server
    url = server.conninfo(user=SECRET_USER, password=SECRET_PASSWORD, dbname=secret_database)
    shown = f"postgresql://{SECRET_USER}@127.0.0.1:{server.port}/{secret_database}"
    env = _fleet.process_env(url, tmp_path)
    outputs: list[TetherProcess] = []

    def tether_cli(name: str, *args: str, rc: int, store: str | None = url) -> TetherProcess:
        argv = [*args, "--store", store] if store is not None else list(args)
        p = run_tether(tmp_path, name, *argv, env=env)
        assert p.proc.returncode == rc, p.tail()
        outputs.append(p)
        return p

    tether_cli("submit", "submit", FIVE, "pw-1", "0", "--run-id", "pw-1", rc=0)
    assert outputs[-1].stdout() == "pw-1\n"
    listing = tether_cli("list", "runs", "list", rc=0).stdout()
    assert "pw-1" in listing and f"1 run in {shown}" in listing
    assert ids(json.loads(tether_cli("json", "runs", "list", "--json", rc=0).stdout())) == ["pw-1"]
    env["TETHER_STORE"] = url
    from_env = tether_cli("env", "runs", "list", rc=0, store=None).stdout()
    assert f"1 run in {shown}" in from_env
    del env["TETHER_STORE"]
    assert "run:       pw-1" in tether_cli("show", "runs", "show", "pw-1", rc=0).stdout()
    missing = tether_cli("missing", "runs", "show", "nope", rc=1).stderr()
    assert f"tether: no run 'nope' in {shown}" in missing

    wrong_db = server.conninfo(user=SECRET_USER, password=SECRET_PASSWORD, dbname="nosuch")
    err = tether_cli("wrong-db", "runs", "list", rc=1, store=wrong_db).stderr()
    assert 'database "nosuch" does not exist' in err and "127.0.0.1" in err
    wrong_pw = server.conninfo(user=SECRET_USER, password=SECRET_PASSWORD + "-x")
    err = tether_cli("wrong-pw", "runs", "list", rc=1, store=wrong_pw).stderr()
    assert "password authentication failed" in err
    failed = tether_cli(
        "worker-wrong-db", "worker", "--import", "tests._fleet", rc=1, store=wrong_db
    )
    assert 'database "nosuch" does not exist' in failed.stderr()

    w = _fleet.worker("worker", tmp_path, url, env, "--grace", "0", "--poll-interval", "0.2")
    outputs.append(w)
    try:
        owner = w.owner(PATIENCE)
        assert f"tether worker {owner} serving tests.fleet.five, " in w.stdout()
        assert f" from {shown} (concurrency 16)" in w.stdout()
        completed = [("completed",)]
        raw = RawStore(url)
        query = "SELECT status FROM {s}.runs WHERE run_id = 'pw-1'"
        poll(lambda: raw.query(query) == completed, "pw-1 to complete", w)
        w.signal(signal.SIGTERM)
        assert w.wait(PATIENCE) == 0, w.tail()
        assert w.stdout().endswith(f"{owner}: stopped; claimed 1, 1 completed\n")
    finally:
        w.stop()
    assert "pw-1:4" in tether_cli("shown", "runs", "show", "pw-1", rc=0).stdout()
    assert not (tmp_path / "violations.log").exists()

    for p in outputs:
        text = p.stdout() + p.stderr()
        for secret in (SECRET_PASSWORD, SECRET_PASSWORD + "-x"):
            assert secret not in text, f"{p.name} shows the password:\n{p.tail()}"
    assert any("127.0.0.1" in p.stderr() for p in outputs), "no error names the server"


@pytest.mark.slow
def test_a_wrong_port_fails_in_seconds_without_the_password(tmp_path: Path) -> None:
    # Nothing listens on port 1: retried, as a restarting server would be,
    # for READ_RETRY_TIMEOUT (not the store's minute), then refused.
    wrong_port = f"postgresql://{SECRET_USER}:{SECRET_PASSWORD}@127.0.0.1:1/tether"
    env = _fleet.process_env(wrong_port, tmp_path)
    p = run_tether(tmp_path, "wrong-port", "runs", "list", "--store", wrong_port, env=env)
    assert p.proc.returncode == 1, p.tail()
    err = p.stderr()
    assert "Connection refused" in err and "port 1" in err and "127.0.0.1" in err
    assert f"postgresql://{SECRET_USER}@127.0.0.1:1/tether" in err
    # Retried, and bounded: the waits it announced fit in READ_RETRY_TIMEOUT (a retry
    # whose wait would end past it is not made), not in the store's minute.
    waits = [float(s) for s in re.findall(r"retrying in (\d+\.\d+)s", err)]
    assert len(waits) >= 2 and sum(waits) <= READ_RETRY_TIMEOUT, waits
    assert SECRET_PASSWORD not in p.stdout() + err


def test_a_worker_log_line_names_its_source_once() -> None:
    # tether's messages name themselves; the driver's get their logger's name.
    logged = [
        ("tether", logging.INFO, "tether: step %s of run %s failed (attempt 1 of 3), retrying"),
        ("tether.worker", logging.WARNING, "tether worker w-1: run %s failed: %r"),
        ("psycopg.pool", logging.WARNING, "error connecting in %r"),
    ]
    args = {"tether": ("charge#0", "r-1"), "tether.worker": ("r-1", "x"), "psycopg.pool": ("x",)}
    lines = [
        LogFormat().format(logging.makeLogRecord({
            "name": name, "levelno": level, "levelname": logging.getLevelName(level),
            "msg": msg, "args": args[name],
        })).partition(" ")[2].partition(" ")[2]  # the date and time left out
        for name, level, msg in logged
    ]  # fmt: skip
    assert lines == [
        "INFO tether: step charge#0 of run r-1 failed (attempt 1 of 3), retrying",
        "WARNING tether worker w-1: run r-1 failed: 'x'",
        "WARNING psycopg.pool: error connecting in 'x'",
    ]
