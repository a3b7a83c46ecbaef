"""A store on PostgreSQL: pooled sync connections in worker threads, group commit.

Layout (schema version 1, kept in ``{schema}.tether_schema``), in a
PostgreSQL schema of its own (``schema=``, default ``tether``)::

    tether_schema(version integer)              -- one row: the schema version
    runs(id bigint IDENTITY UNIQUE,             -- creation order (and keyset pages)
         run_id text PRIMARY KEY,
         data text NOT NULL,                    -- RunRecord.to_json(), JSON text
         status text, workflow text,            -- copies for listings and workers,
                                                -- indexed with id
         owner text, token bigint, cancel boolean)  -- copies of data's lease fields
    entries(run_id text, seq integer,
            ikey text,                          -- Entry.idempotency_key
            data text,                          -- Entry.to_json(), JSON text
            PRIMARY KEY (run_id, seq), UNIQUE (run_id, ikey))
    owners(owner text PRIMARY KEY,              -- one row per lease holder:
           expires timestamptz,                 -- its leases' expiry, database clock
           last_claim text)                     -- its latest worker claim (retries)

Records are stored as the exact JSON text every tether store writes (not
``jsonb``, which would normalize it), and read back with the same strict
decoders: a row that does not decode is :class:`~tether.CheckpointCorruptError`
naming the run, the table and the row. The schema is created, or migrated,
by :meth:`PostgresStore.open` under a transaction-scoped advisory lock, so
many processes may open a fresh database at once.

A lease is per owner: renewing every run an engine holds is one row's
update. Lease expiry is measured on the database's clock
(``clock_timestamp()``), so the clocks of the machines never matter. Every
write about a run locks its row (``SELECT ... FOR UPDATE``), decides with the
shared rules of :mod:`._leases` and :mod:`._queue`, and writes, in one short
transaction; a write of a run record also sends a notification
(``pg_notify``, delivered at commit) that :meth:`PostgresStore.watch` turns
into wake-ups.

Appends are group-committed: one writer thread takes every append queued
while its previous transaction ran and stores them in one transaction of a
few statements (the run rows locked in ``run_id`` order, their highest seqs,
one ``INSERT ... SELECT FROM unnest(...)``). If that fails (most likely an
entry that is already stored), the batch is redone job by job, each in a
savepoint, looking duplicates up, so one bad job fails alone.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import re
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, final
from urllib.parse import quote

import attrs
import trio

from .._errors import (
    CheckpointCorruptError,
    LeaseLostError,
    RunConflictError,
    RunNotFoundError,
    StoreError,
    TetherError,
    UsageError,
)
from ._leases import (
    ClaimDecision,
    check_append,
    check_owner,
    check_ttl,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal,
)
from ._postgres_sql import ADVISORY_LOCK_CLASS, SCHEMA_VERSION, Statements, statements
from ._protocol import (
    Entry,
    RecordDecodeError,
    Renewal,
    RunRecord,
    RunStatus,
    dumps_record,
    first_gap,
    load_entry,
    load_run_record,
)
from ._queue import check_max_dispatches, check_run_filter, decide_dispatch, dispatchable
from ._rows import Appending, encode_append, row_data

if TYPE_CHECKING:
    import psycopg_pool

__all__ = ("PostgresStore",)

T = TypeVar("T")

log = logging.getLogger("tether.postgres")

#: A schema name: lowercase, so that it means the same quoted and unquoted, and
#: short enough for the notification channel ``tether_<schema>`` (63 bytes at most).
_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,47}")
#: How long :meth:`PostgresStore.close` lets calls in flight finish before it
#: cuts their connections.
_CLOSE_GRACE: Final = 5.0
#: Retries of transient errors: the first delay, the longest one.
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 2.0
#: How long a connection may sit in the pool before it is checked on checkout.
_CHECK_AFTER: Final = 2.0
#: How often a thread waiting for a pool connection looks whether its caller left.
_GETCONN_SLICE: Final = 0.25
# Messages of connection failures (no SQLSTATE) that a retry cannot cure.
_PERMANENT: Final = re.compile(
    r"password authentication failed|authentication failed|does not exist|"
    r"no pg_hba\.conf entry|permission denied|not permitted to log in|"
    r"invalid (?:port|integer|value|sslmode|connection)|SSL (?:is not enabled|required)|"
    r"unsupported frontend protocol|server does not support SSL",
    re.IGNORECASE,
)
# SQLSTATEs a retry can cure: connection exceptions (class 08), the server
# shutting down or starting up, serialization failures and deadlocks, too many
# connections.
_TRANSIENT_STATES: Final = frozenset({"57P01", "57P02", "57P03", "40001", "40P01", "53300"})
_PENDING, _TAKEN, _WITHDRAWN = 0, 1, 2


def _psycopg() -> Any:
    """The psycopg and psycopg_pool modules, imported on first use.

    Raises:
        UsageError: they are not installed (the ``tether[postgres]`` extra).
    """
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise UsageError(
            "PostgresStore needs psycopg 3 and psycopg-pool, which are not installed "
            f"({exc.name} is missing): pip install 'tether[postgres]'"
        ) from None
    return psycopg, psycopg_pool


class _Abandoned(Exception):
    """The caller of a thread's call is gone: nothing more is done for it."""


@attrs.define(eq=False)
class _Call:
    """One thread's use of one connection, so that a caller who leaves can cut it.

    While the thread uses the connection, :attr:`sock` is a duplicate of its
    socket (a second descriptor of the same socket, so it stays valid even
    when libpq closes its own): shutting it down makes the thread's wait for
    the server end at once with a connection error, whatever the server is
    doing (waiting for a lock, SIGSTOPped). The server then rolls back the
    transaction, unless its ``COMMIT`` had arrived already: the write is
    idempotent or fenced either way (see :class:`PostgresStore`).
    """

    sock: socket.socket | None = None
    abandoned: bool = False


