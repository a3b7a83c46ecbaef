"""A PostgreSQL store's connections: the pool, calls in threads, cutting, retries.

Layer: stores (``tether.stores``).

Everything here is about reaching the database and surviving it, and
nothing about tether's tables: psycopg imported on first use, the pool and
its checks, one Trio worker thread per call, a call whose caller left cut by
shutting its connection's socket down (:class:`Call`), transient failures
told from permanent ones and retried with backoff, and error messages and
log lines with the password scrubbed out. It is separate so that the store
(:mod:`._postgres`) and its group-committing writer (:mod:`._postgres_writer`)
read as what they do with a connection, not how they get one. Whole because
the pool, the threads that take its connections, the cutting of their
sockets and the waits they log share one lock and one registry of calls:
split, each part would reach into the other's state.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import select
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
#: The longest wait before retrying a call whose connection died under it: the
#: next attempt takes a fresh one, and waits in the pool while none can be made.
_BACKOFF_LOST: Final = 0.4
#: How long a connection may sit in the pool before it is checked on checkout.
_CHECK_AFTER: Final = 2.0
#: How often a thread waiting for a pool connection looks whether its caller left.
_GETCONN_SLICE: Final = 0.25
#: How long the pool tries again to replace a connection that failed to connect
#: before it gives the attempt up (a caller waiting then starts another at once).
_RECONNECT_TIMEOUT: Final = 0.5
#: A call that waited this long for a connection is logged (once per episode).
WAIT_WARNING: Final = 3.0
# Messages of connection failures (no SQLSTATE) that a retry cannot cure.
_PERMANENT: Final = re.compile(
    r"password authentication failed|authentication failed|does not exist|"
    r"no pg_hba\.conf entry|permission denied|not permitted to log in|"
    r"invalid (?:port|integer|value|sslmode|connection)|SSL (?:is not enabled|required)|"
    r"unsupported frontend protocol|server does not support SSL",
    re.IGNORECASE,
)
# A failure to connect, as psycopg words it (3.2 and later, and before).
_CONNECTING: Final = re.compile(r"connection (?:failed|to server)")
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
        self.late = 0  # calls waiting WAIT_WARNING s or more for a connection; guarded by lock

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
            name=self.pool_name,
            timeout=self.connect_timeout + 5,
            reconnect_timeout=_RECONNECT_TIMEOUT,
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
        for up to ``retry_timeout`` seconds in all; after a failure that
        says the attempt's connection died, the wait is at most
        ``_BACKOFF_LOST`` (a backend killed every moment must not hold a
        call back for seconds once connections live again). Cancellable
        throughout.
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
                pause = min(delay, _BACKOFF_LOST) if _lost(exc) else delay
                if not _transient(exc) or now + pause > give_up:
                    raise self.error(what, exc) from None
                log.warning("%s: %s; retrying in %.2fs", what, self.redact(_message(exc)), pause)
            await _sleep(pause)
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
        """A live pooled connection for *call*, its socket registered so it can be cut.

        Waits for the pool in slices, so that a thread whose caller left
        stops waiting soon. A connection found dead (:meth:`alive`) is closed
        and handed back at once, and the wait goes on: the pool replaces it,
        and this caller is in the pool's queue when the replacement comes.
        (The pool's own check slept a growing backoff after a dead one, out
        of its queue, while the replacements died idle in the pool: under
        repeated kills of the backends no call got a connection for
        seconds.) A wait of :data:`WAIT_WARNING` seconds or more is logged,
        once per episode of the store (:meth:`overdue`).

        Raises:
            Abandoned: the caller left.
            psycopg_pool.PoolTimeout: no connection within
                ``connect_timeout + 5`` seconds (a transient error).
        """
        _, psycopg_pool = psycopg_module()
        pool = self.pool
        if pool is None:
            raise Abandoned
        start = time.monotonic()
        deadline = start + self.connect_timeout + 5
        late = False
        try:
            while True:
                if call.abandoned:
                    raise Abandoned
                try:
                    conn = pool.getconn(timeout=_GETCONN_SLICE)
                except psycopg_pool.PoolTimeout:
                    conn = None
                if conn is not None:
                    if self.alive(conn):
                        break
                    conn.close()
                    pool.putconn(conn)  # closed: the pool replaces it
                now = time.monotonic()
                if not late and now - start >= WAIT_WARNING:
                    late = True
                    self.overdue(+1, now - start)
                if now >= deadline:
                    raise psycopg_pool.PoolTimeout(
                        f"no live connection in {now - start:.1f}s from pool {self.pool_name!r}"
                    )
        finally:
            if late:
                self.overdue(-1, time.monotonic() - start)
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

    def overdue(self, change: int, waited: float) -> None:
        """Count a call that began (+1) or ended (-1) a wait of WAIT_WARNING seconds or more.

        The first such call of an episode logs a WARNING; the last one to
        end it, an INFO: a log line says the store waits for connections,
        another that it has them again, however many calls wait.
        """
        with self.lock:
            self.late += change
            edge = self.late == (1 if change > 0 else 0)
        if not edge:
            pass
        elif change > 0:
            log.warning(
                "%s: waiting for a connection for %.1fs so far (the pool's %d are all in use, "
                "or new ones cannot be made)",
                self.label,
                waited,
                self.pool_size + 1,
            )
        else:
            log.info(
                "%s: connections again: no call waits for one any more (the last waited %.1fs)",
                self.label,
                waited,
            )

    def alive(self, conn: Any) -> bool:
        """Whether *conn*, idle from the pool, is usable.

        No round trip, unless its socket has something to read (an idle
        connection's server says something only when it ends it: a
        terminated backend's farewell, or the socket's end), or it sat in
        the pool over ``_CHECK_AFTER`` seconds (a server gone silently), or
        it is new to this store: then an empty statement decides.
        """
        psycopg, _ = psycopg_module()
        if conn.closed:
            return False
        try:
            poller = select.poll()
            poller.register(conn.pgconn.socket, select.POLLIN)
            pending = bool(poller.poll(0))
        except (psycopg.Error, OSError):  # no socket any more
            return False
        if pending or time.monotonic() - self.returned.get(conn, 0.0) > _CHECK_AFTER:
            try:
                conn.execute("")
            except psycopg.Error:
                return False
        return True

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


def _lost(exc: BaseException) -> bool:
    """Whether the psycopg error *exc* says a connection died under a statement.

    Not a failure to connect (the pool's or :meth:`Connections.direct`'s):
    those keep the whole backoff, as the server may be away.
    """
    psycopg, psycopg_pool = psycopg_module()
    if isinstance(exc, psycopg_pool.PoolTimeout) or _CONNECTING.match(str(exc)):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in ("57P01", "57P02")


def describe(params: Mapping[str, Any]) -> str:
    """``postgresql://user@host:port/dbname`` from parsed conninfo, never the password.

    What the conninfo leaves out comes from libpq's environment variables,
    as libpq takes it. Several hosts (a primary, its standbys) are written
    ``host1:port1,host2:port2``, and ``target_session_attrs`` is kept: the
    URL reaches the server the conninfo does.
    """

    def get(key: str, env: str) -> str:
        return str(params.get(key) or os.environ.get(env) or "")

    user = get("user", "PGUSER")
    hosts = (get("host", "PGHOST") or get("hostaddr", "PGHOSTADDR")).split(",")
    ports = get("port", "PGPORT").split(",")
    ports *= len(hosts) if len(ports) == 1 else 1  # libpq: one port for every host
    netloc = (f"{quote(user, safe='')}@" if user else "") + ",".join(
        (quote(host, safe="") if host.startswith("/") else f"[{host}]" if ":" in host else host)
        + (f":{port}" if port else "")
        for host, port in itertools.zip_longest(hosts, ports, fillvalue="")
    )
    dbname = get("dbname", "PGDATABASE")
    session = get("target_session_attrs", "PGTARGETSESSIONATTRS")
    query = f"?target_session_attrs={session}" if session not in ("", "any") else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"


async def _sleep(seconds: float) -> None:
    """Wait *seconds* of real time (a virtual Trio clock does not apply), cancellable."""
    done = threading.Event()
    try:
        await trio.to_thread.run_sync(done.wait, seconds, abandon_on_cancel=True)
    finally:
        done.set()  # the thread ends now, not when the wait would have
