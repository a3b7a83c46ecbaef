"""A FileStore's locks on a run and on a queue: the ``flock`` every process respects.

Layer: stores (``tether.stores``).

Every write about a run (an append, a record update, a claim, a cancel, a
message, a delete) holds an exclusive ``flock`` on the run's ``.lock`` file
while it reads the run's token and writes, so the fencing check and the
write are one atomic step for every process (a lock dies with its process).
A write waits for another process's lock by polling, for at most
``LOCK_TIMEOUT`` seconds, and stops waiting, with nothing written, as soon
as its caller gives up (the thread is abandoned) or the store is closing
(:meth:`~._file_threads.Threads.check_wanted`, at every poll).

A submit by the queues' rules holds its queue's ``flock`` too
(``.queues/<queue>``, taken by every process's such submits, never removed),
while it reads the queue's runs and writes the run it decides on; it takes a
run's lock inside that one, never the other way round, so the two never
deadlock.

A lock is taken in the worker thread that does the write and held until
that write is done. Taking it also checks that the folder is still the run's
(a delete renames the folder away under the same lock), and drops what this
process cached for appends to a run whose folder is not the one cached for
(the run was deleted and created again, by any process).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .._errors import RunNotFoundError, StoreError
from ._file_base import FileBase
from ._file_disk import (
    LOCK,
    LOCK_POLL,
    LOCK_TIMEOUT,
    O_CLOEXEC,
    O_NOFOLLOW,
    QUEUES,
    check_folder,
    run_folder,
)

__all__ = ("FileLocking",)


class FileLocking(FileBase):
    """The run's and the queue's ``flock`` (see the module doc), for the concerns that write."""

    @contextlib.contextmanager
    def _locked(self, run_id: str, doing: str = "cannot write") -> Iterator[Path]:
        """Hold the run's ``flock`` (every process respects it); yield its folder.

        Raises:
            RunNotFoundError: no such run (the message starts with *doing*).
            StoreError: another process held the lock for ``LOCK_TIMEOUT``, or
                the store is closing.
            trio.Cancelled: the caller gave up (the thread is abandoned).
        """
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            folder = self._run_dir(run_id)
            if folder is None:
                raise RunNotFoundError(f"{doing} run {run_id!r}: it is not stored in {self!r}")
            # None: deleted meanwhile (its folder renamed away): look again.
            fd = self._take_lock(f"run {run_id!r}", folder / LOCK, deadline)
            if fd is not None:
                break
        try:
            self._forget_if_new(run_id, fd)
            yield folder
        finally:
            os.close(fd)  # releases the lock

    @contextlib.contextmanager
    def _queue_locked(self, queue: str, run_id: str) -> Iterator[None]:
        """Hold *queue*'s ``flock`` (every process's submits by the queues' rules take
        it), for the submit of run *run_id*.

        Raises:
            CheckpointCorruptError: ``.queues`` is a link or not a folder.
            StoreError: another process held the lock for ``LOCK_TIMEOUT``, or
                the store is closing.
            trio.Cancelled: the caller gave up (the thread is abandoned).
        """
        deadline = time.monotonic() + LOCK_TIMEOUT
        folder = self._root / QUEUES
        while True:
            folder.mkdir(exist_ok=True)
            check_folder(run_id, folder)  # never lock through a link
            # None: removed by hand meanwhile (a submit never removes it): again.
            fd = self._take_lock(f"queue {queue!r}", folder / run_folder(queue), deadline)
            if fd is not None:
                break
        try:
            yield
        finally:
            os.close(fd)  # releases the lock

    def _take_lock(self, what: str, path: Path, deadline: float) -> int | None:
        """Open and ``flock`` the lock file *path* (of *what*, for messages): its
        descriptor, or ``None`` if it was removed, or replaced before it was locked.

        Raises:
            StoreError: another process held the lock until *deadline*, or the
                store is closing.
            trio.Cancelled: the caller gave up (the thread is abandoned).
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        except FileNotFoundError:
            return None
        if self._lock_file(what, path, fd, deadline):
            return fd
        os.close(fd)
        return None

    def _lock_file(self, what: str, path: Path, fd: int, deadline: float) -> bool:
        """``flock`` *fd*, the lock file *path*; ``False`` if, once locked, it is no
        longer at *path* (``delete_run`` renamed the run's folder away meanwhile).

        Raises:
            StoreError: another process held the lock until *deadline*, or the
                store is closing.
            trio.Cancelled: the caller gave up (the thread is abandoned).
        """
        try:
            while True:
                self._threads.check_wanted()  # withdrawn: nothing written yet
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise StoreError(
                            f"{what}: {path} was held by another process "
                            f"for {LOCK_TIMEOUT:.0f} s (is one stopped?)"
                        ) from None
                    time.sleep(LOCK_POLL)
            held = os.fstat(fd)
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                return False
            return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
        except BaseException:
            os.close(fd)
            raise

    def _forget_if_new(self, run_id: str, fd: int) -> None:
        """Drop what is cached for appends to *run_id* if its folder is not the one
        they were cached for: the run was deleted and created again (by any process).

        *fd* is the run's locked lock file: created in its folder by the first
        write and never replaced, so its identity (device, inode, change time)
        stands for that folder.
        """
        st = os.fstat(fd)
        mark = (st.st_dev, st.st_ino, st.st_ctime_ns)
        with self._run_lock(run_id):
            session = self._here()
            if session.marks.get(run_id) != mark:
                session.ids.pop(run_id, None)
                session.next.pop(run_id, None)
                session.marks[run_id] = mark

    @contextlib.contextmanager
    def _locked_or_none(self, run_id: str) -> Iterator[Path | None]:
        """:meth:`_locked`, yielding ``None`` for a run that is not stored (deleted)."""
        with contextlib.ExitStack() as stack:
            try:
                folder: Path | None = stack.enter_context(self._locked(run_id))
            except RunNotFoundError:
                folder = None
            yield folder
