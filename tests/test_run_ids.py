"""Run ids: one rule for every store, held by ``check_store``, and kept exactly.

The rule (``tether.stores.check_run_id``): a ``str`` of 1 to 200 UTF-8
bytes, valid Unicode, without NUL. Every built-in store refuses any other id
with that ``UsageError`` at each call that takes one (before, SQLite and
FileStore raised ``StoreError`` for a lone surrogate, and MemoryStore stored
it: issue 25, item 4), and the engine refuses it before anything is stored.
Every valid id, control characters and ``/`` included, is kept exactly: a
FileStore keeps an id that is not safe as a folder name in a folder named by
its digest, and every id it took before in the folder named by it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio

import tether
from tether.stores import (
    MAX_RUN_ID_BYTES,
    Capability,
    FileStore,
    MailboxStore,
    RunRecord,
    RunStatus,
    Store,
    check_run_id,
    has,
)
from tether.testing import StoreConformanceError, check_store

from ._json_store import JsonStore
from .conftest import reopen_store

RUN_ID_CHECKS = ["run_id_rule", "odd_run_ids"]

INVALID = {
    "surrogate": "order-\ud800-1",
    "nul": "order-\x00-1",
    "long": "r" * (MAX_RUN_ID_BYTES + 1),
    "empty": "",
}
ODD = "evil-\x1b]0;pwned\x07\x1b[2J-id/..\\"


_made = itertools.count()


def _record(run_id: str) -> RunRecord:
    """A new run record, created after every one made before (list_runs' order)."""
    now = datetime(2026, 1, 2, tzinfo=UTC) + timedelta(seconds=next(_made))
    return RunRecord(run_id=run_id, workflow="w", args="[]", created_at=now, updated_at=now)


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "says"),
    [
        (INVALID["surrogate"], "'order-\\\\ud800-1' holds a lone surrogate"),
        (INVALID["nul"], "'order-\\\\x00-1' holds a NUL character"),
        (INVALID["long"], "is 201 UTF-8 bytes long"),
        ("é" * 100 + "r", "is 201 UTF-8 bytes long"),
        ("", "run id '' is empty"),
        (b"bytes", "is a bytes, not a str"),
        (None, "is a NoneType, not a str"),
    ],
)
def test_check_run_id_names_the_id_and_the_rule(run_id: object, says: str) -> None:
    with pytest.raises(tether.UsageError, match=says) as info:
        check_run_id(run_id)
    assert "a run id is a str of 1 to 200 UTF-8 bytes" in str(info.value)
    assert len(str(info.value)) < 300  # a long id is cut


@pytest.mark.parametrize("run_id", ["a", ODD, "é" * 100, "r" * 200, "\x01\x7f\u0085", "🦀"])
def test_check_run_id_takes_any_other_string(run_id: str) -> None:
    assert check_run_id(run_id) is run_id


# -- every store ------------------------------------------------------------------------


