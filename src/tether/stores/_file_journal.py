"""A FileStore's journals: appends, one file each, and their strict reading.

Layer: stores (``tether.stores``).

An append is one file, whatever its number of entries (group commit costs
two fsyncs per append, not two per entry), and a crash never leaves a gap
in the journal, which the strict reader would report as corruption:

* the file's content is fsynced *before* its name is linked, so a name that
  survives a crash names complete content (all the append's entries);
* the one link is the whole append: a crash keeps all its entries or none;
* appends to a run are serialized (the run's ``flock``), and one returns
  only after the folder's fsync made its link durable; the next append's
  link is made after that, so a crash can lose only the newest append, a
  suffix of the journal, never one below a later seq.

A lost newest append was not acknowledged (its ``append`` had not returned),
so its steps run again on resume. One file per *entry* with a single folder
fsync per append would not do: until that fsync, a crash may keep any subset
of the new names (a folder's entries are not written in order on every file
system), so a later seq could survive an earlier one.

How seqs are claimed by ``os.link`` across processes is in
:mod:`._file_disk`. Appends are idempotent: this process caches, per run,
the entries it read or wrote by idempotency key, and the next seq to try
(in the :class:`~._file_threads.Session` of the store's ``open()``). The
synchronous halves of :class:`~._file.FileStore`'s calls, run in a worker
thread.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from .._errors import StoreError, UsageError
from ._file_disk import (
    ENTRIES,
    ENTRY_NAME,
    batch_bytes,
    check_folder,
    corrupt,
    decode_batch,
    fsync_dir,
    numbered,
    write_temp,
    write_torn,
)
from ._file_lock import FileLocking
from ._file_threads import Session
from ._leases import check_append
from ._record_json import RecordDecodeError, loads_record
from ._records import Entry, EntryKind, RunRecord
from ._respond import decide_respond
from ._run_ids import check_run_id

__all__ = ("FileJournal",)


class FileJournal(FileLocking):
    """Appending to a run's journal and reading it back (see the module doc)."""

    def _append_sync(self, run_id: str, entries: list[Entry]) -> list[Entry]:
        with self._locked(run_id, "cannot append to") as folder, self._run_lock(run_id):
            run = self._read_run(run_id, folder, lease=False)
            check_append(run_id, entries, token=run.token, owner=run.owner)
            return self._append_decided(run_id, folder, entries)

    def _respond_sync(self, run_id: str, entries: list[Entry], now: datetime) -> RunRecord:
        with self._locked(run_id, "cannot respond to") as folder:
            record = decide_respond(
                self._read_run(run_id, folder),
                run_id=run_id,
                keys=[e.key for e in entries],
                now=now,
            )
            # The responses first, then the record: two writes under the run's
            # lock. One that fails between them leaves the run paused with a
            # response journaled, which a retry finds (a response already
            # journaled for its key is kept, not stored twice) before it
            # writes the record; the run is never queued without its responses.
            with self._run_lock(run_id):
                stored = self._journal_ids(run_id).values()
                answered = {e.key for e in stored if e.kind is EntryKind.RESPONSE}
                fresh = [e for e in entries if e.key not in answered]
                if fresh:
                    self._append_decided(run_id, folder, fresh)
            self._replace_run(folder, record)
        return record

    def _journal_ids(self, run_id: str) -> dict[str, Entry]:
        """The run's stored entries by idempotency key, read once and cached in this
        thread's session (with the next seq); under the run's locks."""
        session = self._here()
        ids = session.ids.get(run_id)
        if ids is None:
            journal = self._load_sync(run_id)
            ids = {e.idempotency_key: e for e in journal}
            session.ids[run_id] = ids
            session.next[run_id] = len(journal) + 1
        return ids

    def _append_decided(self, run_id: str, folder: Path, entries: list[Entry]) -> list[Entry]:
        """Store *entries* (fenced, or a respond), under the run's locks."""
        session = self._here()
        ids = self._journal_ids(run_id)
        folder = folder / ENTRIES
        check_folder(run_id, folder)  # never write through a link
        # Each entry is a stored one (a duplicate) or the index of a new one
        # (an entry repeated within the call is stored once).
        placed: list[Entry | int] = []
        new: dict[str, int] = {}  # idempotency key -> index among the new entries
        fresh: list[Entry] = []
        for entry in entries:
            ikey = entry.idempotency_key
            existing = ids.get(ikey)
            if existing is not None:
                placed.append(existing)
                continue
            index = new.get(ikey)
            if index is None:
                index = new[ikey] = len(fresh)
                fresh.append(entry)
            placed.append(index)
        if not fresh:
            return [p for p in placed if isinstance(p, Entry)]
        published = self._publish(session, run_id, folder, fresh)
        for ikey, index in new.items():
            ids[ikey] = published[index]
        return [published[p] if isinstance(p, int) else p for p in placed]

    def _publish(
        self, session: Session, run_id: str, folder: Path, entries: list[Entry]
    ) -> list[Entry]:
        """Store *entries* as the run's next seqs, in one file: all of them, or none.

        See the module doc for why one file per append keeps a crash from
        leaving a gap. Under the run's locks; *session*'s next seq is updated.
        """
        seq = session.next.get(run_id, 1)
        while True:
            done = [entry.stored_as(seq + i) for i, entry in enumerate(entries)]
            temp = write_temp(folder, batch_bytes(done))
            try:
                os.link(temp, folder / f"{seq:012d}.json", follow_symlinks=False)
            except FileExistsError:
                # Another process appended since this one did: go past everything stored now.
                seq = max(seq + 1, self._last_seq(run_id, folder) + 1)
                continue
            finally:
                temp.unlink()
            fsync_dir(folder)
            session.next[run_id] = seq + len(done)
            return done

    def _last_seq(self, run_id: str, folder: Path) -> int:
        """The highest seq stored in the journal folder *folder* (0: none)."""
        with os.scandir(folder) as it:
            firsts = [int(m[1]) for d in it if (m := ENTRY_NAME.fullmatch(d.name))]
        if not firsts:
            return 0
        last = max(firsts)
        return last + len(self._load_file(run_id, folder / f"{last:012d}.json", last)) - 1

    def _load_sync(self, run_id: str) -> list[Entry]:
        folder = self._run_dir(run_id)
        if folder is None:
            return []
        entries_dir = folder / ENTRIES
        check_folder(run_id, entries_dir)
        journal: list[Entry] = []
        for seq, path in numbered(run_id, entries_dir, "a journal folder"):
            expected = len(journal) + 1  # files hold seqs 1, 2, 3, ... in order, no gaps
            if seq > expected:
                missing = entries_dir / f"{expected:012d}.json"
                raise corrupt(run_id, missing, f"entry seq {expected} is missing")
            if seq < expected:
                raise corrupt(
                    run_id, path, f"entry seq {seq} is stored twice (in an earlier file too)"
                )
            journal += self._load_file(run_id, path, seq)
        return journal

    def _load_file(self, run_id: str, path: Path, first: int) -> list[Entry]:
        """The entries of journal file *path*, whose name says it starts at seq *first*."""
        try:
            batch: list[Entry] = loads_record(self._read_file(run_id, path), decode_batch)
        except RecordDecodeError as exc:
            raise corrupt(run_id, path, str(exc)) from None
        for i, entry in enumerate(batch):
            where = "the entry" if len(batch) == 1 else f"entry {i + 1} of the file"
            if entry.run_id != run_id:
                raise corrupt(run_id, path, f"{where} names run {entry.run_id!r}")
            if entry.seq != first + i:
                raise corrupt(
                    run_id, path, f"{where} says seq {entry.seq!r}, where it is stored {first + i}"
                )
        return batch

    # -- crash simulation (tether.testing.FaultyStore's Crash(torn=True)) ---------------

    def _simulate_torn_append(self, run_id: str, entries: Sequence[Entry]) -> None:
        """Leave what a crash in the middle of ``append(run_id, entries)`` leaves.

        The file the append would publish (its new entries) is half-written to
        the temporary name :meth:`_publish` uses (``entries/.tmp-<random>.json``),
        without the fsync, the link and the folder's fsync that would follow:
        the process died inside :func:`~._file_disk.write_temp`. Readers ignore
        the file. Nothing cached changes. Where the real call would fail before
        writing (the store is closed, the run is not stored, an invalid id, every
        entry stored already), nothing is written.

        Synchronous, in the caller's thread (a few unsynced bytes): no other
        task runs between the torn write and the simulated crash. It takes no
        lock: an abandoned append may hold the run's thread lock for as long as
        its file system call hangs, and the event loop must not wait for it.
        The caches are only read (one dict lookup at a time, atomic), and what
        they say only decides the seqs written into a file no reader opens.

        Raises:
            StoreError: the file system failed.
            CheckpointCorruptError: the journal read to find the seq is corrupt.
        """
        try:
            check_run_id(run_id)
        except UsageError:
            return
        if not self._open or any(e.run_id != run_id for e in entries):
            return
        try:
            folder = self._run_dir(run_id)
            if folder is None:
                return
            session = self._session
            ids = session.ids.get(run_id)
            seq = session.next.get(run_id)
            if ids is None or seq is None:
                journal = self._load_sync(run_id)
                ids = {e.idempotency_key: e for e in journal}
                seq = len(journal) + 1
            new: dict[str, Entry] = {}
            for e in entries:
                if e.idempotency_key not in ids:
                    new.setdefault(e.idempotency_key, e)
            if new:
                done = [e.stored_as(seq + i) for i, e in enumerate(new.values())]
                write_torn(folder / ENTRIES, batch_bytes(done))
        except OSError as exc:
            raise StoreError(
                f"simulating a torn append to run {run_id!r} in {self!r} failed: {exc}"
            ) from exc
