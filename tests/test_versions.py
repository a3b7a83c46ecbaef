"""Workflow versions: stored with each run, resumed only by their own code, served by workers.

- ``@tether.workflow(version=)`` is validated; the version is stored with
  each run, shown by ``get_run``/``list_runs``, and filters listings;
- versions of one name registered side by side each resume their own runs;
  a run whose version is not registered raises ``WorkflowNotFoundError``
  naming it and the versions that are (and changes nothing);
- ``engine.run``/``engine.submit`` of an existing id under another version
  is a ``RunConflictError``;
- a worker that serves version 2 only never claims a version 1 run, which
  ``engine.list_runs(stranded=True)`` and ``tether runs list --stranded``
  list until a worker serving it comes (every store kind);
- records of older formats (no version) still read, and older SQLite and
  PostgreSQL schemas are migrated.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

import tether
from tether._api._workflow import registry
from tether._cli._main import main
from tether.stores import (
    RecordDecodeError,
    RunRecord,
    RunStatus,
    Store,
    WorkerStore,
    decide_claim,
    dumps_record,
    loads_record,
    utcnow,
)
from tether.stores._postgres_sql import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from tether.testing.pytest_plugin import saved_registry

from . import _fleet
from ._postgres import PostgresServer, as_schema_4
from ._sqlite_schemas import back_to_6
from ._stores import InlineSlowStore
from .conftest import reopen_store

NAME = "tests.versions.order"
#: how many times price() failed on purpose, by n (the first call for each n fails)
failures: dict[int, int] = {}


@tether.step
async def price(n: int) -> int:
    if failures.get(n, 0) == 0:
        failures[n] = 1
        raise RuntimeError(f"price {n} failed once")
    return n * 10


# The same workflow three times: before versions existed, then versions 1 and 2.
@tether.workflow(name=NAME)
async def order_v0(n: int) -> int:
    return await price(n)


@tether.workflow(name=NAME, version="1")
async def order_v1(n: int) -> int:
    return await price(n) + 1


@tether.workflow(name=NAME, version="2")
async def order_v2(n: int) -> str:
    return f"v2: {await price(n)}"


@tether.step
async def quick(n: int) -> int:
    return n


@tether.workflow(name="tests.versions.quick", version="1")
async def quick_v1(n: int) -> int:
    return await quick(n)


@tether.workflow(name="tests.versions.quick", version="2")
async def quick_v2(n: int) -> int:
    return await quick(n) * 100


@pytest.fixture(autouse=True)
def _fresh() -> None:
    failures.clear()


def test_a_version_is_a_short_plain_string() -> None:
    async def body() -> None:
        pass

    for bad in ("", "two words", "a/b", "ü", "x" * 101, 2, b"1"):
        with pytest.raises(tether.UsageError, match="workflow version"):
            tether.workflow(name="tests.versions.bad", version=bad)(body)  # type: ignore[arg-type]
    for good in ("2", "2024-06-01", "v1.2.3+build_7", "x" * 100):
        wf = tether.workflow(name="tests.versions.good", version=good)(body)
        assert wf.version == good and wf.name == "tests.versions.good"
    assert tether.workflow(body).version is None


async def test_the_version_is_stored_shown_and_filtered(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(quick_v2, 3, run_id="q2") == 300
        assert await engine.run(quick_v1, 3, run_id="q1") == 3
        await engine.submit(order_v0, 1, run_id="q0")
        stored = await tether_store.get_run("q2")
        assert stored is not None and stored.version == "2"
        info = await engine.get_run("q1")
        assert info is not None and info.version == "1"
        assert [r.version for r in await engine.list_runs()] == ["2", "1", None]
        listed = await engine.list_runs(version="2")
        assert [r.run_id for r in listed] == ["q2"]
        listed = await engine.list_runs(workflow=NAME, version="2")
        assert listed == []


async def test_versions_side_by_side_each_resume_their_own_runs(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        for n, wf in enumerate((order_v0, order_v1, order_v2)):
            with pytest.raises(RuntimeError, match="failed once"):
                await engine.run(wf, n, run_id=f"o{n}")
    # A new engine, as a new process after a deploy that keeps every version.
    async with tether.open_engine(reopen_store(tether_store)) as engine:
        assert await engine.resume("o0") == 0
        assert await engine.resume("o1") == 11
        assert await engine.resume("o2") == "v2: 20"
        assert [await engine.wait(f"o{n}") for n in range(3)] == [0, 11, "v2: 20"]


async def test_a_run_of_a_version_not_registered_here_is_not_resumed(
    tether_store: Store, autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with tether.open_engine(tether_store) as engine:
        with pytest.raises(RuntimeError, match="failed once"):
            await engine.run(order_v1, 4, run_id="old")
        await engine.submit(quick_v1, 5, run_id="done")
        assert await engine.resume("done") == 5
    # A deploy that dropped version 1: only the unversioned code and version 2 remain.
    monkeypatch.delitem(registry[NAME], "1")
    monkeypatch.delitem(registry["tests.versions.quick"], "1")
    async with tether.open_engine(reopen_store(tether_store)) as engine:
        with pytest.raises(tether.WorkflowNotFoundError) as missing:
            await engine.resume("old")
        message = str(missing.value)
        assert "run 'old'" in message and "version '1'" in message and NAME in message
        assert "registered: unversioned, version '2'" in message
        info = await engine.get_run("old")
        assert info is not None and info.status is RunStatus.FAILED
        assert info.error is not None and "failed once" in info.error.message
        # Waiting still answers: the stored result, as JSON values (no code to decode it).
        assert await engine.wait("done") == 5
        with pytest.raises(tether.WorkflowNotFoundError, match=r"registered: version '2'\)"):
            await engine.resume("done")  # only version 2 of this one is left
        # Nothing of any version at all: the message says so.
        monkeypatch.delitem(registry, NAME)
        with pytest.raises(tether.WorkflowNotFoundError, match=f"no workflow named '{NAME}'"):
            await engine.resume("old")


async def test_run_or_submit_of_an_id_under_another_version_is_a_conflict(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(quick_v1, 1, run_id="r") == 1
        await engine.submit(quick_v1, 2, run_id="s")
        with pytest.raises(tether.RunConflictError, match=r"'r'.*version '1'.*not version '2'"):
            await engine.run(quick_v2, 1, run_id="r")
        with pytest.raises(tether.RunConflictError, match=r"'s'.*version '1'.*not version '2'"):
            await engine.run(quick_v2, 2, run_id="s")
        with pytest.raises(tether.RunConflictError, match=r"'s'.*version '1'.*not version '2'"):
            await engine.submit(quick_v2, 2, run_id="s")
        assert await engine.submit(quick_v1, 2, run_id="s") == "s"
        info = await engine.get_run("s")
        assert info is not None and info.status is RunStatus.QUEUED and info.version == "1"
        assert await engine.run(quick_v1, 2, run_id="s") == 2


async def _stranded(engine: tether.Engine, **filters: Any) -> list[str]:
    return [r.run_id for r in await engine.list_runs(stranded=True, **filters)]


async def test_a_worker_serving_version_2_leaves_version_1_runs_stranded(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(quick_v1, 1, run_id="one")
        await engine.submit(quick_v2, 2, run_id="two")
        # No worker alive at all: every waiting run is stranded.
        assert await _stranded(engine) == ["one", "two"]
        async with tether.open_worker(engine, workflows=[quick_v2], poll_interval=0.5) as v2:
            assert v2.serves == {("tests.versions.quick", "2")}
            assert await engine.wait("two", timeout=30) == 200
            await trio.sleep(5)  # ten polls of the queue, in virtual time
            info = await engine.get_run("one")
            assert info is not None and info.status is RunStatus.QUEUED and not info.executing
            assert v2.claimed == 1
            assert await _stranded(engine) == ["one"]
            assert await _stranded(engine, version="2") == []
            assert await _stranded(engine, status="paused") == []
            workers = await engine.list_workers()
            assert [(w.owner, set(w.serves)) for w in workers] == [
                (engine.owner, {("tests.versions.quick", "2")})
            ]
            # A second worker, on the same engine, for version 1: the advertisement grows.
            async with tether.open_worker(engine, workflows=[quick_v1]):
                assert await engine.wait("one", timeout=30) == 1
                (both,) = await engine.list_workers()
                assert both.serves == {("tests.versions.quick", "1"), ("tests.versions.quick", "2")}
            (left,) = await engine.list_workers()
            assert left.serves == {("tests.versions.quick", "2")}
            await engine.submit(quick_v1, 3, run_id="three")
            assert await _stranded(engine) == ["three"]
        assert await engine.list_workers() == []  # withdrawn when the worker left
        assert await _stranded(engine) == ["three"]


async def test_an_interrupted_run_no_worker_serves_is_stranded_a_live_one_is_not(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        await engine.submit(quick_v1, 1, run_id="held")
        await engine.submit(quick_v1, 2, run_id="dropped")
        claimer = cast(WorkerStore, tether_store)
        ghost = "ghost-host:1:w"  # another machine's worker: never taken for gone
        for run_id in ("held", "dropped"):
            claimed = await claimer.claim_next(
                ghost, ttl=3600, workflows=[("tests.versions.quick", "1")], max_dispatches=5
            )
            assert claimed is not None and claimed.run_id == run_id
        assert await _stranded(engine) == []  # both executing, as far as anyone can tell
        # "dropped" released by its worker (a caller cancellation, a drain): waiting again.
        assert claimed is not None
        await tether_store.update_run(attrs.evolve(claimed, owner=None))
        assert await _stranded(engine) == ["dropped"]
        assert await _stranded(engine, limit=0) == []
        assert await _stranded(engine, after="dropped") == []


async def test_stranded_needs_a_store_that_keeps_advertisements() -> None:
    async with tether.open_engine(InlineSlowStore()) as engine:
        with pytest.raises(tether.UsageError, match="keeps no worker advertisements"):
            await engine.list_runs(stranded=True)
        assert await engine.list_runs() == []


# -- the command line, on stores other processes can open --------------------------------


@pytest.fixture(params=["sqlite", "file", "postgres"])
def spec_and_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], tuple[str, Store]]:
    """A store spec for the command line and a store object on the same place."""
    kind: str = request.param
    if kind == "sqlite":
        return lambda: (f"sqlite:{tmp_path / 'q.db'}", tether.SQLiteStore(tmp_path / "q.db"))
    if kind == "file":
        return lambda: (f"file:{tmp_path / 'q'}", tether.FileStore(tmp_path / "q"))
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = _fleet.new_database(server)
    request.addfinalizer(lambda: _fleet.drop_database(server, name))
    url = server.conninfo(dbname=name)
    return lambda: (url, tether.PostgresStore(url, pool_size=2))


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


async def test_runs_list_stranded_on_the_command_line(
    spec_and_store: Callable[[], tuple[str, Store]],
) -> None:
    # Real time: the command line runs in a thread, with its own Trio run.
    spec, store = spec_and_store()
    async with tether.open_engine(store) as engine:
        await engine.submit(quick_v1, 1, run_id="one")
        await engine.submit(quick_v2, 2, run_id="two")
        async with tether.open_worker(engine, workflows=[quick_v2], poll_interval=0.05):
            with trio.fail_after(60):
                assert await engine.wait("two") == 200
            status, out, err = await trio.to_thread.run_sync(
                _cli, "runs", "list", "--stranded", "--json", "--store", spec
            )
            assert status == 0, err
            listed = json.loads(out)
            assert [(r["run_id"], r["status"]) for r in listed] == [("one", "queued")]
            status, out, err = await trio.to_thread.run_sync(
                _cli, "runs", "list", "--stranded", "--store", spec
            )
            assert status == 0, err
            ids = [line.split()[0] for line in out.splitlines() if line.strip()]
            assert "one" in ids and "two" not in ids, out
            assert "tests.versions.quick@1" in out, out
            info = await engine.get_run("one")
            assert info is not None and info.status is RunStatus.QUEUED
        status, out, err = await trio.to_thread.run_sync(
            _cli, "runs", "list", "--stranded", "--json", "--store", spec
        )
        assert status == 0, err
        assert [r["run_id"] for r in json.loads(out)] == ["one"]  # no worker at all
        status, out, err = await trio.to_thread.run_sync(
            _cli, "runs", "list", "--workflow-version", "2", "--json", "--store", spec
        )
        assert status == 0, err
        assert [(r["run_id"], r["version"]) for r in json.loads(out)] == [("two", "2")]


# -- older records and schemas ---------------------------------------------------------------


def _v3_record(run_id: str, workflow: str) -> dict[str, Any]:
    now = utcnow().isoformat()
    return {
        "run_id": run_id,
        "workflow": workflow,
        "args": "[7]",
        "status": "queued",
        "result": None,
        "error": None,
        "requests": [],
        "created_at": now,
        "updated_at": now,
        "owner": None,
        "token": 0,
        "cancel_requested": False,
        "dispatches": 0,
        "format_version": 3,
    }


def test_records_of_older_formats_read_with_no_version() -> None:
    old = _v3_record("r", "wf")
    record = loads_record(dumps_record(old), RunRecord.from_json)
    assert record.version is None and record.format_version == 3
    current = tether.stores.FORMAT_VERSION
    assert record.to_json()["version"] is None and record.to_json()["format_version"] == current
    with pytest.raises(RecordDecodeError, match=r"unknown field.*'version'"):
        loads_record(dumps_record({**old, "version": "2"}), RunRecord.from_json)
    with pytest.raises(RecordDecodeError, match=r"missing field.*'version'"):
        loads_record(dumps_record({**old, "format_version": 4}), RunRecord.from_json)
    for bad in ("", 2):
        with pytest.raises(RecordDecodeError, match="'version'"):
            loads_record(
                dumps_record({**old, "format_version": 4, "version": bad}), RunRecord.from_json
            )
    again = loads_record(dumps_record(record.to_json()), RunRecord.from_json)
    assert again == attrs.evolve(record, format_version=current)


async def test_an_sqlite_file_of_schema_3_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = tether.SQLiteStore(path)
    await store.open()  # the tables, at today's version
    await store.close()
    # Back to schema version 3, as an older tether left it, with a record of that time.
    conn = sqlite3.connect(path)
    with conn:
        back_to_6(conn)
        conn.execute("DROP TABLE workers")
        conn.execute("DROP TABLE messages")  # (schema 6's)
        conn.execute("ALTER TABLE runs DROP COLUMN version")
        conn.execute("DROP INDEX runs_wake")  # (schema 5's, see tests/test_timers.py)
        conn.execute("ALTER TABLE runs DROP COLUMN wake_at")
        conn.execute(
            "INSERT INTO runs (run_id, data, status, workflow) VALUES (?, ?, 'queued', ?)",
            ("legacy", dumps_record(_v3_record("legacy", LEGACY)), LEGACY),
        )
        conn.execute("PRAGMA user_version = 3")
    conn.close()
    await _serve_legacy(tether.SQLiteStore(path))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (tether.stores.SCHEMA_VERSION,)
    conn.close()


async def test_a_postgres_schema_of_version_1_is_migrated(postgres_server: PostgresServer) -> None:
    store = postgres_server.store()
    await store.open()  # the tables, at today's version
    await store.close()
    schema = f'"{store.schema}"'
    as_schema_4(postgres_server, store.schema)
    postgres_server.sql(f"DROP TABLE {schema}.workers")
    postgres_server.sql(f"DROP TABLE {schema}.messages")  # (schema 4's)
    postgres_server.sql(f"ALTER TABLE {schema}.runs DROP COLUMN version")
    postgres_server.sql(f"ALTER TABLE {schema}.runs DROP COLUMN wake_at")  # (schema 3's)
    postgres_server.sql(f"UPDATE {schema}.tether_schema SET version = 1")
    postgres_server.sql(
        f"INSERT INTO {schema}.runs (run_id, data, status, workflow) "
        "VALUES ('legacy', %s, 'queued', %s)",
        dumps_record(_v3_record("legacy", LEGACY)),
        LEGACY,
    )
    await _serve_legacy(postgres_server.reopen(store))
    assert postgres_server.sql(f"SELECT version FROM {schema}.tether_schema") == [
        (POSTGRES_SCHEMA_VERSION,)
    ]


LEGACY = "tests.versions.quick0"


@tether.workflow(name=LEGACY)
async def quick_v0(n: int) -> int:
    return await quick(n) - 1


async def _serve_legacy(store: Store) -> None:
    """An unversioned run stored before versions existed is claimed, served and listed."""
    async with tether.open_engine(store) as engine:
        info = await engine.get_run("legacy")
        assert info is not None and info.version is None
        assert await _stranded(engine) == ["legacy"]
        async with tether.open_worker(engine, workflows=[quick_v0], poll_interval=0.05):
            with trio.fail_after(60):
                assert await engine.wait("legacy") == 6
        stored = await engine.store.get_run("legacy")
        assert stored is not None and stored.version is None
        assert stored.format_version == tether.stores.FORMAT_VERSION


# -- the example of the docs ---------------------------------------------------------------


def test_the_versions_example_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parent.parent / "examples" / "versions.py"
    spec = importlib.util.spec_from_file_location("_tether_example_versions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with saved_registry():  # the example's workflows leave with it
        spec.loader.exec_module(module)
        trio.run(module.main, clock=trio.testing.MockClock(autojump_threshold=0))
    said = (module.__doc__ or "").split("it prints::\n\n", 1)[1].split("\n\n", 1)[0]
    expected = [line.strip() for line in said.splitlines()]
    assert capsys.readouterr().out.splitlines() == expected


def test_a_claim_that_would_create_a_run_under_another_version_is_refused() -> None:
    # The race engine.run's own check cannot see: the run was created meanwhile.
    now = utcnow()
    stored = RunRecord(
        run_id="r", workflow=NAME, version="1", args="[1]", created_at=now, updated_at=now
    )
    create = attrs.evolve(stored, version="2")
    decision = decide_claim(stored, run_id="r", owner="host:1:e", create=create)
    assert decision.store is None
    with pytest.raises(tether.RunConflictError, match=r"version '1'.*not version '2'"):
        decision.outcome(None)
    same = decide_claim(stored, run_id="r", owner="host:1:e", create=stored)
    assert same.claimed and same.store is not None and same.store.version == "1"
