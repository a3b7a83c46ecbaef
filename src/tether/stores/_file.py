"""A durable store made of plain JSON files, one folder per run.

Layer: stores (``tether.stores``).

:class:`FileStore` is the store's public, async face: each call checks its
arguments, then does its file work in a worker thread (one mechanism,
``FileCalls._call``, so cancellation and errors are handled alike
everywhere). The work itself is in parts, each a mixin of one concern, with
its design in its module doc:

- :mod:`._file_calls`: the store's lifetime (``open``, ``close``) and
  ``_call``, the one way into a worker thread;
- :mod:`._file_threads`: the worker threads, abandoned by a cancelled
  caller, withdrawn while they wait for a lock, counted until they end, and
  waited for by ``close()``; the session (one ``open()`` to ``close()``)
  whose caches they fill;
- :mod:`._file_disk`: the layout on disk, a run's folder name, atomic writes
  of one file, the strict checks of a folder (plain functions of paths);
- :mod:`._file_base`: the store's state, a run's folder, the strict reads of
  a file and of a run's record, the replacement of ``run.json``;
- :mod:`._file_lock`: the run's and the queue's ``flock``, which every
  process respects;
- :mod:`._file_runs`: opening the store; creating, updating, reading,
  listing and deleting runs;
- :mod:`._file_owners`: leases, cancels, workers' claims and advertisements;
- :mod:`._file_journal`: appends (one file each) and strict journal reads;
- :mod:`._file_mailbox`: a run's messages;
- :mod:`._file_submit`: submits by the queues' rules (dedupe ids, debounce,
  ``max_queued``), under the queue's lock.

The parts but :mod:`._file_calls` and :mod:`._file_threads` hold the
synchronous halves of the calls, run in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import final

from .._errors import UsageError
from ._file_calls import FileCalls
from ._file_journal import FileJournal
from ._file_mailbox import FileMailbox
from ._file_owners import FileOwners
from ._file_submit import FileSubmits
from ._flow import Submission, check_submission
from ._leases import check_held, check_owner, check_ttl
from ._mailbox import Message, check_after, check_send
from ._owners import Renewal, Served, WorkerAd
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
from ._store import ClaimNextFromBatch

__all__ = ("FileStore",)


@final
class FileStore(FileCalls, FileJournal, FileMailbox, FileOwners, FileSubmits, ClaimNextFromBatch):
    """Runs and journals as JSON files under *directory*, safe for several processes.

    Args:
        directory: the store's folder; created (with its parents) on :meth:`open`.
            A string that is a store URL (``"file:runs"``; the rule is
            :class:`~tether.SQLiteStore`'s) raises :class:`~tether.UsageError`
            naming :func:`tether.stores.from_url`; a :class:`pathlib.Path` is
            always a path.

    Layout: ``<directory>/<run folder>/run.json`` and one file per append,
    ``<directory>/<run folder>/entries/<first seq, 12 digits>.json``. Each file is
    written atomically (temporary file, fsync, publish, fsync of the folder);
    names starting with ``.`` are temporary and never read.

    Run ids follow every store's rule (:func:`~tether.stores.check_run_id`;
    another raises :class:`~tether.UsageError`). An id safe as a folder name
    (no leading ``.``, no ``/``, ``\\`` or control character) names its run's
    folder; any other valid id is kept exactly in a folder named ``.r-`` and
    its SHA-256, so no id leads outside the directory. Step keys are stored
    inside files only.
    Symbolic links inside the store are refused (files are opened with
    ``O_NOFOLLOW``; a run folder that is a link is an error), so nothing
    outside the directory is ever read or written through one.

    Every method is a Trio checkpoint and does its file work in a worker
    thread, which a cancelled call abandons (all but :meth:`open`): it
    returns at once, whatever the file system does. The thread stops with
    nothing written if it had not begun or still waited for the run's lock
    (another process may hold it for 10 s); one that held it may write after
    its caller left, as any write: whole or not at all, fenced by the token
    read under the lock, an append idempotent. So a cancelled write's outcome
    is unknown to its caller (stored whole, later, or not at all), as the
    engine expects: it writes no status, a resume finds a late append by its
    idempotency key, and a late claim is released or expires (see
    :meth:`claim`). :meth:`close` waits for the threads. They take slots of
    a ``trio.CapacityLimiter`` of the store's own (40 per :meth:`open`), not
    trio's default one: an abandoned thread keeps its slot until it ends, so
    a hung file system starves this store alone, never other threaded stores.

    :meth:`append` is idempotent (see
    :attr:`~tether.stores.Entry.idempotency_key`): duplicates are detected
    against what this process read or wrote, and against the whole journal
    the first time a process appends to a run after :meth:`open` (that cache
    is dropped when the run is stored as completed, and on :meth:`close`; a
    thread that ends after :meth:`close` never refills it).

    Reads are strict: a file that cannot be read or decoded, a folder where a
    file should be, a file name that disagrees with its content, or a
    missing ``seq`` raise :class:`~tether.CheckpointCorruptError` naming the
    run and the path. ``list_runs`` orders runs by ``created_at`` (then id).
    An ``OSError`` becomes :class:`~tether.StoreError` naming the path.

    The file system must support hard links (``os.link``), as local POSIX
    file systems do.

    An :meth:`append` is atomic: its new entries are published in one file
    (a crash keeps all of them or none, and never leaves a gap below a
    later seq; see the module doc of ``_file_journal``).
    """

    # -- the protocol ------------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run: its folder is prepared aside and renamed into place.

        Raises:
            RunConflictError: a run (or anything else) with this id exists.
            UsageError: the run id is not valid (:func:`~tether.stores.check_run_id`).
            StoreError: the file system failed.
        """
        run_id = check_run_id(record.run_id)
        await self._call(f"creating run {run_id!r}", self._create_sync, record)

    async def submit_run(self, submission: Submission) -> str:
        """Keep *submission* by the queues' rules; the id of the run that holds it (see
        :meth:`QueueingStore.submit_run <tether.stores.QueueingStore.submit_run>`).

        With a dedupe id or a ``max_queued``, it holds the queue's lock (a
        ``flock`` every process's such submits take) while it reads the
        queue's runs, decides, and writes: the new run's folder is published as
        :meth:`create_run` publishes one, or the dedupe id's live run's
        ``run.json`` replaced under its run's lock, as :meth:`update_run`
        does. The read is a scan of every run record (O(all runs)), as a
        worker's :meth:`claim_batch`. A plain submit reads nothing, takes no
        lock, and is :meth:`create_run`. See the module doc of ``_file_submit``.

        Cancelled, it returns at once (see the class doc): a submit whose
        thread had not begun or still waited for a lock stores nothing; one
        that held them may store its run (or rewrite the live one) after its
        caller gave up, whole, so the outcome is unknown. The same submit
        again finds it: the run of its dedupe id, or its id taken
        (:class:`~tether.RunConflictError`, which ``engine.submit`` checks).

        Raises:
            QueueFullError: the queue is at ``max_queued``; nothing was stored.
            RunConflictError: the new run's id exists (or anything else by its
                name); or a debounced submit of another workflow than its
                dedupe id's run.
            UsageError: the submission is not valid (:func:`~tether.stores.check_submission`,
                :func:`~tether.stores.check_run_id`).
            CheckpointCorruptError: a run record read cannot be read (none is
                skipped), or the directory holds something that is not a run.
            StoreError: the file system failed, or another process held the
                queue's or the run's lock for too long.
        """
        record = check_submission(submission).record
        run_id = check_run_id(record.run_id)
        result: str = await self._call(f"submitting run {run_id!r}", self._submit_sync, submission)
        return result

    async def update_run(self, record: RunRecord) -> RunRecord:
        """Replace ``run.json`` atomically (``os.replace``).

        Raises:
            RunNotFoundError: no run with this id.
            UsageError: the run id is not valid (:func:`~tether.stores.check_run_id`).
            CheckpointCorruptError: the run's folder is a link or not a folder.
            StoreError: the file system failed.
        """
        run_id = check_run_id(record.run_id)
        result: RunRecord = await self._call(f"updating run {run_id!r}", self._update_sync, record)
        return result

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        """Take the run's lease, under the run's lock (see :meth:`Store.claim`).

        A run created by the claim is published whole (with its first lease),
        as :meth:`create_run` publishes one.

        Cancelled, it returns at once (see the class doc): a claim whose
        thread had not begun or still waited for the run's lock is withdrawn;
        any other may take the lease (or create the run) after its caller gave
        up, so the outcome is unknown. The engine treats it so: it looks for
        the late claim and releases it. Such a lease ends with *owner*'s (one
        lease file covers all its runs), and *owner*'s next claim retakes it.

        Raises:
            RunConflictError, RunCancelledError, RunNotFoundError: see the protocol.
            StoreError: the file system failed, or another process held the
                run's lock for too long.
        """
        check_run_id(run_id)
        check_owner(owner)
        ttl = check_ttl(ttl)
        result: RunRecord = await self._call(
            f"claiming run {run_id!r}", self._claim_sync, run_id, owner, ttl, create, takeover
        )
        return result

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Rewrite *owner*'s lease file (one write), and read the held runs' tokens.

        Raises:
            StoreError: the file system failed.
            CheckpointCorruptError: a held run's record cannot be read.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        held = check_held(held)
        result: Renewal = await self._call(
            f"renewing the leases of {owner}", self._renew_sync, owner, ttl, dict(held)
        )
        return result

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel, under the run's lock (see :meth:`Store.cancel_run`).

        Raises:
            RunNotFoundError, RunConflictError: see the protocol.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        result: RunRecord = await self._call(
            f"cancelling run {run_id!r}", self._cancel_sync, run_id, takeover
        )
        return result

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Rewrite worker *owner*'s file in ``.workers`` (``ttl=0``: remove it).

        Expired files of other workers are removed here. A checkpoint.

        Raises:
            StoreError: the file system failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        served = check_served(serves)
        await self._call(f"advertising worker {owner}", self._advertise_sync, owner, served, ttl)

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The live advertisements in ``.workers``, by owner. A checkpoint.

        Raises:
            CheckpointCorruptError: a file there cannot be read.
            StoreError: the file system failed.
        """
        result: list[WorkerAd] = await self._call(
            "listing workers", lambda: self._workers_sync(now=time.time())
        )
        return result

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run's folder, journal and all, atomically (see the protocol).

        Under the run's lock, the folder is renamed into ``.trash`` (one
        ``os.rename``: the run vanishes whole for every reader, and a write
        waiting for the lock finds no run), the store's folder is fsynced,
        and then the renamed folder is removed. A crash before the rename
        leaves the whole run; after it, a folder in ``.trash`` that no read
        looks at, removed by the next ``delete_run`` (of any process). A
        read that raced the rename reads the run as unknown, never as
        corrupt. A checkpoint.

        Raises:
            RunConflictError: an owner holds a live lease on the run.
            UsageError: the run id is not valid (:func:`~tether.stores.check_run_id`).
            CheckpointCorruptError: the run's record cannot be read.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        result: bool = await self._call(f"deleting run {run_id!r}", self._delete_sync, run_id)
        return result

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None`` for an unknown id. A checkpoint.

        Raises:
            CheckpointCorruptError: ``run.json`` cannot be read or decoded.
            UsageError: the run id is not valid (:func:`~tether.stores.check_run_id`).
        """
        check_run_id(run_id)
        result: RunRecord | None = await self._call(
            f"reading run {run_id!r}", self._get_current, run_id
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
        """Run records by ``created_at`` then id, filtered (see :meth:`Store.list_runs`).

        A checkpoint. The directory is the index: every run record is read
        and the filters applied to them, so a listing costs O(all runs).

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: any run cannot be read (none is skipped),
                or the directory holds something that is not a run.
        """
        selected = check_run_filter(status, workflow, after, limit, version, queue, key)
        records: list[RunRecord] = await self._call("listing runs", self._list_sync)
        return selected.page(records)

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
        """A worker's claim of up to *limit* runs, oldest first (see the protocol).

        Candidates are found by a listing, then each is decided again under
        its run's lock (which every process respects), so two workers never
        claim the same run.

        Cancelled, it returns at once (see the class doc): its thread stops
        at the next run's lock it waits for, but a candidate it holds the lock
        of may still be claimed (a queued run moved to ``running`` under
        *owner*'s lease) after the caller gave up, unseen. Workers shield the
        call (bounded by ``save_timeout``) for that reason. Such a run is
        taken again by *owner*'s next :meth:`claim` of it, and by another
        worker's once *owner*'s lease expires (it stops renewing), at once when
        *owner* is among its *gone* (its engine closed, or its process ended).

        Raises:
            StoreError: the file system failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        result: list[Claimed] = await self._call(
            "claiming queued runs",
            self._claim_batch_sync,
            owner,
            ttl,
            check_served(workflows),
            max_dispatches,
            check_limit(limit),
            frozenset(gone),
            check_now(now),
        )
        return result

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Publish the new entries in one file, with the run's next seqs: all or none.

        A checkpoint; see the class doc on cancellation and idempotency.

        Raises:
            RunNotFoundError: no run with this id.
            UsageError: the run id is not valid, or an entry names another run.
            CheckpointCorruptError: the journal read to find duplicates is corrupt.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        for e in entries:
            if e.run_id != run_id:
                raise UsageError(f"entry {e.key} of run {e.run_id!r} appended to run {run_id!r}")
        result: list[Entry] = await self._call(
            f"appending to run {run_id!r}", self._append_sync, run_id, list(entries)
        )
        return result

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (empty for an unknown run). A checkpoint.

        Raises:
            CheckpointCorruptError: any journal file cannot be read or decoded,
                disagrees with its name, or a ``seq`` is missing or stored
                twice (none is skipped).
            UsageError: the run id is not valid (:func:`~tether.stores.check_run_id`).
        """
        check_run_id(run_id)
        result: list[Entry] = await self._call(
            f"loading the journal of run {run_id!r}",
            lambda: self._unless_deleted(run_id, lambda: self._load_sync(run_id), []),
        )
        return result

    # -- mailboxes ---------------------------------------------------------------------

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """Store a message with the run's next seq under the run's lock; wake it if waiting.

        See :meth:`MailboxStore.send_message
        <tether.stores.MailboxStore.send_message>` and the module doc of
        ``_file_mailbox``. A
        checkpoint; cancelled, it returns at once, and the message is stored
        whole, maybe after the caller got control back, or not at all (see
        the class doc).

        Raises:
            RunNotFoundError: no such run.
            RunConflictError: the run has finished.
            UsageError: invalid arguments, or a run id that is not valid.
            CheckpointCorruptError: the run's record or mailbox cannot be read.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        sent_at = check_send(run_id, name, value, now)
        message: Message = await self._call(
            f"sending a message to run {run_id!r}", self._send_sync, run_id, name, value, sent_at
        )
        return message

    async def respond(self, run_id: str, entries: Sequence[Entry], *, now: datetime) -> RunRecord:
        """Journal the responses and queue the run, under the run's lock.

        See :meth:`RespondingStore.respond <tether.stores.RespondingStore.respond>`.
        Two writes under one lock, the responses first: one that fails between
        them leaves the run paused with its responses journaled; a retry keeps
        those (a response already journaled for a key is not stored again) and
        writes the record. The run is never queued without its responses. A
        checkpoint; cancelled, see the class doc.

        Raises:
            RunNotFoundError, RunConflictError, UnknownRequestError, UsageError: see there.
            CheckpointCorruptError: the run's record or journal cannot be read.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        now = check_respond(run_id, entries, now)
        record: RunRecord = await self._call(
            f"responding to run {run_id!r}", self._respond_sync, run_id, list(entries), now
        )
        return record

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in order (empty for an unknown run).

        A checkpoint.

        Raises:
            UsageError: *after* is not a non-negative integer, or the run id is not valid.
            CheckpointCorruptError: a message file cannot be read or decoded,
                disagrees with its name, or a seq is missing (none is skipped).
        """
        check_run_id(run_id)
        after = check_after(after)
        result: list[Message] = await self._call(
            f"loading the messages of run {run_id!r}",
            lambda: self._unless_deleted(run_id, lambda: self._messages_sync(run_id, after), []),
        )
        return result
