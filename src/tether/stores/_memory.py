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
        # run -> entry key -> the run's stored entries with that key (usually one)
        self._by_key: dict[str, dict[str, list[Entry]]] = {}

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
        self._by_key[record.run_id] = {}

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
        by_key = self._by_key[run_id]
        stored: list[Entry] = []
        for entry in entries:
            # Only an entry with the same key can be its duplicate: the
            # idempotency key is computed for those alone (rare: a retried
            # save, a re-executed step), never for a step's first entry.
            same_key = by_key.get(entry.key)
            existing = None if same_key is None else _stored_twin(entry, same_key)
            if existing is None:
                existing = entry.stored_as(len(journal) + 1)
                journal.append(existing)
                if same_key is None:
                    by_key[entry.key] = [existing]
                else:
                    same_key.append(existing)
            stored.append(existing)
        return stored

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return list(self._journals.get(run_id, ()))


def _fields(entry: Entry) -> tuple[object, ...]:
    """Every field of *entry* but ``seq``: equal whenever the idempotency keys are."""
    return (
        entry.run_id,
        entry.key,
        entry.kind,
        entry.status,
        entry.value,
        entry.error,
        entry.args_digest,
        entry.started_at,
        entry.finished_at,
        entry.attempt,
    )


def _stored_twin(entry: Entry, candidates: list[Entry]) -> Entry | None:
    """The candidate with *entry*'s :attr:`~Entry.idempotency_key`, if any.

    The field comparison is a cheap filter (equal keys imply equal fields);
    the keys themselves decide, so the rule is exactly the documented one.
    """
    fields = _fields(entry)
    ikey: str | None = None
    for candidate in candidates:
        if _fields(candidate) == fields:
            if ikey is None:
                ikey = entry.idempotency_key
            if candidate.idempotency_key == ikey:
                return candidate
    return None
