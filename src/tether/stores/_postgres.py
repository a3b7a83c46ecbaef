"""A store on PostgreSQL: pooled sync connections in worker threads, group commit.

Layer: stores (``tether.stores``).

Every call runs one short transaction on a pooled connection in a Trio
worker thread, cut when its caller leaves and retried on transient
failures; appends are group-committed by one writer thread; a write of a
run record, and a message sent to a run, notifies (``pg_notify``, delivered
at commit) what :meth:`PostgresStore.watch` turns into wake-ups.

The store is six modules, each using only the ones before it:
:mod:`._postgres_sql` (the layout, the schema, its migrations and the statements),
:mod:`._postgres_conn` (the pool, calls in threads, cutting a call whose
caller left, retries, the password kept out of messages),
:mod:`._postgres_tables` (the migration, each call's transaction, decoding
rows), :mod:`._postgres_writer` (group commit),
:mod:`._postgres_lifetime` (opening, and closing in bounded time), and this
one, the store itself: its options, the protocol's async methods and
:meth:`PostgresStore.watch`.

Whole because it is one class, the async surface of the store protocol and its
extensions: one short method per call (its arguments checked, its work handed
to a thread or to the writer, retried where it may be), whose SQL,
connections, writer and lifetime are already apart; splitting the methods
would split the class a user constructs.
"""

from __future__ import annotations

import collections
import queue
import re
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar, final

import trio

from .._errors import UsageError
from ._flow import Submission, check_submission
from ._leases import check_held, check_owner, check_ttl
from ._mailbox import Message, check_after, check_send
from ._owners import Renewal, Served, WorkerAd
from ._postgres_conn import Abandoned, Call, Connections, describe, psycopg_module
from ._postgres_lifetime import close_store, open_store
from ._postgres_sql import statements
from ._postgres_tables import Tables
from ._postgres_writer import Job, Writer
from ._queue import (
    Claimed,
    check_limit,
    check_max_dispatches,
    check_now,
    check_run_filter,
    check_served,
)
from ._record_json import dumps_record
from ._records import Entry, RunRecord, RunStatus
from ._respond import check_respond
from ._rows import Appending, encode_append
from ._run_ids import check_run_id
from ._store import ClaimNextFromBatch
from ._url import refuse_url

__all__ = ("PostgresStore",)

T = TypeVar("T")

#: A schema name: lowercase, so that it means the same quoted and unquoted, and
#: short enough for the notification channel ``tether_<schema>`` (63 bytes at most).
_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,47}")


