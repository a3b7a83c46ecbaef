"""Mailboxes of the durable stores: strict reads of damaged messages, older schemas and
folders upgraded in place, sends from two store objects on one location, and a
PostgreSQL send whose acknowledgement was lost.

The conformance checks themselves run on every store in
``tests/test_stores.py``; the rules and the checks are tested in
``tests/test_mailbox.py``. Thread-backed stores run on the real clock here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether.stores import (
    MailboxStore,
    Message,
    RunRecord,
    RunStatus,
    Store,
    dumps_record,
    mailbox_of,
)
from tether.stores._postgres_sql import SCHEMA_VERSION as PG_SCHEMA_VERSION

from . import _postgres
from ._differential import PROPERTY_SETTINGS, apply_ops, on_both
from ._sqlite_schemas import back_to_6
from .conftest import reopen_store
from .test_postgres import _lose_one_ack

T0 = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)
DURABLE = ["sqlite", "file", "postgres"]


def _record(run_id: str, **kw: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "run_id": run_id,
        "workflow": "wf",
        "args": "[]",
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return RunRecord(**fields)


@asynccontextmanager
async def opened(store: Store) -> AsyncIterator[MailboxStore]:
    mailbox = mailbox_of(store)
    assert mailbox is not None, f"{store!r} keeps no messages"
    await store.open()
    try:
        yield mailbox
    finally:
        await store.close()


# -- changing what is stored, by store kind ------------------------------------------------


def _set_message(store: Store, run_id: str, seq: int, text: str | None) -> None:
    """Store *text* as message *seq* of *run_id* behind the store's back (``None``: delete it)."""
    if isinstance(store, tether.SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            if text is None:
                conn.execute("DELETE FROM messages WHERE run_id = ? AND seq = ?", (run_id, seq))
            else:
                conn.execute(
                    "UPDATE messages SET data = ? WHERE run_id = ? AND seq = ?", (text, run_id, seq)
                )
        conn.close()
    elif isinstance(store, tether.FileStore):
        path = _message_file(store, run_id, seq)
        if text is None:
            path.unlink()
        else:
            path.write_text(text, encoding="utf-8")
    else:
        assert isinstance(store, tether.PostgresStore)
        table = f'"{store.schema}".messages'
        server = _postgres.start_once()
        if text is None:
            server.sql(f"DELETE FROM {table} WHERE run_id = %s AND seq = %s", run_id, seq)
        else:
            query = f"UPDATE {table} SET data = %s WHERE run_id = %s AND seq = %s"
            server.sql(query, text, run_id, seq)


def _message_file(store: tether.FileStore, run_id: str, seq: int) -> Path:
    return store.directory / run_id / "messages" / f"{seq:012d}.json"


def _where(store: Store, seq: int) -> list[str]:
    """What a CheckpointCorruptError about message *seq* names: the store's location and seq."""
    if isinstance(store, tether.SQLiteStore):
        return [str(store.path), f"table messages, seq {seq}"]
    if isinstance(store, tether.FileStore):
        return [str(store.directory), f"messages/{seq:012d}.json"]
    assert isinstance(store, tether.PostgresStore)
    return [store.url, store.schema, f"table messages, seq {seq}"]


@pytest.mark.tether_stores(*DURABLE)
async def test_a_damaged_message_is_corrupt_naming_the_store_run_and_seq(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    store = tether_raw_store_factory()
    async with opened(store) as mailbox:
        await store.create_run(_record("r"))
        sent = [await mailbox.send_message("r", "n", f'{{"n": {i}}}', now=T0) for i in (1, 2, 3)]
        good = dumps_record(sent[1].to_json())
        cases = [
            ('{"run_id":', "not valid JSON"),
            (good.replace('\\"n\\": 2', '\\"n\\": 7'), "does not match its checksum"),
            (dumps_record(sent[2].to_json()), "says seq 3, where it is stored 2"),
            (good.replace('"format_version":1', '"format_version":9'), "format_version 9"),
        ]
        for text, says in cases:
            _set_message(store, "r", 2, text)
            with pytest.raises(tether.CheckpointCorruptError) as info:
                await mailbox.load_messages("r")
            for part in ["'r'", says, *_where(store, 2)]:
                assert part in str(info.value), f"{part!r} not in {info.value}"
            # A read that starts after the damage does not see it.
            assert list(await mailbox.load_messages("r", after=2)) == sent[2:]
        _set_message(store, "r", 2, None)
        with pytest.raises(tether.CheckpointCorruptError, match="missing") as info:
            await mailbox.load_messages("r", after=1)
        for part in ["'r'", *_where(store, 2)]:
            assert part in str(info.value), f"{part!r} not in {info.value}"
        assert list(await mailbox.load_messages("r", after=2)) == sent[2:]


@pytest.mark.tether_stores(*DURABLE)
async def test_sends_from_two_store_objects_on_one_location_take_distinct_seqs(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    """As two processes would: each store object has its own connections, threads, locks."""
    first = tether_raw_store_factory()
    second = reopen_store(first)
    async with opened(first) as a, opened(second) as b:
        await first.create_run(_record("r", status=RunStatus.WAITING))
        sent: list[Message] = []

        async def send(mailbox: MailboxStore, i: int) -> None:
            sent.append(await mailbox.send_message("r", "n", str(i), now=T0 + timedelta(hours=i)))

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(send, (a, b)[i % 2], i)
        assert sorted(m.seq for m in sent) == list(range(1, 21))
        loaded = list(await b.load_messages("r"))
        assert sorted(loaded, key=lambda m: m.value) == sorted(sent, key=lambda m: m.value)
        record = await second.get_run("r")
        # Whichever send came first woke the run; later ones kept its earlier wake_at.
        assert record is not None and record.wake_at == min(m.sent_at for m in sent)


# -- older schemas and folders, upgraded in place -----------------------------------------------


async def test_an_sqlite_file_of_schema_5_gets_a_mailbox(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    store = tether.SQLiteStore(path)
    await store.open()
    await store.close()
    # Back to schema version 5, as the previous tether left it, with a parked run.
    conn = sqlite3.connect(path)
    with conn:
        back_to_6(conn)
        conn.execute("DROP TABLE messages")
        due = T0 + timedelta(days=3)
        parked = _record("old", status=RunStatus.WAITING, wake_at=due)
        conn.execute(
            "INSERT INTO runs (run_id, data, status, workflow, wake_at) VALUES (?, ?, ?, ?, ?)",
            ("old", dumps_record(parked.to_json()), "waiting", "wf", due.timestamp()),
        )
        conn.execute("PRAGMA user_version = 5")
    conn.close()
    async with opened(tether.SQLiteStore(path)) as mailbox:
        assert list(await mailbox.load_messages("old")) == []
        message = await mailbox.send_message("old", "approve", "true", now=T0)
        assert message.seq == 1 and list(await mailbox.load_messages("old")) == [message]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (tether.stores.SCHEMA_VERSION,)
    assert conn.execute("SELECT wake_at FROM runs WHERE run_id = 'old'").fetchone() == (
        T0.timestamp(),
    )
    conn.close()


async def test_a_postgres_schema_of_version_3_gets_a_mailbox(
    postgres_server: _postgres.PostgresServer,
) -> None:
    store = postgres_server.store()
    async with opened(store):
        await store.create_run(_record("old", status=RunStatus.PAUSED))
    _postgres.as_schema_4(postgres_server, store.schema)
    schema = f'"{store.schema}"'
    postgres_server.sql(f"DROP TABLE {schema}.messages")
    postgres_server.sql(f"UPDATE {schema}.tether_schema SET version = 3")
    again = postgres_server.reopen(store)
    async with opened(again) as mailbox:
        message = await mailbox.send_message("old", "approve", "true", now=T0)
        assert list(await mailbox.load_messages("old")) == [message]
    assert postgres_server.sql(f"SELECT version FROM {schema}.tether_schema") == [
        (PG_SCHEMA_VERSION,)
    ]


async def test_a_file_store_run_folder_without_a_mailbox_gets_one_with_its_first_message(
    tmp_path: Path,
) -> None:
    store = tether.FileStore(tmp_path / "files")
    async with opened(store) as mailbox:
        await store.create_run(_record("old"))
        folder = store.directory / "old"
        # What an older tether wrote (and a run that has no message yet): no mailbox folder.
        assert sorted(p.name for p in folder.iterdir()) == ["entries", "run.json"]
        assert list(await mailbox.load_messages("old")) == []
        assert not (folder / "messages").exists(), "a read made the mailbox folder"
        message = await mailbox.send_message("old", "approve", "true", now=T0)
        assert list(await mailbox.load_messages("old")) == [message]
        assert [p.name for p in (folder / "messages").iterdir()] == ["000000000001.json"]
        (folder / "messages" / "notes.txt").write_text("hi", encoding="utf-8")
        with pytest.raises(tether.CheckpointCorruptError, match="unexpected name in a mailbox"):
            await mailbox.load_messages("old")


# -- PostgreSQL: a lost acknowledgement ----------------------------------------------------------


async def test_a_postgres_send_whose_answer_was_lost_is_stored_once(
    postgres_server: _postgres.PostgresServer,
) -> None:
    store = postgres_server.store()
    async with opened(store) as mailbox:
        await store.create_run(_record("r"))
        lost = _lose_one_ack(store, "_in_thread")
        message = await mailbox.send_message("r", "approve", "true", now=T0)
        assert lost, "the acknowledgement was not lost"
        assert message.seq == 1
        assert list(await mailbox.load_messages("r")) == [message]
        again = await mailbox.send_message("r", "approve", "true", now=T0)
        assert again.seq == 2, "a second send of the same message is a second message"


# -- a property: durable mailboxes behave like MemoryStore's --------------------------------------

RUN_IDS = ("a", "b")
STATUSES = [RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.WAITING, RunStatus.COMPLETED]
mailbox_operations = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.sampled_from(RUN_IDS)),
        st.tuples(st.just("status"), st.sampled_from(RUN_IDS), st.sampled_from(STATUSES)),
        st.tuples(st.just("send"), st.sampled_from((*RUN_IDS, "x")), st.sampled_from("pq")),
        st.tuples(st.just("load"), st.sampled_from((*RUN_IDS, "x")), st.integers(0, 4)),
        st.tuples(st.just("get"), st.sampled_from(RUN_IDS)),
        st.tuples(st.just("delete"), st.sampled_from(RUN_IDS)),
        st.tuples(st.just("reopen")),
    ),
    max_size=20,
)


async def _apply(store: Store, ops: list[tuple[Any, ...]]) -> list[object]:
    """Apply *ops* to *store*; return every outcome (a value, or the error type)."""
    return await apply_ops(store, ops, _do, _last)


async def _do(store: Store, i: int, name: str, args: list[Any]) -> list[object]:
    now = T0 + timedelta(minutes=i)
    mailbox = mailbox_of(store)
    assert mailbox is not None
    if name == "create":
        await store.create_run(_record(args[0], created_at=now, updated_at=now))
        return []
    if name == "status":
        # A waiting run waits for messages (no wake_at) or on a timer an hour off.
        wake_at = now + timedelta(hours=1) if i % 2 else None
        record = _record(args[0], status=args[1], created_at=T0, updated_at=now)
        if args[1] is RunStatus.WAITING:
            record = attrs.evolve(record, wake_at=wake_at)
        await store.update_run(record)
        return []
    if name == "send":
        return [await mailbox.send_message(args[0], args[1], str(i), now=now)]
    if name == "load":
        return [list(await mailbox.load_messages(args[0], after=args[1]))]
    if name == "get":
        return [await store.get_run(args[0])]
    assert name == "delete"
    return [await store.delete_run(args[0])]  # type: ignore[attr-defined]


async def _last(store: Store) -> list[object]:
    outcomes: list[object] = []
    for run_id in (*RUN_IDS, "x"):
        mailbox = mailbox_of(store)
        assert mailbox is not None
        outcomes.append(list(await mailbox.load_messages(run_id)))
        outcomes.append(await store.get_run(run_id))
    return outcomes


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@given(ops=mailbox_operations)
@PROPERTY_SETTINGS
def test_durable_mailboxes_behave_like_the_memory_store(
    kind: str, ops: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    expected, got = on_both(_apply, kind, tmp_path, ops)
    assert got == expected
