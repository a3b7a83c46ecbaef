"""A PostgreSQL store's group-committing writer: one thread, one transaction per batch.

Layer: stores (``tether.stores``).

Appends and run record writes (``update_run``: a run's outcome, its
parking, its release) are queued (:meth:`Writer.queued`,
:meth:`Writer.queued_update`; they reach the thread once per batch of
Trio's scheduling, see :class:`Handoff`) and stored by one thread, which takes every
job queued while its previous transaction ran and stores them in one
transaction of a few statements, whatever runs they are of (group commit
across runs): one that locks the run rows in ``run_id`` order and reads
their records and highest seqs, one ``INSERT ... SELECT FROM unnest(...)``
for the entries and one ``UPDATE ... FROM unnest(...)`` for the records.
Each job is fenced on its own, in queue order, against the run as the jobs
before it in the batch left it, so one stale token fails its job alone. If
the transaction fails (most likely an entry that is already stored), the
batch is redone job by job, each in a savepoint, looking duplicates up, so
one bad job fails alone. A caller who leaves withdraws its job if the
writer has not taken it yet; a batch whose every caller left is cut (see
:class:`._postgres_conn.Call`).

It is separate from the store because it is a small concurrent program of
its own (a queue, job states shared across threads, a batch in flight) and
reads best whole.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, TypeAlias, final

import attrs
import trio

from .._errors import LeaseLostError, RunNotFoundError, StoreError, TetherError, UsageError
from ._group_commit import PENDING, WITHDRAWN, drain, hand_back, take_pending
from ._leases import check_append, fenced_update
from ._postgres_conn import Abandoned, Call, Connections, psycopg_module
from ._postgres_tables import Tables
from ._records import Entry, RunRecord
from ._rows import Appending, row_data

__all__ = ("Writer",)


@attrs.define(eq=False)
class Job:
    """One queued append, or one run record write, for the writer thread."""

    run_id: str
    appending: Appending | None  # an append, or
    update: RunRecord | None  # a run record write (update_run), fenced
    token: trio.lowlevel.TrioToken
    #: the texts each attempt of an update wrote (shared by its retries: a retry
    #: that finds one of them stored knows an earlier attempt committed)
    attempted: list[str] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    state: int = PENDING  # guarded by the connections' lock
    result: list[int | Entry] | RunRecord | None = None
    error: BaseException | None = None


class Handoff:
    """A writer's queue, which the jobs of Trio's tasks reach once per batch of scheduling.

    A job handed to the thread at once would wake it at once, and the
    thread would take the batch so far as soon as it got the GIL: at the
    next blocking call of the Trio thread (a file write in a step, a
    socket, anything that releases the GIL), often with one job in it, and
    commit it alone, while the jobs the other tasks of the same batch queue
    a moment later wait for its whole commit. (A worker whose steps each
    wrote one line to a file drained 40% fewer jobs per second on
    PostgreSQL, at nearly twice the CPU per job.) So the jobs are held in their
    Trio run until the tasks runnable now have run: the first one held
    schedules the hand-over as a callback of the run (``run_sync_soon``),
    which runs after them. It costs the first job no more than that batch.

    (SQLite's writer does without: its statements take microseconds and
    release the GIL, so the jobs queued meanwhile join its open transaction,
    see :mod:`._sqlite_writer`.)

    *lock* guards what is held: :meth:`put` is called holding it, in the
    job's Trio run; :meth:`stop` may be called from any thread.
    """

    def __init__(self, lock: threading.Lock) -> None:
        #: what the writer's thread takes its jobs from; ``None`` asks it to stop
        self.queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = lock
        self._held: dict[trio.lowlevel.TrioToken, list[Job]] = {}  # by the run that queued them

    def put(self, job: Job) -> None:
        """Queue *job* for the thread, once the current batch of its Trio run has run.

        Call it holding the lock, in the Trio run of ``job.token``.
        """
        held = self._held.get(job.token)
        if held is None:
            self._held[job.token] = [job]
            job.token.run_sync_soon(self._hand_over, job.token)
        else:
            held.append(job)

    def stop(self) -> None:
        """Hand every job held to the thread, then ask it to stop (it commits them first)."""
        with self._lock:
            for token in list(self._held):
                self._put_held(token)
            self.queue.put(None)

    def _hand_over(self, token: trio.lowlevel.TrioToken) -> None:
        with self._lock:
            self._put_held(token)

    def _put_held(self, token: trio.lowlevel.TrioToken) -> None:
        for job in self._held.pop(token, ()):
            self.queue.put(job)


#: What a job of the writer's batch ended with: each entry's new seq (or the
#: stored entry it equals), or the stored record; or an error.
_Result: TypeAlias = tuple[list[int | Entry] | RunRecord | None, BaseException | None]


def _wake(jobs: list[Job]) -> None:
    for job in jobs:
        job.done.set()


@final
class Writer:
    """The writer of one store: its queue, its thread while the store is open, its batches.

    Args:
        conns: the store's connections (their lock guards the jobs' states
            and :attr:`inflight`; :attr:`Connections.is_open` says whether
            appends are taken).
        tables: the store's tables.
    """

    def __init__(self, conns: Connections, tables: Tables) -> None:
        self._conns = conns
        self._tables = tables
        self._label = conns.label
        self.handoff = Handoff(conns.lock)
        self.thread: threading.Thread | None = None
        self.call = Call()
        self.hard_stop = threading.Event()
        self.inflight: list[Job] = []  # the batch being committed, guarded by the lock
        # Test hooks: the sizes (in appends) of the writer's latest batches.
        self.batches: collections.deque[int] = collections.deque(maxlen=1000)

    def start(self) -> None:
        """Start the thread (the store is open: appends are taken)."""
        self.call = Call()
        self.hard_stop.clear()
        self.thread = threading.Thread(
            target=self._loop, name=f"tether {self._label} writer", daemon=True
        )
        self.thread.start()

    def stop(self, thread: threading.Thread, deadline: float, hurry: threading.Event) -> None:
        """Commit what is queued and end *thread*; past *deadline* (or *hurry*), cut its batch.

        Blocking: for a thread of the store's ``close``, once appends are no
        longer taken.
        """
        self.handoff.stop()
        while thread.is_alive() and time.monotonic() < deadline and not hurry.is_set():
            thread.join(0.05)
        if thread.is_alive():
            self.hard_stop.set()  # what is still queued fails without the database
            self._conns.cut(self.call)
            thread.join()

    async def queued(self, appending: Appending, what: str) -> list[int | Entry]:
        """Queue *appending* for the writer and wait for it (one attempt)."""
        job = Job(appending.run_id, appending, None, trio.lowlevel.current_trio_token())
        result = await self._wait(job, what)
        assert isinstance(result, list)
        return result

    async def queued_update(self, record: RunRecord, attempted: list[str], what: str) -> RunRecord:
        """Queue a fenced write of *record* for the writer and wait for it (one attempt).

        *attempted* is shared by the attempts of one ``update_run``.
        """
        job = Job(record.run_id, None, record, trio.lowlevel.current_trio_token(), attempted)
        result = await self._wait(job, what)
        assert isinstance(result, RunRecord)
        return result

    async def _wait(self, job: Job, what: str) -> list[int | Entry] | RunRecord:
        """Queue *job* and wait for its result."""
        await trio.lowlevel.checkpoint_if_cancelled()
        conns = self._conns
        if not conns.is_open:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self._label} is not open")
        with conns.lock:
            if not conns.is_open:  # closed since the check above (no checkpoint between)
                raise UsageError(f"{what}: {self._label} is not open")
            self.handoff.put(job)
        try:
            await job.done.wait()
        except BaseException:
            with conns.lock:
                # Pending: the writer will skip it (not stored). Taken: it may
                # still commit, which a retry of the same entries finds.
                job.state = WITHDRAWN
                if self.inflight and all(j.state == WITHDRAWN for j in self.inflight):
                    # Nobody waits for this batch: cut it rather than let a
                    # hung database hold up every append queued behind it.
                    conns.cut_locked(self.call)
            raise
        if job.error is not None:
            error, job.error = job.error, None
            if isinstance(error, Abandoned):
                raise StoreError(f"{what}: {self._label} was closed before the write") from None
            raise error
        assert job.result is not None
        return job.result

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            jobs = self.handoff.queue
            batch, stopping = drain(jobs, jobs.get(), more=True)
            with self._conns.lock:
                taken = take_pending(batch)
                self.inflight = taken
                if not self.hard_stop.is_set():
                    self.call.abandoned = False  # a cut batch is over; this one is new
            if taken:
                self._commit(taken)

    def _commit(self, jobs: list[Job]) -> None:
        """Store *jobs* in one transaction and wake their waiters."""
        psycopg, _ = psycopg_module()
        results: list[_Result]
        call = self.call
        try:
            conn = self._conns.checkout(call)
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
                self._conns.checkin(call, conn)
        except Exception as exc:  # the connection or the commit failed: every job did
            results = [(None, exc)] * len(jobs)
        self.batches.append(len(jobs))
        with self._conns.lock:
            self.inflight = []
        hand_back(jobs, results, _wake)

    def _batch(self, conn: Any, jobs: list[Job]) -> list[_Result]:
        """The fast path: a few statements for the whole batch, no duplicate lookups."""
        sql = self._tables.sql
        run_ids = sorted({job.run_id for job in jobs})
        rows = conn.execute(sql.lock_batch, (run_ids,)).fetchall()
        fences = {row[1]: (row[5], row[6]) for row in rows}
        last: dict[str, int | None] = {row[1]: row[7] for row in rows}
        raw = {row[1]: row for row in rows}
        # Each run's record as the batch leaves it, decoded by its first update job
        # (a record that does not decode fails that run's updates, and them alone).
        currents: dict[str, tuple[RunRecord, str]] = {}
        cols: tuple[list[str], list[int], list[str], list[str]] = ([], [], [], [])
        puts: dict[str, RunRecord] = {}  # each run's last record written in the batch
        stored_by: dict[str, list[Job]] = {}  # the update jobs that stored each run's record
        results: list[_Result] = []
        for job in jobs:
            run_id = job.run_id
            if run_id not in fences:
                results.append((None, self._no_run(run_id)))
                continue
            if job.update is not None:
                try:
                    if run_id not in currents:
                        row = raw[run_id]
                        currents[run_id] = (self._tables.decode_run(row[:5]), row[2])
                    stored = self._update(job, job.update, currents)
                except TetherError as exc:
                    results.append((None, exc))
                    continue
                if stored is not currents[run_id][0]:
                    currents[run_id] = (stored, "")
                    puts[run_id] = stored
                    stored_by.setdefault(run_id, []).append(job)
                fences[run_id] = (stored.owner, stored.token)
                results.append((stored, None))
                continue
            assert job.appending is not None
            owner, token = fences[run_id]
            try:
                check_append(run_id, job.appending.entries, token=token, owner=owner)
            except LeaseLostError as exc:
                results.append((None, exc))
                continue
            seq = last.get(run_id) or 0
            seqs: list[int | Entry] = []
            for i, ikey in enumerate(job.appending.ikeys):
                seq += 1
                cols[0].append(run_id)
                cols[1].append(seq)
                cols[2].append(ikey)
                cols[3].append(row_data(job.appending, i, seq))
                seqs.append(seq)
            last[run_id] = seq
            results.append((seqs, None))
        if cols[0]:
            conn.execute(sql.insert_entries, cols)
        if puts:
            records = list(puts.values())
            texts = self._tables.put_runs(conn, records, claims=[None] * len(records))
            # Only the jobs that stored a run's record learn the text that commits
            # (a retry after a lost answer finds it and knows it committed); a job
            # refused by the fence does not, and is refused again.
            for run_id, text in zip(puts, texts, strict=True):
                for job in stored_by[run_id]:
                    job.attempted.append(text)
        return results

    def _update(
        self, job: Job, record: RunRecord, currents: dict[str, tuple[RunRecord, str]]
    ) -> RunRecord:
        """The record an update job stores, fenced against the run as the batch left it;
        the current one when an earlier attempt of the same update committed."""
        current, text = currents.get(job.run_id, (None, ""))
        if current is None:
            raise self._no_run(job.run_id)
        if text and text in job.attempted:
            return current  # the earlier attempt committed
        return fenced_update(current, record)

    def _jobs(self, conn: Any, jobs: list[Job]) -> list[_Result]:
        """The slow path: job by job, each in a savepoint, locking runs in ``run_id`` order."""
        psycopg, _ = psycopg_module()
        results: list[_Result] = [(None, None)] * len(jobs)
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].run_id)
        for i in order:
            job = jobs[i]
            try:
                with conn.transaction():
                    if job.update is not None:
                        stored = self._tables.update_run(
                            conn, bool(job.attempted), job.update, job.attempted
                        )
                        results[i] = (stored, None)
                    else:
                        assert job.appending is not None
                        results[i] = (self._append_one(conn, job.appending), None)
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
        sql = self._tables.sql
        run_id = appending.run_id
        row = conn.execute(sql.lock_fences, ([run_id],)).fetchone()
        if row is None:
            raise self._no_run(run_id)
        _, owner, token = row
        check_append(run_id, appending.entries, token=token, owner=owner)
        return self._tables.insert_entries(conn, appending)

    def _no_run(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(
            f"cannot write to run {run_id!r}: it is not stored in {self._label}"
        )
