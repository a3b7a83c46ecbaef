"""PostgresStore on a real server: what only a real server can show.

The conformance suite and the engine tests run on Postgres through the shared
store fixture (``tests/conftest.py``); this file holds the rest:

- many stores opening one fresh schema at once (tasks and processes): the
  tables are created once; a newer schema version, or a schema of someone
  else's tables, is refused;
- the password never shows: not in ``repr``, not in the errors of a wrong
  database, a refused connection or a wrong password, not in a log line;
- a caller's deadline holds while the database hangs (a row lock held by
  another connection, the server SIGSTOPped), and the run resumes after;
  threads left behind end, and ``close`` is bounded;
- ``pg_ctl restart -m fast`` in the middle of a run: it completes and
  nothing stored is lost; a watcher reconnects;
- group commit: 100 parallel appends in far fewer transactions, and one bad
  append in a batch fails alone;
- a commit whose acknowledgement was lost: every retried write finds what
  the first attempt stored;
- ``import tether`` without psycopg.

Real time throughout (threads and a server process are involved), with
generous bounds; nothing sleeps to wait for something, it polls a condition
with a deadline.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import psycopg
import pytest
import trio

import tether
from tether.stores import Entry, RunRecord, RunStatus, utcnow
from tether.stores._postgres_sql import SCHEMA_VERSION as PG_SCHEMA_VERSION
from tether.testing import check_store

from ._poll import PATIENCE, apoll
from ._postgres import (
    SECRET_PASSWORD,
    SECRET_USER,
    PostgresServer,
    stopped,
)

executed: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    executed.clear()


@pytest.fixture
def server(postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    yield postgres_server
    postgres_server.cont()  # whatever a test did, the server runs again for the next


@asynccontextmanager
async def opened(store: tether.PostgresStore) -> AsyncIterator[tether.PostgresStore]:
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def _record(run_id: str, **kw: Any) -> RunRecord:
    now = utcnow()
    fields: dict[str, Any] = {
        "run_id": run_id,
        "workflow": "wf",
        "args": "[]",
        "created_at": now,
        "updated_at": now,
    }
    fields.update(kw)
    return RunRecord(**fields)


def _entry(run_id: str, key: str, token: int = 0) -> Entry:
    now = utcnow()
    return Entry(run_id=run_id, key=key, value="1", started_at=now, finished_at=now, token=token)


# -- schema: creation, versions ------------------------------------------------------------

_OPEN_IN_PROCESS = """
import sys, trio, tether
store = tether.PostgresStore(sys.argv[1], schema=sys.argv[2])
async def main():
    await store.open()
    await store.create_run(tether.stores.RunRecord(
        run_id=sys.argv[3], workflow="wf", args="[]",
        created_at=tether.stores.utcnow(), updated_at=tether.stores.utcnow()))
    await store.close()
