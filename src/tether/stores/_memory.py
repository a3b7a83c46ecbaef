"""An in-process store: fast, for tests and ephemeral runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import trio

from .._errors import RunConflictError, RunNotFoundError
from ._protocol import Entry, RunRecord

__all__ = ("MemoryStore",)


@final
class MemoryStore:
    """Keeps runs and journals in memory; nothing survives the process.

    Records are frozen and their values are JSON text, so what a reader gets
    can never be changed behind the store's back. Every method is a Trio
    checkpoint taken *before* anything is changed: a cancelled call wrote
    nothing. ``append`` is idempotent (see :attr:`Entry.idempotency_key`).
    The store may be reopened after it was closed (its contents stay),
    which lets one store serve several engines in turn, as a durable store
    would.
    """

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._journals: dict[str, list[Entry]] = {}
        self._ids: dict[str, dict[str, Entry]] = {}  # run -> idempotency key -> stored

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._runs)} runs>)"

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()

    async def create_run(self, record: RunRecord) -> None:
        await trio.lowlevel.checkpoint()
        if record.run_id in self._runs:
            raise RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
        self._runs[record.run_id] = record
        self._journals[record.run_id] = []
        self._ids[record.run_id] = {}

    async def update_run(self, record: RunRecord) -> None:
        await trio.lowlevel.checkpoint()
        if record.run_id not in self._runs:
            raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self!r}")
        self._runs[record.run_id] = record

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._runs.get(run_id)

    async def list_runs(self) -> Sequence[RunRecord]:
        await trio.lowlevel.checkpoint()
        return list(self._runs.values())

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        journal = self._journals.get(run_id)
        if journal is None:
            raise RunNotFoundError(f"cannot append to run {run_id!r}: it is not stored in {self!r}")
        ids = self._ids[run_id]
        stored: list[Entry] = []
        for entry in entries:
            ikey = entry.idempotency_key
            existing = ids.get(ikey)
            if existing is None:
                existing = ids[ikey] = entry.stored_as(len(journal) + 1)
                journal.append(existing)
            stored.append(existing)
        return stored

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return list(self._journals.get(run_id, ()))
