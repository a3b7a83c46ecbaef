"""A PostgresStore call that waits long for a connection says so in the log, once an episode.

The store's database stops taking connections (``ALLOW_CONNECTIONS false``)
and its backends are terminated, while two calls run: each waits for a
connection, past ``WAIT_WARNING`` seconds. One WARNING names the store (not
one per waiting call); once the database takes connections again, both
calls complete and one INFO says no call waits any more. No timing is
asserted: the test polls for the waits it needs, on a real server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import trio

import tether
from tether.stores import RunRecord, utcnow

from ._fleet import drop_database, new_database
from ._poll import apoll
from ._postgres import PostgresServer


@pytest.fixture
def database(postgres_server: PostgresServer) -> Iterator[str]:
    name = new_database(postgres_server)
    try:
        yield name
    finally:
        allow(postgres_server, name, True)
        drop_database(postgres_server, name)


def allow(server: PostgresServer, dbname: str, allowed: bool) -> None:
    server.sql(
        f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS {str(allowed).lower()}", dbname="postgres"
    )


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tether.postgres" and text in r.getMessage()]


async def test_a_wait_for_connections_is_logged_once_and_its_end_too(
    postgres_server: PostgresServer, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether.postgres")
    server = postgres_server
    store = tether.PostgresStore(server.conninfo(dbname=database), pool_size=2)
    now = utcnow()
    record = RunRecord(run_id="w", workflow="wf", args="[]", created_at=now, updated_at=now)
    await store.open()
    try:
        await store.create_run(record)
        allow(server, database, False)
        server.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            database,
            dbname="postgres",
        )
        got: list[RunRecord | None] = []

        async def call() -> None:
            got.append(await store.get_run("w"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            nursery.start_soon(call)
            # Both calls have waited past the threshold: still one warning.
            await apoll(lambda: store._conns.late == 2, "both calls waiting long")
            warned = lines(caplog, "waiting for a connection")
            assert len(warned) == 1, [r.getMessage() for r in warned]
            assert warned[0].levelno == logging.WARNING
            assert repr(store) in warned[0].getMessage()
            assert not lines(caplog, "no call waits")
            allow(server, database, True)
        assert [r.run_id if r else None for r in got] == ["w", "w"]
        ended = lines(caplog, "no call waits for one any more")
        assert len(ended) == 1 and ended[0].levelno == logging.INFO
        assert repr(store) in ended[0].getMessage()
        assert caplog.records.index(ended[0]) > caplog.records.index(warned[0])
        assert len(lines(caplog, "waiting for a connection")) == 1
    finally:
        await store.close()
