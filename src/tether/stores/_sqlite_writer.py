"""A SQLite store's group-committing writer: one thread owns the write connection.

Layer: stores (``tether.stores``).

Callers queue a job and wait (:meth:`Writer.queued`); the thread takes
everything queued at that moment (and what is queued while its statements
run, a few times over) and commits it in one ``BEGIN IMMEDIATE ... COMMIT``
(group commit), then wakes every waiter with one callback into their Trio
run. A lease renewal is committed ahead of a batch of other writes.

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
the caller before it is queued; the writer only numbers its rows. A batch
costs a few statements whatever its size: per run one query for its
existence and its highest ``seq`` (inside the write transaction: processes
sharing the file never collide), and multi-row inserts with no duplicate
lookups, since the ``UNIQUE (run_id, ikey)`` constraint catches a duplicate.
When anything in that fast pass fails, the transaction is rolled back and
the batch redone job by job, each in a savepoint, looking duplicates up: one
bad job fails alone.

It is separate from the store because it is a small concurrent program of
its own (a queue, job states shared across threads, batches) and reads best
whole.
"""

from __future__ import annotations

import collections
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, final

import attrs
import trio

from .._errors import TetherError, UsageError
from ._group_commit import PENDING, WITHDRAWN, drain, hand_back, take_pending
from ._leases import check_append
from ._sqlite_conn import Connections
from ._sqlite_rows import Appending, insert_entries, row_data
from ._sqlite_tables import Tables

__all__ = ("Writer",)

# How many times jobs queued during a transaction may join it.
_LATE_ROUNDS = 3


@attrs.define(eq=False)
class _Job:
    """One queued write: an append, or *fn* run inside the writer's transaction."""

    fn: Callable[[sqlite3.Connection], Any] | None
    token: trio.lowlevel.TrioToken
    appending: Appending | None = None
    urgent: bool = False  # a lease renewal: committed ahead of a batch of other writes
    #: the task waiting for the job (``None`` once its wait ended): touched in its Trio thread
    waiter: trio.lowlevel.Task | None = None
    state: int = PENDING  # guarded by the connections' lock
    result: Any = None
    error: BaseException | None = None


def _no_jobs() -> list[_Job]:
    return []


def _wake(jobs: list[_Job]) -> None:
    """Reschedule the tasks still waiting for *jobs* (in their Trio thread)."""
    for job in jobs:
        waiter = job.waiter
        if waiter is not None:
            job.waiter = None
            trio.lowlevel.reschedule(waiter)


@final
class Writer:
    """The writer of one store: its queue, its thread while the store is open, its batches.

    Args:
        conns: the store's connections (their lock guards the jobs' states;
            :attr:`Connections.is_open` says whether writes are taken).
        tables: the store's tables.
        group_commit: commit every job queued at the same moment in one
            transaction; ``False`` commits each alone.
    """

    def __init__(self, conns: Connections, tables: Tables, *, group_commit: bool) -> None:
        self._conns = conns
        self._tables = tables
        self.group_commit = group_commit
        self.queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        # Test hooks: the writer waits for the gate before taking a batch;
        # the sizes of committed batches (in jobs) are recorded.
        self.gate = threading.Event()
        self.gate.set()
        self.batches: collections.deque[int] = collections.deque(maxlen=1000)

    def start(self, conn: sqlite3.Connection) -> None:
        """Start the thread, which owns (and at last closes) the write connection *conn*."""
        thread = threading.Thread(
            target=self._loop, args=(conn,), name=f"tether {self._conns.label} writer", daemon=True
        )
        self.thread = thread
        thread.start()

    async def stop(self) -> None:
        """Let the thread commit what is queued, and wait for it to end.

        Call once writes are no longer taken. Cancelled while the thread
        waits for another process's lock, it makes the thread give up (what
        is still queued fails with :class:`~tether.StoreError`), waits the
        moment that takes, and re-raises. A no-op when no thread runs.
        """
        thread, self.thread = self.thread, None
        if thread is None:
            return
        self.queue.put(None)
        try:
            await trio.to_thread.run_sync(thread.join, abandon_on_cancel=True)
        except BaseException:
            self._conns.abort.set()  # the writer stops waiting for locks at once
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(thread.join)
            raise

    async def queued(
        self,
        fn: Callable[[sqlite3.Connection], Any] | None,
        what: str,
        appending: Appending | None = None,
        *,
        urgent: bool = False,
    ) -> Any:
        """Queue ``fn(conn)`` (or *appending*) for the writer and wait for its commit.

        A checkpoint. Cancelled before the thread took the job, the job is
        withdrawn (definitely not stored); after, it may still commit.
        Raises :class:`~tether.UsageError` when the store is not open,
        :class:`~tether.StoreError` when SQLite fails, and what *fn* raises.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        conns = self._conns
        if not conns.is_open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {conns.label} is not open")
        job = _Job(fn, trio.lowlevel.current_trio_token(), appending, urgent)
        job.waiter = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            # Cancelled: the wait ends now, whatever the writer does with the job.
            job.waiter = None
            with conns.lock:
                if job.state == PENDING:
                    job.state = WITHDRAWN  # the writer will skip it: not stored
            return trio.lowlevel.Abort.SUCCEEDED

        self.queue.put(job)
        # The cheapest wait there is: the writer's callback reschedules this task.
        await trio.lowlevel.wait_task_rescheduled(abort)
        if job.error is not None:
            error, job.error = job.error, None
            if isinstance(error, sqlite3.Error):
                raise conns.error(what, error) from None
            raise error
        return job.result

    def _loop(self, conn: sqlite3.Connection) -> None:
        stopping = False

        def take(first: _Job | None) -> list[_Job]:
            """Take *first* and, with group commit, every job queued now."""
            nonlocal stopping
            batch, stopping = drain(self.queue, first, more=self.group_commit)
            with self._conns.lock:
                return take_pending(batch)

        def take_more() -> list[_Job]:
            """Jobs queued while the transaction is open (none when stopping)."""
            if stopping or self.queue.empty() or not self.gate.is_set():
                return []
            return take(self.queue.get())

        try:
            while not stopping:
                first = self.queue.get()
                self.gate.wait()
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
            self._conns.begin(conn)
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
                    self._conns.begin(conn)
                    results = self._run_jobs(conn, jobs)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as exc:
            results = [(None, exc)] * len(jobs)
        self.batches.append(len(jobs))
        hand_back(jobs, results, _wake)

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
        tables = self._tables
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
                fence = last[run_id] = tables.last_seq(conn, run_id)
            if fence is None:
                results.append((None, tables.no_run(run_id)))
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
                    self._tables.append_one(conn, job.appending),
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
