"""A third-party store, and the conformance suite run against it.

docs/how-to/write-a-store.md is told from this file: each of its code blocks
appears here verbatim. Run it with ``python examples/custom_store.py``.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio

import tether
from tether.stores import (
    Entry,
    RecordDecodeError,
    RunRecord,
    Store,
    dumps_record,
    loads_record,
)
from tether.testing import check_store


class JsonDictStore:
    """Keeps every record as JSON text in dicts: a stand-in for a real database."""

    def __init__(self) -> None:
        self.runs: dict[str, str] = {}  # run id -> RunRecord JSON, in creation order
        self.journals: dict[str, list[str]] = {}  # run id -> Entry JSON, by seq

    def __repr__(self) -> str:
        return f"JsonDictStore(<{len(self.runs)} runs>)"

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()

    async def create_run(self, record: RunRecord) -> None:
        await trio.lowlevel.checkpoint()  # before any change: a cancelled call wrote nothing
        if record.run_id in self.runs:
            raise tether.RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
        self.runs[record.run_id] = dumps_record(record.to_json())
        self.journals[record.run_id] = []

    async def update_run(self, record: RunRecord) -> None:
        await trio.lowlevel.checkpoint()
        if record.run_id not in self.runs:
            raise tether.RunNotFoundError(f"run {record.run_id!r} is not stored in {self!r}")
        self.runs[record.run_id] = dumps_record(record.to_json())

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._run(run_id) if run_id in self.runs else None

    async def list_runs(self) -> Sequence[RunRecord]:
        await trio.lowlevel.checkpoint()
        return [self._run(run_id) for run_id in self.runs]

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        if run_id not in self.journals:
            raise tether.RunNotFoundError(f"cannot append to run {run_id!r} in {self!r}")
        journal = self.journals[run_id]
        known = {e.idempotency_key: e for e in self._entries(run_id)}
        stored = []
        for entry in entries:
            same = known.get(entry.idempotency_key)
            if same is None:  # not a retry of a stored entry: give it the next seq
                same = known[entry.idempotency_key] = entry.stored_as(len(journal) + 1)
                journal.append(dumps_record(same.to_json()))
            stored.append(same)
        return stored

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return self._entries(run_id)

    def _run(self, run_id: str) -> RunRecord:
        try:
            record: RunRecord = loads_record(self.runs[run_id], RunRecord.from_json)
        except RecordDecodeError as exc:
            raise tether.CheckpointCorruptError(f"run {run_id!r}: run record: {exc}") from None
        return record

    def _entries(self, run_id: str) -> list[Entry]:
        entries = []
        for seq, text in enumerate(self.journals.get(run_id, ()), 1):
            try:
                entries.append(loads_record(text, Entry.from_json))
            except RecordDecodeError as exc:
                raise tether.CheckpointCorruptError(
                    f"run {run_id!r}: journal entry {seq}: {exc}"
                ) from None
        return entries


def corrupt(store: Store, run_id: str, seq: int | None) -> None:
    """Damage a stored record, so the conformance suite can check strict reads."""
    assert isinstance(store, JsonDictStore)
    if seq is None:
        store.runs[run_id] = '{"run_id": '
    else:
        store.journals[run_id][seq - 1] = '{"run_id": '


def reopen(store: Store) -> Store:
    """A new store object on the same file: what a restarted process would open."""
    assert isinstance(store, tether.SQLiteStore)
    return tether.SQLiteStore(store.path)


async def check_a_durable_store(folder: Path) -> None:
    files = (folder / f"store-{n}.db" for n in itertools.count())
    await check_store(lambda: tether.SQLiteStore(next(files)), reopen=reopen)


async def main() -> None:
    result = await check_store(JsonDictStore, corrupt=corrupt)
    print("passed:", ", ".join(result.passed))
    for name, why in result.skipped:
        print(f"skipped: {name} ({why})")
    with tempfile.TemporaryDirectory() as folder:
        await check_a_durable_store(Path(folder))
    print("SQLiteStore passed too")


if __name__ == "__main__":
    trio.run(main)