@attrs.define(eq=False)
class _Job:
    """One queued append, for the writer thread."""

    appending: Appending
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.field(factory=trio.Event)
    state: int = _PENDING  # guarded by the store's lock
    result: list[int | Entry] | None = None
    error: BaseException | None = None


#: What a job of the writer's batch ended with: each entry's new seq (or the
#: stored entry it equals), or an error.
_Result: TypeAlias = tuple[list[int | Entry] | None, BaseException | None]


def _wake(jobs: list[_Job]) -> None:
    for job in jobs:
        job.done.set()


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _run_params(record: RunRecord) -> tuple[object, ...]:
    """The parameters of ``insert_run`` and ``put_run`` for *record*."""
    return (
        dumps_record(record.to_json()),
        record.status.value,
        record.workflow,
        record.owner,
        record.token,
        record.cancel_requested,
        record.run_id,
    )


@final
class PostgresStore:
    """Runs and journals in PostgreSQL, shared by many processes on many machines.

    Args:
        conninfo: a libpq connection string, as a URL
            (``postgresql://user:password@host:5432/db``) or ``key=value``
            pairs. Its password (like ``$PGPASSWORD`` or a passfile's) is
            used to connect and never shown: :func:`repr`, errors and log
            lines name the host, port, database and user only.
        schema: the PostgreSQL schema that holds tether's tables (created on
            :meth:`open` if needed): a lowercase identifier of at most 48
            characters.
        pool_size: the most connections the store opens at once for its
            calls (one more serves the group-committing writer, and
            :meth:`watch` keeps one of its own).
        prepare: use prepared statements (psycopg's default). ``False`` for
            PgBouncer in transaction mode, which cannot keep them.
        connect_timeout: seconds a connection attempt may take (libpq's
            ``connect_timeout``, at least 2).
        retry_timeout: seconds a call keeps retrying transient failures (a
            restart, a failover, a dropped connection, no connection to be
            had) before it fails with :class:`~tether.StoreError`.

    Options given in *conninfo* win over the ones this store sets by default:
    TCP keepalives (a dead peer is noticed within about half a minute),
    ``tcp_user_timeout`` and ``application_name``.

    **Threads and cancellation.** psycopg's async API needs asyncio, so every
    call runs a sync connection from a ``psycopg_pool.ConnectionPool`` in a
    Trio worker thread, at most *pool_size* at once, one short transaction
    each: no connection is held between calls (nor across a step).
    Every method is a checkpoint, and cancelling it returns at once, even
    when the database hangs (a row lock, a stopped server): the thread is
    abandoned and its connection cut (see :class:`_Call`), so the thread
    ends promptly too and the server rolls its transaction back. If the
    ``COMMIT`` had been sent already, the write may have landed: appends are
    idempotent (an entry equal to a stored one is returned, not stored
    again), and every run record write is fenced by its token, so retrying
    it, or the write of another owner, stays correct.

    **Retries.** Transient failures are retried inside each call with
    exponential backoff (real time; the caller's deadline still wins), on a
    new connection; stale pooled connections are checked before use. A retry
    treats the earlier attempt as possibly committed: a retried
    ``create_run`` or ``update_run`` that finds exactly its own write stored
    returns it, a retried worker claim finds the run it claimed, a retried
    append finds its entries.

    **Group commit.** Appends waiting at the same moment (parallel steps'
    saves) are committed together, in one transaction, by one writer thread
    (started by :meth:`open`, stopped by :meth:`close`). A cancelled append
    not yet taken by the writer is withdrawn (definitely not stored); a batch
    whose every caller left is cut, as above.

    The store may be reopened after it was closed.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "tether",
        pool_size: int = 10,
        prepare: bool = True,
        connect_timeout: float = 10.0,
        retry_timeout: float = 60.0,
    ) -> None:
        psycopg, _ = _psycopg()
        if not isinstance(conninfo, str):
            raise UsageError(
                f"PostgresStore takes a connection string, not {type(conninfo).__name__}"
            )
        try:
            params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.Error:
            # libpq's message quotes the text around the mistake, which may
            # be a piece of the password: it is not shown.
            raise UsageError(
                "PostgresStore: the connection string is not a valid libpq URL or "
                "key=value string (libpq's message is not shown: it may quote the password)"
            ) from None
        if not isinstance(schema, str) or _SCHEMA_NAME.fullmatch(schema) is None:
            raise UsageError(
                "schema must be a lowercase PostgreSQL identifier of at most 48 characters "
                f"(letters, digits, _), not {schema!r}"
            )
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise UsageError(f"pool_size must be a positive integer, not {pool_size!r}")
        for name, value in (("connect_timeout", connect_timeout), ("retry_timeout", retry_timeout)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
                raise UsageError(f"{name} must be a non-negative number, not {value!r}")
        self.schema = schema
        self.pool_size = pool_size
        self.prepare = bool(prepare)
        self.connect_timeout = float(connect_timeout)
        self.retry_timeout = float(retry_timeout)
        self._conninfo = conninfo
        self._secrets = tuple(
            s
            for s in {params.get("password") or "", quote(params.get("password") or "", safe="")}
            if s
        )
        self._where = _describe(params)
        defaults: dict[str, Any] = {
            "connect_timeout": max(2, round(self.connect_timeout)),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "tcp_user_timeout": 30_000,
            "application_name": "tether",
        }
        self._kwargs = {k: v for k, v in defaults.items() if k not in params}
        self._sql: Statements = statements(schema)
        self._channel = f"tether_{schema}"
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._limiter: trio.CapacityLimiter | None = None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_call = _Call()
        self._hard_stop = threading.Event()
        self._inflight: list[_Job] = []  # the writer's batch, guarded by _lock
        self._calls: set[_Call] = set()  # calls whose thread runs, guarded by _lock
        self._idle = threading.Condition(self._lock)  # notified when _calls empties
        self._returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._open = False
        # Test hooks: the sizes (in appends) of the writer's latest batches.
        self._batches: collections.deque[int] = collections.deque(maxlen=1000)

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    @property
    def url(self) -> str:
        """Where the store is, ``postgresql://user@host:port/dbname``: never the password."""
        return self._where

    # -- lifetime ------------------------------------------------------------------

    async def open(self) -> None:
        """Create or migrate the schema, then open the pool and start the writer thread.

        A checkpoint. Migrations run in one transaction under an advisory
        lock (``pg_advisory_xact_lock``), so processes opening a fresh
        database at once create the tables once. Transient failures (the
        server is starting) are retried for ``retry_timeout``; cancelled, it
        returns at once, closing what it opened (a migration cut short is
        rolled back whole).

        Raises:
            StoreError: the database cannot be reached or refuses the login,
                the schema holds tables that are not tether's, or its schema
                version is newer than this tether's.
            UsageError: the store is already open.
        """
        if self._open:
            raise UsageError(f"{self!r} is already open")
        _, psycopg_pool = _psycopg()
        self._limiter = trio.CapacityLimiter(self.pool_size)
        await self._retrying("opening the store", self._migrate_in_thread)
        pool = psycopg_pool.ConnectionPool(
            self._conninfo,
            kwargs={
                **self._kwargs,
                "autocommit": True,
                "prepare_threshold": 5 if self.prepare else None,
            },
            min_size=1,
            max_size=self.pool_size + 1,
            open=False,
            check=self._check_connection,
            name=f"tether-{self.schema}",
            timeout=self.connect_timeout + 5,
            reconnect_timeout=max(self.retry_timeout, 1.0),
            num_workers=2,
        )
        pool.open()  # starts the pool's threads; connects in them, so it does not block
        self._pool = pool
        self._writer_call = _Call()
        self._hard_stop.clear()
        self._writer = threading.Thread(
            target=self._writer_loop, name=f"tether {self!r} writer", daemon=True
        )
        self._open = True
        self._writer.start()

    async def close(self) -> None:
        """Finish or cut the calls in flight, stop the writer thread, close the pool.

        A checkpoint. Appends queued are committed first; calls still in
        flight (only abandoned ones, normally: their callers left) get
        ``_CLOSE_GRACE`` seconds, then their connections are cut, so close
        returns in bounded time even when the database hangs, and no thread
        of the store outlives it (a pool thread still connecting ends within
        ``connect_timeout``). Cancelled, it cuts everything at once, waits for
        the threads to notice, and re-raises. Safe to call when open failed
        or the store is closed.
        """
        with self._lock:  # no append is queued after the writer's stop sign
            self._open = False
        writer, self._writer = self._writer, None
        pool, self._pool = self._pool, None
        if writer is None and pool is None:
            await trio.lowlevel.checkpoint()
            return
        hurry = threading.Event()
        finished = threading.Event()

        def shut_down() -> None:
            try:
                self._shut_down(writer, pool, hurry)
            finally:
                finished.set()

        try:
            await trio.to_thread.run_sync(shut_down, abandon_on_cancel=True)
        except BaseException:
            hurry.set()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(finished.wait)
            raise

    def _shut_down(
        self,
        writer: threading.Thread | None,
        pool: psycopg_pool.ConnectionPool[Any] | None,
        hurry: threading.Event,
    ) -> None:
        deadline = time.monotonic() + _CLOSE_GRACE
        if writer is not None:
            self._queue.put(None)
            while writer.is_alive() and time.monotonic() < deadline and not hurry.is_set():
                writer.join(0.05)
            if writer.is_alive():
                self._hard_stop.set()  # what is still queued fails without the database
                self._cut(self._writer_call)
                writer.join()
        with self._lock:
            while self._calls and time.monotonic() < deadline and not hurry.is_set():
                self._idle.wait(0.05)
            for call in self._calls:
                call.abandoned = True
                self._cut_locked(call)
            while self._calls:
                self._idle.wait(0.05)
        if pool is not None:
            pool.close(timeout=self.connect_timeout + 1)

    # -- the protocol ----------------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record (one transaction; notifies watchers).

        Raises:
            RunConflictError: a run with this id exists.
            StoreError: the database failed (after retries, for transient failures).
        """
        data = dumps_record(record.to_json())

        def write(conn: Any, retrying: bool) -> None:
            with conn.transaction():
                if conn.execute(self._sql.insert_run, _run_params(record)).fetchone() is None:
                    if retrying:
                        row = conn.execute(self._sql.run_data, (record.run_id,)).fetchone()
                        if row is not None and row[0] == data:
                            return  # the earlier attempt committed: this is our run
                    raise RunConflictError(f"run {record.run_id!r} already exists in {self!r}")
                self._notify(conn)

        await self._call(f"creating run {record.run_id!r}", write)

    async def update_run(self, record: RunRecord) -> RunRecord:
        """Replace a run record, fenced (one transaction; notifies watchers).

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: the record's token is not the run's current one.
            StoreError: the database failed.
        """
        attempted: list[str] = []

        def write(conn: Any, retrying: bool) -> RunRecord:
            with conn.transaction():
                current, data = self._lock_run(conn, record.run_id)
                if current is None:
                    raise RunNotFoundError(f"run {record.run_id!r} is not stored in {self!r}")
                if retrying and data in attempted:
                    return current  # the earlier attempt committed
                stored = fenced_update(current, record)
                params = _run_params(stored)
                attempted.append(str(params[0]))
                conn.execute(self._sql.put_run, params)
                self._notify(conn)
                return stored

        stored: RunRecord = await self._call(f"updating run {record.run_id!r}", write)
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

        A retry after an unclear outcome is safe: if the first attempt
        committed, *owner* holds the lease, and claims again with the next
        token (no one else held the skipped one).

        Raises:
            RunConflictError, RunCancelledError, RunNotFoundError: see the protocol.
            StoreError: the database failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)

        def write(conn: Any, retrying: bool) -> RunRecord:
            while True:
                try:
                    decision, expires = self._claim(conn, run_id, owner, ttl, create, takeover)
                except _Created:
                    continue  # the run exists now: decide again, on its locked row
                # Outside the transaction: what it stored (a recorded cancel
                # made final) is committed even when the decision refuses.
                return decision.outcome(None if expires is None else _utc(expires))

        result: RunRecord = await self._call(f"claiming run {run_id!r}", write)
        return result

    def _claim(
        self,
        conn: Any,
        run_id: str,
        owner: str,
        ttl: float,
        create: RunRecord | None,
        takeover: int | None,
    ) -> tuple[ClaimDecision, datetime | None]:
        """One claim transaction: the decision, and the lease expiry if it claimed."""
        with conn.transaction():
            current, _ = self._lock_run(conn, run_id)
            decision = decide_claim(
                current, run_id=run_id, owner=owner, create=create, takeover=takeover
            )
            expires = None
            if decision.store is not None:
                if decision.created:
                    inserted = conn.execute(
                        self._sql.insert_run, _run_params(decision.store)
                    ).fetchone()
                    if inserted is None:  # created since the lock found no row
                        raise _Created
                else:
                    conn.execute(self._sql.put_run, _run_params(decision.store))
                if decision.claimed:
                    (expires,) = conn.execute(self._sql.set_owner, (owner, ttl)).fetchone()
                self._notify(conn)
        return decision, expires

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[str],
        max_dispatches: int,
        gone: Collection[str] = (),
    ) -> RunRecord | None:
        """A worker's claim of the oldest dispatchable run (one transaction; see the protocol).

        Candidates are locked with ``FOR UPDATE SKIP LOCKED``, so concurrent
        workers never wait for each other and never take the same run;
        expired leases are found by the same query. A retry after an unclear
        outcome first looks for the run this call's earlier attempt claimed
        (recorded with the owner's lease), so a lost acknowledgement never
        leaves a run claimed by nobody who executes it.

        Raises:
            StoreError: the database failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        names, dead = sorted(set(workflows)), sorted(set(gone))
        if not names:
            await trio.lowlevel.checkpoint()
            return None
        attempt = uuid.uuid4().hex

        def write(conn: Any, retrying: bool) -> RunRecord | None:
            with conn.transaction():
                if retrying:
                    found = self._claimed_before(conn, owner, attempt)
                    if found is not None:
                        return found
                passed: list[str] = []
                while True:
                    row = conn.execute(self._sql.dispatchable, (names, dead, passed)).fetchone()
                    if row is None:
                        return None
                    current = self._read_run(conn, row[0])
                    if current is None or not dispatchable(current, workflows=names, gone=dead):
                        passed.append(row[0])
                        continue
                    decision = decide_dispatch(current, owner=owner, max_dispatches=max_dispatches)
                    conn.execute(self._sql.put_run, _run_params(decision.store))
                    self._notify(conn)
                    if decision.claimed:
                        (expires,) = conn.execute(
                            self._sql.set_owner_claim, (owner, ttl, f"{attempt} {current.run_id}")
                        ).fetchone()
                        return attrs.evolve(decision.store, lease_expires_at=_utc(expires))

        result: RunRecord | None = await self._call("claiming a queued run", write)
        return result

    def _claimed_before(self, conn: Any, owner: str, attempt: str) -> RunRecord | None:
        """The run an earlier attempt of this ``claim_next`` claimed and still holds."""
        row = conn.execute(self._sql.last_claim, (owner,)).fetchone()
        if row is None or row[0] is None or not row[0].startswith(attempt + " "):
            return None
        current, _ = self._lock_run(conn, row[0].partition(" ")[2])
        if current is None or current.owner != owner or current.lease_expires_at is None:
            return None
        return current

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend *owner*'s leases: one row's update, however many runs it holds.

        Not queued behind appends: a renewal must not wait for a backlog of
        saves. Idempotent, so retried as any read.

        Raises:
            StoreError: the database failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)

        def write(conn: Any, retrying: bool) -> Renewal:
            with conn.transaction():
                if ttl:
                    conn.execute(self._sql.set_owner, (owner, ttl))
                else:
                    conn.execute(self._sql.drop_owner, (owner,))
                rows = conn.execute(self._sql.owned, (owner,)).fetchall()
            return renewal({r: (t, bool(c)) for r, t, c in rows}, held)

        result: Renewal = await self._call(f"renewing the leases of {owner}", write)
        return result

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel (one transaction; see :meth:`Store.cancel_run`; notifies watchers).

        Retrying is safe: a recorded cancel is not recorded twice.

        Raises:
            RunNotFoundError, RunConflictError: see the protocol.
            StoreError: the database failed.
        """

        def write(conn: Any, retrying: bool) -> RunRecord:
            with conn.transaction():
                current, _ = self._lock_run(conn, run_id)
                record = decide_cancel(current, run_id=run_id, takeover=takeover)
                if record is None:
                    assert current is not None
                    return current
                conn.execute(self._sql.put_run, _run_params(record))
                self._notify(conn)
                return record

        result: RunRecord = await self._call(f"cancelling run {run_id!r}", write)
        return result

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None``. A checkpoint; one query in a worker thread.

        Raises:
            CheckpointCorruptError: the row does not decode.
            StoreError: the database failed.
        """

        def read(conn: Any, retrying: bool) -> RunRecord | None:
            row = conn.execute(self._sql.get_run, (run_id,)).fetchone()
            return None if row is None else self._decode_run(row)

        result: RunRecord | None = await self._call(f"reading run {run_id!r}", read)
        return result

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> Sequence[RunRecord]:
        """Run records in creation order, filtered and paged (indexed queries).

        A checkpoint; runs in a worker thread.

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: a selected row does not decode (none is skipped).
            StoreError: the database failed.
        """
        selected = check_run_filter(status, workflow, after, limit)
        where: list[bytes] = []
        params: list[object] = []
        if selected.status is not None:
            where.append(b"r.status = ANY(%s)")
            params.append(sorted(s.value for s in selected.status))
        if selected.workflow is not None:
            where.append(b"r.workflow = %s")
            params.append(selected.workflow)
        if selected.after is not None:
            where.append(b"r.id > %s")
        query = self._sql.list_runs
        if where:
            query += b" WHERE " + b" AND ".join(where)
        query += b" ORDER BY r.id"
        if selected.limit is not None:
            query += b" LIMIT %s"

        def read(conn: Any, retrying: bool) -> list[RunRecord]:
            args = list(params)
            if selected.after is not None:
                row = conn.execute(self._sql.run_id_of, (selected.after,)).fetchone()
                if row is None:
                    raise RunNotFoundError(f"list_runs(after={selected.after!r}): no such run")
                args.append(row[0])
            if selected.limit is not None:
                args.append(selected.limit)
            rows = conn.execute(query, args).fetchall()
            return [self._decode_run(row) for row in rows]

        result: list[RunRecord] = await self._call("listing runs", read)
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (an index range: O(its entries)).

        A checkpoint; one query in a worker thread.

        Raises:
            CheckpointCorruptError: any entry does not decode or does not
                match its checksum, or a seq below the highest is missing
                (none is skipped).
            StoreError: the database failed.
        """

        def read(conn: Any, retrying: bool) -> list[Entry]:
            rows = conn.execute(self._sql.load_entries, (run_id,)).fetchall()
            entries = [self._decode_entry(run_id, seq, data) for seq, data in rows]
            gap = first_gap([e.seq for e in entries if e.seq is not None])
            if gap is not None:
                raise self._corrupt(
                    run_id, f"table entries, seq {gap}", "missing (a later seq is stored)"
                )
            return entries

        result: list[Entry] = await self._call(f"loading the journal of run {run_id!r}", read)
        return result

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Append journal entries, group-committed with other appends; return them as stored.

        Each new entry gets the run's next ``seq`` (its row locked in the
        transaction, so processes never collide). An entry equal to one
        already stored returns the stored one, which makes retries safe:
        transient failures are retried here. Cancellation: see the class doc.

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: an entry's token is not the run's current one.
            CheckpointCorruptError: a stored duplicate does not decode.
            StoreError: the database failed.
        """
        for e in entries:
            if e.run_id != run_id:
                raise UsageError(f"entry {e.key} of run {e.run_id!r} appended to run {run_id!r}")
        appending = encode_append(run_id, entries)
        what = f"appending to run {run_id!r}"
        # A retry queues the same entries again: the writer finds those already stored.
        done: list[int | Entry] = await self._retrying(
            what, lambda retrying: self._queued(appending, what)
        )
        return [
            entry.stored_as(got) if isinstance(got, int) else got
            for entry, got in zip(entries, done, strict=True)
        ]

    async def watch(self, changed: Callable[[], None]) -> None:
        """Call *changed()* after each committed change to a run record, from any process.

        ``LISTEN`` on a connection of its own, in a thread; every write of a
        run record sends a notification at commit. Notifications are hints:
        after a lost connection the listener reconnects (with backoff) and
        calls *changed()* once, since anything may have changed meanwhile.
        Never returns; cancel it to stop (the thread is stopped and waited
        for, promptly). Store errors are retried, not raised. (Through
        PgBouncer in transaction mode notifications do not arrive: callers
        fall back to polling.)
        """
        token = trio.lowlevel.current_trio_token()
        stop = threading.Event()
        finished = threading.Event()
        call = _Call()

        def listen() -> None:
            try:
                self._listen(changed, token, stop, call)
            finally:
                finished.set()

        try:
            await trio.to_thread.run_sync(listen, abandon_on_cancel=True)
        finally:
            stop.set()
            self._cut(call)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(finished.wait)

    # -- calls, retries and threads ------------------------------------------------------

    async def _call(self, what: str, fn: Callable[[Any, bool], T]) -> T:
        """Run ``fn(conn, retrying)`` on a pooled connection in a thread, with retries."""

        async def attempt(retrying: bool) -> T:
            if not self._open:
                await trio.lowlevel.checkpoint()
                raise UsageError(f"{what}: {self!r} is not open")
            call = _Call()
            try:
                return await trio.to_thread.run_sync(
                    self._in_thread,
                    call,
                    fn,
                    retrying,
                    abandon_on_cancel=True,
                    limiter=self._limiter,
                )
            except _Abandoned:  # the store closed under the call
                raise UsageError(f"{what}: {self!r} was closed") from None
            except BaseException:
                self._cut(call)  # a no-op unless the thread still uses its connection
                raise

        return await self._retrying(what, attempt)

    async def _retrying(self, what: str, attempt: Callable[[bool], Awaitable[T]]) -> T:
        """``await attempt(retrying)``, retried on transient database failures.

        Backoff doubles from ``_BACKOFF_FIRST`` to ``_BACKOFF_MAX`` seconds,
        waited in real time (the database's time, whatever Trio's clock),
        for up to ``retry_timeout`` seconds in all. Cancellable throughout.
        Non-transient psycopg errors become :class:`~tether.StoreError`
        with a sanitized message; tether's own errors pass through.
        """
        psycopg, _ = _psycopg()
        delay = _BACKOFF_FIRST
        give_up: float | None = None
        retrying = False
        while True:
            try:
                return await attempt(retrying)
            except psycopg.Error as exc:
                now = time.monotonic()
                if give_up is None:
                    give_up = now + self.retry_timeout
                if not _transient(exc) or now + delay > give_up:
                    raise self._error(what, exc) from None
                log.warning("%s: %s; retrying in %.2fs", what, self._redact(_message(exc)), delay)
            await _sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)
            retrying = True

    def _in_thread(self, call: _Call, fn: Callable[[Any, bool], T], retrying: bool) -> T:
        conn = self._checkout(call)
        try:
            return fn(conn, retrying)
        finally:
            self._checkin(call, conn)

    def _checkout(self, call: _Call) -> Any:
        """A pooled connection for *call*, its socket registered so it can be cut.

        Waits for the pool in slices, so that a thread whose caller left
        stops waiting soon.
        """
        _, psycopg_pool = _psycopg()
        pool = self._pool
        if pool is None:
            raise _Abandoned
        deadline = time.monotonic() + self.connect_timeout + 5
        while True:
            if call.abandoned:
                raise _Abandoned
            try:
                conn = pool.getconn(timeout=_GETCONN_SLICE)
                break
            except psycopg_pool.PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
        try:
            sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        except OSError:
            sock = None  # the connection is broken: its first statement will say so
        with self._lock:
            if call.abandoned:
                pass
            else:
                call.sock = sock
                self._calls.add(call)
                return conn
        if sock is not None:
            sock.close()
        pool.putconn(conn)
        raise _Abandoned

    def _checkin(self, call: _Call, conn: Any) -> None:
        with self._lock:
            sock, call.sock = call.sock, None
            self._calls.discard(call)
            if not self._calls:
                self._idle.notify_all()
        if sock is not None:
            sock.close()
        self._returned[conn] = time.monotonic()
        pool = self._pool
        try:
            if pool is not None:
                pool.putconn(conn)
            else:
                conn.close()
        except Exception:  # a closed pool that no longer knows it: just close it
            conn.close()

    def _check_connection(self, conn: Any) -> None:
        """The pool's check on checkout: a round trip, for connections idle a while."""
        if time.monotonic() - self._returned.get(conn, 0.0) > _CHECK_AFTER:
            conn.execute("")

    def _cut(self, call: _Call) -> None:
        with self._lock:
            call.abandoned = True
            self._cut_locked(call)

    @staticmethod
    def _cut_locked(call: _Call) -> None:
        if call.sock is not None:
            # OSError: not connected any more, so the thread's wait has ended already.
            with contextlib.suppress(OSError):
                call.sock.shutdown(socket.SHUT_RDWR)

    def _notify(self, conn: Any) -> None:
        conn.execute(self._sql.notify, (self._channel,))

    # -- group commit --------------------------------------------------------------------

    async def _queued(self, appending: Appending, what: str) -> list[int | Entry]:
        """Queue *appending* for the writer and wait for it (one attempt)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self!r} is not open")
        job = _Job(appending, trio.lowlevel.current_trio_token())
        with self._lock:
            if not self._open:  # closed since the check above (no checkpoint between)
                raise UsageError(f"{what}: {self!r} is not open")
            self._queue.put(job)
        try:
            await job.done.wait()
        except BaseException:
            with self._lock:
                # Pending: the writer will skip it (not stored). Taken: it may
                # still commit, which a retry of the same entries finds.
                job.state = _WITHDRAWN
                if self._inflight and all(j.state == _WITHDRAWN for j in self._inflight):
                    # Nobody waits for this batch: cut it rather than let a
                    # hung database hold up every append queued behind it.
                    self._cut_locked(self._writer_call)
            raise
        if job.error is not None:
            error, job.error = job.error, None
            if isinstance(error, _Abandoned):
                raise StoreError(f"{what}: {self!r} was closed before the write") from None
            raise error
        assert job.result is not None
        return job.result

    def _writer_loop(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            batch: list[_Job] = []
            if first is None:
                stopping = True
            else:
                batch.append(first)
            while not stopping:
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
                self._inflight = taken
                if not self._hard_stop.is_set():
                    self._writer_call.abandoned = False  # a cut batch is over; this one is new
            if taken:
                self._commit(taken)

    def _commit(self, jobs: list[_Job]) -> None:
        """Store *jobs* in one transaction and wake their waiters."""
        psycopg, _ = _psycopg()
        results: list[_Result]
        call = self._writer_call
        try:
            conn = self._checkout(call)
            try:
                try:
                    with conn.transaction():
                        results = self._batch(conn, jobs)
                except (psycopg.IntegrityError, psycopg.DataError, ValueError, TypeError):
                    # Most likely an entry equal to a stored one (UNIQUE (run_id,
                    # ikey)): redo the batch job by job, each in a savepoint, with
                    # the duplicate lookups, so that a failing job fails alone.
                    with conn.transaction():
                        results = self._jobs(conn, jobs)
            finally:
                self._checkin(call, conn)
        except Exception as exc:  # the connection or the commit failed: every job did
            results = [(None, exc)] * len(jobs)
        self._batches.append(len(jobs))
        with self._lock:
            self._inflight = []
        by_token: dict[trio.lowlevel.TrioToken, list[_Job]] = {}
        for job, (result, error) in zip(jobs, results, strict=True):
            job.result, job.error = result, error
            by_token.setdefault(job.token, []).append(job)
        for token, waiters in by_token.items():
            # RunFinishedError: that Trio run is over, so nobody waits for these.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(_wake, waiters)

    def _batch(self, conn: Any, jobs: list[_Job]) -> list[_Result]:
        """The fast path: a few statements for the whole batch, no duplicate lookups."""
        run_ids = sorted({job.appending.run_id for job in jobs})
        fences = {
            r: (owner, token)
            for r, owner, token in conn.execute(self._sql.lock_fences, (run_ids,)).fetchall()
        }
        last = dict(conn.execute(self._sql.last_seqs, (run_ids,)).fetchall())
        cols: tuple[list[str], list[int], list[str], list[str]] = ([], [], [], [])
        results: list[_Result] = []
        for job in jobs:
            appending = job.appending
            run_id = appending.run_id
            fence = fences.get(run_id)
            if fence is None:
                results.append((None, self._no_run(run_id)))
                continue
            try:
                check_append(run_id, appending.entries, token=fence[1], owner=fence[0])
            except LeaseLostError as exc:
                results.append((None, exc))
                continue
            seq = last.get(run_id) or 0
            seqs: list[int | Entry] = []
            for i, ikey in enumerate(appending.ikeys):
                seq += 1
                cols[0].append(run_id)
                cols[1].append(seq)
                cols[2].append(ikey)
                cols[3].append(row_data(appending, i, seq))
                seqs.append(seq)
            last[run_id] = seq
            results.append((seqs, None))
        if cols[0]:
            conn.execute(self._sql.insert_entries, cols)
        return results

    def _jobs(self, conn: Any, jobs: list[_Job]) -> list[_Result]:
        """The slow path: job by job, each in a savepoint, locking runs in ``run_id`` order."""
        psycopg, _ = _psycopg()
        results: list[_Result] = [(None, None)] * len(jobs)
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].appending.run_id)
        for i in order:
            try:
                with conn.transaction():
                    results[i] = (self._append_one(conn, jobs[i].appending), None)
            except (
                TetherError,
                psycopg.IntegrityError,
                psycopg.DataError,
                ValueError,
                TypeError,
            ) as exc:
                results[i] = (None, exc)  # this job's writes are undone; the others commit
        return results

    def _append_one(self, conn: Any, appending: Appending) -> list[int | Entry]:
        run_id = appending.run_id
        row = conn.execute(self._sql.lock_fences, ([run_id],)).fetchone()
        if row is None:
            raise self._no_run(run_id)
        _, owner, token = row
        check_append(run_id, appending.entries, token=token, owner=owner)
        ((_, last),) = conn.execute(self._sql.last_seqs, ([run_id],)).fetchall()
        last = last or 0
        stored: list[int | Entry] = []
        for i, ikey in enumerate(appending.ikeys):
            twin = conn.execute(self._sql.twin, (run_id, ikey)).fetchone()
            if twin is not None:
                stored.append(self._decode_entry(run_id, *twin))
                continue
            last += 1
            conn.execute(self._sql.insert_entry, (run_id, last, ikey, row_data(appending, i, last)))
            stored.append(last)
        return stored

    def _no_run(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(f"cannot append to run {run_id!r}: it is not stored in {self!r}")

    # -- notifications -------------------------------------------------------------------

    def _listen(
        self,
        changed: Callable[[], None],
        token: trio.lowlevel.TrioToken,
        stop: threading.Event,
        call: _Call,
    ) -> None:
        psycopg, _ = _psycopg()
        from psycopg import sql

        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
        delay = _BACKOFF_FIRST
        while not stop.is_set():
            try:
                conn = psycopg.connect(self._conninfo, autocommit=True, **self._kwargs)
            except psycopg.Error as exc:
                log.warning("%r: listening: %s", self, self._redact(_message(exc)))
                stop.wait(delay)
                delay = min(delay * 2, _BACKOFF_MAX)
                continue
            try:
                with self._lock:
                    if stop.is_set():
                        break
                    call.sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
                conn.execute(listen)
                delay = _BACKOFF_FIRST
                # Anything may have changed while no one listened.
                token.run_sync_soon(changed)
                while not stop.is_set():
                    for _ in conn.notifies(timeout=1.0):
                        if not stop.is_set():
                            token.run_sync_soon(changed)
            except trio.RunFinishedError:
                return  # nobody is left to tell
            except (psycopg.Error, OSError) as exc:
                if not stop.is_set():
                    log.warning("%r: listening: %s", self, self._redact(_message(exc)))
                    stop.wait(delay)
                    delay = min(delay * 2, _BACKOFF_MAX)
            finally:
                with self._lock:
                    sock, call.sock = call.sock, None
                if sock is not None:
                    sock.close()
                conn.close()

    # -- migrations ----------------------------------------------------------------------

    async def _migrate_in_thread(self, retrying: bool) -> None:
        call = _Call()
        try:
            await trio.to_thread.run_sync(self._migrate, call, abandon_on_cancel=True)
        except BaseException:
            self._cut(call)
            raise

    def _migrate(self, call: _Call) -> None:
        psycopg, _ = _psycopg()
        conn = psycopg.connect(self._conninfo, autocommit=True, **self._kwargs)
        try:
            with self._lock:
                if call.abandoned:
                    raise _Abandoned
                call.sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
            q = self._sql
            with conn.transaction():
                conn.execute(q.lock, (ADVISORY_LOCK_CLASS, self.schema))
                exists = conn.execute(q.schema_exists, (self.schema,)).fetchone() is not None
                tables = [t for (t,) in conn.execute(q.tables, (self.schema,)).fetchall()]
                if not exists:
                    conn.execute(q.create_schema)
                if "tether_schema" not in tables:
                    if tables:
                        raise StoreError(
                            f"{self!r}: schema {self.schema!r} holds tables that are not a "
                            f"tether store's ({', '.join(tables[:5])}) and no tether schema "
                            "version; choose another schema="
                        )
                    for statement in q.create:
                        conn.execute(statement)
                    conn.execute(q.set_version, (SCHEMA_VERSION,))
                    return
                row = conn.execute(q.version).fetchone()
                version = None if row is None else row[0]
                if type(version) is int and version > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self!r} has tether store schema version {version}, newer than "
                        f"version {SCHEMA_VERSION} that this tether reads; upgrade tether"
                    )
                while type(version) is int and version in q.migrations:
                    for statement in q.migrations[version]:
                        conn.execute(statement)
                    version += 1
                    conn.execute(q.update_version, (version,))
                if version != SCHEMA_VERSION:
                    raise StoreError(
                        f"{self!r} has unknown tether store schema version {version!r} "
                        f"(this tether reads version {SCHEMA_VERSION})"
                    )
        finally:
            with self._lock:
                sock, call.sock = call.sock, None
            if sock is not None:
                sock.close()
            conn.close()

    # -- rows and records ----------------------------------------------------------------

    def _lock_run(self, conn: Any, run_id: str) -> tuple[RunRecord | None, str | None]:
        """The run's record (its row locked until the transaction ends) and its stored text.

        Two statements: the second one's snapshot is taken once the lock is
        held, so it sees the lease of whoever held the row before.
        """
        if conn.execute(self._sql.lock_run, (run_id,)).fetchone() is None:
            return None, None
        row = conn.execute(self._sql.get_run, (run_id,)).fetchone()
        return self._decode_run(row), row[2]

    def _read_run(self, conn: Any, run_id: str) -> RunRecord | None:
        row = conn.execute(self._sql.get_run, (run_id,)).fetchone()
        return None if row is None else self._decode_run(row)

    def _corrupt(self, run_id: object, where: str, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(
            f"run {run_id!r}: {self._where}, schema {self.schema!r}, {where}: {problem}"
        )

    def _decode_run(self, row: Sequence[Any]) -> RunRecord:
        """A runs row (with its owner's expiry) as a record, its lease filled while live."""
        rowid, run_id, data, expires, live = row
        where = f"table runs, id {rowid}"
        if type(data) is not str:
            raise self._corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            record = load_run_record(data, run_id)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, where, str(exc)) from None
        if record.owner is not None and live:
            record = attrs.evolve(record, lease_expires_at=_utc(expires))
        return record

    def _decode_entry(self, run_id: str, seq: object, data: object) -> Entry:
        where = f"table entries, seq {seq!r}"
        if type(seq) is not int:
            raise self._corrupt(run_id, where, f"column seq holds {type(seq).__name__}")
        if type(data) is not str:
            raise self._corrupt(run_id, where, f"column data holds {type(data).__name__}, not text")
        try:
            return load_entry(data, run_id, seq)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, where, str(exc)) from None

    # -- errors --------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        """*text* without this store's password (or ``$PGPASSWORD``)."""
        env = os.environ.get("PGPASSWORD")
        for secret in (*self._secrets, *((env,) if env else ())):
            text = text.replace(secret, "***")
        return text

    def _error(self, what: str, exc: BaseException) -> StoreError:
        """A :class:`~tether.StoreError` for a psycopg error, naming where, never the password.

        Not chained to *exc*: a traceback would print psycopg's message as it is.
        """
        state = getattr(exc, "sqlstate", None)
        code = f" [{state}]" if state else ""
        message = self._redact(_message(exc))
        return StoreError(f"{what} in {self!r}: {type(exc).__name__}{code}: {message}")


