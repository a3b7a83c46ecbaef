"""A FileStore's worker threads: abandoned by a cancelled caller, withdrawn while they
wait, counted until they end, and waited for by ``close()``.
Layer: stores (``tether.stores``).

Every call of :class:`~._file.FileStore` does its file work in a worker
thread (``trio.to_thread.run_sync``) with ``abandon_on_cancel=True``: a
cancelled caller gets control back at once, whatever the file system does (a
disk that hangs, another process holding the run's ``flock`` for up to
``LOCK_TIMEOUT``). The thread is left to finish, and what it does then is
safe:

- **Withdrawn while it waits.** A thread waiting for a run's lock looks at
  every poll whether its caller gave up (``trio.from_thread.check_cancelled``)
  or the store is closing (:meth:`Threads.check_wanted`), and stops with
  nothing written. So does a thread that had not started when its caller gave
  up. Only a thread abandoned once it holds the lock goes on, and writes late.
- **Whole or nothing, fenced, idempotent.** A late write is as atomic as any
  (one file or folder published by a rename or a link, :mod:`._file_disk`),
  its token check runs under the run's lock in the thread, so it is refused
  when the run was claimed since, and a late append is what the retry's
  idempotency key finds.
- **Caches of its own session.** The append caches live in the
  :class:`Session` of one ``open()`` to ``close()``; a thread records into the
  session of the call that started it, so one that ends after ``close()``
  fills caches that nobody reads, never those of a later ``open()`` (which
  reads the journal afresh).
- **Counted until it ends.** ``close()`` marks the session closing (a
  waiting thread withdraws at once) and waits, up to :data:`CLOSE_TIMEOUT`
  real seconds, for every thread still working, abandoned ones included
  (:meth:`Threads.drain`); one still working then (a hung file system) is
  named in a :class:`~tether.StoreError`, and waited for again by the next
  ``close()``.
- **Its own limiter.** A session's threads take the slots of its own
  ``trio.CapacityLimiter`` (:data:`THREADS`), not trio's default one, which
  other thread-backed stores and libraries share: an abandoned thread keeps
  its slot until it ends, so a hung file system can starve this store alone.
  Each ``open()`` makes a new one (a thread of an earlier session keeps a
  slot of that session's limiter, and a limiter of a trio run that has ended
  is never given its slots back).

``open()`` alone is not abandoned (see :meth:`~._file.FileStore.open`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, final

import attrs
import trio

from .._errors import StoreError
from ._records import Entry

__all__ = ("CLOSE_TIMEOUT", "THREADS", "Session", "Threads")

T = TypeVar("T")

#: How long ``close()`` waits for threads still working, in real seconds.
CLOSE_TIMEOUT: Final = 10.0
#: Worker threads one FileStore session runs at once (trio's default limiter has 40).
THREADS: Final = 40


@final
@attrs.define(eq=False)
class Session:
    """One ``open()`` to ``close()`` of a FileStore: its caches, its limiter, its end."""

    limiter: trio.CapacityLimiter
    #: run -> idempotency key -> the entry stored (read or written by this process)
    ids: dict[str, dict[str, Entry]] = attrs.field(factory=dict)
    next: dict[str, int] = attrs.field(factory=dict)  #: run -> the seq to try next
    #: run -> which folder of that id the two caches above are about (a deleted run's id
    #: may be created again, by any process)
    marks: dict[str, tuple[int, int, int]] = attrs.field(factory=dict)
    #: set once, by ``close()``, under the threads' condition; read without it (a bool)
    closing: bool = False


@attrs.define(eq=False)
class _Work:
    """One call's work in a thread: what it does (for messages), and its session."""

    what: str
    session: Session


@final
class Threads:
    """A store's worker threads, counted while they work (see the module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._working: dict[_Work, None] = {}  # guarded by _cond; in the order they began
        self._local = threading.local()

    def current(self) -> Session | None:
        """The session the calling worker thread works for (``None`` outside one)."""
        work: _Work | None = getattr(self._local, "work", None)
        return None if work is None else work.session

    async def run(
        self, session: Session, what: str, fn: Callable[..., T], *args: Any, abandon: bool
    ) -> T:
        """``fn(*args)`` in a worker thread of *session*, counted while it works.

        A checkpoint. With *abandon*, cancellation returns at once (the
        thread is left to finish or withdraw, see the module doc); without,
        it waits for the thread.

        Raises:
            StoreError: *session* is closing: nothing was done.
            Exception: what *fn* raises.
        """
        work = _Work(what, session)
        name = f"FileStore: {what} from {trio.lowlevel.current_task().name}"
        return await trio.to_thread.run_sync(
            self._work,
            work,
            fn,
            args,
            thread_name=name,
            abandon_on_cancel=abandon,
            limiter=session.limiter,
        )

    def _work(self, work: _Work, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._cond:
            if work.session.closing:
                raise StoreError(f"{work.what}: the store was closed; nothing was done")
            self._working[work] = None
        self._local.work = work
        try:
            trio.from_thread.check_cancelled()  # given up before it began: nothing done
            return fn(*args)
        finally:
            self._local.work = None  # trio reuses its threads
            with self._cond:
                del self._working[work]
                self._cond.notify_all()

    def check_wanted(self) -> None:
        """In a worker thread about to wait: stop if its caller gave up or the store closes.

        Raises:
            trio.Cancelled: the caller was cancelled (the thread is abandoned):
                nothing was written.
            StoreError: the store is closing: nothing was written.
        """
        work: _Work | None = getattr(self._local, "work", None)
        if work is None:
            return
        trio.from_thread.check_cancelled()
        if work.session.closing:
            raise StoreError(
                f"{work.what}: the store was closed while it waited for a lock; nothing was written"
            )

    async def drain(self, session: Session, store: str) -> None:
        """End *session*: new work is refused, waiting threads withdraw; wait for the rest.

        Waits for every thread still working, of any session, abandoned ones
        included, for at most :data:`CLOSE_TIMEOUT` real seconds, in a thread
        of its own limiter. A checkpoint; the wait is not cut short by
        cancellation (it is bounded, and no thread may outlive ``close()``).

        Raises:
            StoreError: threads were still working after :data:`CLOSE_TIMEOUT`,
                named with what they do (each writes whole or not at all, if it ends).
        """
        with self._cond:
            session.closing = True
            busy = bool(self._working)
        if not busy:
            await trio.lowlevel.checkpoint()
            return
        timeout = CLOSE_TIMEOUT
        left = await trio.to_thread.run_sync(
            self._wait,
            timeout,
            thread_name=f"FileStore: closing {store}",
            limiter=trio.CapacityLimiter(1),
        )
        if left:
            raise StoreError(
                f"closing {store}: {len(left)} file system call(s) still running after "
                f"{timeout:g} s ({'; '.join(left)}); is the file system hung? Each writes "
                "whole or not at all if it ends, and the next close() waits for it again"
            )

    def _wait(self, timeout: float) -> list[str]:
        """Wait until no thread works, for at most *timeout* s; what still works then."""
        with self._cond:
            self._cond.wait_for(lambda: not self._working, timeout)
            return [work.what for work in self._working]
