"""What wakes waiters on runs: a generation count of changes, bumped as they are seen.

Layer: the kernel (``_core``).

``engine.wait`` and workers re-read the store when something may have
changed. They learn of changes from this engine's own writes (a submit, a
run a worker finished) and, where the store announces changes
(``Store.watch``: LISTEN/NOTIFY on PostgreSQL, in-process on MemoryStore),
from anyone's. A notification is only a hint to read again, so each waiter
also polls: a lost one costs latency, never correctness.

A waiter reads :attr:`Changes.generation` *before* it reads the store and
passes it to :meth:`Changes.wait`, so a change that lands between the read
and the wait is not missed.

A change may also be due later: a run submitted to start at a given time.
:meth:`Changes.due_at` hands that time to each waiter that keeps wake times
(:meth:`Changes.keeping_wakes`: workers), which wakes for it then, on the
engine's clock, not a poll later.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Final

import trio

__all__ = ("Changes", "MAX_WAKES", "push_wake")

#: The most wake times a heap keeps: beyond, the latest are dropped, and the
#: runs they were for are found by polling instead (a worker needs the
#: earliest ones; a producer may schedule a million runs).
MAX_WAKES: Final = 1024

log = logging.getLogger("tether")


def push_wake(wakes: list[datetime], at: datetime) -> None:
    """Push *at* on the heap *wakes*, keeping at most :data:`MAX_WAKES` (the earliest)."""
    heapq.heappush(wakes, at)
    if len(wakes) > 2 * MAX_WAKES:
        wakes[:] = heapq.nsmallest(MAX_WAKES, wakes)  # (sorted: still a heap)


class Changes:
    """A count of changes seen, and a way to wait for the next one."""

    def __init__(self) -> None:
        #: how many changes were seen; only grows
        self.generation = 0
        self._event = trio.Event()
        self._wakes: list[list[datetime]] = []  # the heaps of the waiters keeping wake times

    def notify(self) -> None:
        """Record a change and wake every waiter. Not a checkpoint; any thread of this run."""
        self.generation += 1
        self._event.set()
        self._event = trio.Event()

    def due_at(self, at: datetime) -> None:
        """Something becomes due at *at*: push it on every kept heap of wake times, and
        wake every waiter. Not a checkpoint."""
        for wakes in self._wakes:
            push_wake(wakes, at)
        self.notify()

    @contextmanager
    def keeping_wakes(self, wakes: list[datetime]) -> Iterator[None]:
        """Within the block, :meth:`due_at` pushes onto the heap *wakes*."""
        self._wakes.append(wakes)
        try:
            yield
        finally:
            self._wakes.remove(wakes)

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once a change after generation *seen* was noted, or after *timeout* seconds.

        A checkpoint. Cancellation propagates; nothing changes.
        """
        if self.generation != seen:
            await trio.lowlevel.checkpoint()
            return
        with trio.move_on_after(timeout):
            await self._event.wait()

    async def follow(self, watch: Callable[[Callable[[], None]], Awaitable[None]]) -> None:
        """Run a store's ``watch(self.notify)`` until cancelled (a task of ``open_engine``).

        A store whose ``watch`` fails is logged and left to polling; the
        engine goes on.
        """
        try:
            await watch(self.notify)
        except Exception as exc:
            log.warning(
                "tether: the store's change notifications stopped (%r); waiters poll it instead",
                exc,
            )