@final
class PostgresStore(ClaimNextFromBatch):
    """Runs and journals in PostgreSQL, shared by many processes on many machines.

    Args:
        conninfo: a libpq connection string, as a URL
            (``postgresql://user:password@host:5432/db``) or ``key=value``
            pairs. Its password (like ``$PGPASSWORD`` or a passfile's) is
            used to connect and never shown: :func:`repr`, errors and log
            lines name the host, port, database and user only. Another
            store's URL (``sqlite:``, ``file:``, ``memory:``) raises
            :class:`~tether.UsageError` naming :func:`tether.stores.from_url`.
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
    abandoned and its connection cut (see :class:`._postgres_conn.Call`),
    so the thread ends promptly too and the server rolls its transaction
    back. If the ``COMMIT`` had been sent already, the write may have
    landed: appends are idempotent (an entry equal to a stored one is
    returned, not stored again), and every run record write is fenced by
    its token, so retrying it, or the write of another owner, stays correct.

    **Retries.** Transient failures are retried inside each call with
    exponential backoff (real time; the caller's deadline still wins), on a
    new connection; stale pooled connections are checked before use. A retry
    treats the earlier attempt as possibly committed: a retried
    ``create_run`` or ``update_run`` that finds exactly its own write stored
    returns it, a retried worker claim finds the run it claimed, a retried
    append finds its entries.

    **Group commit.** Appends and run record writes waiting at the same
    moment (parallel steps' saves, and the saves and outcomes of every run
    the process executes) are committed together, in one transaction, by one
    writer thread (started by :meth:`open`, stopped by :meth:`close`), each
    fenced on its own. A cancelled write not yet taken by the writer is
    withdrawn (definitely not stored); a batch whose every caller left is
    cut, as above.

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
        refuse_url("PostgresStore", conninfo, paths=False)
        psycopg, _ = psycopg_module()
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
        self._where = describe(params)
        label = repr(self)
        self._conns = Connections(
            conninfo,
            params,
            label=label,
            pool_name=f"tether-{schema}",
            pool_size=self.pool_size,
            prepare=self.prepare,
            connect_timeout=self.connect_timeout,
            retry_timeout=self.retry_timeout,
        )
        self._tables = Tables(
            sql=statements(schema),
            schema=schema,
            where=self._where,
            label=label,
            channel=f"tether_{schema}",
        )
        self._writer = Writer(self._conns, self._tables)

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    @property
    def url(self) -> str:
        """Where the store is, ``postgresql://user@host:port/dbname``: never the password."""
        return self._where

    # Test hooks: the calls whose thread uses a connection, and the writer's queue,
    # batch in flight and latest batch sizes (in appends).

    @property
    def _calls(self) -> set[Call]:
        return self._conns.calls

    @property
    def _queue(self) -> queue.SimpleQueue[Job | None]:
        return self._writer.handoff.queue

    @property
    def _inflight(self) -> list[Job]:
        return self._writer.inflight

    @property
    def _batches(self) -> collections.deque[int]:
        return self._writer.batches

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
        if self._conns.is_open:
            raise UsageError(f"{self!r} is already open")
        await open_store(self._conns, self._tables, self._writer)

    async def close(self) -> None:
        """Finish or cut the calls in flight, stop the writer thread, close the pool.

        A checkpoint. Appends queued are committed first; calls still in
        flight (only abandoned ones, normally: their callers left) get a
        grace period (``CLOSE_GRACE`` in :mod:`._postgres_lifetime`, 5 s),
        then their connections are cut, so close
        returns in bounded time even when the database hangs, and no thread
        of the store outlives it (a pool thread still connecting ends within
        ``connect_timeout``). Cancelled, it cuts everything at once, waits for
        the threads to notice, and re-raises. Safe to call when open failed
        or the store is closed.
        """
        await close_store(self._conns, self._writer)

    # -- the protocol ----------------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run record (one transaction; notifies watchers).

        Raises:
            RunConflictError: a run with this id exists.
            StoreError: the database failed (after retries, for transient failures).
        """
        check_run_id(record.run_id)
        data = dumps_record(record.to_json())
        await self._call(
            f"creating run {record.run_id!r}",
            lambda conn, retrying: self._tables.create_run(conn, retrying, record, data),
        )

    async def submit_run(self, submission: Submission) -> str:
        """Keep a submission: its new run, or its dedupe id's (one transaction; see
        :meth:`QueueingStore.submit_run <tether.stores.QueueingStore.submit_run>`).

        Racing submits, from any process, decide one after the other: a submit
        with a dedupe id takes a transaction-scoped advisory lock on it, and one
        with ``max_queued`` on its queue first. They read through partial
        indexes (the unfinished runs of each dedupe id, each queue's runs
        waiting to start), so their cost grows with neither the finished runs
        kept nor other queues. The dedupe id's run is locked while a debounce
        rewrites it, so no claim starts it meanwhile. Notifies watchers when it
        writes. A retry after an unclear outcome that finds the run stored as
        this call wrote it returns its id, as :meth:`create_run` does (not
        :class:`~tether.RunConflictError`, nor a full queue it filled itself).
        Cancelled, it returns at once (see the class doc): the run may have been
        stored.

        Raises:
            QueueFullError: the queue holds ``max_queued`` runs waiting to start;
                nothing was stored.
            RunConflictError: a run with the new run's id exists, or a debounced
                submit of another workflow than its dedupe id's run.
            UsageError: not a valid submission (:func:`check_submission
                <tether.stores.check_submission>`), or run id; checked before
                anything is read.
            CheckpointCorruptError: the dedupe id's run does not decode.
            StoreError: the database failed (after retries, for transient failures).
        """
        submission = check_submission(submission)
        record = submission.record
        check_run_id(record.run_id)
        data = dumps_record(record.to_json())
        return await self._call(
            f"submitting run {record.run_id!r}",
            lambda conn, retrying: self._tables.submit_run(conn, retrying, submission, data),
        )

    async def update_run(self, record: RunRecord) -> RunRecord:
        """Replace a run record, fenced; group-committed with other writes; notifies watchers.

        Queued for the writer like an append, so that the outcomes of many
        runs (and their appends) share one transaction; fenced against the
        run as the writes before it in that transaction left it. Transient
        failures are retried here: a retry that finds this call's own write
        stored returns it. Cancellation: see the class doc (a write the
        writer has taken may still commit).

        Raises:
            RunNotFoundError: no run with this id.
            LeaseLostError: the record's token is not the run's current one.
            StoreError: the database failed.
        """
        check_run_id(record.run_id)
        attempted: list[str] = []
        what = f"updating run {record.run_id!r}"
        return await self._conns.retrying(
            what, lambda retrying: self._queued_update(record, attempted, what)
        )

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
        check_run_id(run_id)
        check_owner(owner)
        ttl = check_ttl(ttl)
        return await self._call(
            f"claiming run {run_id!r}",
            lambda conn, retrying: self._tables.claim(conn, run_id, owner, ttl, create, takeover),
        )

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

        A waiting run is due by *now*, the claimer's clock (not the
        database's: the claimer's engine measured its timers on it).
        Candidates are locked with ``FOR UPDATE SKIP LOCKED``, so concurrent
        workers never wait for each other and never take the same run;
        expired leases are found by the same statement. Each kind of
        candidate (queued, orphaned, due) is found through its own index, so
        a claim's cost grows neither with the finished runs kept nor with the
        backlog. A batch is a few statements, however many runs it takes.
        The owner's lease is rewritten only when less than half of *ttl* is
        left. A retry after an unclear outcome first looks for the runs this
        call's earlier attempt claimed (recorded on them), so a lost
        acknowledgement never leaves a run claimed by nobody who executes it.

        Raises:
            StoreError: the database failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        limit = check_limit(limit)
        served, dead = check_served(workflows), sorted(set(gone))
        clock = check_now(now)
        if not served:
            await trio.lowlevel.checkpoint()
            return []
        attempt = uuid.uuid4().hex
        return await self._call(
            "claiming queued runs",
            lambda conn, retrying: self._tables.claim_batch(
                conn,
                retrying,
                owner=owner,
                ttl=ttl,
                served=served,
                dead=dead,
                max_dispatches=max_dispatches,
                limit=limit,
                attempt=attempt,
                now=clock,
            ),
        )

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Extend *owner*'s leases: one row's update, however many runs it holds.

        Not queued behind appends: a renewal must not wait for a backlog of
        saves. Idempotent, so retried as any read.

        Raises:
            StoreError: the database failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        held = check_held(held)
        return await self._call(
            f"renewing the leases of {owner}",
            lambda conn, retrying: self._tables.renew(conn, owner, ttl, held),
        )

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Replace worker *owner*'s row of ``workers`` (``ttl=0``: delete it); one transaction.

        Expired rows are deleted in the same transaction. Idempotent, so
        retried as any read.

        Raises:
            StoreError: the database failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        served = check_served(serves)
        await self._call(
            f"advertising worker {owner}",
            lambda conn, retrying: self._tables.advertise(conn, owner, served, ttl),
        )

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The live rows of ``workers``, by owner (the database's clock). A checkpoint.

        Raises:
            CheckpointCorruptError: a row does not decode.
            StoreError: the database failed.
        """
        return await self._call(
            "listing workers", lambda conn, retrying: self._tables.list_workers(conn)
        )

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel (one transaction; see :meth:`Store.cancel_run`; notifies watchers).

        Retrying is safe: a recorded cancel is not recorded twice.

        Raises:
            RunNotFoundError, RunConflictError: see the protocol.
            StoreError: the database failed.
        """
        check_run_id(run_id)
        return await self._call(
            f"cancelling run {run_id!r}",
            lambda conn, retrying: self._tables.cancel_run(conn, run_id, takeover),
        )

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run and its journal (one transaction; notifies watchers).

        The run's row is locked first, so the delete waits for a claim or a
        write in progress and then decides on what it committed. Retrying is
        safe: a retry after an unclear outcome that finds no run reports it
        deleted.

        Raises:
            RunConflictError: an owner holds a live lease on the run.
            StoreError: the database failed.
        """
        check_run_id(run_id)
        attempted: list[bool] = []
        return await self._call(
            f"deleting run {run_id!r}",
            lambda conn, retrying: self._tables.delete_run(conn, retrying, run_id, attempted),
        )

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None``. A checkpoint; one query in a worker thread.

        Raises:
            CheckpointCorruptError: the row does not decode.
            StoreError: the database failed.
        """
        check_run_id(run_id)
        return await self._call(
            f"reading run {run_id!r}",
            lambda conn, retrying: self._tables.read_run(conn, run_id),
        )

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
        """Run records in creation order, filtered and paged (indexed queries).

        A checkpoint; runs in a worker thread.

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: a selected row does not decode (none is skipped).
            StoreError: the database failed.
        """
        selected = check_run_filter(status, workflow, after, limit, version, queue, key)
        return await self._call(
            "listing runs", lambda conn, retrying: self._tables.list_runs(conn, selected)
        )

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (an index range: O(its entries)).

        A checkpoint; one query in a worker thread.

        Raises:
            CheckpointCorruptError: any entry does not decode or does not
                match its checksum, or a seq below the highest is missing
                (none is skipped).
            StoreError: the database failed.
        """
        check_run_id(run_id)
        return await self._call(
            f"loading the journal of run {run_id!r}",
            lambda conn, retrying: self._tables.load_entries(conn, run_id),
        )

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
        check_run_id(run_id)
        for e in entries:
            if e.run_id != run_id:
                raise UsageError(f"entry {e.key} of run {e.run_id!r} appended to run {run_id!r}")
        appending = encode_append(run_id, entries)
        what = f"appending to run {run_id!r}"
        # A retry queues the same entries again: the writer finds those already stored.
        done: list[int | Entry] = await self._conns.retrying(
            what, lambda retrying: self._queued(appending, what)
        )
        return [
            entry.stored_as(got) if isinstance(got, int) else got
            for entry, got in zip(entries, done, strict=True)
        ]

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """Store a message with the run's next seq; wake the run if it is waiting.

        One transaction: the run's row locked (``FOR UPDATE``), the send
        decided (see :meth:`MailboxStore.send_message
        <tether.stores.MailboxStore.send_message>`), the message inserted, a
        waiting run made due, and watchers notified at commit. A retry after
        an unclear outcome finds the message its earlier attempt committed and
        returns it, so a message is never stored twice by one call. Cancelled,
        it returns at once (see the class doc): the message may have been stored.

        Raises:
            RunNotFoundError: no such run.
            RunConflictError: the run has finished.
            UsageError: invalid arguments.
            StoreError: the database failed.
        """
        sent_at = check_send(run_id, name, value, now)
        message = Message(run_id=run_id, seq=1, name=name, value=value, sent_at=sent_at)
        attempted: list[tuple[int, str]] = []
        return await self._call(
            f"sending a message to run {run_id!r}",
            lambda conn, retrying: self._tables.send_message(conn, retrying, message, attempted),
        )

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """Journal responses and queue the run, in one transaction; notifies watchers.

        See :meth:`RespondingStore.respond <tether.stores.RespondingStore.respond>`.
        Transient failures are retried here; a retry recognizes an earlier
        attempt that committed. Cancelled, it returns at once (see the class
        doc): the responses may have been stored.

        Raises:
            RunNotFoundError, RunConflictError, UnknownRequestError, UsageError: see there.
            StoreError: the database failed.
        """
        now = check_respond(run_id, entries, now)
        appending = encode_append(run_id, entries)
        return await self._call(
            f"responding to run {run_id!r}",
            lambda conn, retrying: self._tables.respond(conn, retrying, appending, now),
        )

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in order (an index range).

        A checkpoint; one query in a worker thread.

        Raises:
            UsageError: *after* is not a non-negative integer.
            CheckpointCorruptError: a message does not decode or match its
                checksum, or a seq below the highest is missing.
            StoreError: the database failed.
        """
        check_run_id(run_id)
        after = check_after(after)
        return await self._call(
            f"loading the messages of run {run_id!r}",
            lambda conn, retrying: self._tables.load_messages(conn, run_id, after),
        )

    async def watch(self, changed: Callable[[], None]) -> None:
        """Call *changed()* after each committed change to a run record, from any process.

        ``LISTEN`` on a connection of its own, in a thread; every write of a
        run record sends a notification at commit. Notifications are hints:
        after a lost connection the listener reconnects (with backoff) and
        calls *changed()* once, since anything may have changed meanwhile.
        A message sent to a run is a change too. Never returns; cancel it to
        stop (the thread is stopped and waited for, promptly). Store errors
        are retried, not raised. (Through PgBouncer in transaction mode
        notifications do not arrive: callers fall back to polling.)
        """
        await self._conns.watch(self._tables.channel, changed)

    # -- calls ---------------------------------------------------------------------------
    # _in_thread, _queued and _queued_update are looked up on the store at each attempt, so that a
    # test can replace them (to lose an acknowledgement) without reaching inside.

    async def _call(self, what: str, fn: Callable[[Any, bool], T]) -> T:
        """Run ``fn(conn, retrying)`` on a pooled connection in a thread, with retries."""
        conns = self._conns

        async def attempt(retrying: bool) -> T:
            if not conns.is_open:
                await trio.lowlevel.checkpoint()
                raise UsageError(f"{what}: {self!r} is not open")
            call = Call()
            try:
                return await trio.to_thread.run_sync(
                    self._in_thread,
                    call,
                    fn,
                    retrying,
                    abandon_on_cancel=True,
                    limiter=conns.limiter,
                )
            except Abandoned:  # the store closed under the call
                raise UsageError(f"{what}: {self!r} was closed") from None
            except BaseException:
                conns.cut(call)  # a no-op unless the thread still uses its connection
                raise

        return await conns.retrying(what, attempt)

    def _in_thread(self, call: Call, fn: Callable[[Any, bool], T], retrying: bool) -> T:
        return self._conns.in_thread(call, fn, retrying)

    async def _queued(self, appending: Appending, what: str) -> list[int | Entry]:
        """Queue *appending* for the group-committing writer and wait for it (one attempt)."""
        return await self._writer.queued(appending, what)

    async def _queued_update(self, record: RunRecord, attempted: list[str], what: str) -> RunRecord:
        """Queue a fenced write of *record* for the writer and wait for it (one attempt)."""
        return await self._writer.queued_update(record, attempted, what)
