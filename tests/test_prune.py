"""Deleting runs: ``tether runs prune`` and the stores' ``delete_run``.

- ``runs prune --status S --older-than AGE`` deletes the finished runs of
  those statuses last updated before the age, each with its journal, and
  says how many; ``--dry-run`` lists them and deletes nothing; unfinished
  statuses and ages that are not ``30d``/``12h``/``90m`` are usage errors;
- every store passes the ``delete_run`` conformance check, and the check
  catches a store that keeps a deleted run's journal or deletes a run that
  is executing; a store without ``delete_run`` skips it, and FaultyStore has
  the method exactly when the store it wraps has it;
- FileStore deletes atomically: a crash before its rename leaves the whole
  run, after it no run at all; a read or a write that raced a delete sees an
  unknown run, never a corrupt one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

import tether
from tether.stores import (
    Capability,
    DeletableStore,
    Entry,
    RunRecord,
    RunStatus,
    Store,
    has,
    utcnow,
)
from tether.testing import FaultyStore, Raise, StoreConformanceError, check_store

from ._cli import cli, usage_error
from ._json_store import JsonStore

DAY = timedelta(days=1)


def record(run_id: str, status: RunStatus, age: timedelta) -> RunRecord:
    when = utcnow() - age
    return RunRecord(
        run_id=run_id,
        workflow="tests.prune.flow",
        args="[]",
        status=status,
        created_at=when - timedelta(minutes=5),
        updated_at=when,
    )


def entry(run_id: str, key: str) -> Entry:
    now = utcnow()
    return Entry(run_id=run_id, key=key, value="1", started_at=now, finished_at=now)


#: run id -> (status, age): what :func:`stored_runs` stores, each with a journal.
RUNS = {
    "old-c": (RunStatus.COMPLETED, 40 * DAY),
    "new-c": (RunStatus.COMPLETED, 1 * DAY),
    "old-f": (RunStatus.FAILED, 40 * DAY),
    "old-x": (RunStatus.CANCELLED, 31 * DAY),
    "old-d": (RunStatus.DEAD_LETTER, 31 * DAY),
    "old-p": (RunStatus.PAUSED, 40 * DAY),
    "old-r": (RunStatus.RUNNING, 40 * DAY),
    "old-q": (RunStatus.QUEUED, 40 * DAY),
}


async def stored_runs(store: Store) -> None:
    async with tether.open_engine(store):
        for run_id, (status, age) in RUNS.items():
            await store.create_run(record(run_id, status, age))
            await store.append(run_id, [entry(run_id, "a#0"), entry(run_id, "b#0")])


def open_store(kind: str, path: Path) -> Store:
    return tether.SQLiteStore(path / "runs.db") if kind == "sqlite" else tether.FileStore(path)


async def what_is_stored(store: Store) -> dict[str, int]:
    """Each stored run's journal length."""
    async with tether.open_engine(store):
        return {r.run_id: len(await store.load_entries(r.run_id)) for r in await store.list_runs()}