async def test_every_store_holds_run_ids_to_the_rule(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    result = await check_store(tether_raw_store_factory, only=RUN_ID_CHECKS, reopen=reopen_store)
    assert result.passed == tuple(RUN_ID_CHECKS)


@pytest.mark.parametrize("problem", list(INVALID))
async def test_every_call_of_a_built_in_store_refuses_an_invalid_id(
    tether_raw_store_factory: Callable[[], Store], problem: str
) -> None:
    run_id = INVALID[problem]
    store = tether_raw_store_factory()
    await store.open()
    try:
        calls: list[Callable[[], Any]] = [
            lambda: store.create_run(_record(run_id)),
            lambda: store.claim(run_id, "h:1:a", ttl=60, create=_record(run_id)),
            lambda: store.claim(run_id, "h:1:a", ttl=60),
            lambda: store.get_run(run_id),
            lambda: store.update_run(_record(run_id)),
            lambda: store.load_entries(run_id),
            lambda: store.append(run_id, []),
            lambda: store.cancel_run(run_id),
            lambda: store.list_runs(after=run_id),
        ]
        if has(store, Capability.DELETE):
            calls.append(lambda: store.delete_run(run_id))  # type: ignore[attr-defined]
        if has(store, Capability.MESSAGES):
            box: MailboxStore = store  # type: ignore[assignment]
            calls.append(lambda: box.send_message(run_id, "n", "1", now=datetime.now(UTC)))
            calls.append(lambda: box.load_messages(run_id))
        for call in calls:
            with pytest.raises(tether.UsageError, match="a run id is a str of 1 to 200"):
                await call()
        assert list(await store.list_runs()) == []
    finally:
        await store.close()


class LaxStore(JsonStore):
    """Breaks the rule: stores any id (as MemoryStore did a lone surrogate)."""

    async def create_run(self, record: RunRecord) -> None:
        await trio.lowlevel.checkpoint()
        self.write(record)
        self.journals[record.run_id] = []


class FolderStore(JsonStore):
    """Breaks the rule the other way: refuses an id that is not a safe folder name."""

    async def create_run(self, record: RunRecord) -> None:
        if "/" in record.run_id or record.run_id.startswith("."):
            raise tether.UsageError(f"run id {record.run_id!r} is not a folder name")
        await super().create_run(record)


@pytest.mark.parametrize(
    ("broken", "check", "says"),
    [
        (LaxStore, "run_id_rule", "create_run of a run id with a lone surrogate: no UsageError"),
        (FolderStore, "odd_run_ids", "is not a folder name"),
    ],
)
async def test_the_run_id_checks_catch_a_store_that_breaks_the_rule(
    broken: type[JsonStore], check: str, says: str
) -> None:
    with pytest.raises(StoreConformanceError) as info:
        await check_store(broken, only=[check])
    assert [name for name, _ in info.value.failures] == [check]
    assert says in str(info.value)
    await check_store(JsonStore, only=[check])


# -- FileStore's folders ------------------------------------------------------------------


@pytest.mark.tether_stores("file")
async def test_file_store_keeps_old_ids_in_their_folders_and_others_by_digest(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    store = tether_raw_store_factory()
    assert isinstance(store, FileStore)
    plain = ["o-1", "é" * 100, "with space", "a:b%c", "x..y"]
    odd = ["a/b", ".hidden", "..", "tab\tin", "a\\b", "del\x7f", ODD]
    async with tether.open_engine(store):
        for run_id in plain + odd:
            await store.create_run(_record(run_id))
        names = set(os.listdir(store.directory))
        digests = {".r-" + hashlib.sha256(r.encode()).hexdigest() for r in odd}
        assert set(plain) | digests <= names  # (and .owners, .workers, ...)
        assert not any(n for n in names - set(plain) - digests if not n.startswith("."))
        assert [r.run_id for r in await store.list_runs()] == plain + odd
    # A new FileStore on the same folder (another process) finds them all.
    again = FileStore(store.directory)
    async with tether.open_engine(again):
        assert [r.run_id for r in await again.list_runs()] == plain + odd
        for run_id in plain + odd:
            got = await again.get_run(run_id)
            assert got is not None and got.run_id == run_id


@pytest.mark.tether_stores("file")
async def test_file_store_reads_a_misplaced_digest_folder_as_corrupt(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    store = tether_raw_store_factory()
    assert isinstance(store, FileStore)
    async with tether.open_engine(store):
        await store.create_run(_record("a/b"))
        (folder,) = [n for n in os.listdir(store.directory) if n.startswith(".r-")]
        os.rename(store.directory / folder, store.directory / (".r-" + "0" * 64))
        with pytest.raises(tether.CheckpointCorruptError, match="whose folder is another"):
            await store.list_runs()


# -- the engine ---------------------------------------------------------------------------


@tether.step
async def double(x: int) -> int:
    return 2 * x


@tether.workflow(name="tests.run_ids.wf", messages={"n": int})
async def wf(x: int) -> int:
    return await double(x)


@tether.workflow(name="tests.run_ids.waits", messages={"n": int})
async def waits() -> int:
    return await tether.receive("n", int)


@tether.workflow(name="tests.run_ids.parent")
async def parent(child_id: str) -> int:
    return await tether.child(wf, 1, run_id=child_id)


@pytest.mark.parametrize("problem", list(INVALID))
async def test_the_engine_refuses_an_invalid_id_before_anything_is_stored(
    tether_store: Store, autojump_clock: trio.abc.Clock, problem: str
) -> None:
    run_id = INVALID[problem]
    async with tether.open_engine(tether_store) as engine:
        for call in (
            lambda: engine.run(wf, 1, run_id=run_id),
            lambda: engine.submit(wf, 1, run_id=run_id),
            lambda: engine.send(run_id, "n", 1),
            lambda: engine.wait(run_id),
            lambda: engine.resume(run_id),
        ):
            with pytest.raises(tether.UsageError, match="a run id is a str of 1 to 200"):
                await call()
        with pytest.raises(tether.UsageError, match="a run id is a str"):
            engine.open_run(wf, 1, run_id=run_id)
        assert await engine.list_runs() == []
        with pytest.raises(tether.UsageError, match="a run id is a str"):
            await engine.run(parent, run_id, run_id="p")  # a child's id
        assert [r.run_id for r in await engine.list_runs()] == ["p"]


async def test_an_odd_id_runs_parks_takes_messages_and_is_listed_on_every_store(
    tether_store: Store, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether_store) as engine:
        assert await engine.run(wf, 4, run_id=ODD) == 8
        await engine.submit(waits, run_id=ODD + "/w")
        async with tether.open_worker(engine, workflows=[waits]):
            await engine.send(ODD + "/w", "n", 5)
            with trio.fail_after(60):
                assert await engine.wait(ODD + "/w") == 5
        assert await engine.run(parent, "\x1b[2J-child", run_id=".p") == 2
        runs = {r.run_id: r.status for r in await engine.list_runs()}
        assert runs == {
            ODD: RunStatus.COMPLETED,
            ODD + "/w": RunStatus.COMPLETED,
            ".p": RunStatus.COMPLETED,
            "\x1b[2J-child": RunStatus.COMPLETED,
        }