class _Created(Exception):
    """A run was created by someone else between a claim's read and its insert."""


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _transient(exc: BaseException) -> bool:
    """Whether a retry (on a new connection) may cure the psycopg error *exc*."""
    _, psycopg_pool = _psycopg()
    import psycopg

    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        return state.startswith("08") or state in _TRANSIENT_STATES
    if not isinstance(exc, psycopg.OperationalError):
        return False
    # A connection failure (no SQLSTATE): refused, timed out, dropped, or the
    # server said no. Only the last kind is there to stay.
    return _PERMANENT.search(str(exc)) is None


def _describe(params: Mapping[str, Any]) -> str:
    """``postgresql://user@host:port/dbname`` from parsed conninfo, never the password.

    What the conninfo leaves out comes from libpq's environment variables,
    as libpq takes it.
    """

    def get(key: str, env: str) -> str:
        return str(params.get(key) or os.environ.get(env) or "")

    user = get("user", "PGUSER")
    host = get("host", "PGHOST") or get("hostaddr", "PGHOSTADDR")
    port = get("port", "PGPORT")
    dbname = get("dbname", "PGDATABASE")
    netloc = (f"{quote(user, safe='')}@" if user else "") + host + (f":{port}" if port else "")
    return f"postgresql://{netloc}/{quote(dbname, safe='')}"


async def _sleep(seconds: float) -> None:
    """Wait *seconds* of real time (a virtual Trio clock does not apply), cancellable."""
    done = threading.Event()
    try:
        await trio.to_thread.run_sync(done.wait, seconds, abandon_on_cancel=True)
    finally:
        done.set()  # the thread ends now, not when the wait would have