@pytest.fixture(params=["sqlite", "file"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    kind: str = request.param
    trio.run(stored_runs, open_store(kind, tmp_path))
    where = tmp_path / "runs.db" if kind == "sqlite" else tmp_path
    return f"{kind}:{where}", tmp_path


def stored(spec: tuple[str, Path]) -> dict[str, int]:
    kind = spec[0].partition(":")[0]
    return trio.run(what_is_stored, open_store(kind, spec[1]))


def test_prune_deletes_old_finished_runs_with_their_journals(spec: tuple[str, Path]) -> None:
    store = spec[0]
    everything = {run_id: 2 for run_id in RUNS}
    assert stored(spec) == everything
    r = cli("runs", "prune", "--status", "completed,failed", "--older-than", "30d", "--dry-run",
            "--store", store)  # fmt: skip
    assert r.status == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["RUN", "ID", "WORKFLOW", "STATUS", "UPDATED", "(UTC)"]
    assert [line.split()[:3] for line in lines[1:3]] == [
        ["old-c", "tests.prune.flow", "completed"],
        ["old-f", "tests.prune.flow", "failed"],
    ]
    assert lines[3] == (
        f"2 runs would be deleted from {store} (completed, failed, last updated more than "
        "30d ago); dry run: nothing was deleted"
    )
    assert stored(spec) == everything

    r = cli("runs", "prune", "--status", "completed", "--status", "failed", "--older-than",
            "30d", "--store", store)  # fmt: skip
    assert (r.status, r.err) == (0, "")
    assert r.out == (
        f"deleted 2 runs from {store} (completed, failed, last updated more than 30d ago)\n"
    )
    left = {k: v for k, v in everything.items() if k not in ("old-c", "old-f")}
    assert stored(spec) == left
    r = cli("runs", "show", "old-c", "--store", store)
    assert (r.status, r.err) == (1, f"tether: no run 'old-c' in {store}\n")

    r = cli("runs", "prune", "--status", "cancelled,dead_letter", "--older-than", "744h",
            "--store", store)  # fmt: skip
    assert r.out == (
        f"deleted 2 runs from {store} (cancelled, dead_letter, last updated more than 31d ago)\n"
    )
    assert set(stored(spec)) == {"new-c", "old-p", "old-r", "old-q"}
    r = cli("runs", "prune", "--status", "completed", "--older-than", "2880m", "--store", store)
    assert r.out.startswith("deleted 0 runs from")
    r = cli("runs", "prune", "--status", "completed", "--older-than", "0m", "--store", store)
    assert r.out.startswith("deleted 1 run from")
    assert set(stored(spec)) == {"old-p", "old-r", "old-q"}  # never an unfinished run


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--status", "running", "--older-than", "1d"], "'running' is not a finished status"),
        (["--status", "completed,paused", "--older-than", "1d"], "'paused' is not a finished"),
        (["--status", "queued", "--older-than", "1d"], "'queued' is not a finished status"),
        (["--status", "done", "--older-than", "1d"], "'done' is not a run status"),
        (["--status", "completed", "--older-than", "30"], "'30' is not an age"),
        (["--status", "completed", "--older-than", "1w"], "'1w' is not an age"),
        (["--status", "completed", "--older-than=-1d"], "'-1d' is not an age"),
        (["--status", "completed"], "the following arguments are required: --older-than"),
        (["--older-than", "1d"], "the following arguments are required: --status"),
    ],
)
def test_prune_refuses_unfinished_statuses_and_bad_ages(
    options: list[str], says: str, spec: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error("runs", "prune", *options, "--store", spec[0], capsys=capsys)
    assert says in err
    if " status" in says:
        assert "use completed, failed, cancelled, dead_letter" in err
    assert stored(spec) == {run_id: 2 for run_id in RUNS}


def test_prune_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    r = cli("runs", "prune", "--status", "completed", "--older-than", "1d", "--store",
            f"sqlite:{missing}")  # fmt: skip
    assert r.status == 1
    assert f"the SQLite file {missing} does not exist" in r.err
    assert os.listdir(tmp_path) == []


# -- the stores' delete_run -------------------------------------------------------------


async def test_every_store_deletes_runs_whole(
    tether_raw_store_factory: Callable[[], Store],
) -> None:
    result = await check_store(tether_raw_store_factory, only=["delete_run"])
    assert result.passed == ("delete_run",)


class KeepsTheJournal(JsonStore):
    """Breaks "the journal goes with it": deletes the record only."""

    async def delete_run(self, run_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self.runs.pop(run_id, None) is not None


class DeletesUnderALease(JsonStore):
    """Breaks "a run that executes is kept": deletes whatever it is asked to."""

    async def delete_run(self, run_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        self.journals.pop(run_id, None)
        return self.runs.pop(run_id, None) is not None


class CannotDelete(JsonStore):
    """A third-party store from before ``delete_run``."""

    delete_run = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (KeepsTheJournal, "the journal of a deleted run is still there"),
        (DeletesUnderALease, "delete_run of a run with a live lease: no RunConflictError"),
    ],
)
async def test_the_check_catches_a_store_that_breaks_delete(
    broken: type[JsonStore], says: str
) -> None:
    with pytest.raises(StoreConformanceError) as info:
        await check_store(broken, only=["delete_run"])
    assert says in str(info.value)


async def test_a_store_without_delete_run_skips_the_check() -> None:
    result = await check_store(CannotDelete, only=["delete_run"])
    assert result.skipped == (
        ("delete_run", "the store has no delete_run (it cannot delete runs)"),
    )
    assert not isinstance(CannotDelete(), DeletableStore)


class Bare:
    """A store's stand-in with no methods at all."""


async def test_faulty_store_deletes_exactly_when_its_inner_store_does() -> None:
    # It forwards delete_run, and declares it only when the wrapped store has it.
    assert not has(FaultyStore(Bare()), Capability.DELETE)  # type: ignore[arg-type]
    assert has(FaultyStore(tether.MemoryStore()), Capability.DELETE)
    result = await check_store(lambda: FaultyStore(tether.MemoryStore()), only=["delete_run"])
    assert result.passed == ("delete_run",)
    store = FaultyStore(tether.MemoryStore())
    store.inject("delete_run", Raise(lambda: tether.StoreError("disk on fire")))
    async with tether.open_engine(store):
        await store.create_run(record("f-1", RunStatus.COMPLETED, DAY))
        with pytest.raises(tether.StoreError, match="disk on fire"):
            await store.delete_run("f-1")
        assert await store.get_run("f-1") is not None
    assert store.calls["delete_run"] == 1


# -- FileStore: atomic for every reader, and across a crash --------------------------------


class Crash(BaseException):
    """The process died here."""


async def file_store_with(path: Path, *run_ids: str) -> tether.FileStore:
    store = tether.FileStore(path)
    await store.open()
    for run_id in run_ids:
        await store.create_run(record(run_id, RunStatus.COMPLETED, DAY))
        await store.append(run_id, [entry(run_id, "a#0"), entry(run_id, "b#0")])
    return store


def crash_in(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the FileStore's next call of ``os.NAME`` / ``shutil.NAME`` kill the process."""
    module = os if name == "rename" else shutil

    def crash(*args: Any, **kwargs: Any) -> None:
        raise Crash(name)

    monkeypatch.setattr(module, name, crash)


async def test_file_store_a_crash_before_the_rename_keeps_the_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await file_store_with(tmp_path, "r-1")
    before = (await store.get_run("r-1"), list(await store.load_entries("r-1")))
    with monkeypatch.context() as patched:
        crash_in("rename", patched)
        with pytest.raises(Crash):
            await store.delete_run("r-1")
    again = await file_store_with(tmp_path)  # what the next process reads
    assert (await again.get_run("r-1"), list(await again.load_entries("r-1"))) == before


async def test_file_store_a_crash_after_the_rename_leaves_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await file_store_with(tmp_path, "r-1", "r-2")
    with monkeypatch.context() as patched:
        crash_in("rmtree", patched)
        with pytest.raises(Crash):
            await store.delete_run("r-1")
    assert len(os.listdir(tmp_path / ".trash")) == 1  # the run's folder, not yet removed
    again = await file_store_with(tmp_path)
    assert await again.get_run("r-1") is None
    assert list(await again.load_entries("r-1")) == []
    assert [r.run_id for r in await again.list_runs()] == ["r-2"]
    assert await again.delete_run("r-1") is False
    assert await again.delete_run("r-2") is True
    assert os.listdir(tmp_path / ".trash") == []  # the crash's leftover is gone too


async def test_file_store_a_read_that_races_a_delete_sees_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await file_store_with(tmp_path, "r-1", "r-2")
    (tmp_path / ".trash").mkdir()
    read_file = store._read_file
    armed = False

    def deleted_first(run_id: str, path: Path) -> bytes:
        # The delete's rename lands between the reader finding the run and reading it.
        nonlocal armed
        if armed and run_id == "r-1":
            armed = False
            os.rename(tmp_path / run_id, tmp_path / ".trash" / f"gone-{time.monotonic_ns()}")
        return read_file(run_id, path)

    monkeypatch.setattr(store, "_read_file", deleted_first)
    armed = True
    assert [r.run_id for r in await store.list_runs()] == ["r-2"]
    await store.create_run(record("r-1", RunStatus.COMPLETED, DAY))
    armed = True
    assert await store.get_run("r-1") is None
    await store.create_run(record("r-1", RunStatus.COMPLETED, DAY))
    await store.append("r-1", [entry("r-1", "a#0")])
    armed = True
    assert list(await store.load_entries("r-1")) == []
    assert not armed  # each read did race a delete


async def test_file_store_a_write_that_waited_for_a_deleted_runs_lock_finds_no_run(
    tmp_path: Path,
) -> None:
    store = await file_store_with(tmp_path, "r-1")
    folder = tmp_path / "r-1"
    # A writer that opened the run's lock file, then waited while the run was deleted.
    fd = os.open(folder / ".lock", os.O_RDWR)
    (tmp_path / ".trash").mkdir()
    os.rename(folder, tmp_path / ".trash" / "gone")
    try:
        assert store._lock_file("r-1", folder, fd, time.monotonic() + 5) is False
    finally:
        os.close(fd)
    with pytest.raises(tether.RunNotFoundError):
        await store.cancel_run("r-1")
    with pytest.raises(tether.RunNotFoundError):
        await store.append("r-1", [entry("r-1", "c#0")])
