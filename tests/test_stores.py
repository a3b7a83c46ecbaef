"""Every store passes the conformance suite; each check catches a store that breaks it.

Also: strict reads of damaged files and rows, run-id safety of FileStore,
SQLite's group commit, schema version and withdrawal of cancelled saves, and
ClockHoldingStore under an autojumping clock. Thread-backed stores run on the
real clock here (an autojumping clock would treat their threads as idle).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import itertools
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether.stores import (
    Entry,
    EntryKind,
    EntryStatus,
    ErrorInfo,
    RecordDecodeError,
    RunRecord,
    RunStatus,
    Store,
    dumps_record,
    loads_record,
    utcnow,
)
from tether.testing import CHECKS, StoreConformanceError, Tamperer, check_store

from . import _postgres
from ._differential import PROPERTY_SETTINGS, apply_ops, on_both
from ._json_store import JsonStore, json_corrupt
from .conftest import make_store, reopen_store

# -- corrupting stored records, by store kind ----------------------------------------------


def sqlite_corrupt(store: Store, run_id: str, seq: int | None) -> None:
    assert isinstance(store, tether.SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        if seq is None:
            conn.execute("UPDATE runs SET data = '{\"run_id\":' WHERE run_id = ?", (run_id,))
        else:
            conn.execute(
                "UPDATE entries SET data = '{\"run_id\":' WHERE run_id = ? AND seq = ?",
                (run_id, seq),
            )
    conn.close()


def file_corrupt(store: Store, run_id: str, seq: int | None) -> None:
    assert isinstance(store, tether.FileStore)
    folder = store.directory / run_id
    path = folder / "run.json" if seq is None else folder / "entries" / f"{seq:012d}.json"
    path.write_text('{"run_id":', encoding="utf-8")


def postgres_corrupt(store: Store, run_id: str, seq: int | None) -> None:
    assert isinstance(store, tether.PostgresStore)
    table = "runs" if seq is None else "entries"
    where = "run_id = %s" + ("" if seq is None else " AND seq = %s")
    params = (run_id,) if seq is None else (run_id, seq)
    query = f'UPDATE "{store.schema}".{table} SET data = \'{{"run_id":\' WHERE {where}'
    _postgres.start_once().sql(query, *params)


CORRUPTERS: dict[str, Callable[[Store, str, int | None], None] | None] = {
    "memory": None,
    "sqlite": sqlite_corrupt,
    "file": file_corrupt,
    "postgres": postgres_corrupt,
}


def _other_digit(data: str) -> str:
    """*data* (an entry's stored JSON) with the first digit of its value changed."""
    head, sep, value = data.partition('"value":')
    digit = next(i for i, c in enumerate(value) if c.isdigit())
    changed = str((int(value[digit]) + 1) % 10)
    return head + sep + value[:digit] + changed + value[digit + 1 :]


def sqlite_remove(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, tether.SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM entries WHERE run_id = ? AND seq = ?", (run_id, seq))
    conn.close()


def sqlite_alter(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, tether.SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        where = (run_id, seq)
        (data,) = conn.execute(
            "SELECT data FROM entries WHERE run_id = ? AND seq = ?", where
        ).fetchone()
        conn.execute(
            "UPDATE entries SET data = ? WHERE run_id = ? AND seq = ?", (_other_digit(data), *where)
        )
    conn.close()


def _entry_file(store: Store, run_id: str, seq: int) -> Path:
    assert isinstance(store, tether.FileStore)
    return store.directory / run_id / "entries" / f"{seq:012d}.json"


def file_remove(store: Store, run_id: str, seq: int) -> None:
    _entry_file(store, run_id, seq).unlink()


def file_alter(store: Store, run_id: str, seq: int) -> None:
    path = _entry_file(store, run_id, seq)
    path.write_text(_other_digit(path.read_text(encoding="utf-8")), encoding="utf-8")


def postgres_remove(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, tether.PostgresStore)
    query = f'DELETE FROM "{store.schema}".entries WHERE run_id = %s AND seq = %s'
    _postgres.start_once().sql(query, run_id, seq)


def postgres_alter(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, tether.PostgresStore)
    server, table = _postgres.start_once(), f'"{store.schema}".entries'
    ((data,),) = server.sql(f"SELECT data FROM {table} WHERE run_id = %s AND seq = %s", run_id, seq)
    query = f"UPDATE {table} SET data = %s WHERE run_id = %s AND seq = %s"
    server.sql(query, _other_digit(data), run_id, seq)


#: remove= and alter= hooks of check_store, by store kind.
TAMPERERS: dict[str, tuple[Tamperer, Tamperer] | None] = {
    "memory": None,
    "sqlite": (sqlite_remove, sqlite_alter),
    "file": (file_remove, file_alter),
    "postgres": (postgres_remove, postgres_alter),
}


async def test_every_store_passes_the_conformance_suite(
    tether_store_kind: str, tether_raw_store_factory: Callable[[], Store]
) -> None:
    remove, alter = TAMPERERS[tether_store_kind] or (None, None)
    result = await check_store(
        tether_raw_store_factory,
        reopen=reopen_store,
        corrupt=CORRUPTERS[tether_store_kind],
        remove=remove,
        alter=alter,
    )
    assert set(result.passed) | {name for name, _ in result.skipped} == set(CHECKS)
    if tether_store_kind == "memory":
        skipped = ["strict_reads", "journal_gap", "entry_checksum"]
    else:
        skipped = ["watch", "message_watch"] if tether_store_kind in ("sqlite", "file") else []
    assert [name for name, _ in result.skipped] == skipped


async def test_a_planted_unfenced_batch_write_is_caught(
    tether_store_kind: str,
    tether_raw_store_factory: Callable[[], Store],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group commit that stores the appends of many runs without each one's fence
    check (here: none at all) fails batch_fencing."""
    if tether_store_kind not in ("sqlite", "postgres"):
        pytest.skip(f"the {tether_store_kind} store commits no writes of many runs together")
    writer = importlib.import_module(f"tether.stores._{tether_store_kind}_writer")
    monkeypatch.setattr(writer, "check_append", lambda *args, **kwargs: None)
    with pytest.raises(StoreConformanceError, match="batch_fencing"):
        await check_store(tether_raw_store_factory, only=["batch_fencing"])


def _sqlite_store(paths: Iterator[Path], group_commit: bool) -> Store:
    return tether.SQLiteStore(next(paths), group_commit=group_commit)


async def test_sqlite_passes_with_durable_defaults_and_without_group_commit(
    tmp_path: Path,
) -> None:
    paths = (tmp_path / f"{i}.db" for i in range(100))
    for group in (True, False):
        result = await check_store(
            functools.partial(_sqlite_store, paths, group),
            reopen=reopen_store,
            corrupt=sqlite_corrupt,
            only=["concurrent_appends", "cancelled_append_atomic", "reopen", "strict_reads"],
        )
        assert len(result.passed) == 4


async def test_one_check_alone_and_unknown_names() -> None:
    result = await check_store(tether.MemoryStore, only=["concurrent_appends"])
    assert result.passed == ("concurrent_appends",)

    async def async_factory() -> Store:
        return tether.MemoryStore()

    assert (await check_store(async_factory, only=["append_seqs"])).passed == ("append_seqs",)
    with pytest.raises(ValueError, match="no_such_check"):
        await check_store(tether.MemoryStore, only=["no_such_check"])


# -- small deliberately broken stores: each check must catch its rule broken ---------------


class LateSeqStore(JsonStore):
    """Breaks concurrent appends: reads the next seq, then awaits, then writes."""

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        if run_id not in self.journals:
            await trio.lowlevel.checkpoint()
            raise tether.RunNotFoundError(run_id)
        out = []
        for entry in entries:
            stored = self.stored_twin(run_id, entry)
            if stored is None:
                stored = entry.stored_as(len(self.journals[run_id]) + 1)
                await trio.lowlevel.checkpoint()  # another append takes the same seq
                self.journals[run_id].append(dumps_record(stored.to_json()))
            out.append(stored)
        return out


class TornStore(JsonStore):
    """Breaks atomicity: writes the entry without its value, awaits, then completes it."""

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        if run_id not in self.journals:
            raise tether.RunNotFoundError(run_id)
        out = []
        for entry in entries:
            stored = self.stored_twin(run_id, entry)
            if stored is None:
                journal = self.journals[run_id]
                stored = entry.stored_as(len(journal) + 1)
                data = stored.to_json()
                journal.append(dumps_record({**data, "value": None}))
                await trio.lowlevel.checkpoint()  # a cancellation here leaves it torn
                journal[-1] = dumps_record(data)
            out.append(stored)
        return out


class SkippingStore(JsonStore):
    """Breaks strict reads: drops what it cannot decode and returns the rest."""

    def decode_entries(self, run_id: str) -> list[Entry]:
        out = []
        for text in self.journals.get(run_id, ()):
            try:
                out.append(loads_record(text, Entry.from_json))
            except RecordDecodeError:
                continue
        return out

    async def get_run(self, run_id: str) -> RunRecord | None:
        try:
            return await super().get_run(run_id)
        except tether.CheckpointCorruptError:
            return None

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        await trio.lowlevel.checkpoint()
        out = []
        for run_id in self.runs:
            try:
                out.append(self.decode_run(run_id))
            except tether.CheckpointCorruptError:
                continue
        return out


class ForgetfulStore(JsonStore):
    """Breaks idempotency: every append stores a new copy."""

    def stored_twin(self, run_id: str, entry: Entry) -> Entry | None:
        return None


class SharedListStore(JsonStore):
    """Breaks "reads return copies": hands out its own journal list."""

    def __init__(self) -> None:
        super().__init__()
        self.shared: dict[str, list[Entry]] = {}

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        out = await super().append(run_id, entries)
        self.shared.setdefault(run_id, []).extend(out)
        return out

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return self.shared.setdefault(run_id, [])


class SortedListStore(JsonStore):
    """Breaks "oldest first": lists runs by id."""

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        return sorted(await super().list_runs(**filters), key=lambda r: r.run_id)


@pytest.mark.parametrize(
    ("broken", "check", "says"),
    [
        (LateSeqStore, "concurrent_appends", "distinct seqs"),
        (TornStore, "cancelled_append_atomic", "changed after it was stored"),
        (SkippingStore, "strict_reads", "no CheckpointCorruptError"),
        (ForgetfulStore, "idempotent_append", "re-append returned"),
        (ForgetfulStore, "cancelled_append_atomic", "2 copies stored"),
        (SharedListStore, "reads_are_copies", "shares its list"),
        (SortedListStore, "list_runs_order", "list_runs order"),
    ],
)
async def test_each_check_catches_a_store_that_breaks_its_rule(
    broken: type[JsonStore], check: str, says: str
) -> None:
    with pytest.raises(StoreConformanceError) as info:
        await check_store(broken, only=[check], corrupt=json_corrupt)
    assert [name for name, _ in info.value.failures] == [check]
    assert says in str(info.value)


async def test_all_failures_are_reported_together() -> None:
    with pytest.raises(StoreConformanceError) as info:
        await check_store(LateSeqStore, corrupt=json_corrupt)
    failed = [name for name, _ in info.value.failures]
    assert "concurrent_appends" in failed
    assert "run_round_trip" not in failed  # the rest still ran, and passed
    assert "concurrent_appends" in str(info.value)


def test_the_write_a_store_example_passes(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parent.parent / "examples" / "custom_store.py"
    spec = importlib.util.spec_from_file_location("_tether_example_custom_store", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trio.run(module.main)
    out = capsys.readouterr().out
    assert "strict_reads" in out and "SQLiteStore passed too" in out


# -- strict reads of damaged records: SQLite and FileStore ----------------------------------


def _mutate_json(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        data = json.loads(text)
        change(data)
        return json.dumps(data)

    return apply


def _set(field: str, value: Any) -> Callable[[str], str]:
    return _mutate_json(lambda d: d.__setitem__(field, value))


def _drop(field: str) -> Callable[[str], str]:
    return _mutate_json(lambda d: d.__delitem__(field))


#: Damage done to the JSON text of a stored record, by name.
DAMAGE: dict[str, Callable[[str], str]] = {
    "truncated": lambda t: t[: len(t) // 2],
    "empty": lambda t: "",
    "not an object": lambda t: "[1, 2]",
    "duplicate key": lambda t: t[:-1] + ',"run_id":"r"}',
    "NaN": lambda t: t[:-1] + ',"nan":NaN}',
    "unknown field": _set("extra", 1),
    "wrong type": _set("created_at", 5),
    "invalid timestamp": _set("created_at", "yesterday"),
    "naive timestamp": _set("created_at", "2026-01-02T03:04:05"),
    "other run": _set("run_id", "someone-else"),
}
ENTRY_DAMAGE: dict[str, Callable[[str], str]] = {
    **{k: v for k, v in DAMAGE.items() if k not in {"wrong type", "invalid timestamp"}},
    "missing field": _drop("args_digest"),
    "wrong type": _set("attempt", "1"),
    "bool for int": _set("attempt", True),
    "unknown kind": _set("kind", "magic"),
    "invalid timestamp": _set("started_at", "2026-13-45T00:00:00+00:00"),
    "naive timestamp": _set("finished_at", "2026-01-02T03:04:05"),
    "seq disagrees": _set("seq", 2),
    "bad error": _set("error", {"type": "X"}),
}
RUN_DAMAGE: dict[str, Callable[[str], str]] = {
    **DAMAGE,
    "missing field": _drop("workflow"),
    "requests not strings": _set("requests", [1]),
    "newer format": _set("format_version", 99),
    "unknown status": _set("status", "sleeping"),
}


@asynccontextmanager
async def seeded(store: Store, run_id: str = "r", n: int = 3) -> AsyncIterator[None]:
    """*store*, open for the block, holding runs "older" and *run_id* with *n* entries."""
    await store.open()
    try:
        now = utcnow()
        await store.create_run(
            RunRecord(run_id="older", workflow="w", args="[]", created_at=now, updated_at=now)
        )
        await store.create_run(
            RunRecord(run_id=run_id, workflow="w", args="[]", created_at=utcnow(), updated_at=now)
        )
        for i in range(n):
            await store.append(
                run_id, [Entry(run_id=run_id, key=f"s#{i}", started_at=now, finished_at=now)]
            )
        yield
    finally:
        await store.close()


def _entry_location(store: Store, run_id: str, seq: int) -> str:
    if isinstance(store, tether.FileStore):
        return str(store.directory / run_id / "entries" / f"{seq:012d}.json")
    return f"table entries, seq {seq}"


def _damage_entry(store: Store, run_id: str, seq: int, damage: Callable[[str], str]) -> None:
    if isinstance(store, tether.FileStore):
        path = store.directory / run_id / "entries" / f"{seq:012d}.json"
        path.write_text(damage(path.read_text(encoding="utf-8")), encoding="utf-8")
        return
    assert isinstance(store, tether.SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        (text,) = conn.execute(
            "SELECT data FROM entries WHERE run_id = ? AND seq = ?", (run_id, seq)
        ).fetchone()
        conn.execute(
            "UPDATE entries SET data = ? WHERE run_id = ? AND seq = ?",
            (damage(text), run_id, seq),
        )
    conn.close()


def _damage_run(store: Store, run_id: str, damage: Callable[[str], str]) -> str:
    """Damage the run record; return its location as error messages name it."""
    if isinstance(store, tether.FileStore):
        path = store.directory / run_id / "run.json"
        path.write_text(damage(path.read_text(encoding="utf-8")), encoding="utf-8")
        return str(path)
    assert isinstance(store, tether.SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        (rowid, text) = conn.execute(
            "SELECT id, data FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        conn.execute("UPDATE runs SET data = ? WHERE run_id = ?", (damage(text), run_id))
    conn.close()
    return f"table runs, rowid {rowid}"


durable = pytest.mark.parametrize("kind", ["sqlite", "file"])


@durable
@pytest.mark.parametrize("damage", sorted(ENTRY_DAMAGE))
async def test_a_damaged_newest_entry_is_never_skipped(
    kind: str, damage: str, tmp_path: Path
) -> None:
    store = make_store(kind, tmp_path)
    async with seeded(store):
        _damage_entry(store, "r", 3, ENTRY_DAMAGE[damage])
        with pytest.raises(tether.CheckpointCorruptError) as info:
            await store.load_entries("r")
        message = str(info.value)
        assert "'r'" in message and _entry_location(store, "r", 3) in message, message
        # The damaged entry also stops appends that look for duplicates
        # (FileStore reads the journal first) or is left alone (SQLite):
        # either way nothing is lost and nothing older is returned.
        assert await store.load_entries("older") == []


@durable
@pytest.mark.parametrize("damage", sorted(RUN_DAMAGE))
async def test_a_damaged_run_record_raises_on_get_and_list(
    kind: str, damage: str, tmp_path: Path
) -> None:
    store = make_store(kind, tmp_path)
    async with seeded(store):
        where = _damage_run(store, "r", RUN_DAMAGE[damage])
        for call in (lambda: store.get_run("r"), store.list_runs):
            with pytest.raises(tether.CheckpointCorruptError) as info:
                await call()
            message = str(info.value)
            assert "'r'" in message and where in message, message
        older = await store.get_run("older")
        assert older is not None


async def test_sqlite_rows_with_bad_values(tmp_path: Path) -> None:
    store = tether.SQLiteStore(tmp_path / "s.db")
    async with seeded(store):
        for sql, params in [
            ("UPDATE entries SET data = 5 WHERE seq = 3", ()),
            ("UPDATE entries SET data = ? WHERE seq = 3", (b"{}",)),
            ("UPDATE entries SET seq = 'three' WHERE seq = 3", ()),
        ]:
            with sqlite3.connect(store.path) as conn:
                (saved,) = conn.execute("SELECT data FROM entries WHERE rowid = 3").fetchone()
                conn.execute(sql, params)
            conn.close()
            with pytest.raises(tether.CheckpointCorruptError, match=r"'r'.*table entries"):
                await store.load_entries("r")
            with sqlite3.connect(store.path) as conn:
                conn.execute("UPDATE entries SET seq = 3, data = ? WHERE rowid = 3", (saved,))
            conn.close()
            assert len(await store.load_entries("r")) == 3
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE runs SET data = 7 WHERE run_id = 'r'")
        conn.close()
        with pytest.raises(tether.CheckpointCorruptError, match=r"'r'.*table runs, rowid 2"):
            await store.list_runs()


async def test_file_store_damage_of_the_file_system_kind(tmp_path: Path) -> None:
    store = tether.FileStore(tmp_path / "fs")
    outside = tmp_path / "outside.json"
    async with seeded(store):
        entries = store.directory / "r" / "entries"
        newest = entries / "000000000003.json"
        good = newest.read_bytes()
        second = (entries / "000000000002.json").read_bytes()
        outside.write_bytes(good)

        def expect(problem: str, path: Path) -> Callable[[], Any]:
            async def check() -> None:
                with pytest.raises(tether.CheckpointCorruptError) as info:
                    await store.load_entries("r")
                message = str(info.value)
                assert "'r'" in message and str(path) in message and problem in message, message

            return check

        def a_folder() -> None:
            newest.unlink()
            newest.mkdir()

        def a_broken_link() -> None:
            newest.unlink()
            newest.symlink_to(tmp_path / "gone.json")

        def a_link_out() -> None:
            newest.unlink()
            newest.symlink_to(outside)

        def invalid_utf8() -> None:
            newest.write_bytes(b'{"run_id": "\xff"}')

        def a_stranger() -> None:
            (entries / "notes.txt").write_text("hi")

        def a_gap() -> None:
            (entries / "000000000002.json").rename(entries / "000000000005.json")

        cases: list[tuple[str, Callable[[], None], str, Path]] = [
            ("a folder", a_folder, "not a regular file", newest),
            ("a broken link", a_broken_link, "cannot be read", newest),
            ("a link out", a_link_out, "cannot be read", newest),
            ("invalid UTF-8", invalid_utf8, "not valid JSON", newest),
            ("a stranger", a_stranger, "unexpected name", entries / "notes.txt"),
            ("a gap", a_gap, "seq 2 is missing", entries / "000000000002.json"),
        ]
        for name, damage, problem, path in cases:
            damage()
            await expect(problem, path)()
            # Repair, by hand, as a user would.
            for p in (newest, entries / "notes.txt", entries / "000000000005.json"):
                if p.is_symlink() or p.is_file():
                    p.unlink()
                elif p.is_dir():
                    p.rmdir()
            newest.write_bytes(good)
            if not (entries / "000000000002.json").exists():
                (entries / "000000000002.json").write_bytes(second)
            assert len(await store.load_entries("r")) == 3, name

        # Temporary files of writes in progress are not read.
        (entries / ".tmp-123.json").write_text("{")
        assert len(await store.load_entries("r")) == 3

        # A run folder that is a link is refused, wherever it points.
        elsewhere = tmp_path / "elsewhere"
        (store.directory / "r").rename(elsewhere)
        (store.directory / "r").symlink_to(elsewhere)
        for call in (
            lambda: store.get_run("r"),
            lambda: store.load_entries("r"),
            store.list_runs,
            lambda: store.append(
                "r", [Entry(run_id="r", key="x#0", started_at=utcnow(), finished_at=utcnow())]
            ),
        ):
            with pytest.raises(tether.CheckpointCorruptError, match="symbolic link"):
                await call()
        assert sorted(p.name for p in (elsewhere / "entries").glob("0*")) == [
            f"{i:012d}.json" for i in (1, 2, 3)
        ]
        # A folder in place of run.json.
        (store.directory / "r").unlink()
        elsewhere.rename(store.directory / "r")
        (store.directory / "r" / "run.json").unlink()
        (store.directory / "r" / "run.json").mkdir()
        with pytest.raises(tether.CheckpointCorruptError, match=r"run\.json: is not a regular"):
            await store.get_run("r")


BAD_IDS = ["", "a\0b", "x" * 201, "a\udc80b"]
ODD_IDS = [".", "..", "../x", "a/b", "/etc", "a\\b", ".hidden", "tab\there"]


@pytest.mark.parametrize("run_id", BAD_IDS + ODD_IDS)
async def test_file_store_run_ids_never_leave_the_directory(run_id: str, tmp_path: Path) -> None:
    store = tether.FileStore(tmp_path / "fs")
    await store.open()
    now = utcnow()
    try:
        record = RunRecord(run_id=run_id, workflow="w", args="[]", created_at=now, updated_at=now)
        entry = Entry(run_id=run_id, key="k#0", started_at=now, finished_at=now)
        if run_id in BAD_IDS:  # refused, as by every store
            for call in (
                lambda: store.create_run(record),
                lambda: store.update_run(record),
                lambda: store.get_run(run_id),
                lambda: store.load_entries(run_id),
                lambda: store.append(run_id, [entry]),
            ):
                with pytest.raises(tether.UsageError, match="run id"):
                    await call()
        else:  # kept exactly, in a folder named by its digest
            await store.create_run(record)
            await store.append(run_id, [entry])
            assert await store.get_run(run_id) == record
            assert [e.key for e in await store.load_entries(run_id)] == ["k#0"]
    finally:
        await store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fs"]  # noqa: ASYNC240
    names = [p.name for p in (tmp_path / "fs").iterdir()]
    assert names == ([] if run_id in BAD_IDS else [".r-" + _sha256(run_id)])


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_file_store_keys_stay_inside_files(tmp_path: Path) -> None:
    store = tether.FileStore(tmp_path / "fs")
    await store.open()
    now = utcnow()
    await store.create_run(
        RunRecord(run_id="r", workflow="w", args="[]", created_at=now, updated_at=now)
    )
    (stored,) = await store.append(
        "r", [Entry(run_id="r", key="../../../etc/passwd#0", started_at=now, finished_at=now)]
    )
    await store.close()
    assert stored.seq == 1
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))  # noqa: ASYNC240
    assert files == [
        "fs",
        "fs/r",
        "fs/r/.lock",
        "fs/r/entries",
        "fs/r/entries/000000000001.json",
        "fs/r/run.json",
    ]


# -- SQLite specifics -------------------------------------------------------------------------


async def _entries_in_parallel(store: tether.SQLiteStore, n: int) -> None:
    now = utcnow()
    await store.create_run(
        RunRecord(run_id="g", workflow="w", args="[]", created_at=now, updated_at=now)
    )
    store._gate.clear()  # the writer waits: every save queues up
    before = len(store._batches)
    async with trio.open_nursery() as nursery:
        for i in range(n):
            entry = Entry(run_id="g", key=f"p#{i}", started_at=now, finished_at=now)
            nursery.start_soon(store.append, "g", [entry])
        await trio.testing.wait_all_tasks_blocked()
        store._gate.set()
    assert len(await store.load_entries("g")) == n
    for _ in range(before):
        store._batches.popleft()


@pytest.mark.parametrize("group_commit", [True, False])
async def test_sqlite_group_commits_waiting_saves(group_commit: bool, tmp_path: Path) -> None:
    store = tether.SQLiteStore(tmp_path / "g.db", group_commit=group_commit)
    await store.open()
    try:
        await _entries_in_parallel(store, 20)
        assert list(store._batches) == ([20] if group_commit else [1] * 20)
    finally:
        await store.close()


async def test_sqlite_one_batch_with_duplicates_and_a_missing_run(tmp_path: Path) -> None:
    """A batch holding re-appended entries (stored before, or twice in the batch)
    and an append to a missing run: the batch is redone job by job, so the
    duplicates return the stored entries, the missing run fails alone, and
    the rest is stored in one transaction."""
    store = tether.SQLiteStore(tmp_path / "d.db")
    await store.open()
    now = utcnow()

    def entry(key: str, attempt: int = 1, run_id: str = "d") -> Entry:
        return Entry(run_id=run_id, key=key, started_at=now, finished_at=now, attempt=attempt)

    try:
        await store.create_run(
            RunRecord(run_id="d", workflow="w", args="[]", created_at=now, updated_at=now)
        )
        (old,) = await store.append("d", [entry("old#0")])
        store._gate.clear()
        before = len(store._batches)
        got: dict[str, Any] = {}

        async def append(name: str, run_id: str, entries: list[Entry]) -> None:
            try:
                got[name] = await store.append(run_id, entries)
            except tether.RunNotFoundError as exc:
                got[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, "new", "d", [entry("a#0"), entry("b#0")])
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(append, "again", "d", [entry("old#0")])
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(append, "twice", "d", [entry("a#0"), entry("a#0", attempt=2)])
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(append, "missing", "nope", [entry("x#0", run_id="nope")])
            await trio.testing.wait_all_tasks_blocked()
            store._gate.set()
        assert list(store._batches)[before:] == [4]
        a, b = got["new"]
        assert (a.seq, b.seq) == (2, 3)
        assert got["again"] == [old]
        assert got["twice"][0] == a
        assert got["twice"][1].seq == 4 and got["twice"][1].attempt == 2
        assert isinstance(got["missing"], tether.RunNotFoundError)
        loaded = list(await store.load_entries("d"))
        assert [(e.key, e.seq) for e in loaded] == [
            ("old#0", 1),
            ("a#0", 2),
            ("b#0", 3),
            ("a#0", 4),
        ]
    finally:
        store._gate.set()
        await store.close()


_ODD_ENTRIES = [
    Entry(
        run_id='r"\\\n\u00e9\u2028\x01',  # (NUL is the one control character refused)
        key="k\u2603/\u00e9#0",
        kind=EntryKind.STREAM,
        status=EntryStatus.FAILED,
        error=ErrorInfo(type="ValueError", message='bad "x"\n\t\U0001f600', key=None),
        started_at=datetime(2020, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        finished_at=datetime(2020, 1, 1, 1, 2, 3, 4, tzinfo=UTC),
        attempt=7,
    ),
    Entry(
        run_id="r",
        key="k#1",
        kind=EntryKind.RESPONSE,
        status=EntryStatus.INTERRUPTED,
        value='{"a": [1, "\u00e9"]}',
        error=ErrorInfo(type="T", message="", key="s#1"),
        args_digest="abc",
        started_at=datetime(2020, 1, 1, tzinfo=timezone(-timedelta(hours=3))),
        finished_at=datetime(2021, 2, 3, 4, 5, 6, 789, tzinfo=UTC),
    ),
    Entry(run_id="r", key="k#2", value="1", started_at=utcnow(), finished_at=utcnow()),
]


@pytest.mark.parametrize("entry", _ODD_ENTRIES)
async def test_sqlite_stores_the_canonical_json_and_idempotency_key(
    entry: Entry, tmp_path: Path
) -> None:
    from tether.stores._sqlite_rows import encode_entry, generic_encode_entry

    assert encode_entry(entry) == generic_encode_entry(entry)
    assert encode_entry(entry)[0] == entry.idempotency_key
    store = tether.SQLiteStore(tmp_path / "c.db")
    await store.open()
    try:
        now = utcnow()
        run = RunRecord(
            run_id=entry.run_id, workflow="w", args="[]", created_at=now, updated_at=now
        )
        await store.create_run(run)
        (stored,) = await store.append(entry.run_id, [entry])
        assert stored == entry.stored_as(1)
        assert await store.append(entry.run_id, [entry]) == [stored]
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "c.db")) as conn:
        rows = conn.execute("SELECT ikey, data FROM entries").fetchall()
    assert rows == [(entry.idempotency_key, dumps_record(stored.to_json()))]


async def test_sqlite_a_save_cancelled_while_queued_is_withdrawn(tmp_path: Path) -> None:
    store = tether.SQLiteStore(tmp_path / "w.db")
    await store.open()
    now = utcnow()
    try:
        await store.create_run(
            RunRecord(run_id="w", workflow="w", args="[]", created_at=now, updated_at=now)
        )
        store._gate.clear()
        with trio.move_on_after(0.05) as scope:
            await store.append("w", [Entry(run_id="w", key="a#0", started_at=now, finished_at=now)])
        assert scope.cancelled_caught
        store._gate.set()
        (kept,) = await store.append(
            "w", [Entry(run_id="w", key="b#0", started_at=now, finished_at=now)]
        )
        assert kept.seq == 1
        assert [e.key for e in await store.load_entries("w")] == ["b#0"]
    finally:
        await store.close()


async def test_sqlite_refuses_a_newer_schema_and_foreign_files(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = tether.SQLiteStore(path)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {tether.stores.SCHEMA_VERSION + 1}")
    conn.close()
    newer = tether.stores.SCHEMA_VERSION + 1
    with pytest.raises(
        tether.StoreError, match=rf"{path}.*version {newer}.*version {tether.stores.SCHEMA_VERSION}"
    ):
        await tether.SQLiteStore(path).open()

    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(tether.StoreError, match="not a tether store"):
        await tether.SQLiteStore(foreign).open()

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    failed = tether.SQLiteStore(junk)
    with pytest.raises(tether.StoreError, match=str(junk)):
        await failed.open()
    await failed.close()  # safe after a failed open


async def test_sqlite_closes_its_thread_and_can_reopen(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    store = tether.SQLiteStore(tmp_path / "t.db")
    await store.open()
    assert len(set(threading.enumerate()) - before) >= 1
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.close()  # even while cancelled
    assert not [t for t in set(threading.enumerate()) - before if "writer" in t.name]
    await store.open()
    assert await store.list_runs() == []
    await store.close()
    with pytest.raises(tether.UsageError, match="not open"):
        await store.get_run("x")


def test_store_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(tether.UsageError, match="synchronous"):
        tether.SQLiteStore(tmp_path / "x.db", synchronous="sometimes")
    with pytest.raises(tether.UsageError, match="file"):
        tether.SQLiteStore(":memory:")
    with pytest.raises(tether.UsageError):
        tether.FileStore("")


def test_records_round_trip_through_the_strict_decoder() -> None:
    now = utcnow()
    entry = Entry(run_id="r", key="k#0", started_at=now, finished_at=now, seq=4)
    assert loads_record(dumps_record(entry.to_json()), Entry.from_json) == entry
    with pytest.raises(RecordDecodeError, match="duplicate JSON key"):
        loads_record('{"a": 1, "a": 2}', Entry.from_json)
    with pytest.raises(RecordDecodeError, match="seq"):
        Entry.from_json({**entry.to_json(), "seq": 0})


# -- ClockHoldingStore -------------------------------------------------------------------------


@tether.step
async def tick(i: int) -> int:
    await trio.sleep(1)
    return i


@tether.workflow(name="tests.test_stores.ticks")
async def ticks(n: int) -> list[int]:
    async with tether.parallel() as p:
        handles = [p.start_soon(tick, i) for i in range(n)]
    return [h.result for h in handles] + [await tick(n)]


gates: list[threading.Event] = []


@tether.step
async def stall() -> None:
    for gate in gates:
        gate.clear()  # the writer thread takes no more writes


@tether.workflow(name="tests.test_stores.stalled")
async def stalled() -> None:
    await stall()


async def test_clock_holding_store_keeps_virtual_time_still_for_threads(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A full-fsync SQLite store and a save_timeout of one millisecond of
    # virtual time: only a clock that stands still while the thread works
    # lets the saves finish.
    store = tether.testing.ClockHoldingStore(tether.SQLiteStore(tmp_path / "c.db"))
    async with tether.open_engine(store, save_timeout=0.001) as engine:
        start = trio.current_time()
        assert await engine.run(ticks, 5, run_id="c") == [0, 1, 2, 3, 4, 5]
        assert trio.current_time() - start == 2.0  # the steps' own sleeps, nothing else

    # Unwrapped, the clock jumps past the next deadline while a thread works:
    # past the lease's renewal deadline (the lease is lost while the journal
    # is read), or past save_timeout while the writer thread holds the save
    # (held at its gate here, so a wrong outcome is certain).
    bare = tether.SQLiteStore(tmp_path / "bare.db")
    gates[:] = [bare._gate]
    try:
        async with tether.open_engine(bare, save_timeout=0.001) as engine:
            with pytest.raises((tether.SaveTimeoutError, tether.LeaseLostError)):
                await engine.run(stalled, run_id="s")
            bare._gate.set()
    finally:
        bare._gate.set()


async def test_clock_holding_store_passes_errors_through(tmp_path: Path) -> None:
    store = tether.testing.ClockHoldingStore(tether.MemoryStore())
    await store.open()
    with pytest.raises(tether.RunNotFoundError):
        await store.append("x", [])
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await store.get_run("x")
    await store.close()
    result = await check_store(lambda: tether.testing.ClockHoldingStore(tether.MemoryStore()))
    assert "concurrent_appends" in result.passed


# -- a property: durable stores behave like MemoryStore --------------------------------------

RUN_IDS = ("a", "b", "c")
operations = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.sampled_from(RUN_IDS)),
        st.tuples(st.just("update"), st.sampled_from(RUN_IDS), st.sampled_from(list(RunStatus))),
        st.tuples(st.just("append"), st.sampled_from(RUN_IDS), st.integers(0, 2)),
        st.tuples(st.just("reappend"), st.sampled_from(RUN_IDS), st.integers(0, 20)),
        st.tuples(st.just("get"), st.sampled_from((*RUN_IDS, "x"))),
        st.tuples(st.just("load"), st.sampled_from((*RUN_IDS, "x"))),
        st.tuples(st.just("list")),
        st.tuples(st.just("reopen")),
    ),
    max_size=25,
)


async def _apply(store: Store, ops: list[tuple[Any, ...]]) -> list[object]:
    """Apply *ops* to *store*; return every outcome (a value, or the error type)."""
    clock = itertools.count()

    def at() -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=next(clock))

    appended: dict[str, list[Entry]] = {r: [] for r in RUN_IDS}
    created: dict[str, datetime] = {}

    async def do(store: Store, _: int, name: str, args: list[Any]) -> list[object]:
        if name == "create":
            now = at()
            record = RunRecord(
                run_id=args[0], workflow="w", args="[]", created_at=now, updated_at=now
            )
            await store.create_run(record)
            created.setdefault(args[0], now)
            return [None]
        if name == "update":
            now = at()
            record = RunRecord(
                run_id=args[0],
                workflow="w",
                args="[]",
                status=args[1],
                created_at=created.get(args[0], now),  # as the engine does
                updated_at=now,
            )
            await store.update_run(record)
            return [None]
        if name == "append":
            run_id, n = args
            batch = [
                Entry(run_id=run_id, key=f"k#{i}", started_at=at(), finished_at=at())
                for i in range(n)
            ]
            stored = list(await store.append(run_id, batch))
            appended[run_id] += batch
            return [stored]
        if name == "reappend":
            run_id, i = args
            if not appended[run_id]:
                return []
            entry = appended[run_id][i % len(appended[run_id])]
            return [list(await store.append(run_id, [entry]))]
        if name == "get":
            return [await store.get_run(args[0])]
        if name == "load":
            return [list(await store.load_entries(args[0]))]
        assert name == "list"
        return [list(await store.list_runs())]

    async def last(store: Store) -> list[object]:
        journals = [list(await store.load_entries(r)) for r in (*RUN_IDS, "x")]
        return [*journals, list(await store.list_runs())]

    return await apply_ops(store, ops, do, last)


@durable
@given(ops=operations)
@PROPERTY_SETTINGS
def test_durable_stores_behave_like_the_memory_store(
    kind: str, ops: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    expected, got = on_both(_apply, kind, tmp_path, ops)
    assert got == expected
