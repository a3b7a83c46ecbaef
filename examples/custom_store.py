"""A third-party store, and the conformance suite run against it.

docs/how-to/write-a-store.md is told from this file: each of its code blocks
appears here verbatim. Run it with ``python examples/custom_store.py``.
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio

import tether
from tether.stores import (
    Entry,
    RecordDecodeError,
    Renewal,
    RunRecord,
    Store,
    check_append,
    check_run_filter,
    check_run_id,
    decide_cancel,
    decide_claim,
    dumps_record,
    fenced_update,
    first_gap,
    load_entry,
    load_run_record,
    renewal_of,
)
from tether.testing import check_store


class JsonDictStore:
    """Keeps every record as JSON text in dicts: a stand-in for a real database.

    Each method's atomic step is what it does after its one checkpoint: no
    other task runs until it returns, as no other writer would see inside a
    database transaction. Leases expire on the wall clock, as a database's do.
    """

    def __init__(self) -> None:
        self.runs: dict[str, str] = {}  # run id -> RunRecord JSON, in creation order
        self.journals: dict[str, dict[int, str]] = {}  # run id -> seq -> Entry JSON
        self.owners: dict[str, float] = {}  # owner -> when its leases expire (Unix time)

    def __repr__(self) -> str:
        return f"JsonDictStore(<{len(self.runs)} runs>)"

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()

    # -- runs ------------------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        check_run_id(record.run_id)  # UsageError for an id no store may keep
        await trio.lowlevel.checkpoint()  # before any change: a cancelled call wrote nothing
        if record.run_id in self.runs:
            raise tether.RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
        self._put(record)
        self.journals[record.run_id] = {}

    async def update_run(self, record: RunRecord) -> RunRecord:
        await trio.lowlevel.checkpoint()
        # RunNotFoundError for an unknown run, LeaseLostError for a stale token.
        stored = fenced_update(self._run(record.run_id), record)
        self._put(stored)
        return stored

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._run(run_id)

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        selected = check_run_filter(**filters)  # status=, workflow=, after=, limit=
        await trio.lowlevel.checkpoint()
        return selected.page(self._stored(run_id) for run_id in self.runs)

    # -- leases ----------------------------------------------------------------------

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        await trio.lowlevel.checkpoint()
        decision = decide_claim(
            self._run(run_id), run_id=run_id, owner=owner, create=create, takeover=takeover
        )
        if decision.store is not None:  # written even when the claim is refused
            self._put(decision.store)
            if decision.created:
                self.journals[run_id] = {}
        if not decision.claimed:  # refused (raises), or a completed run (returned as it is)
            return decision.outcome(None)
        self.owners[owner] = time.time() + ttl  # the owner's lease, in the same step
        return decision.outcome(self._stored(run_id).lease_expires_at)

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        await trio.lowlevel.checkpoint()
        if ttl:
            self.owners[owner] = time.time() + ttl  # every lease of the owner, at once
        else:
            self.owners.pop(owner, None)  # ttl=0: the owner's leases end now
        runs = {run_id: run for run_id in held if (run := self._run(run_id)) is not None}
        return renewal_of(owner, held, runs)

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        await trio.lowlevel.checkpoint()
        record = decide_cancel(self._run(run_id), run_id=run_id, takeover=takeover)
        if record is not None:
            self._put(record)
        return self._stored(run_id)

    # -- the journal -----------------------------------------------------------------

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        run = self._run(run_id)
        if run is None:
            raise tether.RunNotFoundError(f"cannot append to run {run_id!r} in {self!r}")
        check_append(run_id, entries, token=run.token, owner=run.owner)  # LeaseLostError
        journal = self.journals[run_id]
        known = {e.idempotency_key: e for e in self._entries(run_id)}
        stored = []
        for entry in entries:
            same = known.get(entry.idempotency_key)
            if same is None:  # not a retry of a stored entry: give it the next seq
                seq = max(journal, default=0) + 1
                same = known[entry.idempotency_key] = entry.stored_as(seq)
                journal[seq] = dumps_record(same.to_json())
            stored.append(same)
        return stored

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return self._entries(run_id)

    # -- strict reads ----------------------------------------------------------------

    def _put(self, record: RunRecord) -> None:
        self.runs[record.run_id] = dumps_record(record.to_json())

    def _run(self, run_id: str) -> RunRecord | None:
        """The stored record, with ``lease_expires_at`` while its owner's lease is live."""
        if run_id not in self.runs:
            return None
        try:
            record = load_run_record(self.runs[run_id], run_id)
        except RecordDecodeError as exc:
            raise tether.CheckpointCorruptError(f"run {run_id!r}: run record: {exc}") from None
        expires = self.owners.get(record.owner) if record.owner is not None else None
        if expires is not None and expires > time.time():
            record = attrs.evolve(record, lease_expires_at=datetime.fromtimestamp(expires, UTC))
        return record

    def _stored(self, run_id: str) -> RunRecord:
        record = self._run(run_id)
        assert record is not None
        return record

    def _entries(self, run_id: str) -> list[Entry]:
        journal = self.journals.get(run_id, {})
        seqs = sorted(journal)
        gap = first_gap(seqs)
        if gap is not None:
            raise tether.CheckpointCorruptError(
                f"run {run_id!r}: journal entry {gap} is missing (entry {seqs[-1]} is stored)"
            )
        entries = []
        for seq in seqs:
            try:
                entries.append(load_entry(journal[seq], run_id, seq))
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
        store.journals[run_id][seq] = '{"run_id": '


def remove(store: Store, run_id: str, seq: int) -> None:
    """Lose a stored entry, so the suite can check that a gap in a journal is refused."""
    assert isinstance(store, JsonDictStore)
    del store.journals[run_id][seq]


def alter(store: Store, run_id: str, seq: int) -> None:
    """Change a digit of a stored entry's value: still valid JSON, so only its checksum tells."""
    assert isinstance(store, JsonDictStore)
    data = json.loads(store.journals[run_id][seq])
    data["value"] = re.sub(r"\d", lambda d: "2" if d[0] == "1" else "1", data["value"], count=1)
    store.journals[run_id][seq] = dumps_record(data)


def reopen(store: Store) -> Store:
    """A new store object on the same file: what a restarted process would open."""
    assert isinstance(store, tether.SQLiteStore)
    return tether.SQLiteStore(store.path)


async def check_a_durable_store(folder: Path) -> None:
    files = (folder / f"store-{n}.db" for n in itertools.count())
    await check_store(lambda: tether.SQLiteStore(next(files)), reopen=reopen)


async def main() -> None:
    result = await check_store(JsonDictStore, corrupt=corrupt, remove=remove, alter=alter)
    print("passed:", ", ".join(result.passed))
    for name, why in result.skipped:
        print(f"skipped: {name} ({why})")
    with tempfile.TemporaryDirectory() as folder:
        await check_a_durable_store(Path(folder))
    print("SQLiteStore passed too")


if __name__ == "__main__":
    trio.run(main)
