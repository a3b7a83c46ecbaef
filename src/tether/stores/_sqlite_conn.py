"""A SQLite store's connections: the writer's (opened with the schema), and a pool of readers.

Layer: stores (``tether.stores``).

:class:`Connections` opens connections with the store's pragmas, opens the
write connection in WAL mode and runs the migration in its first
transaction, waits for another process's write lock by polling (so that a
cancelled opener or a closing store stops waiting), turns SQLite's errors
into :class:`~tether.StoreError` naming the file, and runs reads in Trio
worker threads on pooled read connections.

It is separate from the store and from its writer because both use it: the
writer thread begins its transactions here, and the store's reads and
lifetime go through it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar, final

import trio

from .._errors import StoreError, UsageError

__all__ = ("Connections",)

T = TypeVar("T")

# How long a writer or an opener waits between attempts to take the write lock.
_BUSY_POLL = 0.005
_BUSY: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


@final
class Connections:
    """One store's connections, its open flag, and the lock that guards them.

    Args:
        path: the database file.
        synchronous: SQLite's ``PRAGMA synchronous``, lowercase.
        busy_timeout: seconds to wait for another process's write lock.
        label: the store's ``repr``, for messages.
    """

    def __init__(self, path: Path, *, synchronous: str, busy_timeout: float, label: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.label = label
        #: Guards :attr:`readers`, :attr:`is_open` for returning readers, and the writer's jobs.
        self.lock = threading.Lock()
        self.readers: list[sqlite3.Connection] = []
        self.is_open = False
        # Set to make the writer stop waiting for another process's lock.
        self.abort = threading.Event()

    def error(self, what: str, exc: BaseException) -> StoreError:
        """A :class:`~tether.StoreError` for SQLite's *exc* while doing *what*."""
        err = StoreError(f"{what} in {self.path}: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err

    def connect(self) -> sqlite3.Connection:
        """A new connection with the store's pragmas (blocking)."""
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

    def connect_writer(self, migrate: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
        """The write connection, in WAL mode, after ``migrate(conn)`` committed.

        Blocking, for a worker thread of ``open``: while another process
        holds the write lock it polls, checking between attempts whether its
        caller was cancelled. Whatever fails, the connection is closed.
        """
        try:
            conn = self.connect()
        except sqlite3.Error as exc:
            raise self.error("opening the store", exc) from None
        try:
            # Lock waits are polled here, not left to SQLite's busy handler,
            # so that a cancelled opener or a closing store stops them.
            conn.execute("PRAGMA busy_timeout = 0")
            mode = self.retry_busy(
                lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], opening=True
            )
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: SQLite cannot use WAL mode here (got {mode!r})")
            self.begin(conn, opening=True)
            try:
                migrate(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            conn.close()
            raise self.error("opening the store", exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def retry_busy(self, fn: Callable[[], T], *, opening: bool) -> T:
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
            elif self.abort.is_set():
                raise StoreError(
                    f"{self.path}: gave up waiting for the write lock: the store is closing"
                )
            time.sleep(_BUSY_POLL)

    def begin(self, conn: sqlite3.Connection, *, opening: bool = False) -> None:
        """``BEGIN IMMEDIATE`` on *conn*, waiting for the write lock (see :meth:`retry_busy`)."""
        self.retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), opening=opening)

    async def read(self, fn: Callable[[sqlite3.Connection], Any], what: str) -> Any:
        """``fn(conn)`` on a read connection, in a Trio worker thread.

        A checkpoint. Cancelled, it waits for *fn* to return (a read is
        short). Raises :class:`~tether.UsageError` when the store is not
        open, :class:`~tether.StoreError` when SQLite fails, and what *fn*
        raises.
        """
        if not self.is_open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self.label} is not open")
        return await trio.to_thread.run_sync(self._read_sync, fn, what)

    def _read_sync(self, fn: Callable[[sqlite3.Connection], Any], what: str) -> Any:
        with self.lock:
            conn = self.readers.pop() if self.readers else None
        try:
            if conn is None:
                conn = self.connect()
            result = fn(conn)
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise self.error(what, exc) from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        with self.lock:
            if self.is_open:
                self.readers.append(conn)
                conn = None
        if conn is not None:
            conn.close()
        return result

    def close_readers(self) -> None:
        """Close the pooled read connections (those in use close when their read ends)."""
        with self.lock:
            readers, self.readers = self.readers, []
        for conn in readers:
            conn.close()
