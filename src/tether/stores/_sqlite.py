"""A durable store in one SQLite file: one writer thread, group commit.

Layout (schema version 1, kept in ``PRAGMA user_version``)::

    runs(id INTEGER PRIMARY KEY AUTOINCREMENT,     -- creation order
         run_id TEXT NOT NULL UNIQUE,
         data TEXT NOT NULL)                       -- RunRecord.to_json(), JSON text
    entries(run_id TEXT NOT NULL, seq INTEGER NOT NULL,
            ikey TEXT NOT NULL,                    -- Entry.idempotency_key
            data TEXT NOT NULL,                    -- Entry.to_json(), JSON text
            PRIMARY KEY (run_id, seq), UNIQUE (run_id, ikey))

Writes go through one thread that owns the write connection: callers queue a
job and wait; the thread takes everything queued at that moment and commits
it in one ``BEGIN IMMEDIATE ... COMMIT`` (group commit), then wakes every
waiter. Reads run in Trio worker threads on separate read connections (WAL
lets them proceed while the writer commits).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, final

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
from ._protocol import Entry, RecordDecodeError, RunRecord, dumps_record, loads_record

__all__ = ("SCHEMA_VERSION", "SQLiteStore")

#: The schema version this tether writes and reads (``PRAGMA user_version``).
SCHEMA_VERSION: Final = 1

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

_PENDING, _TAKEN, _WITHDRAWN = 0, 1, 2


@attrs.define(eq=False)
class _Job:
    """One queued write: *fn* runs inside the writer's transaction."""

    fn: Callable[[sqlite3.Connection], Any]
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.field(factory=trio.Event)
    state: int = _PENDING  # guarded by the store's lock
    result: Any = None
    error: BaseException | None = None


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
        self._batches: collections.deque[int] = collections.deque(maxlen=1000)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- lifetime ------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and its schema) and start the writer thread.

        A checkpoint. Cancellation takes effect only before the file is
        opened; once opening has started, it completes.

        Raises:
            StoreError: the file cannot be opened, is not a tether store, or
                has a newer schema version.
            UsageError: the store is already open.
        """
        if self._open:
            raise UsageError(f"{self!r} is already open")
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

        A checkpoint that is not cut short by cancellation: it waits for the
        writer thread to finish what is queued (bounded by ``busy_timeout``
        per transaction), so no thread outlives it. Safe to call when open
        failed or the store is closed.
        """
        self._open = False
        thread, self._thread = self._thread, None
        with trio.CancelScope(shield=True):
            if thread is not None:
                self._queue.put(None)
                await trio.to_thread.run_sync(thread.join)
            with self._lock:
                readers, self._readers = self._readers, []
            for conn in readers:
                conn.close()
            await trio.lowlevel.checkpoint()
        self._writer = None

    # -- the protocol ------------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record (a queued write; see the class doc on cancellation).

        Raises:
            RunConflictError: a run with this id exists.
            StoreError: SQLite failed.
        """
        data = dumps_record(record.to_json())

        def write(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (record.run_id,)).fetchone():
                raise RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
            conn.execute("INSERT INTO runs (run_id, data) VALUES (?, ?)", (record.run_id, data))

        await self._write(write, f"creating run {record.run_id!r}")

    async def update_run(self, record: RunRecord) -> None:
        """Replace a run record (a queued write; see the class doc on cancellation).

        Raises:
            RunNotFoundError: no run with this id.
            StoreError: SQLite failed.
        """
        data = dumps_record(record.to_json())

        def write(conn: sqlite3.Connection) -> None:
            cur = conn.execute("UPDATE runs SET data = ? WHERE run_id = ?", (data, record.run_id))
            if cur.rowcount == 0:
                raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self!r}")

        await self._write(write, f"updating run {record.run_id!r}")

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
        prepared = [(e, e.idempotency_key) for e in entries]

        def write(conn: sqlite3.Connection) -> list[Entry]:
            if not conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise RunNotFoundError(
                    f"cannot append to run {run_id!r}: it is not stored in {self!r}"
                )
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM entries WHERE run_id = ?", (run_id,)
            ).fetchone()
            stored: list[Entry] = []
            for entry, ikey in prepared:
                row = conn.execute(
                    "SELECT rowid, seq, data FROM entries WHERE run_id = ? AND ikey = ?",
                    (run_id, ikey),
                ).fetchone()
                if row is not None:
                    stored.append(self._decode_entry(run_id, row))
                    continue
                last += 1
                done = entry.stored_as(last)
                conn.execute(
                    "INSERT INTO entries (run_id, seq, ikey, data) VALUES (?, ?, ?, ?)",
                    (run_id, last, ikey, dumps_record(done.to_json())),
                )
                stored.append(done)
            return stored

        result: list[Entry] = await self._write(write, f"appending to run {run_id!r}")
        return result

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None``. A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: the row does not decode.
            StoreError: SQLite failed.
        """

        def read(conn: sqlite3.Connection) -> RunRecord | None:
            row = conn.execute(
                "SELECT id, run_id, data FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return None if row is None else self._decode_run(row)

        result: RunRecord | None = await self._read(read, f"reading run {run_id!r}")
        return result

    async def list_runs(self) -> Sequence[RunRecord]:
        """Every run record in creation order. A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: any row does not decode (none is skipped).
            StoreError: SQLite failed.
        """

        def read(conn: sqlite3.Connection) -> list[RunRecord]:
            rows = conn.execute("SELECT id, run_id, data FROM runs ORDER BY id").fetchall()
            return [self._decode_run(row) for row in rows]

        result: list[RunRecord] = await self._read(read, "listing runs")
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (an index range: O(its entries)).

        A checkpoint; runs in a worker thread.

        Raises:
            CheckpointCorruptError: any entry does not decode (none is skipped).
            StoreError: SQLite failed.
        """

        def read(conn: sqlite3.Connection) -> list[Entry]:
            rows = conn.execute(
                "SELECT rowid, seq, data FROM entries WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            return [self._decode_entry(run_id, row) for row in rows]

        result: list[Entry] = await self._read(read, f"loading the journal of run {run_id!r}")
        return result

    # -- decoding ------------------------------------------------------------------------

    def _corrupt(self, run_id: object, where: str, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(f"run {run_id!r}: {self.path}, {where}: {problem}")

    def _decode_run(self, row: tuple[Any, ...]) -> RunRecord:
        rowid, run_id, data = row
        where = f"table runs, rowid {rowid}"
        if type(data) is not str:
            raise self._corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            record: RunRecord = loads_record(data, RunRecord.from_json)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, where, str(exc)) from None
        if record.run_id != run_id:
            raise self._corrupt(run_id, where, f"the record names run {record.run_id!r}")
        return record

    def _decode_entry(self, run_id: str, row: tuple[Any, ...]) -> Entry:
        rowid, seq, data = row
        where = f"table entries, seq {seq!r} (rowid {rowid})"
        if type(seq) is not int:
            raise self._corrupt(run_id, where, f"column seq holds {type(seq).__name__}")
        if type(data) is not str:
            raise self._corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            entry: Entry = loads_record(data, Entry.from_json)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, where, str(exc)) from None
        if entry.run_id != run_id:
            raise self._corrupt(run_id, where, f"the entry names run {entry.run_id!r}")
        if entry.seq != seq:
            raise self._corrupt(run_id, where, f"the entry says seq {entry.seq!r}")
        return entry

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
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: SQLite cannot use WAL mode here (got {mode!r})")
            conn.execute("BEGIN IMMEDIATE")
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
                    # One statement at a time: executescript() would COMMIT first.
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
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

    async def _write(self, fn: Callable[[sqlite3.Connection], Any], what: str) -> Any:
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self!r} is not open")
        job = _Job(fn=fn, token=trio.lowlevel.current_trio_token())
        self._queue.put(job)
        try:
            await job.done.wait()
        except BaseException:
            with self._lock:
                if job.state == _PENDING:
                    job.state = _WITHDRAWN  # the writer will skip it: not stored
            raise
        if job.error is not None:
            error, job.error = job.error, None
            if isinstance(error, sqlite3.Error):
                raise self._error(what, error) from None
            raise error
        return job.result

    def _writer_loop(self, conn: sqlite3.Connection) -> None:
        stopping = False
        try:
            while not stopping:
                first = self._queue.get()
                self._gate.wait()
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
                if taken:
                    self._commit(conn, taken)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, jobs: list[_Job]) -> None:
        results: list[tuple[Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for job in jobs:
                    conn.execute("SAVEPOINT job")
                    try:
                        results.append((job.fn(conn), None))
                    except (TetherError, sqlite3.Error, ValueError, TypeError) as exc:
                        # This job's writes are undone; the others commit.
                        conn.execute("ROLLBACK TO job")
                        results.append((None, exc))
                    conn.execute("RELEASE job")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as exc:
            results = [(None, exc)] * len(jobs)
        self._batches.append(len(jobs))
        for job, (result, error) in zip(jobs, results, strict=True):
            job.result, job.error = result, error
            # When its Trio run is gone, nobody waits for it.
            with contextlib.suppress(trio.RunFinishedError):
                job.token.run_sync_soon(job.done.set)
