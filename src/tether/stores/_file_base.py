"""What every FileStore operation stands on: its state, and a run's folder and record.

Layer: stores (``tether.stores``).

:class:`FileBase` holds the store's state (its directory, whether it is
open, its worker threads and the session whose caches of appends they fill,
:mod:`._file_threads`, with the thread locks that guard those caches) and
the synchronous reads and writes every concern of the store shares: finding
a run's folder (never through a link, never outside the directory), the
strict read of a file and of a run's record (with its owner's lease), and
the atomic replacement of ``run.json``. The concerns are mixins on top of it
(:mod:`._file_lock`, :mod:`._file_runs`, :mod:`._file_owners`,
:mod:`._file_journal`, :mod:`._file_mailbox`), and :class:`~._file.FileStore`
is their public, async face. Everything here runs in a worker thread.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs
import trio

from .._errors import CheckpointCorruptError, UsageError
from ._file_disk import (
    O_CLOEXEC,
    O_NOFOLLOW,
    OWNERS,
    RUN_FILE,
    check_folder,
    corrupt,
    fsync_dir,
    run_folder,
    time_of,
    write_temp,
)
from ._file_threads import THREADS, Session, Threads
from ._record_json import RecordDecodeError, dumps_record
from ._records import RunRecord, RunStatus, load_run_record
from ._url import path_url, refuse_url

__all__ = ("FileBase",)

T = TypeVar("T")

_LOCKS = 64


class FileBase:
    """A FileStore's state and the reads and writes its concerns share (see the module doc)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        refuse_url("FileStore", directory)
        if not isinstance(directory, str | os.PathLike) or not os.fspath(directory):
            raise UsageError(f"FileStore takes a directory path, not {directory!r}")
        self.directory = Path(directory).absolute()
        self._root = self.directory
        self._open = False
        # Appends to one run are serialized in this process (other processes
        # are kept apart by os.link); a fixed set of locks, picked by run id.
        # Taken in worker threads only, never in the event loop's: a thread
        # abandoned in a hung write may hold one for good.
        self._run_locks = tuple(threading.Lock() for _ in range(_LOCKS))
        self._threads = Threads()
        # The caches of appends, until close() (open() makes a new session).
        self._session = Session(limiter=trio.CapacityLimiter(THREADS), closing=True)

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"

    @property
    def url(self) -> str:
        """The store's URL, ``file:DIR`` (absolute): :func:`tether.stores.from_url` of it
        is a store of this directory."""
        return path_url("file", str(self.directory))

    def _run_lock(self, run_id: str) -> threading.Lock:
        return self._run_locks[hash(run_id) % _LOCKS]

    def _here(self) -> Session:
        """The session whose caches this thread reads and fills: its call's, in a
        worker thread (a thread that ends after close() fills a dead session's
        caches, never a later open()'s); the store's, elsewhere."""
        return self._threads.current() or self._session

    def _run_dir(self, run_id: str) -> Path | None:
        """The run's folder, or ``None`` if nothing by that name exists."""
        path = self._root / run_folder(run_id)
        if not os.path.lexists(path):
            return None
        check_folder(run_id, path)
        if path.resolve().parent != self._root:  # defence in depth: never leave the root
            raise corrupt(run_id, path, "resolves outside the store's directory")
        return path

    def _read_file(self, run_id: str, path: Path) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        except FileNotFoundError:
            raise corrupt(run_id, path, "missing") from None
        except OSError as exc:  # ELOOP: a symbolic link; EACCES; ...
            raise corrupt(run_id, path, f"cannot be read: {exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise corrupt(run_id, path, "is not a regular file")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise corrupt(run_id, path, f"cannot be read: {exc}") from None
        finally:
            os.close(fd)

    def _read_run(self, run_id: str, folder: Path, *, lease: bool = True) -> RunRecord:
        """The run's record; with *lease*, its lease expiry filled while live."""
        path = folder / RUN_FILE
        try:
            record = load_run_record(self._read_file(run_id, path), run_id)
        except RecordDecodeError as exc:
            raise corrupt(run_id, path, str(exc)) from None
        if lease and record.owner is not None:
            expires = self._owner_expiry(record.owner)
            if expires is not None and expires > time.time():
                record = attrs.evolve(record, lease_expires_at=time_of(expires))
        return record

    def _owner_expiry(self, owner: str) -> float | None:
        """When *owner*'s leases expire (Unix time), or ``None`` if it has no lease file."""
        path = self._root / OWNERS / f"{owner}.json"
        try:
            data = json.loads(self._read_file(owner, path))
            expires = data["expires"]
            if data["owner"] != owner or not isinstance(expires, float | int):
                raise ValueError(f"not the lease of {owner}")
        except CheckpointCorruptError as exc:
            if not path.exists():
                return None
            raise CheckpointCorruptError(f"lease of owner {owner}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorruptError(f"lease file {path} cannot be read: {exc}") from None
        return float(expires)

    def _replace_run(self, folder: Path, record: RunRecord) -> None:
        """Write *record* as the run's ``run.json`` (under the run's lock)."""
        if record.status is not RunStatus.RUNNING:
            # A run that is not executing takes no more entries now: drop what
            # was cached for its appends (read back from disk if needed).
            with self._run_lock(record.run_id):
                session = self._here()
                session.ids.pop(record.run_id, None)
                session.next.pop(record.run_id, None)
        temp = write_temp(folder, dumps_record(record.to_json()).encode("utf-8"))
        try:
            os.replace(temp, folder / RUN_FILE)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        fsync_dir(folder)

    def _unless_deleted(self, run_id: str, read: Callable[[], T], gone: T) -> T:
        """*read()*; *gone* if the run was deleted while it read.

        A delete renames the run's folder away whole, so a read that raced it
        finds a file or folder missing: that is an unknown run, not a corrupt
        one. Read again while the run's folder is there (a new run may have
        taken the id); what stays unreadable is corrupt.
        """
        for attempt in range(3):
            try:
                return read()
            except CheckpointCorruptError:
                if not os.path.lexists(self._root / run_folder(run_id)):
                    return gone
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
