"""A FileStore's runs as folders: opening the store, creating, updating, reading,
listing and deleting runs.
Layer: stores (``tether.stores``).

A new run's folder is prepared aside (``.tmp-<random>``) and renamed into
place whole; ``run.json`` is replaced atomically under the run's lock, with
the fencing check; a deleted run's folder is renamed into ``.trash`` whole,
then removed. Reads that race a delete read the run as unknown, never as
corrupt. The synchronous halves of :class:`~._file.FileStore`'s calls, run in
a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from pathlib import Path

from .._errors import CheckpointCorruptError, RunConflictError, StoreError, UsageError
from ._file_disk import (
    ENTRIES,
    RUN_FILE,
    TEMP,
    TRASH,
    check_folder,
    corrupt,
    fsync_dir,
    is_digest_folder,
    run_folder,
    write_temp,
    write_torn,
)
from ._file_lock import FileLocking
from ._leases import check_delete, fenced_update
from ._record_json import RecordDecodeError, dumps_record, loads_record
from ._records import RunRecord
from ._run_ids import check_run_id

__all__ = ("FileRuns",)


class FileRuns(FileLocking):
    """The store's directory and its runs' folders and records (see the module doc)."""

    def _open_sync(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        root = self.directory.resolve(strict=True)
        if not root.is_dir():
            raise StoreError(f"{self.directory} is not a directory")
        return root

    def _create_sync(self, record: RunRecord) -> None:
        """Publish the run's folder whole, or raise RunConflictError if it exists."""
        run_id = record.run_id
        data = dumps_record(record.to_json()).encode("utf-8")
        final = self._root / run_folder(run_id)
        if os.path.lexists(final):
            raise RunConflictError(f"run {run_id!r} already exists in {self!r}")
        temp = self._root / f"{TEMP}{uuid.uuid4().hex}"
        temp.mkdir()
        try:
            (temp / ENTRIES).mkdir()
            write_temp(temp, data).rename(temp / RUN_FILE)
            fsync_dir(temp / ENTRIES)
            fsync_dir(temp)
            try:
                os.rename(temp, final)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise RunConflictError(f"run {run_id!r} already exists in {self!r}") from None
                raise
        except BaseException:
            for leftover in (temp / RUN_FILE, *temp.glob(f"{TEMP}*")):
                leftover.unlink(missing_ok=True)
            for folder in (temp / ENTRIES, temp):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        fsync_dir(self._root)

    def _update_sync(self, record: RunRecord) -> RunRecord:
        run_id = record.run_id
        with self._locked(run_id) as folder:
            stored = fenced_update(self._read_run(run_id, folder), record)
            self._replace_run(folder, stored)
        return stored

    def _delete_sync(self, run_id: str) -> bool:
        trash = self._root / TRASH
        trash.mkdir(exist_ok=True)
        check_folder(run_id, trash)  # never move a run through a link
        with self._locked_or_none(run_id) as folder:
            if folder is None or not check_delete(self._read_run(run_id, folder), run_id=run_id):
                return False
            with self._run_lock(run_id):
                os.rename(folder, trash / uuid.uuid4().hex)
                session = self._here()
                session.ids.pop(run_id, None)
                session.next.pop(run_id, None)
            fsync_dir(self._root)
        with os.scandir(trash) as it:
            leftovers = [d.name for d in it]
        for name in leftovers:  # this delete's folder, and any a crash left
            shutil.rmtree(trash / name, ignore_errors=True)
        return True

    def _get_current(self, run_id: str) -> RunRecord | None:
        return self._unless_deleted(run_id, lambda: self._get_sync(run_id), None)

    def _get_sync(self, run_id: str) -> RunRecord | None:
        folder = self._run_dir(run_id)
        return None if folder is None else self._read_run(run_id, folder)

    def _list_sync(self) -> list[RunRecord]:
        records = []
        with os.scandir(self._root) as it:
            names = sorted(
                d.name for d in it if not d.name.startswith(".") or is_digest_folder(d.name)
            )
        for name in names:
            run_id = self._run_id_of(name)
            record = None if run_id is None else self._get_current(run_id)
            if record is not None:  # None: deleted while listing
                records.append(record)
        records.sort(key=lambda r: (r.created_at, r.run_id))
        return records

    def _run_id_of(self, name: str) -> str | None:
        """The id of the run whose folder is *name* (``None``: deleted meanwhile).

        A folder named by a digest says its run's id in its ``run.json``.

        Raises:
            CheckpointCorruptError: *name* is no run's folder name, or its
                ``run.json`` cannot be read or names a run of another folder.
        """
        if not is_digest_folder(name):
            try:
                check_run_id(name)
            except UsageError:
                raise corrupt(name, self._root / name, "not a run folder name") from None
            if run_folder(name) != name:
                raise corrupt(name, self._root / name, "not a run folder name")
            return name
        folder = self._root / name
        path = folder / RUN_FILE
        try:
            check_folder(name, folder)  # never read through a link
            record: RunRecord = loads_record(self._read_file(name, path), RunRecord.from_json)
        except CheckpointCorruptError:
            if not os.path.lexists(folder):
                return None  # deleted while listing
            raise
        except RecordDecodeError as exc:
            raise corrupt(name, path, str(exc)) from None
        try:
            run_id = check_run_id(record.run_id)
        except UsageError as exc:
            raise corrupt(name, path, str(exc)) from None
        if run_folder(run_id) != name:
            raise corrupt(name, path, f"the record names run {run_id!r}, whose folder is another")
        return run_id

    # -- crash simulation (tether.testing.FaultyStore's Crash(torn=True)) ---------------

    def _simulate_torn_update(self, record: RunRecord) -> None:
        """Leave what a crash in the middle of ``update_run(record)`` leaves.

        The new ``run.json`` is half-written to the temporary name
        :meth:`_update_sync` uses (``<run>/.tmp-<random>.json``), without the
        fsync and the ``os.replace`` that would follow: the stored record is
        the old one. Where the real call would fail before writing (the store
        is closed, no such run, an invalid id), nothing is written.
        Synchronous, like ``_simulate_torn_append``.

        Raises:
            StoreError: the file system failed.
        """
        try:
            run_id = check_run_id(record.run_id)
        except UsageError:
            return
        if not self._open:
            return
        data = dumps_record(record.to_json()).encode("utf-8")
        try:
            folder = self._run_dir(run_id)
            if folder is not None:
                write_torn(folder, data)
        except OSError as exc:
            raise StoreError(
                f"simulating a torn update of run {run_id!r} in {self!r} failed: {exc}"
            ) from exc
