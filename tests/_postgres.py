"""A throwaway PostgreSQL server for the test session, and stores on it.

:func:`session_server` starts one cluster per test session (``initdb`` and
``pg_ctl`` from the PostgreSQL server binaries, Debian's
``/usr/lib/postgresql/*/bin`` or ``$PATH``) in a temporary directory, on
127.0.0.1 at a free port, with the fast settings tests can afford
(``fsync=off``: a crash of the machine may lose the cluster, which is
thrown away anyway). PostgreSQL refuses to run as root: as root, every
server command runs as the ``postgres`` user, which owns the directory.

Two roles log in: :data:`USER` by ``trust``, the one stores use, and
:data:`SECRET_USER`, which needs :data:`SECRET_PASSWORD` (SCRAM), for the
tests that check that a password never leaks. Each store gets a fresh
PostgreSQL schema (:meth:`PostgresServer.new_schema`) in one database, so a
new store costs a few DDL statements, not a new database.

Where the server cannot start, :func:`session_server` skips the tests that
need it, printing why; under ``CI=true`` it fails them instead.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import pytest

import tether

#: The role stores log in as (``trust``), and the database they use.
USER: Final = "tether"
DATABASE: Final = "tether"
#: A role that logs in only with its password (SCRAM over TCP).
SECRET_USER: Final = "tether_secret"
SECRET_PASSWORD: Final = "Pw-9f4e2c-not-in-any-message"

#: How long the server may take to start, stop or restart.
_PG_CTL_WAIT: Final = 60
_schemas = itertools.count()


class PostgresUnavailable(Exception):
    """The test server cannot be started here (the message says why)."""


def find_bindir() -> Path | None:
    """The directory of ``pg_ctl`` and ``initdb``: Debian's newest, else ``$PATH``'s."""

    def version(pg_ctl: str) -> int:
        name = Path(pg_ctl).parent.parent.name
        return int(name) if name.isdigit() else 0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=version)
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl and shutil.which("initdb"):
        return Path(pg_ctl).resolve().parent
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (another process may take it before a server does)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """One running cluster: its address, and the means to restart or stop it."""

    def __init__(self, bindir: Path, directory: Path, port: int, as_postgres: bool) -> None:
        self.bindir = bindir
        self.directory = directory
        self.data = directory / "data"
        self.log = directory / "server.log"
        self.port = port
        self.host = "127.0.0.1"
        self._as_postgres = as_postgres
        self.running = False

    # -- commands ------------------------------------------------------------------------

    def _run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bindir / cmd[0]), *cmd[1:]]
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        # Debian's wrappers read these; the cluster is ours alone.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=_PG_CTL_WAIT + 30, check=False
        )

    def checked(self, *cmd: str) -> None:
        """Run a server command (``pg_ctl``, ``pg_basebackup``...) from :attr:`bindir`, as the
        server's user; raises :class:`PostgresUnavailable` with its output if it fails."""
        done = self._run(*cmd)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise PostgresUnavailable(
                f"{' '.join(cmd[:2])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
                f"\n{log}"
            )

    def initdb(self) -> None:
        self.checked(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.directory}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "300",
            "password_encryption": "'scram-sha-256'",
            "log_min_messages": "warning",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# tether tests\n")
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "local replication all trust\n"  # pg_basebackup, standbys
            "host replication all 127.0.0.1/32 trust\n"
            f"host all {SECRET_USER} 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 trust\n",
            encoding="utf-8",
        )

    def _pg_ctl(self, *args: str) -> None:
        wait = ("-w", "-t", str(_PG_CTL_WAIT))
        self.checked("pg_ctl", "-D", str(self.data), "-l", str(self.log), *wait, *args)

    def start(self) -> None:
        self._pg_ctl("start")
        self.running = True

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is dropped; back when it returns."""
        self._pg_ctl("-m", "fast", "restart")

    def stop(self) -> None:
        """Stop the server (immediate: nothing of it is kept) and remove its directory."""
        if self.running:
            self.cont()  # a stopped postmaster cannot shut down
            self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
            self.running = False
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- processes ------------------------------------------------------------------------

    def pid(self) -> int:
        """The postmaster's process id."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def pids(self) -> list[int]:
        """The postmaster and every process it started (backends, background workers)."""
        postmaster = self.pid()
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[1]) == postmaster:
                children.append(int(entry))
        return [postmaster, *children]

    def stop_processes(self) -> list[int]:
        """SIGSTOP the postmaster and its children; returns them (for :meth:`cont`)."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def cont(self, pids: Sequence[int] | None = None) -> None:
        """SIGCONT the server's processes (all of them by default)."""
        try:
            pids = self.pids() if pids is None else pids
        except (OSError, ValueError):
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    # -- addresses and stores -----------------------------------------------------------------

    def conninfo(
        self, *, user: str = USER, password: str | None = None, dbname: str = DATABASE
    ) -> str:
        """A ``postgresql://`` URL for *user* on the test database."""
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@{self.host}:{self.port}/{dbname}"

    def new_schema(self) -> str:
        """A schema name no store of this session used yet."""
        return f"t{os.getpid()}_{next(_schemas)}"

    def store(self, **options: Any) -> tether.PostgresStore:
        """A fresh, unopened store in a new schema of the test database."""
        options.setdefault("pool_size", 4)
        return tether.PostgresStore(self.conninfo(), schema=self.new_schema(), **options)

    def reopen(self, store: tether.PostgresStore) -> tether.PostgresStore:
        """A new store object on *store*'s schema."""
        return tether.PostgresStore(self.conninfo(), schema=store.schema, pool_size=4)

    def sql(self, query: str, *params: Any, dbname: str = DATABASE) -> list[tuple[Any, ...]]:
        """Run one statement as :data:`USER` (autocommit) and return its rows."""
        import psycopg

        with psycopg.connect(self.conninfo(dbname=dbname), autocommit=True) as conn:
            cur = conn.execute(query.encode(), params or None)
            return cur.fetchall() if cur.description else []


