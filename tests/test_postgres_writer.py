"""The PostgreSQL writer's group commit and batched claims: fencing, lost answers, races.

Each test makes a writer's transaction wait for a row lock (a real one, held by
another connection), so that the jobs queued meanwhile are committed together.
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
import pytest
import trio

import tether
from tether.stores import RunStatus

from ._poll import apoll
from ._postgres import PostgresServer
from .test_postgres import RowLock, _entry, _record, opened


def _waiting(server: PostgresServer, n: int = 1) -> Any:
    """A predicate: *n* statements of the database wait for a lock."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    return lambda: server.sql(query)[0][0] >= n


def _lose_first_ack_of_each(store: tether.PostgresStore) -> list[str]:
    original = store._queued_update
    lost: list[str] = []

    async def acall(record: Any, attempted: Any, what: str) -> Any:
        first = id(attempted) not in seen
        seen.add(id(attempted))
        try:
            result = await original(record, attempted, what)
        except tether.TetherError as exc:
            if first:
                lost.append(f"{record.result}: {exc!r}")
                raise psycopg.OperationalError("server closed the connection") from None
            raise
        if first:
            lost.append(f"{record.result}: ok")
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result

    seen: set[int] = set()
    store._queued_update = acall  # type: ignore[method-assign]
    return lost


async def test_a_fenced_out_update_is_not_told_it_was_stored_after_a_lost_ack(
    postgres_server: PostgresServer,
) -> None:
    server = postgres_server
    store = server.store()
    async with opened(store):
        await store.create_run(_record("blocker"))
        old = await store.claim("r", "host:1:a", ttl=0.2, create=_record("r"))
        await trio.sleep(0.5)
        new = await store.claim("r", "host:1:b", ttl=60)
        assert new.token == old.token + 1
        stale = attrs.evolve(
            old, status=RunStatus.COMPLETED, result='"stale"', owner=None, lease_expires_at=None
        )
        fresh = attrs.evolve(new, result='"fresh"', lease_expires_at=None)
        lost = _lose_first_ack_of_each(store)
        lock = RowLock(server, store, "blocker")
        lock.take()
        outcomes: dict[str, Any] = {}

        async def update(name: str, record: Any) -> None:
            try:
                outcomes[name] = await store.update_run(record)
            except tether.TetherError as exc:
                outcomes[name] = exc

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.append, "blocker", [_entry("blocker", "b")])
                await apoll(lambda: bool(store._inflight), "the writer to wait for the lock")
                nursery.start_soon(update, "stale", stale)
                nursery.start_soon(update, "fresh", fresh)
                await apoll(lambda: store._queue.qsize() >= 2, "the updates to queue")
                await trio.to_thread.run_sync(lock.release)
        finally:
            if not lock.conn.closed:
                lock.conn.close()
        assert lost, "no answer was lost"
        assert isinstance(outcomes["stale"], tether.LeaseLostError), outcomes["stale"]
        stored = await store.get_run("r")
        assert stored is not None and stored.result == '"fresh"', stored


async def test_a_stale_max_seq_after_a_lock_wait_falls_back(
    postgres_server: PostgresServer,
) -> None:
    server = postgres_server
    store = server.store()
    async with opened(store):
        claimed = await store.claim("r", "host:1:a", ttl=60, create=_record("r"))
        other = server.reopen(store)
        async with opened(other):
            lock = RowLock(server, store, "r")
            lock.take()
            got: dict[str, Any] = {}

            async def append(name: str, s: Any) -> None:
                got[name] = await s.append("r", [_entry("r", name, token=claimed.token)])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(append, "one", store)
                await apoll(_waiting(server), "writer 1 to wait for the lock")
                nursery.start_soon(append, "two", other)
                await apoll(_waiting(server, 2), "writer 2 to wait for the lock")
                await trio.to_thread.run_sync(lock.release)
            entries = await store.load_entries("r")
            assert sorted(e.seq or 0 for e in entries) == [1, 2]


