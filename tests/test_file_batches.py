"""FileStore: one journal file per append (group commit), and what a crash can leave of it."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import tether
from tether.stores import Entry, RunRecord, utcnow

NOW = utcnow()


def entry(i: int) -> Entry:
    return Entry(run_id="r", key=f"s#{i}", value=str(i), started_at=NOW, finished_at=NOW)


def names(directory: Path) -> list[str]:
    """The journal files of run ``r``, temporary ones left out."""
    return sorted(p.name for p in (directory / "r" / "entries").iterdir() if p.name[0] != ".")


@asynccontextmanager
async def opened(directory: Path, *, create: bool = False) -> AsyncIterator[tether.FileStore]:
    store = tether.FileStore(directory)
    await store.open()
    try:
        if create:
            await store.create_run(
                RunRecord(run_id="r", workflow="w", args="[]", created_at=NOW, updated_at=NOW)
            )
        yield store
    finally:
        await store.close()


async def test_an_append_of_several_entries_is_one_file_read_back_in_order(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path / "s", create=True) as store:
        assert [e.seq for e in await store.append("r", [entry(1)])] == [1]
        stored = await store.append("r", [entry(2), entry(3), entry(4)])
        assert [e.seq for e in stored] == [2, 3, 4]
        assert [e.seq for e in await store.append("r", [entry(5)])] == [5]
        assert names(store.directory) == [f"{seq:012d}.json" for seq in (1, 2, 5)]
        folder = store.directory / "r" / "entries"
        # One entry is an object, as every FileStore wrote it; several, an array.
        assert json.loads((folder / "000000000001.json").read_text())["seq"] == 1
        batch = json.loads((folder / "000000000002.json").read_text())
        assert [e["seq"] for e in batch] == [2, 3, 4]
        journal = await store.load_entries("r")
        assert [(e.seq, e.key) for e in journal] == [(i, f"s#{i}") for i in range(1, 6)]
    async with opened(tmp_path / "s") as fresh:  # no cache: read from the files alone
        assert await fresh.load_entries("r") == journal


async def test_duplicates_in_and_across_appends_return_the_stored_entries(tmp_path: Path) -> None:
    async with opened(tmp_path / "s", create=True) as store:
        first = await store.append("r", [entry(1), entry(2), entry(1)])
        assert [e.seq for e in first] == [1, 2, 1]
        assert first[0] == first[2]
        again = await store.append("r", [entry(2), entry(3)])
        assert again[0] == first[1]
        assert again[1].seq == 3
        assert names(store.directory) == ["000000000001.json", "000000000003.json"]
        assert [e.key for e in await store.load_entries("r")] == ["s#1", "s#2", "s#3"]


@pytest.mark.parametrize(
    ("state", "survives"),
    [
        ("nothing", False),  # the crash came before the temporary file
        ("torn temporary file", False),  # ... while it was written
        ("whole temporary file", False),  # ... after its fsync, before the link
        ("temporary file and link", True),  # ... after the link, before the unlink
        ("link", True),  # ... after the unlink, before (or after) the folder's fsync
    ],
)
async def test_a_crash_in_an_append_keeps_all_its_entries_or_none(
    state: str, survives: bool, tmp_path: Path
) -> None:
    """Every state a crash during the append of seqs 2-4 can leave on disk.

    Until the folder is fsynced, a crash may keep the new name or not
    (and the temporary one or not): each combination is built here from the
    bytes the store writes. Each reads as the journal before the append or
    after it, never with a gap, and the next append goes on from there.
    """
    async with opened(tmp_path / "made", create=True) as store:
        await store.append("r", [entry(1)])
        before = tmp_path / "before"
        shutil.copytree(store.directory, before)
        await store.append("r", [entry(2), entry(3), entry(4)])
        data = (store.directory / "r" / "entries" / "000000000002.json").read_bytes()
    crashed = tmp_path / "crashed"
    shutil.copytree(before, crashed)
    folder = crashed / "r" / "entries"
    if state == "torn temporary file":
        (folder / ".tmp-0.json").write_bytes(data[: len(data) // 2])
    if state in ("whole temporary file", "temporary file and link"):
        (folder / ".tmp-0.json").write_bytes(data)
    if state == "temporary file and link":
        (folder / "000000000002.json").hardlink_to(folder / ".tmp-0.json")
    if state == "link":
        (folder / "000000000002.json").write_bytes(data)
    expected = [1, 2, 3, 4] if survives else [1]
    async with opened(crashed) as resumed:
        assert [e.seq for e in await resumed.load_entries("r")] == expected
        [next_entry] = await resumed.append("r", [entry(5)])
        assert next_entry.seq == len(expected) + 1
        assert [e.seq for e in await resumed.load_entries("r")] == [*expected, len(expected) + 1]


async def test_a_missing_or_doubled_file_is_corruption_never_skipped(tmp_path: Path) -> None:
    async with opened(tmp_path / "s", create=True) as store:
        await store.append("r", [entry(1)])
        await store.append("r", [entry(2), entry(3), entry(4)])
        await store.append("r", [entry(5)])
    folder = tmp_path / "s" / "r" / "entries"
    batch = folder / "000000000002.json"
    good = batch.read_bytes()
    items = json.loads(good)

    async def corrupt(problem: str, path: Path) -> None:
        async with opened(tmp_path / "s") as fresh:
            with pytest.raises(tether.CheckpointCorruptError) as info:
                await fresh.load_entries("r")
        message = str(info.value)
        assert "'r'" in message and str(path) in message and problem in message, message

    # The batch below seq 5 is gone: seq 2 is missing, however many seqs the file held.
    batch.unlink()
    await corrupt("entry seq 2 is missing", folder / "000000000002.json")
    # One of its seqs also stored in a file of its own.
    batch.write_bytes(good)
    (folder / "000000000003.json").write_text(json.dumps(items[1]))
    await corrupt("entry seq 3 is stored twice", folder / "000000000003.json")
    (folder / "000000000003.json").unlink()
    # An entry of the file that disagrees with its place.
    batch.write_text(json.dumps([items[0], items[2], items[1]]))
    await corrupt("entry 2 of the file says seq 4, where it is stored 3", batch)
    # A file of one entry is written as the entry itself, never as an array.
    batch.write_text(json.dumps(items[:1]))
    await corrupt("a file of entries holds two or more, not 1", batch)
    batch.write_text("[]")
    await corrupt("a file of entries holds two or more, not 0", batch)
    # Bytes changed inside the file: the entry's checksum says so.
    batch.write_bytes(good.replace(b'"value":"3"', b'"value":"7"'))
    await corrupt("entry seq 3 does not match its checksum", batch)
    batch.write_bytes(good)
    async with opened(tmp_path / "s") as fresh:
        assert [e.seq for e in await fresh.load_entries("r")] == [1, 2, 3, 4, 5]


async def test_a_writer_that_missed_another_writers_batch_goes_past_it(tmp_path: Path) -> None:
    """Two stores on one directory (as two processes): each caches the next seq."""
    async with opened(tmp_path / "s", create=True) as a, opened(tmp_path / "s") as b:
        await a.append("r", [entry(1)])  # a: the next seq is 2
        stored = await b.append("r", [entry(2), entry(3), entry(4)])
        assert [e.seq for e in stored] == [2, 3, 4]
        # a's idea of the next seq is stale: its file collides with b's and
        # goes past the highest seq of b's file, not to seq 3 (inside it).
        [late] = await a.append("r", [entry(5)])
        assert late.seq == 5
        assert names(a.directory) == [f"{seq:012d}.json" for seq in (1, 2, 5)]
        for store in (a, b):
            assert [e.seq for e in await store.load_entries("r")] == [1, 2, 3, 4, 5]