trio.run(main)
"""


async def test_many_stores_open_one_fresh_schema_at_once(server: PostgresServer) -> None:
    schema = server.new_schema()
    processes = [
        subprocess.Popen(  # noqa: ASYNC220 (started at once; waited for in a thread)
            [sys.executable, "-c", _OPEN_IN_PROCESS, server.conninfo(), schema, f"proc-{i}"]
        )
        for i in range(3)
    ]
    stores = [tether.PostgresStore(server.conninfo(), schema=schema) for _ in range(8)]
    try:
        async with trio.open_nursery() as nursery:
            for store in stores:
                nursery.start_soon(store.open)
        for i, store in enumerate(stores):
            await store.create_run(_record(f"task-{i}"))
        codes = [await trio.to_thread.run_sync(p.wait, PATIENCE) for p in processes]
        assert codes == [0, 0, 0], f"the opening processes exited with {codes}"
        runs = {r.run_id for r in await stores[0].list_runs()}
        assert runs == {f"task-{i}" for i in range(8)} | {f"proc-{i}" for i in range(3)}
    finally:
        for p in processes:
            p.kill()
        for store in stores:
            await store.close()
    assert server.sql(f'SELECT version FROM "{schema}".tether_schema') == [(PG_SCHEMA_VERSION,)]
    tables = server.sql("SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)
    expected = ["entries", "messages", "owners", "runs", "tether_schema", "workers"]
    assert sorted(t for (t,) in tables) == expected


async def test_a_newer_schema_version_is_refused(server: PostgresServer) -> None:
    store = server.store()
    async with opened(store):
        await store.create_run(_record("kept"))
    server.sql(f'UPDATE "{store.schema}".tether_schema SET version = 99')
    again = server.reopen(store)
    newer = f"schema version 99, newer than version {PG_SCHEMA_VERSION}"
    with pytest.raises(tether.StoreError, match=newer):
        await again.open()
    await again.close()  # safe after a failed open
    server.sql(f'UPDATE "{store.schema}".tether_schema SET version = {PG_SCHEMA_VERSION}')
    async with opened(server.reopen(store)) as store:
        assert [r.run_id for r in await store.list_runs()] == ["kept"]


async def test_a_schema_of_other_tables_is_refused(server: PostgresServer) -> None:
    schema = server.new_schema()
    server.sql(f'CREATE SCHEMA "{schema}"')
    server.sql(f'CREATE TABLE "{schema}".orders (id int)')
    store = tether.PostgresStore(server.conninfo(), schema=schema)
    with pytest.raises(tether.StoreError, match="not a tether store's"):
        await store.open()
    assert server.sql("SELECT count(*) FROM pg_tables WHERE schemaname = %s", schema) == [(1,)]


def test_bad_arguments_are_usage_errors() -> None:
    for bad in ("Upper", "has-dash", "1digit", "x" * 49, ""):
        with pytest.raises(tether.UsageError, match="schema must be"):
            tether.PostgresStore("postgresql://u@h/db", schema=bad)
    with pytest.raises(tether.UsageError, match="pool_size"):
        tether.PostgresStore("postgresql://u@h/db", pool_size=0)


async def test_concurrent_claims_of_one_run_admit_one_owner(server: PostgresServer) -> None:
    """Claimers that waited for the run's row lock see the lease its holder just took."""
    store = server.store(pool_size=12)
    async with opened(store):
        await store.create_run(_record("contested"))
        outcomes: list[str] = []

        async def claim(i: int) -> None:
            try:
                await store.claim("contested", f"host-{i}:{i}:c", ttl=60)
                outcomes.append("claimed")
            except tether.RunConflictError:
                outcomes.append("conflict")

        for _ in range(3):
            async with trio.open_nursery() as nursery:
                for i in range(12):
                    nursery.start_soon(claim, i)
            assert sorted(outcomes) == ["claimed"] + ["conflict"] * 11, Counter(outcomes)
            record = await store.get_run("contested")
            assert record is not None and record.owner is not None
            await store.renew(record.owner, ttl=0, held={})  # released: contested again
            outcomes.clear()


# -- credentials -------------------------------------------------------------------------


def _no_secret(text: str, secret: str = SECRET_PASSWORD) -> None:
    assert secret not in text, f"the password shows in: {text!r}"


def _shown(exc: BaseException) -> str:
    """Everything a traceback of *exc* prints."""
    return "".join(traceback.format_exception(exc))


