"""A PostgreSQL store's lifetime: opening it, and closing it in bounded time.

Layer: stores (``tether.stores``).

Opening runs the migration in a worker thread (retried while the server is
starting), then opens the pool and starts the group-committing writer.
Closing stops the writer and the pool from a thread of its own, lets the
calls in flight finish for a grace period, then cuts them; whoever takes
the shutdown (that thread, or the closing task when it was cancelled before
the thread ran) does it exactly once, and the closer always waits for it, so
no thread of the store outlives ``close``.

It is separate from the store because closing is a small hand-off between a
Trio task and a thread, with its own cancellation cases, that reads best
whole; the store keeps only the calls to it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Final

import trio

from ._postgres_conn import Call, Connections
from ._postgres_tables import Tables
from ._postgres_writer import Writer

if TYPE_CHECKING:
    import psycopg_pool

__all__ = ("CLOSE_GRACE", "close_store", "open_store")

#: How long :meth:`PostgresStore.close <tether.PostgresStore.close>` lets calls
#: in flight finish before it cuts their connections.
CLOSE_GRACE: Final = 5.0


async def open_store(conns: Connections, tables: Tables, writer: Writer) -> None:
    """Create or migrate the schema, then open the pool and start the writer thread.

    A checkpoint. The migration runs in a worker thread on a connection of
    its own, retried on transient failures for ``retry_timeout``; cancelled,
    it returns at once, cutting that connection (the server rolls the
    migration back whole).

    Raises:
        StoreError: the database cannot be reached or refuses the login, or
            the migration refuses the schema.
    """
    conns.limiter = trio.CapacityLimiter(conns.pool_size)

    async def migrate_in_thread(retrying: bool) -> None:
        call = Call()
        try:
            await trio.to_thread.run_sync(
                conns.direct, call, tables.migrate, abandon_on_cancel=True
            )
        except BaseException:
            conns.cut(call)
            raise

    await conns.retrying("opening the store", migrate_in_thread)
    conns.open_pool()
    conns.is_open = True
    writer.start()


async def close_store(conns: Connections, writer: Writer) -> None:
    """Finish or cut the calls in flight, stop the writer thread, close the pool.

    A checkpoint. Appends queued are committed first; calls still in flight
    get :data:`CLOSE_GRACE` seconds, then their connections are cut.
    Cancelled, it cuts everything at once, waits for the threads to notice,
    and re-raises. Safe to call when open failed or the store is closed.
    """
    with conns.lock:  # no append is queued after the writer's stop sign
        conns.is_open = False
    thread, writer.thread = writer.thread, None
    pool, conns.pool = conns.pool, None
    if thread is None and pool is None:
        await trio.lowlevel.checkpoint()
        return
    hurry = threading.Event()
    finished = threading.Event()
    # Whoever takes it shuts down: the thread, or this task when it was
    # cancelled before the thread ran (waiting for a thread slot, or
    # already cancelled on entry), so the shutdown happens exactly once
    # and is always waited for.
    claim = threading.Lock()

    def shut_down() -> None:
        if not claim.acquire(blocking=False):
            return  # the closer took over
        try:
            _shut_down(conns, writer, thread, pool, hurry)
        finally:
            finished.set()

    try:
        await trio.to_thread.run_sync(shut_down, abandon_on_cancel=True)
    except BaseException:
        hurry.set()
        with trio.CancelScope(shield=True):
            if claim.acquire(blocking=False):
                await trio.to_thread.run_sync(_shut_down, conns, writer, thread, pool, hurry)
            else:
                await trio.to_thread.run_sync(finished.wait)
        raise


def _shut_down(
    conns: Connections,
    writer: Writer,
    thread: threading.Thread | None,
    pool: psycopg_pool.ConnectionPool[Any] | None,
    hurry: threading.Event,
) -> None:
    """Stop the writer *thread*, then the calls and *pool* (blocking: for a thread)."""
    deadline = time.monotonic() + CLOSE_GRACE
    if thread is not None:
        writer.stop(thread, deadline, hurry)
    conns.shut_down(pool, deadline, hurry)
