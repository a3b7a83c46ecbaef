"""A throwaway primary with a synchronous streaming standby, for failover tests and benchmarks.

:func:`start_pair` starts two clusters of ``tests/_postgres.py`` on
127.0.0.1: a primary (a cluster of its own, never the session's: the
failover kills it) and a standby made from it by ``pg_basebackup``,
streaming from it as ``application_name`` :data:`STANDBY_NAME`. Then the
primary's ``synchronous_standby_names`` names the standby, with
``synchronous_commit = on``: a commit returns once the standby has its WAL
(and until then no other session sees it), so whatever any session saw
committed survives the primary's death. (Both run with ``fsync=off``, as
every test cluster: a process killed loses nothing of it, a machine that
crashes would.)

:meth:`Pair.url` is the multi-host URL clients use (``target_session_attrs
=read-write``: whichever of the two takes writes); :meth:`Pair.kill_primary`
SIGKILLs the primary's postmaster and every process of it, as a machine
that dies; :meth:`Pair.promote` is ``pg_ctl promote`` on the standby.
:func:`pair_or_skip` skips a test where this cannot run (no server binaries,
no ``pg_basebackup``), as the other PostgreSQL tests do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Final

import attrs
import pytest

from . import _postgres
from ._poll import poll
from ._postgres import DATABASE, USER, PostgresServer, PostgresUnavailable

#: The standby's ``application_name``, which the primary's ``synchronous_standby_names`` names.
STANDBY_NAME: Final = "standby"

#: How long replay must stay put, with nothing streaming in, to count as caught up.
SETTLED: Final = 1.0


@attrs.define(eq=False)
class Pair:
    """A primary and its synchronous standby."""

    primary: PostgresServer
    standby: PostgresServer
    #: The standby's replay position at the last :meth:`replayed`, and since when.
    _replay: tuple[str, float] | None = attrs.field(default=None, init=False)

    def url(self, dbname: str = DATABASE) -> str:
        """Both servers in one libpq URL: a client connects to whichever takes writes."""
        hosts = ",".join(f"{s.host}:{s.port}" for s in (self.primary, self.standby))
        return f"postgresql://{USER}@{hosts}/{dbname}?target_session_attrs=read-write"

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and all its processes at once (a dead machine)."""
        for pid in self.primary.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def replayed(self) -> bool:
        """Whether the standby has applied all the WAL records it received (its reads are up
        to date).

        Replay reaching the end of what was received says so at once. But a primary that
        dies may have streamed the first part of a record and never the rest (its WAL
        writer flushes whole pages, not whole records): replay then stops before the end of
        what was received, for good. So once no WAL is streaming in, replay that stays put
        for :data:`SETTLED` seconds of reads counts as caught up too.
        """
        caught_up, replay, streaming = self.standby.sql(
            "SELECT pg_last_wal_receive_lsn() IS NOT NULL "
            "AND pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), "
            "pg_last_wal_replay_lsn()::text, "
            "EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')"
        )[0]
        if caught_up:
            return True
        now = time.monotonic()
        if streaming or self._replay is None or self._replay[0] != replay:
            self._replay = (replay, now)
            return False
        return now - self._replay[1] >= SETTLED

    def promote(self) -> None:
        """``pg_ctl promote`` on the standby; returns once it takes writes."""
        data = str(self.standby.data)
        self.standby.checked("pg_ctl", "-D", data, "-w", "-t", "60", "promote")

    def stop(self) -> None:
        """Stop both servers and remove their directories."""
        try:
            self.standby.stop()
        finally:
            self.primary.stop()


def _make_standby(primary: PostgresServer) -> PostgresServer:
    """A standby of *primary*, from ``pg_basebackup``, started and streaming."""
    standby = _postgres.new_server(primary.bindir)
    try:
        standby.checked(
            "pg_basebackup",
            "-h", primary.host, "-p", str(primary.port), "-U", USER,
            "-D", str(standby.data), "-X", "stream", "--checkpoint=fast", "--no-sync",
        )  # fmt: skip
        primary_conninfo = (
            f"host={primary.host} port={primary.port} user={USER} application_name={STANDBY_NAME}"
        )
        settings = {
            "port": str(standby.port),
            "unix_socket_directories": f"'{standby.directory}'",
            "primary_conninfo": f"'{primary_conninfo}'",
            # Promoted, it has no standby of its own to wait for.
            "synchronous_standby_names": "''",
        }
        with (standby.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# the standby\n")
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        signal_file = standby.data / "standby.signal"
        signal_file.touch()
        owner = standby.data.stat()
        os.chown(signal_file, owner.st_uid, owner.st_gid)
        standby.start()
    except BaseException:
        standby.stop()
        raise
    return standby


def _synchronous(primary: PostgresServer) -> bool:
    rows = primary.sql(
        "SELECT current_setting('synchronous_commit'),"
        " current_setting('synchronous_standby_names'),"
        " (SELECT sync_state FROM pg_stat_replication WHERE application_name = %s)",
        STANDBY_NAME,
    )
    return rows[0] == ("on", STANDBY_NAME, "sync")


def start_pair() -> Pair:
    """A new primary and its synchronous standby, both running, the standby streaming.

    Raises:
        PostgresUnavailable: no server binaries or ``pg_basebackup``, or a
            server did not start (the message says why).
    """
    bindir = _postgres.find_bindir()
    if bindir is None:
        raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl)")
    if not (bindir / "pg_basebackup").exists():
        raise PostgresUnavailable(f"no pg_basebackup beside pg_ctl in {bindir}")
    try:
        primary = _postgres.start_server(bindir)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PostgresUnavailable(f"the primary did not start: {exc}") from None
    try:
        pair = Pair(primary, _make_standby(primary))
    except BaseException:
        primary.stop()
        raise
    try:
        # Only now: a commit before the standby streams would wait for it.
        primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        primary.sql("ALTER SYSTEM SET synchronous_commit = on")
        primary.sql("SELECT pg_reload_conf()")
        poll(lambda: _synchronous(primary), "the standby to replicate synchronously")
    except BaseException:
        pair.stop()
        raise
    return pair


@contextlib.contextmanager
def pair_or_skip() -> Iterator[Pair]:
    """:func:`start_pair` for a test, stopped after it; skips the test where it cannot
    run (fails it under ``CI=true``, as :func:`tests._postgres.session_server` does)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("failover tests skipped: psycopg is not installed")
    try:
        pair = start_pair()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: the failover tests must run, but {exc}", pytrace=False)
        pytest.skip(f"failover tests skipped: {exc}")
    try:
        yield pair
    finally:
        pair.stop()
