"""A PostgreSQL store's connections: the pool, calls in threads, cutting, retries.

Layer: stores (``tether.stores``).

Everything here is about reaching the database and surviving it, and
nothing about tether's tables: psycopg imported on first use, the pool and
its checks, one Trio worker thread per call, a call whose caller left cut by
shutting its connection's socket down (:class:`Call`), transient failures
told from permanent ones and retried with backoff, and error messages and
log lines with the password scrubbed out. It is separate so that the store
(:mod:`._postgres`) and its group-committing writer (:mod:`._postgres_writer`)
read as what they do with a connection, not how they get one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, final
from urllib.parse import quote

import attrs
import trio

from .._errors import StoreError, UsageError

if TYPE_CHECKING:
    import psycopg_pool

__all__ = ("Connections", "Abandoned", "Call", "describe", "psycopg_module")

T = TypeVar("T")

log = logging.getLogger("tether.postgres")

#: Retries of transient errors: the first delay, the longest one.
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 2.0
#: How long a connection may sit in the pool before it is checked on checkout.
_CHECK_AFTER: Final = 2.0
#: How often a thread waiting for a pool connection looks whether its caller left.
_GETCONN_SLICE: Final = 0.25
# Messages of connection failures (no SQLSTATE) that a retry cannot cure.
_PERMANENT: Final = re.compile(
    r"password authentication failed|authentication failed|does not exist|"
    r"no pg_hba\.conf entry|permission denied|not permitted to log in|"
    r"invalid (?:port|integer|value|sslmode|connection)|SSL (?:is not enabled|required)|"
    r"unsupported frontend protocol|server does not support SSL",
    re.IGNORECASE,
)
# SQLSTATEs a retry can cure: connection exceptions (class 08), the server
# shutting down or starting up, serialization failures and deadlocks, too many
# connections.
_TRANSIENT_STATES: Final = frozenset({"57P01", "57P02", "57P03", "40001", "40P01", "53300"})


def psycopg_module() -> Any:
    """The psycopg and psycopg_pool modules, imported on first use.

    Raises:
        UsageError: they are not installed (the ``tether[postgres]`` extra).
    """
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise UsageError(
            "PostgresStore needs psycopg 3 and psycopg-pool, which are not installed "
            f"({exc.name} is missing): pip install -e '.[postgres]' in tether's clone"
        ) from None
    return psycopg, psycopg_pool


class Abandoned(Exception):
    """The caller of a thread's call is gone: nothing more is done for it."""


@attrs.define(eq=False)
class Call:
    """One thread's use of one connection, so that a caller who leaves can cut it.

    While the thread uses the connection, :attr:`sock` is a duplicate of its
    socket (a second descriptor of the same socket, so it stays valid even
    when libpq closes its own): shutting it down makes the thread's wait for
    the server end at once with a connection error, whatever the server is
    doing (waiting for a lock, SIGSTOPped). The server then rolls back the
    transaction, unless its ``COMMIT`` had arrived already: the write is
    idempotent or fenced either way (see :class:`~tether.PostgresStore`).
    """

    sock: socket.socket | None = None
    abandoned: bool = False


