"""An in-process store: fast, for tests and ephemeral runs (:class:`MemoryStore`).

Layer: stores (``tether.stores``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import final

import attrs
import trio

from .._errors import RunConflictError, RunNotFoundError
from ._flow import Submission, check_submission, decide_submit, live_dedupe, pending
from ._leases import (
    check_append,
    check_delete,
    check_held,
    check_owner,
    check_ttl,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal_of,
)
from ._mailbox import Message, check_after, check_send, decide_send
from ._owners import Renewal, Served, WorkerAd
from ._queue import (
    Claimed,
    check_limit,
    check_max_dispatches,
    check_now,
    check_run_filter,
    check_served,
    claimed_from,
    decide_batch,
)
from ._records import Entry, RunRecord, RunStatus
from ._respond import check_respond, decide_respond
from ._run_ids import check_run_id
from ._store import ClaimNextFromBatch

__all__ = ("MemoryStore",)


@final
class MemoryStore(ClaimNextFromBatch):
    """Keeps runs, journals and messages in memory; nothing survives the process.

    Records are frozen and their values are JSON text, so what a reader gets
    can never be changed behind the store's back. Every method is a Trio
    checkpoint taken *before* anything is changed: a cancelled call wrote
    nothing. ``append`` is idempotent (see :attr:`Entry.idempotency_key`).
    The store may be reopened after it was closed (its contents stay),
    which lets one store serve several engines in turn, as a durable store
    would, and it may be open in several engines of one process at once.

    Args:
        clock: the clock lease expiry is measured on, in seconds; Trio's
            (``trio.current_time``) by default, so virtual time under a
            ``MockClock`` expires leases. Lease times are shown as datetimes
            that many seconds after the Unix epoch.
    """

    def __init__(self, *, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._leases: dict[str, float] = {}  # owner -> when its leases expire
        # worker -> what it serves and when that advertisement expires
        self._workers: dict[str, tuple[frozenset[Served], float]] = {}
        self._runs: dict[str, RunRecord] = {}
        self._journals: dict[str, list[Entry]] = {}
        # run -> entry key -> the run's stored entry with that key, or (rarely) the
        # list of them (a list per key would cost memory for every entry held)
        self._by_key: dict[str, dict[str, Entry | list[Entry]]] = {}
        self._messages: dict[str, list[Message]] = {}  # run -> its mailbox, seq order
        self._watchers: set[Callable[[], None]] = set()

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._runs)} runs>)"

    @property
    def url(self) -> str:
        """``memory:``: :func:`tether.stores.from_url` of it is a new, empty store."""
        return "memory:"

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()

    async def create_run(self, record: RunRecord) -> None:
        check_run_id(record.run_id)
        await trio.lowlevel.checkpoint()
        if record.run_id in self._runs:
            raise RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
        self._create(record)

    def _create(self, record: RunRecord) -> None:
        self._set(record)
        self._journals[record.run_id] = []
        self._by_key[record.run_id] = {}

    async def submit_run(self, submission: Submission) -> str:
        submission = check_submission(submission)
        record = submission.record
        check_run_id(record.run_id)
        await trio.lowlevel.checkpoint()
        # A scan, as list_runs: what an in-memory store affords.
        live = None
        if record.dedupe is not None:
            live = next(
                (r for r in self._runs.values() if live_dedupe(r, record.queue, record.dedupe)),
                None,
            )
        depth = None
        if submission.max_queued is not None:
            depth = sum(1 for r in self._runs.values() if r.queue == record.queue and pending(r))
        exists = record.run_id in self._runs
        decision = decide_submit(submission, live=live, exists=exists, depth=depth)
        if decision.replace is not None:
            self._set(decision.replace)
        elif decision.create is not None:
            self._create(decision.create)
        return decision.run_id

    async def update_run(self, record: RunRecord) -> RunRecord:
        check_run_id(record.run_id)
        await trio.lowlevel.checkpoint()
        if record.run_id not in self._runs:
            raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self!r}")
        stored = fenced_update(self._runs[record.run_id], record)
        self._set(stored)
        return stored

    async def get_run(self, run_id: str) -> RunRecord | None:
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        record = self._runs.get(run_id)
        return None if record is None else self._read(record)

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        version: str | None = None,
        queue: str | None = None,
        key: str | None = None,
    ) -> Sequence[RunRecord]:
        selected = check_run_filter(status, workflow, after, limit, version, queue, key)
        await trio.lowlevel.checkpoint()
        # The dict keeps creation order; a scan is what an in-memory store affords.
        return [self._read(r) for r in selected.page(self._runs.values())]

    async def claim_batch(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        limit: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
    ) -> Sequence[Claimed]:
        """A worker's claim of up to *limit* runs, oldest first (see the protocol)."""
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        limit = check_limit(limit)
        served = check_served(workflows)
        now = check_now(now)
        await trio.lowlevel.checkpoint()
        decided = decide_batch(
            (self._read(stored) for stored in list(self._runs.values())),
            owner=owner,
            limit=limit,
            max_dispatches=max_dispatches,
            workflows=served,
            gone=gone,
            now=now,
        )
        claimed = []
        expires = self._clock() + ttl
        for current, decision in decided:
            self._set(decision.store)
            if decision.claimed:
                self._leases[owner] = expires
                claimed.append(
                    claimed_from(current, decision, datetime.fromtimestamp(expires, UTC))
                )
        return claimed

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Record what worker *owner* serves until now + *ttl* (``ttl=0``: withdraw it)."""
        check_owner(owner)
        ttl = check_ttl(ttl)
        served = check_served(serves)
        await trio.lowlevel.checkpoint()
        now = self._clock()
        self._workers = {o: ad for o, ad in self._workers.items() if ad[1] > now}
        if ttl:
            self._workers[owner] = (served, now + ttl)
        else:
            self._workers.pop(owner, None)

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The advertisements that have not expired on the store's clock, by owner."""
        await trio.lowlevel.checkpoint()
        now = self._clock()
        return [
            WorkerAd(owner=o, serves=ad[0], expires_at=datetime.fromtimestamp(ad[1], UTC))
            for o, ad in sorted(self._workers.items())
            if ad[1] > now
        ]

    async def watch(self, changed: Callable[[], None]) -> None:
        """Call *changed()* after each change to a run record (in this process); never return."""
        self._watchers.add(changed)
        try:
            await trio.sleep_forever()
        finally:
            self._watchers.discard(changed)

    def _set(self, record: RunRecord) -> None:
        """Store *record* and tell the watchers."""
        self._runs[record.run_id] = record
        self._changed()

    def _changed(self) -> None:
        for changed in list(self._watchers):
            changed()

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        check_run_id(run_id)
        check_owner(owner)
        ttl = check_ttl(ttl)
        await trio.lowlevel.checkpoint()
        current = self._runs.get(run_id)
        decision = decide_claim(
            None if current is None else self._read(current),
            run_id=run_id,
            owner=owner,
            create=create,
            takeover=takeover,
        )
        if decision.store is not None:
            self._set(decision.store)
            if decision.created:
                self._journals[run_id] = []
                self._by_key[run_id] = {}
        if not decision.claimed:
            return decision.outcome(None)
        expires = self._leases[owner] = self._clock() + ttl
        return decision.outcome(datetime.fromtimestamp(expires, UTC))

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        check_owner(owner)
        ttl = check_ttl(ttl)
        held = check_held(held)
        await trio.lowlevel.checkpoint()
        if ttl:
            self._leases[owner] = self._clock() + ttl
        else:
            self._leases.pop(owner, None)
        return renewal_of(
            owner, held, {r: run for r in held if (run := self._runs.get(r)) is not None}
        )

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        current = self._runs.get(run_id)
        record = decide_cancel(
            None if current is None else self._read(current), run_id=run_id, takeover=takeover
        )
        if record is not None:
            self._set(record)
        return self._read(self._runs[run_id])

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run and its journal at once (see :meth:`DeletableStore.delete_run`).

        Raises:
            RunConflictError: an owner holds a live lease on the run.
        """
        check_run_id(run_id)
        await trio.lowlevel.checkpoint()
        current = self._runs.get(run_id)
        if not check_delete(None if current is None else self._read(current), run_id=run_id):
            return False
        del self._runs[run_id]
        self._journals.pop(run_id, None)
        self._by_key.pop(run_id, None)
        self._messages.pop(run_id, None)
        self._changed()
        return True

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """Store a message with the run's next seq; wake the run if it is waiting.

        See :meth:`MailboxStore.send_message <tether.stores.MailboxStore.send_message>`.
        A checkpoint before anything changes (cancelled, nothing is stored);
        the watchers are told.

        Raises:
            RunNotFoundError: no such run.
            RunConflictError: the run has finished.
            UsageError: invalid arguments.
        """
        sent_at = check_send(run_id, name, value, now)
        await trio.lowlevel.checkpoint()
        current = self._runs.get(run_id)
        record = decide_send(current, run_id=run_id, now=sent_at)
        mailbox = self._messages.setdefault(run_id, [])
        message = Message(
            run_id=run_id, seq=len(mailbox) + 1, name=name, value=value, sent_at=sent_at
        )
        mailbox.append(message)
        if record is None:
            self._changed()
        else:
            self._set(record)
        return message

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """Journal responses and queue the run at once (see :meth:`RespondingStore.respond
        <tether.stores.RespondingStore.respond>`).

        A checkpoint before anything changes (cancelled, nothing is stored);
        the watchers are told.

        Raises:
            RunNotFoundError, RunConflictError, UnknownRequestError, UsageError: see there.
        """
        now = check_respond(run_id, entries, now)
        await trio.lowlevel.checkpoint()
        current = self._runs.get(run_id)
        record = decide_respond(
            None if current is None else self._read(current),
            run_id=run_id,
            keys=[e.key for e in entries],
            now=now,
        )
        self._store_entries(run_id, self._journals[run_id], entries)
        self._set(record)
        return record

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in order (empty for an unknown run).

        A checkpoint.

        Raises:
            UsageError: *after* is not a non-negative integer.
        """
        check_run_id(run_id)
        after = check_after(after)
        await trio.lowlevel.checkpoint()
        return self._messages.get(run_id, [])[after:]

    def _read(self, record: RunRecord) -> RunRecord:
        """*record* with its lease expiry filled while the owner's lease is live."""
        if record.owner is None:
            return record
        expires = self._leases.get(record.owner)
        if expires is None or expires <= self._clock():
            return record
        return attrs.evolve(record, lease_expires_at=datetime.fromtimestamp(expires, UTC))

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        await trio.lowlevel.checkpoint()
        return self.append_nowait(run_id, entries)

    def append_nowait(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """:meth:`append` without its checkpoint: synchronous, never blocks.

        The engine's fast path: it calls this instead of ``append`` while
        ``append`` is this class's own (not overridden, not patched), so that
        a save costs no scope and no wait (see ``tether._saver``). An entry
        that already carries the seq it gets is stored as it is, not copied:
        the engine numbers its entries ahead when it can.
        """
        journal = self._journals.get(run_id)
        if journal is None:
            check_run_id(run_id)  # (a stored run's id is valid: checked only on a miss)
            raise RunNotFoundError(f"cannot append to run {run_id!r}: it is not stored in {self!r}")
        run = self._runs[run_id]
        check_append(run_id, entries, token=run.token, owner=run.owner)
        return self._store_entries(run_id, journal, entries)

    def _store_entries(
        self, run_id: str, journal: list[Entry], entries: Sequence[Entry]
    ) -> list[Entry]:
        """Store *entries* (decided: fenced, or a respond) in *run_id*'s *journal*."""
        by_key = self._by_key[run_id]
        stored: list[Entry] = []
        for entry in entries:
            # Only an entry with the same key can be its duplicate: the
            # idempotency key is computed for those alone (rare: a retried
            # save, a re-executed step), never for a step's first entry.
            same_key = by_key.get(entry.key)
            if isinstance(same_key, Entry):
                same_key = by_key[entry.key] = [same_key]
            existing = None if same_key is None else _stored_twin(entry, same_key)
            if existing is None:
                seq = len(journal) + 1
                existing = entry if entry.seq == seq else entry.stored_as(seq)
                journal.append(existing)
                if same_key is None:
                    by_key[entry.key] = existing
                else:
                    same_key.append(existing)
            stored.append(existing)
        return stored

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        check_run_id(run_id)
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
        entry.token,
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