def new_server(bindir: Path) -> PostgresServer:
    """A server on a new temporary directory (its user's) and a free port; no cluster yet."""
    as_postgres = os.geteuid() == 0
    directory = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    if as_postgres:
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(directory, ignore_errors=True)
            raise PostgresUnavailable(
                "running as root, and there is no 'postgres' user to run the server as"
            ) from None
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    os.chmod(directory, 0o700)
    return PostgresServer(bindir, directory, free_port(), as_postgres)


def start_server(bindir: Path) -> PostgresServer:
    """A new cluster in a new temporary directory, started, with :data:`DATABASE` and the roles."""
    server = new_server(bindir)
    try:
        server.initdb()
        server.start()
        server.sql(f"CREATE DATABASE {DATABASE}", dbname="postgres")
        server.sql(
            f"CREATE ROLE {SECRET_USER} LOGIN PASSWORD '{SECRET_PASSWORD}'", dbname="postgres"
        )
        server.sql(f"GRANT CREATE ON DATABASE {DATABASE} TO {SECRET_USER}", dbname="postgres")
    except BaseException:
        server.stop()
        raise
    return server


_server: PostgresServer | None = None
_failure: str | None = None


def start_once() -> PostgresServer:
    """The session's server, started on the first call (and stopped at exit).

    Raises:
        PostgresUnavailable: no server binaries, no psycopg, or the server
            did not start (the same reason again on later calls).
    """
    global _server, _failure
    if _server is not None:
        return _server
    if _failure is not None:
        raise PostgresUnavailable(_failure)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _failure = "psycopg is not installed (pip install -e '.[dev]')"
        raise PostgresUnavailable(_failure) from None
    bindir = find_bindir()
    if bindir is None:
        _failure = (
            "no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin "
            "or on PATH; install the 'postgresql' package"
        )
        raise PostgresUnavailable(_failure)
    last: Exception | None = None
    for _ in range(3):  # another process may take the free port before the server does
        try:
            _server = start_server(bindir)
        except (PostgresUnavailable, OSError, subprocess.SubprocessError) as exc:
            last = exc
            continue
        atexit.register(stop)
        return _server
    _failure = f"the PostgreSQL test server did not start: {last}"
    raise PostgresUnavailable(_failure)


def stop() -> None:
    """Stop the session's server, if it runs."""
    global _server
    server, _server = _server, None
    if server is not None:
        server.stop()


def session_server() -> PostgresServer:
    """The session's server; skips the calling test without one (fails it under ``CI=true``)."""
    try:
        return start_once()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: the PostgreSQL tests must run, but {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL tests skipped: {exc}")


def as_schema_5(server: PostgresServer, schema: str) -> None:
    """Turn a store's tables of today (schema version 6) back into version 5's layout."""
    quoted = f'"{schema}"'
    server.sql(f"DROP INDEX {quoted}.runs_dedupe")
    server.sql(f"DROP INDEX {quoted}.runs_pending")
    for column in ("queue", "key", "dedupe"):
        server.sql(f"ALTER TABLE {quoted}.runs DROP COLUMN {column}")
    server.sql(f"UPDATE {quoted}.tether_schema SET version = 5")


def as_schema_4(server: PostgresServer, schema: str) -> None:
    """Turn a store's tables of today (schema version 6) back into version 4's layout."""
    as_schema_5(server, schema)
    quoted = f'"{schema}"'
    server.sql(f"ALTER TABLE {quoted}.runs DROP COLUMN claim")
    server.sql(f"DROP INDEX {quoted}.runs_queued")
    server.sql(f"DROP INDEX {quoted}.runs_running")
    server.sql(f"ALTER TABLE {quoted}.owners ADD COLUMN last_claim text")
    server.sql(
        f"CREATE INDEX runs_dispatchable ON {quoted}.runs (id) "
        "WHERE status IN ('queued', 'running')"
    )
    server.sql(f"UPDATE {quoted}.tether_schema SET version = 4")


@contextlib.contextmanager
def stopped(server: PostgresServer) -> Iterator[list[int]]:
    """The server's processes SIGSTOPped for the block; always SIGCONTed after."""
    pids = server.stop_processes()
    try:
        yield pids
    finally:
        server.cont(pids)