@pytest.mark.parametrize("new_owner", [None, "host:9:z"])
async def test_lock_batch_after_a_wait_on_an_owner_change(
    postgres_server: PostgresServer, new_owner: str | None
) -> None:
    server = postgres_server
    store = server.store()
    async with opened(store):
        claimed = await store.claim("r", "host:1:a", ttl=60, create=_record("r"))
        await store.claim("o", "host:9:z", ttl=60, create=_record("o"))  # owners row for z
        conn = psycopg.connect(server.conninfo())
        conn.execute(
            f'UPDATE "{store.schema}".runs SET owner = %s WHERE run_id = %s'.encode(),
            (new_owner, "r"),
        )
        got: dict[str, Any] = {}

        async def append() -> None:
            try:
                got["a"] = await store.append("r", [_entry("r", "k", token=claimed.token)])
            except tether.TetherError as exc:
                got["a"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append)
            await apoll(_waiting(server), "the writer to wait for the lock")
            await trio.to_thread.run_sync(conn.commit)
        conn.close()
        assert not isinstance(got["a"], tether.RunNotFoundError), got["a"]


async def test_claim_owner_when_the_owners_row_is_inserted_concurrently(
    postgres_server: PostgresServer,
) -> None:
    server = postgres_server
    store = server.store()
    async with opened(store):
        await store.create_run(_record("q", status=RunStatus.QUEUED))
        conn = psycopg.connect(server.conninfo())
        conn.execute(
            f'INSERT INTO "{store.schema}".owners (owner, expires) '
            "VALUES ('host:1:w', clock_timestamp() + interval '60 s')".encode()
        )
        got: dict[str, Any] = {}

        async def claim() -> None:
            try:
                got["c"] = await store.claim_batch(
                    "host:1:w", ttl=60, workflows=["wf"], max_dispatches=5, limit=3
                )
            except Exception as exc:
                got["c"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim)
            await apoll(_waiting(server), "the claim to wait for the owner's row")
            await trio.to_thread.run_sync(conn.commit)
        conn.close()
        assert not isinstance(got["c"], Exception), got["c"]


async def test_a_corrupt_record_fails_only_its_own_update(postgres_server: PostgresServer) -> None:
    server = postgres_server
    store = server.store()
    async with opened(store):
        await store.create_run(_record("blocker"))
        good = await store.claim("good", "host:1:a", ttl=60, create=_record("good"))
        bad = await store.claim("bad", "host:1:a", ttl=60, create=_record("bad"))
        server.sql(f"UPDATE \"{store.schema}\".runs SET data = 'not json' WHERE run_id = 'bad'")
        lock = RowLock(server, store, "blocker")
        lock.take()
        outcomes: dict[str, Any] = {}

        async def run(name: str, fn: Any) -> None:
            try:
                outcomes[name] = await fn()
            except Exception as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.append, "blocker", [_entry("blocker", "b")])
            await apoll(lambda: bool(store._inflight), "the writer to wait for the lock")
            bad_update = attrs.evolve(bad, result='"x"', lease_expires_at=None)
            good_entry = _entry("good", "g", token=good.token)
            nursery.start_soon(run, "bad", lambda: store.update_run(bad_update))
            nursery.start_soon(run, "good", lambda: store.append("good", [good_entry]))
            await apoll(lambda: store._queue.qsize() >= 2, "queued")
            await trio.to_thread.run_sync(lock.release)
        assert not isinstance(outcomes["good"], Exception), outcomes["good"]
        assert isinstance(outcomes["bad"], tether.CheckpointCorruptError), outcomes["bad"]


async def test_batch_claim_lost_ack(postgres_server: PostgresServer) -> None:
    server = postgres_server
    from .test_postgres import _lose_one_ack

    store = server.store()
    async with opened(store):
        for i in range(5):
            await store.create_run(_record(f"q{i}", status=RunStatus.QUEUED))
        lost = _lose_one_ack(store, "_in_thread")
        got = await store.claim_batch(
            "host:1:w", ttl=60, workflows=["wf"], max_dispatches=3, limit=3
        )
        assert lost
        assert [c.record.run_id for c in got] == ["q0", "q1", "q2"], got
        for i in (3, 4):
            r = await store.get_run(f"q{i}")
            assert r is not None and r.status is RunStatus.QUEUED
        got2 = await store.claim_batch(
            "host:1:w", ttl=60, workflows=["wf"], max_dispatches=3, limit=3
        )
        assert [c.record.run_id for c in got2] == ["q3", "q4"]