async def test_the_password_never_shows(
    server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = server.conninfo(user=SECRET_USER, password=SECRET_PASSWORD)
    store = tether.PostgresStore(url, schema="secret_ok")
    assert repr(store) == (
        f"PostgresStore('postgresql://{SECRET_USER}@127.0.0.1:{server.port}/tether', "
        "schema='secret_ok')"
    )
    async with opened(store):  # SCRAM with the real password works
        await store.create_run(_record("s"))
        assert (await store.get_run("s")) is not None
    keyvalue = (
        f"host=127.0.0.1 port={server.port} dbname=tether user={SECRET_USER} "
        f"password={SECRET_PASSWORD}"
    )
    assert SECRET_PASSWORD not in repr(tether.PostgresStore(keyvalue))

    failures: dict[str, tuple[str, str]] = {
        "a wrong database": (
            server.conninfo(user=SECRET_USER, password=SECRET_PASSWORD, dbname="nosuch"),
            r'database "nosuch" does not exist',
        ),
        "a wrong password": (
            server.conninfo(user=SECRET_USER, password=SECRET_PASSWORD + "-wrong"),
            "password authentication failed",
        ),
        "a refused connection": (
            f"postgresql://{SECRET_USER}:{SECRET_PASSWORD}@127.0.0.1:1/tether",
            "port 1 failed: Connection refused",
        ),
    }
    for what, (conninfo, cause) in failures.items():
        failing = tether.PostgresStore(conninfo, retry_timeout=0.3)
        with pytest.raises(tether.StoreError) as caught:
            await failing.open()
        message = str(caught.value)
        assert cause in message, f"{what}: {message}"
        assert "127.0.0.1" in message, f"{what}: the error does not name the host: {message}"
        _no_secret(_shown(caught.value))
        _no_secret(_shown(caught.value), SECRET_PASSWORD + "-wrong")
    with pytest.raises(tether.UsageError, match="not a valid") as malformed:
        tether.PostgresStore(f"host=127.0.0.1 password={SECRET_PASSWORD[:6]} {SECRET_PASSWORD}")
    _no_secret(_shown(malformed.value), SECRET_PASSWORD[6:])
    assert caplog.records, "nothing was logged: the log check checks nothing"
    for record in caplog.records:
        _no_secret(record.getMessage())
        _no_secret(record.getMessage(), SECRET_PASSWORD + "-wrong")


async def test_pgpassword_is_used_and_never_shows(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("PGPASSWORD", SECRET_PASSWORD)
    async with opened(tether.PostgresStore(server.conninfo(user=SECRET_USER))) as store:
        await store.create_run(_record("env"))
    wrong_db = tether.PostgresStore(server.conninfo(user=SECRET_USER, dbname="nosuch"))
    with pytest.raises(tether.StoreError, match="does not exist") as caught:
        await wrong_db.open()
    _no_secret(_shown(caught.value) + repr(wrong_db))
    for record in caplog.records:
        _no_secret(record.getMessage())


# -- a stuck database --------------------------------------------------------------------


@tether.step
async def pg_add(x: int) -> int:
    executed[f"add({x})"] += 1
    return x + 1


@attrs.define
class Stall:
    """What the stalling step does once: take a row lock elsewhere, or stop the server."""

    action: Callable[[], Any] | None = None

    async def __call__(self) -> None:
        action, self.action = self.action, None
        if action is not None:
            await trio.to_thread.run_sync(action)


stall = Stall()


@tether.step
async def pg_stall(x: int) -> int:
    executed[f"stall({x})"] += 1
    await stall()
    return x * 10


@tether.workflow
async def stalling(x: int) -> int:
    a = await pg_add(x)
    b = await pg_stall(a)
    return await pg_add(b)


class RowLock:
    """A run's row locked by another connection, in an open transaction."""

    def __init__(self, server: PostgresServer, store: tether.PostgresStore, run_id: str) -> None:
        self.conn = psycopg.connect(server.conninfo())
        self.query = f'SELECT 1 FROM "{store.schema}".runs WHERE run_id = %s FOR UPDATE'
        self.run_id = run_id

    def take(self) -> None:
        self.conn.execute(self.query.encode(), (self.run_id,))

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


async def _times_out(engine: tether.Engine, run_id: str, deadline: float) -> None:
    # The deadline's error, not the store's: a call that waited for the block (a lock
    # timeout, a connect timeout) would raise that instead, and one that waited for
    # the block to end would not return before the test ends it.
    with pytest.raises(trio.TooSlowError):
        await engine.run(stalling, 1, run_id=run_id, timeout=deadline)


async def test_a_deadline_holds_while_a_row_lock_blocks_a_save(server: PostgresServer) -> None:
    store = server.store()
    lock = RowLock(server, store, "locked")
    async with tether.open_engine(store) as engine:
        stall.action = lock.take  # inside the second step: its save then waits for the lock
        try:
            await _times_out(engine, "locked", 0.5)  # while the lock is held
        finally:
            lock.release()
        assert await engine.resume("locked") == 21
        assert executed["add(1)"] == 1, f"a stored step executed again: {executed}"
        info = await engine.get_run("locked")
        assert info is not None and info.status is RunStatus.COMPLETED
        keys = [e.key for e in info.entries]
        assert sorted(keys) == ["pg_add#0", "pg_add#1", "pg_stall#0"], keys


async def test_a_deadline_holds_while_a_row_lock_blocks_a_claim(server: PostgresServer) -> None:
    store = server.store()
    async with tether.open_engine(store) as engine:
        await engine.submit(stalling, 1, run_id="queued")
        lock = RowLock(server, store, "queued")
        lock.take()
        try:
            with pytest.raises(trio.TooSlowError):  # while the lock is held
                await engine.run(stalling, 1, run_id="queued", timeout=0.5)
        finally:
            lock.release()
        assert await engine.run(stalling, 1, run_id="queued") == 21
        assert executed == {"add(1)": 1, "stall(2)": 1, "add(20)": 1}


async def test_a_deadline_holds_while_the_server_is_stopped(server: PostgresServer) -> None:
    store = server.store()
    pids: list[int] = []
    async with tether.open_engine(store) as engine:
        stall.action = lambda: pids.extend(server.stop_processes())
        try:
            await _times_out(engine, "stopped", 0.5)  # while the server is stopped
        finally:
            server.cont(pids)
        assert pids, "the server was not stopped: the test tested nothing"
        assert await engine.resume("stopped") == 21
        assert executed["add(1)"] == 1, f"a stored step executed again: {executed}"


async def test_abandoned_threads_end_and_close_is_bounded(server: PostgresServer) -> None:
    store = server.store(pool_size=3, connect_timeout=2)
    await store.open()
    await store.create_run(_record("r"))
    try:
        with stopped(server):
            # Each read is cut short by its deadline while the server is stopped.
            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(_read_with_deadline, store, 0.3)
            # Each abandoned thread's connection was cut: none is left waiting.
            await apoll(lambda: not store._calls, "the abandoned threads to end")
            with trio.fail_after(PATIENCE):  # bounded (connect_timeout), not hung
                await store.close()
    finally:
        await store.close()
    async with opened(server.reopen(store)) as again:
        assert (await again.get_run("r")) is not None


async def _read_with_deadline(store: tether.PostgresStore, deadline: float) -> None:
    with trio.move_on_after(deadline) as scope:
        await store.get_run("r")
    assert scope.cancelled_caught, "a read on a stopped server returned"


async def test_a_watch_cancelled_before_its_thread_starts_returns(server: PostgresServer) -> None:
    # Cancelled before its listening thread got a slot, watch() used to wait
    # (shielded) for a thread that never started: an engine block whose body
    # was already cancelled hung forever.
    async with opened(server.store()) as store:
        with trio.fail_after(PATIENCE), trio.CancelScope() as scope:
            scope.cancel()
            await store.watch(lambda: None)
        assert scope.cancelled_caught
    with trio.fail_after(PATIENCE), trio.CancelScope() as outer:
        outer.cancel()
        async with tether.open_engine(server.store()):
            pass
    assert outer.cancelled_caught


async def test_a_close_cancelled_before_its_thread_starts_still_shuts_down(
    server: PostgresServer,
) -> None:
    # Cancelled on entry, close() used to wait (shielded) for a shutdown
    # thread that never started: it hung, even under a deadline.
    store = server.store()
    await store.open()
    writer = store._writer.thread
    assert writer is not None
    with trio.fail_after(PATIENCE), trio.CancelScope() as scope:
        scope.cancel()
        await store.close()
    assert scope.cancelled_caught
    assert not writer.is_alive(), "close() left the writer thread running"
    with trio.fail_after(PATIENCE):
        await store.close()  # closed: nothing left to do


async def test_an_open_on_a_stopped_server_is_cancellable(server: PostgresServer) -> None:
    store = server.store()
    with stopped(server):
        with trio.move_on_after(0.5) as scope:
            await store.open()
        # Cut short by the deadline while the server is stopped (a connect timeout would
        # have raised StoreError instead).
        assert scope.cancelled_caught
        await store.close()
    async with opened(store):  # nothing half-done stands in the way
        await store.create_run(_record("after"))


# -- a restart ----------------------------------------------------------------------------


@tether.step
async def pg_restart(x: int) -> int:
    executed["restart"] += 1
    if restarting.action is not None:
        await restarting()
    return x + 100


restarting = Stall()


@tether.workflow
async def five_steps(x: int) -> list[int]:
    out = [await pg_add(x), await pg_add(x + 1)]
    async with tether.parallel() as p:
        handles = [p.start_soon(pg_add, x + 10 + i) for i in range(3)]
    out += [h.result for h in handles]
    out.append(await pg_restart(x))
    out.append(await pg_add(x + 2))
    return out


async def test_a_restart_mid_run_loses_nothing(server: PostgresServer) -> None:
    store = server.store()
    restarting.action = server.restart
    async with tether.open_engine(store) as engine:
        result = await engine.run(five_steps, 1, run_id="restarted")
        assert restarting.action is None, "the server was not restarted: nothing was tested"
        assert result == [2, 3, 12, 13, 14, 101, 4]
        info = await engine.get_run("restarted")
        assert info is not None and info.status is RunStatus.COMPLETED
        keys = [e.key for e in info.entries]
        assert len(keys) == len(set(keys)) == 7, keys
        assert [e.seq for e in info.entries] == list(range(1, 8))
        assert executed["restart"] == 1 and all(n == 1 for n in executed.values()), executed


async def test_a_watcher_reconnects_after_a_restart(server: PostgresServer) -> None:
    store = server.store()
    calls: list[float] = []
    async with opened(store), trio.open_nursery() as nursery:
        nursery.start_soon(store.watch, lambda: calls.append(time.monotonic()))
        await apoll(lambda: bool(calls), "the watcher to listen")
        await trio.to_thread.run_sync(server.restart)
        restarted = time.monotonic()
        await store.create_run(_record("after-restart"))
        await apoll(lambda: any(t > restarted for t in calls), "a notification after the restart")
        nursery.cancel_scope.cancel()


# -- group commit ---------------------------------------------------------------------------


async def test_parallel_appends_are_group_committed(server: PostgresServer) -> None:
    store = server.store()
    async with opened(store):
        await store.create_run(_record("gc"))
        xid_before = server.sql("SELECT pg_current_xact_id()::text::bigint")[0][0]
        batches_before = len(store._batches)
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(store.append, "gc", [_entry("gc", f"s#{i}")])
        xid_after = server.sql("SELECT pg_current_xact_id()::text::bigint")[0][0]
        entries = await store.load_entries("gc")
        assert sorted(e.key for e in entries) == sorted(f"s#{i}" for i in range(100))
        batches = list(store._batches)[batches_before:]
        assert sum(batches) == 100 and len(batches) <= 10, f"batches of {batches}"
        # Only writing transactions take a transaction id: one per batch, and
        # one for the second pg_current_xact_id().
        writes = xid_after - xid_before - 1
        assert writes <= 10, f"100 appends took {writes} write transactions"


async def test_appends_of_one_batch_of_tasks_commit_together_though_one_blocks_the_loop(
    server: PostgresServer,
) -> None:
    # Tasks runnable together queue their appends in one batch of Trio's scheduling.
    # One of them makes a blocking call first (a step writing a file, say): it
    # releases the GIL, and a writer woken by the first append would take that
    # append alone and commit it, while the others wait for its whole commit.
    store = server.store()
    async with opened(store):
        for i in range(4):
            await store.create_run(_record(f"b{i}"))
        batches_before = len(store._batches)
        async with trio.open_nursery() as nursery:
            for i in range(4):

                async def append(i: int = i) -> None:
                    time.sleep(0.05)  # noqa: ASYNC251  the blocking call under test
                    await store.append(f"b{i}", [_entry(f"b{i}", "s#0")])

                nursery.start_soon(append)
        assert list(store._batches)[batches_before:] == [4]
        for i in range(4):
            assert [e.key for e in await store.load_entries(f"b{i}")] == ["s#0"]


async def test_a_bad_append_in_a_batch_fails_alone(server: PostgresServer) -> None:
    store = server.store()
    async with opened(store):
        for run_id in ("blocker", "good"):
            await store.create_run(_record(run_id))
        claimed = await store.claim("fenced", "host:1:a", ttl=60, create=_record("fenced"))
        dup = _entry("good", "dup")
        (stored,) = await store.append("good", [dup])
        lock = RowLock(server, store, "blocker")
        lock.take()  # the writer's first batch waits for it; the rest queue behind
        outcomes: dict[str, Any] = {}

        async def append(name: str, run_id: str, entry: Entry) -> None:
            try:
                outcomes[name] = list(await store.append(run_id, [entry]))
            except tether.TetherError as exc:
                outcomes[name] = exc

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(append, "blocker", "blocker", _entry("blocker", "b"))
                await apoll(lambda: bool(store._inflight), "the writer to wait for the lock")
                for i in range(5):
                    nursery.start_soon(append, f"good-{i}", "good", _entry("good", f"g#{i}"))
                nursery.start_soon(append, "missing", "nobody", _entry("nobody", "m"))
                nursery.start_soon(append, "stale", "fenced", _entry("fenced", "f", token=7))
                nursery.start_soon(append, "dup", "good", dup)
                await apoll(lambda: store._queue.qsize() >= 8, "the appends to queue")
                await trio.to_thread.run_sync(lock.release)
        finally:
            lock.conn.close()
        assert store._batches[-1] == 8, f"the 8 queued appends were not one batch: {store._batches}"
        assert isinstance(outcomes["missing"], tether.RunNotFoundError)
        assert isinstance(outcomes["stale"], tether.LeaseLostError)
        assert outcomes["dup"] == [stored], "the duplicate was not returned as stored"
        keys = [e.key for e in await store.load_entries("good")]
        assert keys[0] == "dup" and sorted(keys[1:]) == [f"g#{i}" for i in range(5)], keys
        assert len(await store.load_entries("blocker")) == 1
        assert claimed.token == 1 and await store.load_entries("fenced") == []


async def test_a_batch_nobody_waits_for_does_not_hold_up_the_next(
    server: PostgresServer,
) -> None:
    """An append cut short by its caller's deadline frees the writer for other runs."""
    store = server.store()
    async with opened(store):
        for run_id in ("locked", "free"):
            await store.create_run(_record(run_id))
        lock = RowLock(server, store, "locked")
        lock.take()
        try:
            with trio.move_on_after(0.3) as scope:
                await store.append("locked", [_entry("locked", "s#0")])
            assert scope.cancelled_caught, "an append to a locked run returned"
            # Stored while the locked run's batch still waits for its lock.
            with trio.fail_after(PATIENCE):
                (entry,) = await store.append("free", [_entry("free", "s#0")])
        finally:
            lock.release()
        assert entry.seq == 1
        assert await store.load_entries("locked") == [], "the cut batch was stored"


# -- a lost acknowledgement ----------------------------------------------------------------


def _lose_one_ack(store: tether.PostgresStore, attribute: str) -> list[int]:
    """Make the next call of *attribute* succeed, then fail as if its answer was lost."""
    original = getattr(store, attribute)
    lost: list[int] = []

    def call(*args: Any) -> Any:
        result = original(*args)
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result

    async def acall(*args: Any) -> Any:
        result = await original(*args)
        if not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result

    setattr(store, attribute, acall if attribute.startswith("_queued") else call)
    return lost


async def test_retries_after_a_lost_acknowledgement_find_what_was_stored(
    server: PostgresServer,
) -> None:
    store = server.store()
    owner = "host:1:w"
    async with opened(store):
        lost = _lose_one_ack(store, "_in_thread")
        await store.create_run(_record("created", workflow="other"))  # not RunConflictError
        assert lost and await store.get_run("created") is not None

        claimed = await store.claim("done", owner, ttl=60, create=_record("done"))
        lost = _lose_one_ack(store, "_queued_update")
        final = attrs.evolve(
            claimed, status=RunStatus.COMPLETED, result="1", owner=None, lease_expires_at=None
        )
        stored = await store.update_run(final)  # not LeaseLostError: it released the lease
        assert lost and stored.status is RunStatus.COMPLETED

        for run_id in ("q0", "q1"):
            await store.create_run(_record(run_id, status=RunStatus.QUEUED))
        lost = _lose_one_ack(store, "_in_thread")
        got = await store.claim_next(owner, ttl=60, workflows=["wf"], max_dispatches=3)
        assert lost and got is not None and got.run_id == "q0" and got.token == 1, got
        q1 = await store.get_run("q1")
        assert q1 is not None and q1.status is RunStatus.QUEUED, f"the retry claimed {q1!r}"

        lost = _lose_one_ack(store, "_queued")
        (entry,) = await store.append("q0", [_entry("q0", "s#0", token=got.token)])
        assert lost and [e.key for e in await store.load_entries("q0")] == ["s#0"]
        assert entry.seq == 1


# -- options, imports -----------------------------------------------------------------------


async def test_without_prepared_statements(server: PostgresServer) -> None:
    """``prepare=False`` (PgBouncer's transaction mode) serves the same contract."""
    result = await check_store(
        lambda: server.store(prepare=False),
        only=[
            "run_round_trip",
            "append_seqs",
            "concurrent_appends",
            "fencing",
            "claim_next_queued",
        ],
    )
    assert len(result.passed) == 5


def test_import_tether_without_psycopg() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"
        "sys.modules['psycopg_pool'] = None\n"
        "import tether\n"
        "assert tether.PostgresStore.__name__ == 'PostgresStore'\n"
        "try:\n"
        "    tether.PostgresStore('postgresql://u@h/db')\n"
        "except tether.UsageError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install -e '.[postgres]'" in done.stdout, done.stdout


async def test_a_batched_claim_reads_the_journals_of_the_runs_it_takes(
    server: PostgresServer,
) -> None:
    """A run taken over comes with its journal, read in the claim's transaction exactly as
    load_entries reads it (so the worker does not read it again); a new run with none."""
    store = server.store()
    async with opened(store):
        first = await store.claim("old", "host:1:a", ttl=0.3, create=_record("old"))
        await store.append("old", [_entry("old", f"s#{i}", token=first.token) for i in range(3)])
        await store.create_run(_record("new", status=RunStatus.QUEUED))
        await store.renew("host:1:a", ttl=0, held={})  # its owner "died"
        taken = await store.claim_batch(
            "host:2:b", ttl=60, workflows=["wf"], max_dispatches=5, limit=5
        )
        assert [c.record.run_id for c in taken] == ["old", "new"]
        assert taken[0].previous_owner == "host:1:a" and taken[1].previous_owner is None
        assert taken[0].entries == list(await store.load_entries("old"))
        assert [e.key for e in taken[0].entries or ()] == ["s#0", "s#1", "s#2"]
        assert taken[1].entries == []
