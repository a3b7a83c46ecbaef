"""A durable store in one SQLite file: one writer thread, group commit.

Layer: stores (``tether.stores``).

Writes go through one thread that owns the write connection: callers queue a
job and wait; the thread commits everything queued at that moment in one
``BEGIN IMMEDIATE ... COMMIT`` (group commit), then wakes every waiter with
one callback into their Trio run. Reads run in Trio worker threads on
separate read connections (WAL lets them proceed while the writer commits).

The store is six modules, each using only the ones before it:
:mod:`._sqlite_sql` (the layout, the schema, its migrations and the statements),
:mod:`._sqlite_rows` (records to rows and strictly back),
:mod:`._sqlite_tables` (the migration and what each call does in SQL),
:mod:`._sqlite_conn` (connections, lock waits, reads in threads),
:mod:`._sqlite_writer` (the writer thread and group commit: why the hand-off
costs what it costs, and how a batch of appends takes few statements), and
this one, the store itself: its options, its lifetime and the protocol's
async methods. Whole because it is one class, the store's async face: each
method validates, then hands one call to the writer or a reader, and
splitting the class would split it by size alone.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import final

import trio

from .._errors import UsageError
from ._flow import Submission, check_submission
from ._leases import ClaimDecision, check_held, check_owner, check_ttl
from ._mailbox import Message, check_after, check_send
from ._owners import Renewal, Served, WorkerAd, dumps_served
from ._queue import (
    Claimed,
    check_limit,
    check_max_dispatches,
    check_now,
    check_run_filter,
    check_served,
)
from ._records import Entry, RunRecord, RunStatus
from ._respond import check_respond
from ._run_ids import check_run_id
from ._sqlite_conn import Connections
from ._sqlite_rows import encode_append, time_of
from ._sqlite_sql import SCHEMA_VERSION
from ._sqlite_tables import Tables
from ._sqlite_writer import Writer
from ._store import ClaimNextFromBatch
from ._url import path_url, refuse_url

__all__ = ("SCHEMA_VERSION", "SQLiteStore")

_SYNCHRONOUS = ("off", "normal", "full", "extra")


@final
class SQLiteStore(ClaimNextFromBatch):
    """Runs and journals in one SQLite file, safe for several processes.

    Args:
        path: the database file; created (with its schema) on :meth:`open`.
            A string that is a store URL (its text before the first ``:`` is
            ``sqlite``, ``file``, ``memory``, ``postgresql`` or ``postgres``, in
            any case, as ``"sqlite:runs.db"``) raises :class:`~tether.UsageError`
            naming :func:`tether.stores.from_url`, which takes URLs; any other
            string (``"C:\\runs.db"``, ``"runs:2024.db"``) and every
            :class:`pathlib.Path` is a path.
        synchronous: SQLite's ``PRAGMA synchronous``: ``"full"`` (default:
            every commit is fsynced, durable across power loss), ``"normal"``
            (in WAL mode, a power loss may lose the last commits, never
            corrupt the file; a process crash loses nothing), ``"extra"`` or
            ``"off"``.
        group_commit: commit every write queued at the same moment in one
            transaction (default). ``False`` commits each write alone.
        busy_timeout: seconds to wait for another process's write lock
            before a write fails with :class:`~tether.StoreError`.

    One writer thread, started by :meth:`open` and stopped by :meth:`close`,
    owns the write connection (WAL mode). Writes from parallel steps that
    wait at the same moment are committed together in one transaction and
    their waiters woken together. Reads run in Trio worker threads, so none
    blocks the event loop.

    Every method is a Trio checkpoint. A cancelled write whose job the
    writer thread had not yet taken is withdrawn: it is definitely not
    stored. One the thread had taken may still commit; :meth:`append` is
    idempotent (an entry equal to a stored one, see
    :attr:`~tether.stores.Entry.idempotency_key`, returns the stored entry),
    so retrying it is safe either way.

    Reads are strict: a row that does not decode raises
    :class:`~tether.CheckpointCorruptError` naming the run, the file, the
    table and the row. SQLite's own errors become :class:`~tether.StoreError`
    naming the file. A file written by a newer schema version is refused.

    The store may be reopened after it was closed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "full",
        group_commit: bool = True,
        busy_timeout: float = 10.0,
    ) -> None:
        refuse_url("SQLiteStore", path)
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            raise UsageError(f"SQLiteStore takes a file path, not {path!r}")
        if os.fspath(path) == ":memory:":
            raise UsageError("SQLiteStore needs a file (its readers use their own connections)")
        if not isinstance(synchronous, str) or synchronous.lower() not in _SYNCHRONOUS:
            raise UsageError(
                f"synchronous must be one of {', '.join(map(repr, _SYNCHRONOUS))}, "
                f"not {synchronous!r}"
            )
        if not isinstance(busy_timeout, int | float) or not busy_timeout >= 0:
            raise UsageError(f"busy_timeout must be a non-negative number, not {busy_timeout!r}")
        self.path = Path(path)
        self.synchronous = synchronous.lower()
        self.group_commit = bool(group_commit)
        self.busy_timeout = float(busy_timeout)
        label = repr(self)
        self._conns = Connections(
            self.path, synchronous=self.synchronous, busy_timeout=self.busy_timeout, label=label
        )
        self._tables = Tables(path=self.path, label=label)
        self._writer = Writer(self._conns, self._tables, group_commit=self.group_commit)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    @property
    def url(self) -> str:
        """The store's URL, ``sqlite:PATH``: :func:`tether.stores.from_url` of it is a
        store of this file."""
        return path_url("sqlite", str(self.path))

    # Test hooks: the writer waits for the gate before taking a batch; the
    # sizes of its committed batches (in jobs) are recorded.

    @property
    def _gate(self) -> threading.Event:
        return self._writer.gate

    @property
    def _batches(self) -> collections.deque[int]:
        return self._writer.batches

    # -- lifetime ------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and its schema) and start the writer thread.

        A checkpoint, cancellable throughout: while another process holds
        the file's write lock, opening waits for it (up to ``busy_timeout``)
        in a worker thread that gives up as soon as the caller is cancelled,
        closing what it opened, so a deadline around ``open_engine`` is
        prompt and no thread is left behind.

        Raises:
            StoreError: the file cannot be opened, is not a tether store, or
                has a newer schema version.
            UsageError: the store is already open.
        """
        if self._conns.is_open:
            raise UsageError(f"{self!r} is already open")
        self._conns.abort.clear()
        conn = await trio.to_thread.run_sync(self._conns.connect_writer, self._tables.migrate)
        self._conns.is_open = True
        self._writer.start(conn)

    async def close(self) -> None:
        """Finish every queued write, stop the writer thread, close the connections.

        A checkpoint. It waits for the writer thread to finish what is queued
        (bounded by ``busy_timeout`` per transaction), so no thread outlives
        it. Cancelled while the writer waits for another process's lock, it
        makes the writer give up (the writes still queued fail with
        :class:`~tether.StoreError`), waits the moment that takes, and
        re-raises. Safe to call when open failed or the store is closed.
        """
        self._conns.is_open = False
        try:
            await self._writer.stop()
            await trio.lowlevel.checkpoint()
        finally:
            self._conns.close_readers()

    # -- runs and leases ---------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record (a queued write; see the class doc on cancellation).

        Raises:
            RunConflictError: a run with this id exists.
            UsageError: the run id is not valid (:func:`check_run_id`).
            StoreError: SQLite failed.
        """
        check_run_id(record.run_id)
        await self._writer.queued(
            lambda conn: self._tables.create_run(conn, record), f"creating run {record.run_id!r}"
        )

    async def submit_run(self, submission: Submission) -> str:
        """Keep *submission* by the queues' rules, in one transaction (a queued write; see
        the class doc on cancellation); see :meth:`tether.stores.QueueingStore.submit_run`.

        Raises:
            QueueFullError: the queue is at ``max_queued``; nothing was stored.
            RunConflictError: the new run's id exists; or a debounced submit of
                another workflow than its dedupe id's run.
            UsageError: the submission is not valid (:func:`check_submission`).
            StoreError: SQLite failed.
        """
        check_submission(submission)
        check_run_id(submission.record.run_id)
        run_id: str = await self._writer.queued(
            lambda conn: self._tables.submit_run(conn, submission),
            f"submitting run {submission.record.run_id!r}",
        )
        return run_id

    async def update_run(self, record: RunRecord) -> RunRecord:
        """Replace a run record (a queued write; see the class doc on cancellation).

        Raises:
            RunNotFoundError: no run with this id.
            StoreError: SQLite failed.
        """
        check_run_id(record.run_id)
        stored: RunRecord = await self._writer.queued(
            lambda conn: self._tables.update_run(conn, record), f"updating run {record.run_id!r}"
        )
        return stored

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        """Take the run's lease (one transaction; see :meth:`Store.claim`).

        Raises:
            RunConflictError, RunCancelledError, RunNotFoundError: see the protocol.
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        check_owner(owner)
        ttl = check_ttl(ttl)
        # The decision comes back rather than raising, so that what it
        # stores (a recorded cancel made final) commits even when it refuses.
        decided: tuple[ClaimDecision, float] = await self._writer.queued(
            lambda conn: self._tables.claim(conn, run_id, owner, ttl, create, takeover),
            f"claiming run {run_id!r}",
        )
        decision, expires = decided
        return decision.outcome(time_of(expires))

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend *owner*'s leases: one row's update, however many runs it holds.

        Raises:
            StoreError: SQLite failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        held = check_held(held)
        result: Renewal = await self._writer.queued(
            lambda conn: self._tables.renew(conn, owner, ttl, held),
            f"renewing the leases of {owner}",
            urgent=True,
        )
        return result

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel (one transaction; see :meth:`Store.cancel_run`).

        Raises:
            RunNotFoundError, RunConflictError: see the protocol.
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        result: RunRecord = await self._writer.queued(
            lambda conn: self._tables.cancel_run(conn, run_id, takeover),
            f"cancelling run {run_id!r}",
        )
        return result

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run's row and its journal's rows, in one transaction of the writer.

        Readers see the run whole or not at all (each read is one snapshot).
        A queued write; see the class doc on cancellation.

        Raises:
            RunConflictError: an owner holds a live lease on the run.
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        deleted: bool = await self._writer.queued(
            lambda conn: self._tables.delete_run(conn, run_id), f"deleting run {run_id!r}"
        )
        return deleted

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None``. A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: the row does not decode.
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        result: RunRecord | None = await self._conns.read(
            lambda conn: self._tables.select_run(conn, run_id), f"reading run {run_id!r}"
        )
        return result

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
        """Run records in creation order, filtered (indexed queries; see :meth:`Store.list_runs`).

        A checkpoint; runs in a worker thread.

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: a selected row does not decode (none is skipped).
            StoreError: SQLite failed.
        """
        selected = check_run_filter(status, workflow, after, limit, version, queue, key)
        result: list[RunRecord] = await self._conns.read(
            lambda conn: self._tables.list_runs(conn, selected), "listing runs"
        )
        return result

    # -- the queue and workers ---------------------------------------------------------

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
        """A worker's claim of up to *limit* runs, oldest first (one transaction; see the
        protocol).

        Raises:
            StoreError: SQLite failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        limit = check_limit(limit)
        clock = check_now(now)  # the claimer's: when waiting runs are due
        served, dead = check_served(workflows), sorted(set(gone))
        if not served:
            await trio.lowlevel.checkpoint()
            return []
        result: list[Claimed] = await self._writer.queued(
            lambda conn: self._tables.claim_batch(
                conn,
                owner=owner,
                ttl=ttl,
                served=served,
                dead=dead,
                max_dispatches=max_dispatches,
                limit=limit,
                clock=clock,
            ),
            "claiming queued runs",
        )
        return result

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Write worker *owner*'s row of ``workers`` (``ttl=0``: delete it); one transaction.

        Expired rows of other workers are deleted in the same transaction.

        Raises:
            StoreError: SQLite failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        text = dumps_served(check_served(serves))
        await self._writer.queued(
            lambda conn: self._tables.advertise(conn, owner, text, ttl),
            f"advertising worker {owner}",
        )

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The live rows of ``workers``, by owner. A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: a row does not decode.
            StoreError: SQLite failed.
        """
        result: list[WorkerAd] = await self._conns.read(
            self._tables.list_workers, "listing workers"
        )
        return result

    # -- the journal -------------------------------------------------------------------

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Append journal entries in one transaction; return them as stored.

        Each new entry gets the run's next ``seq`` (``max + 1`` inside the
        write transaction, so processes sharing the file never collide). An
        entry equal to one already stored returns the stored one.
        Cancellation: see the class doc.

        Raises:
            RunNotFoundError: no run with this id.
            CheckpointCorruptError: a stored duplicate does not decode.
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        for e in entries:
            if e.run_id != run_id:
                raise UsageError(f"entry {e.key} of run {e.run_id!r} appended to run {run_id!r}")
        appending = encode_append(run_id, entries)
        # The writer returns each entry's new seq, or the stored entry it equals.
        done: list[int | Entry] = await self._writer.queued(
            None, f"appending to run {run_id!r}", appending
        )
        return [
            entry.stored_as(got) if isinstance(got, int) else got
            for entry, got in zip(entries, done, strict=True)
        ]

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (an index range: O(its entries)).

        A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: any entry does not decode or does not
                match its checksum, or a seq below the highest is missing
                (none is skipped).
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        result: list[Entry] = await self._conns.read(
            lambda conn: self._tables.load_entries(conn, run_id),
            f"loading the journal of run {run_id!r}",
        )
        return result

    # -- the mailbox -------------------------------------------------------------------

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """Store a message with the run's next seq, and wake the run if it is waiting.

        One transaction of the writer (``BEGIN IMMEDIATE``: processes sharing
        the file never take the same seq); see :meth:`MailboxStore.send_message
        <tether.stores.MailboxStore.send_message>`. A queued write: cancelled
        before the writer took it, nothing is stored; after, the message may
        have been stored (see the class doc).

        Raises:
            RunNotFoundError: no such run.
            RunConflictError: the run has finished.
            UsageError: invalid arguments.
            StoreError: SQLite failed.
        """
        sent_at = check_send(run_id, name, value, now)
        message: Message = await self._writer.queued(
            lambda conn: self._tables.send_message(conn, run_id, name, value, sent_at),
            f"sending a message to run {run_id!r}",
        )
        return message

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """Journal responses and queue the run, in one transaction of the writer.

        See :meth:`RespondingStore.respond <tether.stores.RespondingStore.respond>`.
        A queued write: cancelled before the writer took it, nothing is
        stored; after, it may have been (see the class doc).

        Raises:
            RunNotFoundError, RunConflictError, UnknownRequestError, UsageError: see there.
            StoreError: SQLite failed.
        """
        now = check_respond(run_id, entries, now)
        appending = encode_append(run_id, entries)
        record: RunRecord = await self._writer.queued(
            lambda conn: self._tables.respond(conn, appending, now),
            f"responding to run {run_id!r}",
        )
        return record

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in order (an index range).

        A checkpoint; runs in a worker thread.

        Raises:
            UsageError: *after* is not a non-negative integer.
            CheckpointCorruptError: a message does not decode or match its
                checksum, or a seq below the highest is missing.
            StoreError: SQLite failed.
        """
        check_run_id(run_id)
        after = check_after(after)
        result: list[Message] = await self._conns.read(
            lambda conn: self._tables.load_messages(conn, run_id, after),
            f"loading the messages of run {run_id!r}",
        )
        return result
