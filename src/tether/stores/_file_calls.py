"""A FileStore's lifetime and its one way into a worker thread: ``open``, ``close``, ``_call``.

Layer: stores (``tether.stores``).

:meth:`FileCalls._call` is where every call of :class:`~._file.FileStore`
sends its file work to a worker thread of the session (abandoned when the
caller is cancelled, see :mod:`._file_threads`), so cancellation and errors
are handled alike everywhere. :meth:`~FileCalls.open` begins a session (new
caches, a new thread limiter) and is the one call that is never abandoned;
:meth:`~FileCalls.close` ends it and waits for the threads still working.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import trio

from .._errors import StoreError, TetherError, UsageError
from ._file_runs import FileRuns
from ._file_threads import THREADS, Session

__all__ = ("FileCalls",)

T = TypeVar("T")


class FileCalls(FileRuns):
    """The store's lifetime, and its calls into worker threads (see the module doc)."""

    async def open(self) -> None:
        """Create the directory if needed, and begin a session (empty caches). A checkpoint.

        Not abandoned on cancellation, unlike every other call: cancelled, it
        waits for its thread (a ``mkdir`` and a ``resolve``), so the store is
        either open or not, never half, and no thread is left behind by an
        ``open()`` that no ``close()`` follows. A file system that hangs
        holds it.

        Raises:
            StoreError: the directory cannot be created or is not a folder.
        """
        if not self._open:
            self._session = Session(limiter=trio.CapacityLimiter(THREADS))
        self._root = await self._call("opening the store", self._open_sync, abandon=False)
        self._open = True

    async def close(self) -> None:
        """End the session: refuse new calls, forget cached state, wait for the threads.

        Threads still waiting for a run's lock stop at once, with nothing
        written; :meth:`close` waits for the others, the abandoned writes of
        cancelled calls included, for at most 10 real seconds. A checkpoint;
        cancellation does not cut that bounded wait short. Once it returns, no
        thread of the store runs.

        Raises:
            StoreError: a file system call still ran after 10 s (the file
                system hangs); it is named, left to end (it writes whole or not
                at all), and waited for again by the next :meth:`close`. The
                store is closed all the same.
        """
        self._open = False
        await self._threads.drain(self._session, repr(self))

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, abandon: bool = True) -> T:
        """``fn(*args)`` in a worker thread of the session, abandoned on cancel (see
        :mod:`._file_threads`); an ``OSError`` becomes :class:`~tether.StoreError`."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._open and fn != self._open_sync:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self!r} is not open")
        try:
            return await self._threads.run(self._session, what, fn, *args, abandon=abandon)
        except TetherError:
            raise
        except OSError as exc:
            raise StoreError(f"{what} in {self!r} failed: {exc}") from exc
