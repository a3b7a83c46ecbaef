"""A durable store in one SQLite file: one writer thread, group commit.

Layout (schema version 6, kept in ``PRAGMA user_version``)::

    runs(id INTEGER PRIMARY KEY AUTOINCREMENT,     -- creation order
         run_id TEXT NOT NULL UNIQUE,
         data TEXT NOT NULL,                       -- RunRecord.to_json(), JSON text
         owner TEXT, token INTEGER, cancel INTEGER,  -- copies of data's lease fields
         status TEXT, workflow TEXT,               -- copies for listing and workers,
                                                   -- indexed with id
         version TEXT,                             -- copy of the workflow version
         wake_at REAL)                             -- copy of a waiting run's wake_at,
                                                   -- Unix time, indexed
    entries(run_id TEXT NOT NULL, seq INTEGER NOT NULL,
            ikey TEXT NOT NULL,                    -- Entry.idempotency_key
            data TEXT NOT NULL,                    -- Entry.to_json(), JSON text
            PRIMARY KEY (run_id, seq), UNIQUE (run_id, ikey))
    messages(run_id TEXT NOT NULL, seq INTEGER NOT NULL,  -- a run's mailbox
             data TEXT NOT NULL,                   -- Message.to_json(), JSON text
             PRIMARY KEY (run_id, seq))
    owners(owner TEXT PRIMARY KEY,                 -- one row per lease holder:
           expires REAL NOT NULL)                  -- its leases' expiry, Unix time
    workers(owner TEXT PRIMARY KEY,                -- one row per live worker:
            serves TEXT NOT NULL,                  -- its (workflow, version) pairs, JSON
            expires REAL NOT NULL)                 -- until when, Unix time

A lease is per owner, not per run: renewing every run an engine holds is one
row's update. The lease columns of ``runs`` mirror the JSON so that fencing
checks and renewals are indexed queries; ``status`` and ``workflow`` do the
same for filtered listings and for workers' claims. Older files are
migrated on open (the columns, indexes and tables are added; older JSON stays
readable).

Writes go through one thread that owns the write connection: callers queue a
job and wait; the thread takes everything queued at that moment (and what is
queued while its statements run, a few times over) and commits it in one
``BEGIN IMMEDIATE ... COMMIT`` (group commit), then wakes every waiter with
one callback into their Trio run. Reads run in Trio worker threads on
separate read connections (WAL lets them proceed while the writer commits).

What the hand-off costs, and why it stays: a lone save pays two thread
wake-ups over its commit, one to wake the writer (a ``queue.SimpleQueue``
put: one futex wake) and one to wake the Trio run (``run_sync_soon``, whose
callback reschedules the waiting task directly, no event). Measured with a
no-op job, that round trip is about 20 us when both threads share a CPU and
80-100 us when the writer has to be woken on another, idle one (a virtual
machine's CPU wakes slowly); ``trio.to_thread.run_sync`` costs more (40 and
110 us: its thread cache and limiter), and a pipe or a socket pair in place
of the queue measured no better, so no cheaper primitive is left to pick. A
writer that spins instead of sleeping would fight the event loop for the GIL
(every poll takes it). Only a commit in the event loop's own thread avoids
both wake-ups, and it would stop every task of the process for each fsync,
and for another process's write lock up to ``busy_timeout``: a Trio library
must not block its loop, so the fsync stays in a thread
(``benchmarks/store_throughput.py`` prints that floor, the same bare commit
through the same hand-off, beside a step).

An append is encoded (its JSON and idempotency key, :mod:`._sqlite_rows`) by
the caller before it is queued; the writer only numbers its rows. A batch costs a few statements
whatever its size: per run one query for its existence and its highest
``seq`` (inside the write transaction: processes sharing the file never
collide), and multi-row inserts with no duplicate lookups, since the
``UNIQUE (run_id, ikey)`` constraint catches a duplicate. When anything in
that fast pass fails, the transaction is rolled back and the batch redone job
by job, each in a savepoint, looking duplicates up: one bad job fails alone.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar, final

import attrs
import trio

from .._errors import (
    CheckpointCorruptError,
    RunConflictError,
    RunNotFoundError,
    StoreError,
    TetherError,
    UsageError,
)
from ._leases import (
    ClaimDecision,
    check_append,
    check_delete,
    check_owner,
    check_ttl,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal,
)
from ._mailbox import Message, check_after, check_send, decide_send, load_message, message_gap
from ._protocol import (
    Entry,
    RecordDecodeError,
    Renewal,
    RunRecord,
    RunStatus,
    Served,
    WorkerAd,
    dumps_record,
    dumps_served,
    first_gap,
    load_entry,
    load_run_record,
    loads_served,
)
from ._queue import (
    check_max_dispatches,
    check_now,
    check_run_filter,
    check_served,
    decide_dispatch,
    dispatchable,
)
from ._sqlite_rows import Appending, encode_append, insert_entries, row_data

__all__ = ("SCHEMA_VERSION", "SQLiteStore")

T = TypeVar("T")

#: The schema version this tether writes and reads (``PRAGMA user_version``).
SCHEMA_VERSION: Final = 6

_SYNCHRONOUS = ("off", "normal", "full", "extra")

_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    data TEXT NOT NULL
);
CREATE TABLE entries (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ikey TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, ikey)
);
"""
# Version 1 -> 2: the lease columns and the owners table.
_MIGRATE_2 = """
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cancel INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_owner ON runs (owner) WHERE owner IS NOT NULL;
CREATE TABLE owners (owner TEXT PRIMARY KEY, expires REAL NOT NULL);
"""
# Version 2 -> 3: status and workflow columns, indexed for listing and for workers.
_MIGRATE_3 = """
ALTER TABLE runs ADD COLUMN status TEXT;
ALTER TABLE runs ADD COLUMN workflow TEXT;
UPDATE runs SET status = json_extract(data, '$.status'), workflow = json_extract(data, '$.workflow')
    WHERE json_valid(data);
CREATE INDEX runs_status ON runs (status, id);
CREATE INDEX runs_workflow ON runs (workflow, id);
"""
# Version 3 -> 4: the workflow version column (older records have none: NULL is
# right), and workers' advertisements, kept apart from leases. No index for the
# version: a workflow has few versions, and the (workflow, id) index narrows to it.
_MIGRATE_4 = """
ALTER TABLE runs ADD COLUMN version TEXT;
CREATE TABLE workers (owner TEXT PRIMARY KEY, serves TEXT NOT NULL, expires REAL NOT NULL);
"""
# Version 4 -> 5: when a waiting run (parked on a timer) is due, for workers'
# claims; only waiting runs have one, so the index holds only them.
_MIGRATE_5 = """
ALTER TABLE runs ADD COLUMN wake_at REAL;
CREATE INDEX runs_wake ON runs (wake_at) WHERE status = 'waiting';
"""
# Version 5 -> 6: runs' mailboxes (engine.send, tether.receive).
_MIGRATE_6 = """
CREATE TABLE messages (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""
_STEPS: Final = (_SCHEMA, _MIGRATE_2, _MIGRATE_3, _MIGRATE_4, _MIGRATE_5, _MIGRATE_6)
#: What brings a file of each older version to :data:`SCHEMA_VERSION` (0: a new file).
_MIGRATIONS: Final = {version: "".join(_STEPS[version:]) for version in range(SCHEMA_VERSION)}

_INSERT_ENTRY = "INSERT INTO entries (run_id, seq, ikey, data) VALUES (?, ?, ?, ?)"
# The run's lease holder and token (for the fencing check) and its highest seq.
_LAST_SEQ = """
SELECT owner, token, (SELECT COALESCE(MAX(seq), 0) FROM entries WHERE run_id = ?1)
FROM runs WHERE run_id = ?1
"""
# A run record with its owner's lease expiry.
_SELECT_RUN = """
SELECT r.id, r.run_id, r.data, o.expires FROM runs r LEFT JOIN owners o ON o.owner = r.owner
"""
_PUT_RUN = """
UPDATE runs SET data = ?, owner = ?, token = ?, cancel = ?, status = ?, workflow = ?, version = ?,
wake_at = ? WHERE run_id = ?
"""
_INSERT_RUN = """
INSERT INTO runs (data, owner, token, cancel, status, workflow, version, wake_at, run_id)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# Candidates for a worker's claim, oldest first (see dispatchable(), which decides).
_DISPATCHABLE = (
    _SELECT_RUN
    + """
WHERE r.workflow IN ({workflows}) AND (r.workflow, COALESCE(r.version, '')) IN (VALUES {pairs})
AND (r.status = 'queued' OR (r.status = 'running' AND (
    r.owner IS NULL OR o.expires IS NULL OR o.expires <= ? OR r.owner IN ({gone})))
    OR (r.status = 'waiting' AND r.wake_at <= ?))
ORDER BY r.id LIMIT 32
"""
)
_SET_OWNER = """
INSERT INTO owners (owner, expires) VALUES (?, ?)
ON CONFLICT (owner) DO UPDATE SET expires = excluded.expires
"""
# How long a writer or an opener waits between attempts to take the write lock.
_BUSY_POLL = 0.005
_BUSY: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# How many times jobs queued during a transaction may join it.
_LATE_ROUNDS = 3
_PENDING, _TAKEN, _WITHDRAWN = 0, 1, 2


