"""A small, complete store that keeps JSON text: the base of the deliberately broken stores.

It is written as a third-party store would be: records as JSON text, and every
lease rule taken from the helpers ``tether.stores`` gives store authors
(``check_run_id``, ``decide_claim``, ``fenced_update``, ``check_append``,
``decide_cancel``, ``renewal_of``, ``first_gap``, ``check_served``, ``dumps_served``), inside its
atomic steps (no await between a read and its write). Each broken store in the
tests overrides one method to break one rule, and the conformance check for that
rule must catch it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import trio

import tether
from tether.stores import (
    Entry,
    RecordDecodeError,
    Renewal,
    RunRecord,
    Served,
    Store,
    WorkerAd,
    check_append,
    check_delete,
    check_now,
    check_run_filter,
    check_run_id,
    check_served,
    decide_cancel,
    decide_claim,
    decide_dispatch,
    dispatchable,
    dumps_record,
    dumps_served,
    fenced_update,
    first_gap,
    loads_record,
    loads_served,
    renewal_of,
)


class JsonStore:
    """A correct little store that keeps JSON text, so its records can be damaged.

    Leases expire on Trio's clock, as MemoryStore's do.
    """

    def __init__(self) -> None:
        self.runs: dict[str, str] = {}
        self.journals: dict[str, list[str]] = {}
        self.leases: dict[str, float] = {}  # owner -> expiry, Trio time
        self.workers: dict[str, tuple[str, float]] = {}  # owner -> (serves JSON, expiry)

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()

    # -- records ----------------------------------------------------------------------

    def decode_run(self, run_id: str) -> RunRecord:
        try:
            record: RunRecord = loads_record(self.runs[run_id], RunRecord.from_json)
        except RecordDecodeError as exc:
            raise tether.CheckpointCorruptError(f"run {run_id!r}: record: {exc}") from None
        expires = self.leases.get(record.owner or "")
        if record.owner is not None and expires is not None and expires > trio.current_time():
            # Shown on a datetime axis; only "is it live" matters to the rules.
            record = attrs.evolve(record, lease_expires_at=record.updated_at)
        return record

    def read(self, run_id: str) -> RunRecord | None:
        return self.decode_run(run_id) if run_id in self.runs else None

    def write(self, record: RunRecord) -> None:
        self.runs[record.run_id] = dumps_record(record.to_json())

    async def create_run(self, record: RunRecord) -> None:
        check_run_id(record.run_id)
        await trio.lowlevel.checkpoint()
        if record.run_id in self.runs:
            raise tether.RunConflictError(record.run_id)
        self.write(record)
        self.journals[record.run_id] = []

    async def update_run(self, record: RunRecord) -> RunRecord:
        await trio.lowlevel.checkpoint()
        stored = fenced_update(self.read(record.run_id), record)
        self.write(stored)
        return stored

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self.read(run_id)

    async def delete_run(self, run_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        if not check_delete(self.read(run_id), run_id=run_id):
            return False
        del self.runs[run_id]
        self.journals.pop(run_id, None)
        return True

    async def list_runs(self, **filters: Any) -> Sequence[RunRecord]:
        selected = check_run_filter(**filters)  # status=, workflow=, after=, limit=
        await trio.lowlevel.checkpoint()
        return selected.page(self.decode_run(run_id) for run_id in self.runs)

    # -- leases -----------------------------------------------------------------------

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
            self.read(run_id), run_id=run_id, owner=owner, create=create, takeover=takeover
        )
        if decision.store is not None:
            self.write(decision.store)
            if decision.created:
                self.journals[run_id] = []
        if not decision.claimed:
            return decision.outcome(None)
        self.leases[owner] = trio.current_time() + ttl
        return decision.outcome(self.decode_run(run_id).lease_expires_at)

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> RunRecord | None:
        served = check_served(workflows)
        now = check_now(now)
        await trio.lowlevel.checkpoint()
        for run_id in self.runs:
            current = self.decode_run(run_id)
            if dispatchable(current, workflows=served, gone=gone, now=now):
                decision = decide_dispatch(current, owner=owner, max_dispatches=max_dispatches)
                self.write(decision.store)
                if decision.claimed:
                    self.leases[owner] = trio.current_time() + ttl
                    return self.decode_run(run_id)
        return None

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        text = dumps_served(check_served(serves))
        await trio.lowlevel.checkpoint()
        if ttl:
            self.workers[owner] = (text, trio.current_time() + ttl)
        else:
            self.workers.pop(owner, None)

    async def list_workers(self) -> Sequence[WorkerAd]:
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        return [
            WorkerAd(
                owner=owner,
                serves=loads_served(text),
                expires_at=datetime.fromtimestamp(expires, UTC),
            )
            for owner, (text, expires) in sorted(self.workers.items())
            if expires > now
        ]

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        await trio.lowlevel.checkpoint()
        self.leases[owner] = trio.current_time() + ttl
        records = {run_id: record for run_id in held if (record := self.read(run_id))}
        return renewal_of(owner, held, records)

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        await trio.lowlevel.checkpoint()
        record = decide_cancel(self.read(run_id), run_id=run_id, takeover=takeover)
        if record is not None:
            self.write(record)
        return self.decode_run(run_id)

    # -- the journal ------------------------------------------------------------------

    def decode_entry(self, run_id: str, i: int, text: str) -> Entry:
        try:
            entry: Entry = loads_record(text, Entry.from_json)
        except RecordDecodeError as exc:
            raise tether.CheckpointCorruptError(f"run {run_id!r}: entry {i}: {exc}") from None
        return entry

    def decode_entries(self, run_id: str) -> list[Entry]:
        entries = [
            self.decode_entry(run_id, i, text)
            for i, text in enumerate(self.journals.get(run_id, ()))
        ]
        gap = first_gap([e.seq or 0 for e in entries])
        if gap is not None:
            raise tether.CheckpointCorruptError(f"run {run_id!r}: entry seq {gap} is missing")
        return entries

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return self.decode_entries(run_id)

    def stored_twin(self, run_id: str, entry: Entry) -> Entry | None:
        for e in self.decode_entries(run_id):
            if e.idempotency_key == entry.idempotency_key:
                return e
        return None

    def check_token(self, run_id: str, entries: Sequence[Entry]) -> None:
        run = self.read(run_id)
        if run is None:
            raise tether.RunNotFoundError(run_id)
        check_append(run_id, entries, token=run.token, owner=run.owner)

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        self.check_token(run_id, entries)
        out = []
        for entry in entries:
            stored = self.stored_twin(run_id, entry)
            if stored is None:
                stored = entry.stored_as(len(self.journals[run_id]) + 1)
                self.journals[run_id].append(dumps_record(stored.to_json()))
            out.append(stored)
        return out


def json_corrupt(store: Store, run_id: str, seq: int | None) -> None:
    assert isinstance(store, JsonStore)
    if seq is None:
        store.runs[run_id] = "{"
    else:
        store.journals[run_id][seq - 1] = '{"seq": 1, "seq": 2}'


def json_remove(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, JsonStore)
    del store.journals[run_id][seq - 1]


def json_alter(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, JsonStore)
    text = store.journals[run_id][seq - 1]
    store.journals[run_id][seq - 1] = text.replace('\\"n\\":1', '\\"n\\":2', 1)