@final
class Connections:
    """One store's connections: its pool, the threads that use them, its retries.

    Args:
        conninfo: the store's connection string, as given.
        params: *conninfo* parsed by libpq (its password is kept only to be
            scrubbed from messages).
        label: how messages and log lines name the store (its ``repr``,
            which never shows the password).
        pool_name: the pool's name, in psycopg's log lines.
        pool_size: the most calls at once (the pool holds one more
            connection, for the writer).
        prepare, connect_timeout, retry_timeout: as
            :class:`~tether.PostgresStore` takes them.

    :attr:`lock` guards the registry of calls whose thread uses a connection
    (:attr:`calls`), the sockets of every :class:`Call`, and :attr:`is_open`
    turning false; the store's writer shares it.
    """

    def __init__(
        self,
        conninfo: str,
        params: Mapping[str, Any],
        *,
        label: str,
        pool_name: str,
        pool_size: int,
        prepare: bool,
        connect_timeout: float,
        retry_timeout: float,
    ) -> None:
        self.conninfo = conninfo
        self.label = label
        self.pool_name = pool_name
        self.pool_size = pool_size
        self.prepare = prepare
        self.connect_timeout = connect_timeout
        self.retry_timeout = retry_timeout
        self.secrets = tuple(
            s
            for s in {params.get("password") or "", quote(params.get("password") or "", safe="")}
            if s
        )
        defaults: dict[str, Any] = {
            "connect_timeout": max(2, round(self.connect_timeout)),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "tcp_user_timeout": 30_000,
            "application_name": "tether",
        }
        self.kwargs = {k: v for k, v in defaults.items() if k not in params}
        self.lock = threading.Lock()
        self.pool: psycopg_pool.ConnectionPool[Any] | None = None
        self.limiter: trio.CapacityLimiter | None = None
        self.is_open = False  # calls and appends are taken; turned false under lock
        self.calls: set[Call] = set()  # calls whose thread runs, guarded by lock
        self.idle = threading.Condition(self.lock)  # notified when calls empties
        self.returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    # -- the pool ----------------------------------------------------------------------------

    def open_pool(self) -> None:
        """Open the pool: its threads connect in the background, so this does not block."""
        _, psycopg_pool = psycopg_module()
        pool = psycopg_pool.ConnectionPool(
            self.conninfo,
            kwargs={
                **self.kwargs,
                "autocommit": True,
                "prepare_threshold": 5 if self.prepare else None,
            },
            min_size=1,
            max_size=self.pool_size + 1,
            open=False,
            check=self._check_connection,
            name=self.pool_name,
            timeout=self.connect_timeout + 5,
            reconnect_timeout=max(self.retry_timeout, 1.0),
            num_workers=2,
        )
        pool.open()  # starts the pool's threads; connects in them, so it does not block
        self.pool = pool

    def shut_down(
        self,
        pool: psycopg_pool.ConnectionPool[Any] | None,
        deadline: float,
        hurry: threading.Event,
    ) -> None:
        """Let the calls in flight finish until *deadline* (or *hurry*), cut the rest, close *pool*.

        Blocking: for a thread of the store's ``close``.
        """
        with self.lock:
            while self.calls and time.monotonic() < deadline and not hurry.is_set():
                self.idle.wait(0.05)
            for call in self.calls:
                call.abandoned = True
                self.cut_locked(call)
            while self.calls:
                self.idle.wait(0.05)
        if pool is not None:
            pool.close(timeout=self.connect_timeout + 1)

    # -- calls, retries and threads ------------------------------------------------------

    async def retrying(self, what: str, attempt: Callable[[bool], Awaitable[T]]) -> T:
        """``await attempt(retrying)``, retried on transient database failures.

        Backoff doubles from ``_BACKOFF_FIRST`` to ``_BACKOFF_MAX`` seconds,
        waited in real time (the database's time, whatever Trio's clock),
        for up to ``retry_timeout`` seconds in all. Cancellable throughout.
        Non-transient psycopg errors become :class:`~tether.StoreError`
        with a sanitized message; tether's own errors pass through.
        """
        psycopg, _ = psycopg_module()
        delay = _BACKOFF_FIRST
        give_up: float | None = None
        retrying = False
        while True:
            try:
                return await attempt(retrying)
            except psycopg.Error as exc:
                now = time.monotonic()
                if give_up is None:
                    give_up = now + self.retry_timeout
                if not _transient(exc) or now + delay > give_up:
                    raise self.error(what, exc) from None
                log.warning("%s: %s; retrying in %.2fs", what, self.redact(_message(exc)), delay)
            await _sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)
            retrying = True

    def in_thread(self, call: Call, fn: Callable[[Any, bool], T], retrying: bool) -> T:
        """``fn(conn, retrying)`` on a pooled connection, in the calling (worker) thread."""
        conn = self.checkout(call)
        try:
            return fn(conn, retrying)
        finally:
            self.checkin(call, conn)

    def checkout(self, call: Call) -> Any:
        """A pooled connection for *call*, its socket registered so it can be cut.

        Waits for the pool in slices, so that a thread whose caller left
        stops waiting soon.
        """
        _, psycopg_pool = psycopg_module()
        pool = self.pool
        if pool is None:
            raise Abandoned
        deadline = time.monotonic() + self.connect_timeout + 5
        while True:
            if call.abandoned:
                raise Abandoned
            try:
                conn = pool.getconn(timeout=_GETCONN_SLICE)
                break
            except psycopg_pool.PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
        try:
            sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        except OSError:
            sock = None  # the connection is broken: its first statement will say so
        with self.lock:
            if call.abandoned:
                pass
            else:
                call.sock = sock
                self.calls.add(call)
                return conn
        if sock is not None:
            sock.close()
        pool.putconn(conn)
        raise Abandoned

    def checkin(self, call: Call, conn: Any) -> None:
        with self.lock:
            sock, call.sock = call.sock, None
            self.calls.discard(call)
            if not self.calls:
                self.idle.notify_all()
        if sock is not None:
            sock.close()
        self.returned[conn] = time.monotonic()
        pool = self.pool
        try:
            if pool is not None:
                pool.putconn(conn)
            else:
                conn.close()
        except Exception:  # a closed pool that no longer knows it: just close it
            conn.close()

    def _check_connection(self, conn: Any) -> None:
        """The pool's check on checkout: a round trip, for connections idle a while."""
        if time.monotonic() - self.returned.get(conn, 0.0) > _CHECK_AFTER:
            conn.execute("")

    def cut(self, call: Call) -> None:
        with self.lock:
            call.abandoned = True
            self.cut_locked(call)

    @staticmethod
    def cut_locked(call: Call) -> None:
        if call.sock is not None:
            # OSError: not connected any more, so the thread's wait has ended already.
            with contextlib.suppress(OSError):
                call.sock.shutdown(socket.SHUT_RDWR)

    # -- connections of their own --------------------------------------------------------

    def direct(self, call: Call, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` on a new autocommit connection (not the pool's), closed after.

        Blocking, for a worker thread: the connection's socket is registered
        with *call* while *fn* runs, so that a caller who leaves can cut it.
        """
        psycopg, _ = psycopg_module()
        conn = psycopg.connect(self.conninfo, autocommit=True, **self.kwargs)
        try:
            with self.lock:
                if call.abandoned:
                    raise Abandoned
                call.sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
            return fn(conn)
        finally:
            with self.lock:
                sock, call.sock = call.sock, None
            if sock is not None:
                sock.close()
            conn.close()

    async def watch(self, channel: str, changed: Callable[[], None]) -> None:
        """Call *changed()* for each notification on *channel*; never returns.

        ``LISTEN`` in a thread, on a connection of its own (see
        :meth:`~tether.PostgresStore.watch`). Cancelled, the thread is
        stopped, its connection cut, and waited for (promptly).
        """
        token = trio.lowlevel.current_trio_token()
        stop = threading.Event()
        call = Call()

        async def stop_when_cancelled() -> None:
            try:
                await trio.sleep_forever()
            finally:
                stop.set()
                self.cut(call)

        # Not abandoned on cancel: the sibling's cancellation stops the thread
        # (stop, then cut its blocking call) and this waits until it has ended,
        # so no thread outlives the call. Cancelled before the thread started
        # (waiting for a thread slot), nothing is left to wait for.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_when_cancelled)
            try:
                await trio.to_thread.run_sync(self._listen, channel, changed, token, stop, call)
            finally:
                nursery.cancel_scope.cancel()

    def _listen(
        self,
        channel: str,
        changed: Callable[[], None],
        token: trio.lowlevel.TrioToken,
        stop: threading.Event,
        call: Call,
    ) -> None:
        """``LISTEN`` on *channel*, calling *changed()* in Trio for each notification.

        Blocking, for a worker thread, until *stop* is set (and *call* cut).
        Reconnects with backoff when the connection is lost; after each
        (re)connection *changed()* is called once, since anything may have
        changed while no one listened.
        """
        psycopg, _ = psycopg_module()
        from psycopg import sql

        listen = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
        delay = _BACKOFF_FIRST
        while not stop.is_set():
            try:
                conn = psycopg.connect(self.conninfo, autocommit=True, **self.kwargs)
            except psycopg.Error as exc:
                log.warning("%s: listening: %s", self.label, self.redact(_message(exc)))
                stop.wait(delay)
                delay = min(delay * 2, _BACKOFF_MAX)
                continue
            try:
                with self.lock:
                    if stop.is_set():
                        break
                    call.sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
                conn.execute(listen)
                delay = _BACKOFF_FIRST
                # Anything may have changed while no one listened.
                token.run_sync_soon(changed)
                while not stop.is_set():
                    for _ in conn.notifies(timeout=1.0):
                        if not stop.is_set():
                            token.run_sync_soon(changed)
            except trio.RunFinishedError:
                return  # nobody is left to tell
            except (psycopg.Error, OSError) as exc:
                if not stop.is_set():
                    log.warning("%s: listening: %s", self.label, self.redact(_message(exc)))
                    stop.wait(delay)
                    delay = min(delay * 2, _BACKOFF_MAX)
            finally:
                with self.lock:
                    sock, call.sock = call.sock, None
                if sock is not None:
                    sock.close()
                conn.close()

    # -- errors --------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """*text* without this store's password (or ``$PGPASSWORD``)."""
        env = os.environ.get("PGPASSWORD")
        for secret in (*self.secrets, *((env,) if env else ())):
            text = text.replace(secret, "***")
        return text

    def error(self, what: str, exc: BaseException) -> StoreError:
        """A :class:`~tether.StoreError` for a psycopg error, naming where, never the password.

        Not chained to *exc*: a traceback would print psycopg's message as it is.
        """
        state = getattr(exc, "sqlstate", None)
        code = f" [{state}]" if state else ""
        message = self.redact(_message(exc))
        return StoreError(f"{what} in {self.label}: {type(exc).__name__}{code}: {message}")


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _transient(exc: BaseException) -> bool:
    """Whether a retry (on a new connection) may cure the psycopg error *exc*."""
    _, psycopg_pool = psycopg_module()
    import psycopg

    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        return state.startswith("08") or state in _TRANSIENT_STATES
    if not isinstance(exc, psycopg.OperationalError):
        return False
    # A connection failure (no SQLSTATE): refused, timed out, dropped, or the
    # server said no. Only the last kind is there to stay.
    return _PERMANENT.search(str(exc)) is None


def describe(params: Mapping[str, Any]) -> str:
    """``postgresql://user@host:port/dbname`` from parsed conninfo, never the password.

    What the conninfo leaves out comes from libpq's environment variables,
    as libpq takes it.
    """

    def get(key: str, env: str) -> str:
        return str(params.get(key) or os.environ.get(env) or "")

    user = get("user", "PGUSER")
    host = get("host", "PGHOST") or get("hostaddr", "PGHOSTADDR")
    port = get("port", "PGPORT")
    dbname = get("dbname", "PGDATABASE")
    netloc = (f"{quote(user, safe='')}@" if user else "") + host + (f":{port}" if port else "")
    return f"postgresql://{netloc}/{quote(dbname, safe='')}"


async def _sleep(seconds: float) -> None:
    """Wait *seconds* of real time (a virtual Trio clock does not apply), cancellable."""
    done = threading.Event()
    try:
        await trio.to_thread.run_sync(done.wait, seconds, abandon_on_cancel=True)
    finally:
        done.set()  # the thread ends now, not when the wait would have