@attrs.define(eq=False)
class _Job:
    """One queued write: an append, or *fn* run inside the writer's transaction."""

    fn: Callable[[sqlite3.Connection], Any] | None
    token: trio.lowlevel.TrioToken
    appending: Appending | None = None
    urgent: bool = False  # a lease renewal: committed ahead of a batch of other writes
    #: the task waiting for the job (``None`` once its wait ended): touched in its Trio thread
    waiter: trio.lowlevel.Task | None = None
    state: int = _PENDING  # guarded by the store's lock
    result: Any = None
    error: BaseException | None = None


def _no_jobs() -> list[_Job]:
    return []


def _execute_script(conn: sqlite3.Connection, script: str) -> None:
    # One statement at a time: executescript() would COMMIT first.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _run_row(record: RunRecord) -> tuple[object, ...]:
    """The parameters of :data:`_INSERT_RUN` and :data:`_PUT_RUN` for *record*."""
    return (
        dumps_record(record.to_json()),
        record.owner,
        record.token,
        record.cancel_requested,
        record.status.value,
        record.workflow,
        record.version,
        None if record.wake_at is None else record.wake_at.timestamp(),
        record.run_id,
    )


def _time_of(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def _wake(jobs: list[_Job]) -> None:
    """Reschedule the tasks still waiting for *jobs* (in their Trio thread)."""
    for job in jobs:
        waiter = job.waiter
        if waiter is not None:
            job.waiter = None
            trio.lowlevel.reschedule(waiter)


@final
class SQLiteStore:
    """Runs and journals in one SQLite file, safe for several processes.

    Args:
        path: the database file; created (with its schema) on :meth:`open`.
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
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._writer: sqlite3.Connection | None = None
        self._readers: list[sqlite3.Connection] = []
        self._open = False
        # Test hooks: the writer waits for the gate before taking a batch;
        # the sizes of committed batches (in jobs) are recorded.
        self._gate = threading.Event()
        self._gate.set()
        # Set to make the writer stop waiting for another process's lock.
        self._abort = threading.Event()
        self._batches: collections.deque[int] = collections.deque(maxlen=1000)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

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
        if self._open:
            raise UsageError(f"{self!r} is already open")
        self._abort.clear()
        conn = await trio.to_thread.run_sync(self._connect_writer)
        thread = threading.Thread(
            target=self._writer_loop, args=(conn,), name=f"tether {self!r} writer", daemon=True
        )
        self._writer = conn
        self._thread = thread
        self._open = True
        thread.start()

    async def close(self) -> None:
        """Finish every queued write, stop the writer thread, close the connections.

        A checkpoint. It waits for the writer thread to finish what is queued
        (bounded by ``busy_timeout`` per transaction), so no thread outlives
        it. Cancelled while the writer waits for another process's lock, it
        makes the writer give up (the writes still queued fail with
        :class:`~tether.StoreError`), waits the moment that takes, and
        re-raises. Safe to call when open failed or the store is closed.
        """
        self._open = False
        thread, self._thread = self._thread, None
        try:
            if thread is not None:
                self._queue.put(None)
                try:
                    await trio.to_thread.run_sync(thread.join, abandon_on_cancel=True)
                except BaseException:
                    self._abort.set()  # the writer stops waiting for locks at once
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(thread.join)
                    raise
            await trio.lowlevel.checkpoint()
        finally:
            with self._lock:
                readers, self._readers = self._readers, []
            for conn in readers:
                conn.close()
            self._writer = None

    # -- the protocol ------------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record (a queued write; see the class doc on cancellation).

        Raises:
            RunConflictError: a run with this id exists.
            StoreError: SQLite failed.
        """

        def write(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (record.run_id,)).fetchone():
                raise RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
            self._insert_run(conn, record)

        await self._write(write, f"creating run {record.run_id!r}")

    async def update_run(self, record: RunRecord) -> RunRecord:
        """Replace a run record (a queued write; see the class doc on cancellation).

        Raises:
            RunNotFoundError: no run with this id.
            StoreError: SQLite failed.
        """

        def write(conn: sqlite3.Connection) -> RunRecord:
            current = self._select_run(conn, record.run_id)
            if current is None:
                raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self!r}")
            stored = fenced_update(current, record)
            self._put_run(conn, stored)
            return stored

        stored: RunRecord = await self._write(write, f"updating run {record.run_id!r}")
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
        check_owner(owner)
        ttl = check_ttl(ttl)

        def write(conn: sqlite3.Connection) -> tuple[ClaimDecision, float]:
            now = time.time()
            decision = decide_claim(
                self._select_run(conn, run_id, now),
                run_id=run_id,
                owner=owner,
                create=create,
                takeover=takeover,
            )
            if decision.store is not None:
                if decision.created:
                    self._insert_run(conn, decision.store)
                else:
                    self._put_run(conn, decision.store)
                if decision.claimed:
                    conn.execute(_SET_OWNER, (owner, now + ttl))
            return decision, now + ttl

        # The decision comes back rather than raising, so that what it
        # stores (a recorded cancel made final) commits even when it refuses.
        decided: tuple[ClaimDecision, float] = await self._write(write, f"claiming run {run_id!r}")
        decision, expires = decided
        return decision.outcome(_time_of(expires))

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend *owner*'s leases: one row's update, however many runs it holds.

        Raises:
            StoreError: SQLite failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)

        def write(conn: sqlite3.Connection) -> Renewal:
            if ttl:
                conn.execute(_SET_OWNER, (owner, time.time() + ttl))
            else:
                conn.execute("DELETE FROM owners WHERE owner = ?", (owner,))
            rows = conn.execute(
                "SELECT run_id, token, cancel FROM runs WHERE owner = ?", (owner,)
            ).fetchall()
            return renewal({r: (t, bool(c)) for r, t, c in rows}, held)

        result: Renewal = await self._write(write, f"renewing the leases of {owner}", urgent=True)
        return result

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel (one transaction; see :meth:`Store.cancel_run`).

        Raises:
            RunNotFoundError, RunConflictError: see the protocol.
            StoreError: SQLite failed.
        """

        def write(conn: sqlite3.Connection) -> RunRecord:
            current = self._select_run(conn, run_id)
            record = decide_cancel(current, run_id=run_id, takeover=takeover)
            if record is None:
                assert current is not None
                return current
            self._put_run(conn, record)
            return record

        result: RunRecord = await self._write(write, f"cancelling run {run_id!r}")
        return result

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run's row and its journal's rows, in one transaction of the writer.

        Readers see the run whole or not at all (each read is one snapshot).
        A queued write; see the class doc on cancellation.

        Raises:
            RunConflictError: an owner holds a live lease on the run.
            StoreError: SQLite failed.
        """

        def write(conn: sqlite3.Connection) -> bool:
            if not check_delete(self._select_run(conn, run_id, time.time()), run_id=run_id):
                return False
            conn.execute("DELETE FROM entries WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM messages WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            return True

        deleted: bool = await self._write(write, f"deleting run {run_id!r}")
        return deleted

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

        def write(conn: sqlite3.Connection) -> Message:
            record = decide_send(self._select_run(conn, run_id), run_id=run_id, now=sent_at)
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE run_id = ?", (run_id,)
            ).fetchone()
            if type(last) is not int:
                raise self._corrupt(run_id, "table messages", f"the highest seq is {last!r}")
            message = Message(run_id=run_id, seq=last + 1, name=name, value=value, sent_at=sent_at)
            conn.execute(
                "INSERT INTO messages (run_id, seq, data) VALUES (?, ?, ?)",
                (run_id, message.seq, dumps_record(message.to_json())),
            )
            if record is not None:
                self._put_run(conn, record)
            return message

        message: Message = await self._write(write, f"sending a message to run {run_id!r}")
        return message

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in order (an index range).

        A checkpoint; runs in a worker thread.

        Raises:
            UsageError: *after* is not a non-negative integer.
            CheckpointCorruptError: a message does not decode or match its
                checksum, or a seq below the highest is missing.
            StoreError: SQLite failed.
        """
        after = check_after(after)

        def read(conn: sqlite3.Connection) -> list[Message]:
            rows = conn.execute(
                "SELECT rowid, seq, data FROM messages WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after),
            ).fetchall()
            messages = [self._decode_message(run_id, row) for row in rows]
            gap = message_gap([m.seq for m in messages], after=after)
            if gap is not None:
                raise self._corrupt(
                    run_id, f"table messages, seq {gap}", "missing (a later seq is stored)"
                )
            return messages

        result: list[Message] = await self._read(read, f"loading the messages of run {run_id!r}")
        return result

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
        """A worker's claim of the oldest dispatchable run (one transaction; see the protocol).

        Raises:
            StoreError: SQLite failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        clock = check_now(now)  # the claimer's: when waiting runs are due
        served, dead = check_served(workflows), sorted(set(gone))
        names = sorted({name for name, _ in served})
        if not names:
            await trio.lowlevel.checkpoint()
            return None
        # A version is never empty: '' stands for NULL (unversioned) in the pairs.
        pairs = [v for name, version in sorted(served, key=str) for v in (name, version or "")]
        query = _DISPATCHABLE.format(
            workflows=", ".join("?" * len(names)),
            pairs=", ".join(["(?, ?)"] * len(served)),
            gone=", ".join("?" * len(dead)),
        )

        def write(conn: sqlite3.Connection) -> RunRecord | None:
            while True:
                now = time.time()
                params = (*names, *pairs, now, *dead, clock.timestamp())
                rows = conn.execute(query, params).fetchall()
                decided = False
                for row in rows:
                    current = self._decode_run(row, now)
                    if not dispatchable(current, workflows=served, gone=dead, now=clock):
                        continue
                    decision = decide_dispatch(current, owner=owner, max_dispatches=max_dispatches)
                    self._put_run(conn, decision.store)
                    decided = True
                    if decision.claimed:
                        conn.execute(_SET_OWNER, (owner, now + ttl))
                        return attrs.evolve(decision.store, lease_expires_at=_time_of(now + ttl))
                if not decided:  # (the rows the query found were no candidates after all)
                    return None

        result: RunRecord | None = await self._write(write, "claiming a queued run")
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

        def write(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute("DELETE FROM workers WHERE expires <= ? OR owner = ?", (now, owner))
            if ttl:
                conn.execute("INSERT INTO workers VALUES (?, ?, ?)", (owner, text, now + ttl))

        await self._write(write, f"advertising worker {owner}")

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The live rows of ``workers``, by owner. A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: a row does not decode.
            StoreError: SQLite failed.
        """

        def read(conn: sqlite3.Connection) -> list[WorkerAd]:
            rows = conn.execute(
                "SELECT rowid, owner, serves, expires FROM workers WHERE expires > ? "
                "ORDER BY owner",
                (time.time(),),
            ).fetchall()
            ads = []
            for rowid, owner, serves, expires in rows:
                try:
                    if type(owner) is not str or type(serves) is not str:
                        raise RecordDecodeError("its owner or serves column is not text")
                    if type(expires) not in (float, int):
                        raise RecordDecodeError("its expires column is not a number")
                    pairs = loads_served(serves)
                except RecordDecodeError as exc:
                    raise CheckpointCorruptError(
                        f"{self.path}, table workers, rowid {rowid}: {exc}"
                    ) from None
                ads.append(WorkerAd(owner=owner, serves=pairs, expires_at=_time_of(expires)))
            return ads

        result: list[WorkerAd] = await self._read(read, "listing workers")
        return result

    def _insert_run(self, conn: sqlite3.Connection, record: RunRecord) -> None:
        conn.execute(_INSERT_RUN, _run_row(record))

    def _put_run(self, conn: sqlite3.Connection, record: RunRecord) -> None:
        conn.execute(_PUT_RUN, _run_row(record))

    def _select_run(
        self, conn: sqlite3.Connection, run_id: str, now: float | None = None
    ) -> RunRecord | None:
        row = conn.execute(_SELECT_RUN + " WHERE r.run_id = ?", (run_id,)).fetchone()
        return None if row is None else self._decode_run(row, now)

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
        for e in entries:
            if e.run_id != run_id:
                raise UsageError(f"entry {e.key} of run {e.run_id!r} appended to run {run_id!r}")
        appending = encode_append(run_id, entries)
        # The writer returns each entry's new seq, or the stored entry it equals.
        done: list[int | Entry] = await self._write(None, f"appending to run {run_id!r}", appending)
        return [
            entry.stored_as(got) if isinstance(got, int) else got
            for entry, got in zip(entries, done, strict=True)
        ]

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None``. A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: the row does not decode.
            StoreError: SQLite failed.
        """

        def read(conn: sqlite3.Connection) -> RunRecord | None:
            return self._select_run(conn, run_id)

        result: RunRecord | None = await self._read(read, f"reading run {run_id!r}")
        return result

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        version: str | None = None,
    ) -> Sequence[RunRecord]:
        """Run records in creation order, filtered (indexed queries; see :meth:`Store.list_runs`).

        A checkpoint; runs in a worker thread.

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: a selected row does not decode (none is skipped).
            StoreError: SQLite failed.
        """
        selected = check_run_filter(status, workflow, after, limit, version)
        where: list[str] = []
        params: list[object] = []
        if selected.status is not None:
            where.append(f"r.status IN ({', '.join('?' * len(selected.status))})")
            params.extend(sorted(s.value for s in selected.status))
        if selected.workflow is not None:
            where.append("r.workflow = ?")
            params.append(selected.workflow)
        if selected.version is not None:
            where.append("r.version = ?")
            params.append(selected.version)
        if selected.after is not None:
            where.append("r.id > (SELECT id FROM runs WHERE run_id = ?)")
            params.append(selected.after)
        query = _SELECT_RUN + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.id"
        if selected.limit is not None:
            query += f" LIMIT {selected.limit}"

        def read(conn: sqlite3.Connection) -> list[RunRecord]:
            if (
                selected.after is not None
                and not conn.execute(
                    "SELECT 1 FROM runs WHERE run_id = ?", (selected.after,)
                ).fetchone()
            ):
                raise RunNotFoundError(f"list_runs(after={selected.after!r}): no such run")
            rows = conn.execute(query, params).fetchall()
            now = time.time()
            return [self._decode_run(row, now) for row in rows]

        result: list[RunRecord] = await self._read(read, "listing runs")
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (an index range: O(its entries)).

        A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: any entry does not decode or does not
                match its checksum, or a seq below the highest is missing
                (none is skipped).
            StoreError: SQLite failed.
        """

        def read(conn: sqlite3.Connection) -> list[Entry]:
            rows = conn.execute(
                "SELECT rowid, seq, data FROM entries WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            entries = [self._decode_entry(run_id, row) for row in rows]
            gap = first_gap([e.seq for e in entries if e.seq is not None])
            if gap is not None:
                raise self._corrupt(
                    run_id, f"table entries, seq {gap}", "missing (a later seq is stored)"
                )
            return entries

        result: list[Entry] = await self._read(read, f"loading the journal of run {run_id!r}")
        return result

    # -- decoding ------------------------------------------------------------------------

    def _corrupt(self, run_id: object, where: str, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(f"run {run_id!r}: {self.path}, {where}: {problem}")

    def _decode_run(self, row: tuple[Any, ...], now: float | None = None) -> RunRecord:
        """A runs row (with its owner's expiry) as a record, its lease filled while live."""
        rowid, run_id, data, expires = row
        where = f"table runs, rowid {rowid}"
        if type(data) is not str:
            raise self._corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            record = load_run_record(data, run_id)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, where, str(exc)) from None
        live = isinstance(expires, float | int) and expires > (time.time() if now is None else now)
        if record.owner is not None and live:
            record = attrs.evolve(record, lease_expires_at=_time_of(expires))
        return record

    def _decode_entry(self, run_id: str, row: tuple[Any, ...]) -> Entry:
        entry: Entry = self._decode_seq_row(run_id, "entries", row, load_entry)
        return entry

    def _decode_message(self, run_id: str, row: tuple[Any, ...]) -> Message:
        message: Message = self._decode_seq_row(run_id, "messages", row, load_message)
        return message

    def _decode_seq_row(
        self, run_id: str, table: str, row: tuple[Any, ...], load: Callable[[str, str, int], T]
    ) -> T:
        """A row ``(rowid, seq, data)`` of *table*, decoded strictly by *load*."""
        rowid, seq, data = row
        where = f"table {table}, seq {seq!r} (rowid {rowid})"
        if type(seq) is not int:
            raise self._corrupt(run_id, where, f"column seq holds {type(seq).__name__}")
        if type(data) is not str:
            raise self._corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            return load(data, run_id, seq)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, where, str(exc)) from None

    # -- connections and threads -------------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        err = StoreError(f"{what} in {self.path}: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_writer(self) -> sqlite3.Connection:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            raise self._error("opening the store", exc) from None
        try:
            # Lock waits are polled here, not left to SQLite's busy handler,
            # so that a cancelled opener or a closing store stops them.
            conn.execute("PRAGMA busy_timeout = 0")
            mode = self._retry_busy(
                lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], opening=True
            )
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: SQLite cannot use WAL mode here (got {mode!r})")
            self._begin(conn, opening=True)
            try:
                (version,) = conn.execute("PRAGMA user_version").fetchone()
                if version == 0:
                    (tables,) = conn.execute(
                        "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
                    ).fetchone()
                    if tables:
                        raise StoreError(
                            f"{self.path} is an SQLite database but not a tether store "
                            f"(it has {tables} tables and no tether schema version)"
                        )
                if version in _MIGRATIONS:
                    _execute_script(conn, _MIGRATIONS[version])
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                elif version > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has tether store schema version {version}, newer than "
                        f"version {SCHEMA_VERSION} that this tether reads; upgrade tether"
                    )
                elif version != SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has unknown tether store schema version {version} "
                        f"(this tether reads version {SCHEMA_VERSION})"
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            conn.close()
            raise self._error("opening the store", exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _retry_busy(self, fn: Callable[[], T], *, opening: bool) -> T:
        """``fn()``, retried while another connection holds the lock it needs.

        Up to ``busy_timeout`` seconds. Between attempts an opener checks
        whether its caller was cancelled (``trio.from_thread.check_cancelled``
        raises ``Cancelled`` in this thread then), the writer whether the
        store is closing.
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode not in _BUSY or time.monotonic() >= deadline:
                    raise
            if opening:
                trio.from_thread.check_cancelled()
            elif self._abort.is_set():
                raise StoreError(
                    f"{self.path}: gave up waiting for the write lock: the store is closing"
                )
            time.sleep(_BUSY_POLL)

    def _begin(self, conn: sqlite3.Connection, *, opening: bool = False) -> None:
        self._retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), opening=opening)

    async def _read(self, fn: Callable[[sqlite3.Connection], Any], what: str) -> Any:
        if not self._open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self!r} is not open")
        return await trio.to_thread.run_sync(self._read_sync, fn, what)

    def _read_sync(self, fn: Callable[[sqlite3.Connection], Any], what: str) -> Any:
        with self._lock:
            conn = self._readers.pop() if self._readers else None
        try:
            if conn is None:
                conn = self._connect()
            result = fn(conn)
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise self._error(what, exc) from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        with self._lock:
            if self._open:
                self._readers.append(conn)
                conn = None
        if conn is not None:
            conn.close()
        return result

    async def _write(
        self,
        fn: Callable[[sqlite3.Connection], Any] | None,
        what: str,
        appending: Appending | None = None,
        *,
        urgent: bool = False,
    ) -> Any:
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self!r} is not open")
        job = _Job(fn, trio.lowlevel.current_trio_token(), appending, urgent)
        job.waiter = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            # Cancelled: the wait ends now, whatever the writer does with the job.
            job.waiter = None
            with self._lock:
                if job.state == _PENDING:
                    job.state = _WITHDRAWN  # the writer will skip it: not stored
            return trio.lowlevel.Abort.SUCCEEDED

        self._queue.put(job)
        # The cheapest wait there is: the writer's callback reschedules this task.
        await trio.lowlevel.wait_task_rescheduled(abort)
        if job.error is not None:
            error, job.error = job.error, None
            if isinstance(error, sqlite3.Error):
                raise self._error(what, error) from None
            raise error
        return job.result

    def _writer_loop(self, conn: sqlite3.Connection) -> None:
        stopping = False

        def take(first: _Job | None) -> list[_Job]:
            """Take *first* and, with group commit, every job queued now."""
            nonlocal stopping
            batch: list[_Job] = []
            if first is None:
                stopping = True
            else:
                batch.append(first)
            while self.group_commit and not stopping:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                else:
                    batch.append(job)
            with self._lock:
                taken = [j for j in batch if j.state == _PENDING]
                for j in taken:
                    j.state = _TAKEN
            return taken

        def take_more() -> list[_Job]:
            """Jobs queued while the transaction is open (none when stopping)."""
            if stopping or self._queue.empty() or not self._gate.is_set():
                return []
            return take(self._queue.get())

        try:
            while not stopping:
                first = self._queue.get()
                self._gate.wait()
                taken = take(first)
                urgent = [job for job in taken if job.urgent]
                if urgent and len(urgent) < len(taken):
                    # A renewal must not wait for a backlog of saves: if it
                    # came late, the engine's leases would lapse meanwhile.
                    self._commit(conn, urgent, None)
                    taken = [job for job in taken if not job.urgent]
                if taken:
                    self._commit(conn, taken, take_more if self.group_commit else None)
        finally:
            conn.close()

    def _commit(
        self,
        conn: sqlite3.Connection,
        jobs: list[_Job],
        take_more: Callable[[], list[_Job]] | None,
    ) -> None:
        """Commit *jobs* in one transaction, and the jobs *take_more* adds.

        A job can only be queued while this thread has released the GIL,
        which it does in every SQLite call: jobs queued during the
        transaction's statements join it before it commits, instead of
        waiting a whole commit more (a few rounds at most, so a steady
        stream of jobs cannot hold a commit back).
        """
        results: list[tuple[Any, BaseException | None]] = []
        try:
            self._begin(conn)
            try:
                try:
                    last: dict[str, tuple[str | None, int, int] | None] = {}
                    rows: list[Any] = []
                    self._run_batch(conn, jobs, last, rows, results)
                    more = take_more or _no_jobs
                    late = _LATE_ROUNDS
                    while True:
                        joining = more() if late else []
                        if not joining and rows:
                            insert_entries(conn, rows)
                            rows.clear()
                            joining = more() if late else []
                        if not joining:
                            break
                        late -= 1
                        jobs += joining
                        self._run_batch(conn, joining, last, rows, results)
                except (TetherError, sqlite3.Error, ValueError, TypeError):
                    # Most likely an entry equal to a stored one (UNIQUE
                    # (run_id, ikey)), or one job's write failed: undo the
                    # batch and redo it job by job, each in a savepoint, with
                    # the duplicate lookups, so a failing job fails alone.
                    if conn.in_transaction:  # some errors end it themselves
                        conn.execute("ROLLBACK")
                    self._begin(conn)
                    results = self._run_jobs(conn, jobs)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as exc:
            results = [(None, exc)] * len(jobs)
        self._batches.append(len(jobs))
        by_token: dict[trio.lowlevel.TrioToken, list[_Job]] = {}
        for job, (result, error) in zip(jobs, results, strict=True):
            job.result, job.error = result, error
            by_token.setdefault(job.token, []).append(job)
        for token, waiters in by_token.items():
            # One callback wakes a Trio run's waiters. When its run is gone,
            # nobody waits for them.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(_wake, waiters)

    def _run_batch(
        self,
        conn: sqlite3.Connection,
        jobs: list[_Job],
        last: dict[str, tuple[str | None, int, int] | None],
        rows: list[Any],
        results: list[tuple[Any, BaseException | None]],
    ) -> None:
        """Run *jobs* the fast way, inside the open transaction.

        Few statements, whatever the batch's size (each one lets the event
        loop's thread take the GIL, and getting it back can take a switch
        interval): one query per run for its existence and its highest
        ``seq``, kept in *last* (inside the write transaction, so other
        processes cannot interleave), and the entries' rows gathered in
        *rows* for multi-row inserts, with no duplicate lookups: the ``UNIQUE
        (run_id, ikey)`` constraint fails an insert when an entry is already
        stored (or repeated in the batch). Any error here makes
        :meth:`_commit` redo the batch with :meth:`_run_jobs`.
        """
        for job in jobs:
            appending = job.appending
            if appending is None:
                if rows:  # the job sees every earlier write
                    insert_entries(conn, rows)
                    rows.clear()
                results.append(self._run_job(conn, job))
                last.clear()
                continue
            run_id = appending.run_id
            fence = last.get(run_id)
            if fence is None:
                fence = last[run_id] = self._last_seq(conn, run_id)
            if fence is None:
                results.append((None, self._no_run(run_id)))
                continue
            owner, token, seq = fence
            check_append(run_id, appending.entries, token=token, owner=owner)
            seqs: list[int] = []
            for i, ikey in enumerate(appending.ikeys):
                seq += 1
                rows += (run_id, seq, ikey, row_data(appending, i, seq))
                seqs.append(seq)
            last[run_id] = (owner, token, seq)
            results.append((seqs, None))

    def _run_jobs(
        self, conn: sqlite3.Connection, jobs: list[_Job]
    ) -> list[tuple[Any, BaseException | None]]:
        """Run the jobs one by one, each in its own savepoint."""
        return [self._run_job(conn, job) for job in jobs]

    def _run_job(self, conn: sqlite3.Connection, job: _Job) -> tuple[Any, BaseException | None]:
        conn.execute("SAVEPOINT job")
        try:
            if job.appending is not None:
                result: tuple[Any, BaseException | None] = (
                    self._append_one(conn, job.appending),
                    None,
                )
            else:
                assert job.fn is not None
                result = (job.fn(conn), None)
        except (TetherError, sqlite3.Error, ValueError, TypeError) as exc:
            # This job's writes are undone; the others commit.
            conn.execute("ROLLBACK TO job")
            result = (None, exc)
        conn.execute("RELEASE job")
        return result

    def _append_one(self, conn: sqlite3.Connection, appending: Appending) -> list[int | Entry]:
        """One append, entry by entry, looking each up first (an index search)."""
        run_id = appending.run_id
        fence = self._last_seq(conn, run_id)
        if fence is None:
            raise self._no_run(run_id)
        owner, token, last = fence
        check_append(run_id, appending.entries, token=token, owner=owner)
        stored: list[int | Entry] = []
        for i, ikey in enumerate(appending.ikeys):
            row = conn.execute(
                "SELECT rowid, seq, data FROM entries WHERE run_id = ? AND ikey = ?",
                (run_id, ikey),
            ).fetchone()
            if row is not None:
                stored.append(self._decode_entry(run_id, row))
                continue
            last += 1
            conn.execute(_INSERT_ENTRY, (run_id, last, ikey, row_data(appending, i, last)))
            stored.append(last)
        return stored

    def _last_seq(
        self, conn: sqlite3.Connection, run_id: str
    ) -> tuple[str | None, int, int] | None:
        """The run's lease holder, token and highest seq (0 for none); ``None``: no such run."""
        row = conn.execute(_LAST_SEQ, (run_id,)).fetchone()
        if row is None:
            return None
        owner, token, last = row
        if type(last) is not int or type(token) is not int:
            where = "tables runs and entries, the token and the highest seq"
            raise self._corrupt(run_id, where, f"are {token!r} and {last!r}, not integers")
        return owner, token, last

    def _no_run(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(f"cannot append to run {run_id!r}: it is not stored in {self!r}")
