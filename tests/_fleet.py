"""Workflows for tests/test_fleet.py and tests/test_cli_worker.py, served by ``tether worker``.

Imported by the worker processes (``--import tests._fleet``) and by the
tests. Two environment variables, set by the test for its workers, tell the
steps where to look:

- ``TETHER_FLEET_STORE``: the store the workers serve, as a ``sqlite:PATH``
  spec or a ``postgresql://`` URL (its tables in the ``tether`` schema, as
  the command line opens them);
- ``TETHER_FLEET_LOG``: a directory for two append-only logs:
  ``executions.log`` gets ``RUN I PID`` each time a step body starts, and
  ``violations.log`` gets a line for each step that started although its
  record was already stored (the test expects none).

:func:`five` is the fleet's workflow: a step, a ``tether.parallel()`` block
of three steps, a step; each step's result ``"RUN:I"`` is unique in the
whole store, so a stored record of it can be looked up by value.
:func:`poison` SIGKILLs the process that executes it, a moment into its
step. :func:`gated` waits until a file exists (a run a worker holds as long
as the test wants).

For the tests, below the workflows: :class:`TetherProcess` (a ``python -m
tether`` process, its output in files), :class:`RawStore` (the store's tables
read by SQL, no tether code involved) and a fresh PostgreSQL database per
fleet (the command line always uses the schema ``tether``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

import tether

from ._poll import PATIENCE

if TYPE_CHECKING:
    from ._postgres import PostgresServer

STORE_ENV: Final = "TETHER_FLEET_STORE"
LOG_ENV: Final = "TETHER_FLEET_LOG"
#: The schema the command line opens a PostgreSQL store in.
PG_SCHEMA: Final = "tether"

_pg_lock = threading.Lock()
_pg_conns: dict[str, Any] = {}  # this process's psycopg connection to each store, once made


def _append(name: str, line: str) -> None:
    """Append *line* to the log *name* in ``$TETHER_FLEET_LOG`` (one write: atomic)."""
    path = os.path.join(os.environ[LOG_ENV], name)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def stored_value_count(spec: str, run_id: str, value: str) -> int:
    """How many journal entries of *run_id* hold the result *value*, read straight from the
    store's tables (no tether code involved), for SQLite and PostgreSQL."""
    text = json.dumps(value)  # a result is stored as its JSON text
    if spec.startswith("sqlite:"):
        conn = sqlite3.connect(spec.removeprefix("sqlite:"), timeout=30)
        try:
            query = (
                "SELECT count(*) FROM entries "
                "WHERE run_id = ? AND json_extract(data, '$.value') = ?"
            )
            (n,) = conn.execute(query, (run_id, text)).fetchone()
        finally:
            conn.close()
        return int(n)
    import psycopg

    query = (
        f"SELECT count(*) FROM {PG_SCHEMA}.entries "
        "WHERE run_id = %s AND (data::json ->> 'value') = %s"
    )
    deadline = time.monotonic() + PATIENCE  # a restarting server
    with _pg_lock:
        while True:
            try:
                if spec not in _pg_conns:
                    _pg_conns[spec] = psycopg.connect(spec, autocommit=True, connect_timeout=5)
                row = _pg_conns[spec].execute(query.encode(), (run_id, text)).fetchone()
                return int(row[0])
            except psycopg.OperationalError:
                # The server restarted (the restart test): reconnect and ask again.
                conn = _pg_conns.pop(spec, None)
                if conn is not None:
                    conn.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def close_connections() -> None:
    """Close the connections :func:`stored_value_count` keeps (for a test process)."""
    with _pg_lock:
        while _pg_conns:
            _pg_conns.popitem()[1].close()


def _check_not_stored(run_id: str, i: int, value: str) -> None:
    spec = os.environ[STORE_ENV]
    try:
        n = stored_value_count(spec, run_id, value)
    except Exception as exc:  # an unchecked step is a failure of the test, not a pass
        _append("violations.log", f"{run_id} {i} {os.getpid()} unchecked: {exc!r}")
        return
    if n:
        _append("violations.log", f"{run_id} {i} {os.getpid()} already stored {n} time(s)")


@tether.step
async def work(run_id: str, i: int, pause: float) -> str:
    """Step *i* of run *run_id*: checks it was not stored already, sleeps, returns ``RUN:I``."""
    value = f"{run_id}:{i}"
    _append("executions.log", f"{run_id} {i} {os.getpid()}")
    # Before doing its work, the step looks in the store for its own record.
    # Fencing makes this race-free: this execution began with a claim that
    # gave it a new token, then loaded the journal. A record stored before
    # that claim was in the journal loaded, so the engine replays it and
    # never calls this body; a write of an older owner that lands after the
    # claim is refused (its token is stale), and only this execution, which
    # runs each step once, writes with the new token. So whatever this read
    # finds was stored before the claim: a step executing again. The read is
    # a thread the step waits for without abandoning it (not cancellable):
    # once a body has started, its check completes and is logged.
    await trio.to_thread.run_sync(_check_not_stored, run_id, i, value)
    await trio.sleep(pause)
    return value


#: A bounded queue, for ``tether submit --queue tests._fleet:letters``.
letters = tether.Queue("tests.letters", max_queued=2)


@tether.workflow(name="tests.fleet.five")
async def five(run_id: str, pause: float) -> list[str]:
    """Five steps: one, three in parallel, one; the list of their results."""
    first = await work(run_id, 0, pause)
    async with tether.parallel() as p:
        middle = [p.start_soon(work, run_id, i, pause) for i in (1, 2, 3)]
    last = await work(run_id, 4, pause)
    return [first, *(h.result for h in middle), last]


def expected(run_id: str) -> list[str]:
    """What :func:`five` returns for *run_id*."""
    return [f"{run_id}:{i}" for i in range(5)]


@tether.step
async def kill_myself(delay: float) -> None:
    _append("executions.log", f"poison 0 {os.getpid()}")
    await trio.sleep(delay)  # it works a while first, like a step that runs out of memory
    os.kill(os.getpid(), signal.SIGKILL)


@tether.workflow(name="tests.fleet.poison")
async def poison(delay: float) -> None:
    """A run that SIGKILLs every worker that executes it, *delay* seconds into its step."""
    await kill_myself(delay)


@tether.step
async def wait_for_file(path: str) -> str:
    # Another process makes the file: nothing here could set an event.
    while not await trio.Path(path).exists():  # noqa: ASYNC110
        await trio.sleep(0.05)
    return path


@tether.workflow(name="tests.fleet.gated")
async def gated(path: str) -> str:
    """A run that executes until the file *path* exists."""
    return await wait_for_file(path)


@tether.workflow(name="tests.fleet.nap")
async def nap(seconds: float) -> float:
    """Sleep *seconds* on a durable timer (a worker may park it), then return them."""
    await tether.sleep(seconds)
    return seconds


# -- for the tests: worker processes, and the store read from outside ------------------------

REPO: Final = Path(__file__).resolve().parent.parent
SRC: Final = REPO / "src"
_STARTED: Final = re.compile(r"^tether worker (\S+) serving ", re.MULTILINE)


def process_env(spec: str, logs: Path) -> dict[str, str]:
    """The environment of a ``tether`` process: ``src`` and the repo root importable,
    the fleet's variables set, no ``$TETHER_STORE`` of the caller's."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SRC), str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    env[STORE_ENV] = spec
    env[LOG_ENV] = str(logs)
    return env


class TetherProcess:
    """One ``python -m tether ARGS`` process; its stdout and stderr go to files in *folder*."""

    def __init__(self, name: str, folder: Path, args: Sequence[str], env: dict[str, str]) -> None:
        self.name = name
        self._out_path = folder / f"{name}.stdout"
        self._err_path = folder / f"{name}.stderr"
        with self._out_path.open("wb") as out, self._err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether", *args],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )

    def __repr__(self) -> str:
        return f"<{self.name} pid {self.pid}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self._out_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self._err_path.read_text(encoding="utf-8", errors="replace")

    def tail(self, chars: int = 2500) -> str:
        """What a failed assertion shows of this process."""
        rc = self.proc.poll()
        state = "running" if rc is None else f"exited {rc}"
        return (
            f"--- {self.name} (pid {self.pid}, {state}) stdout:\n{self.stdout()[-chars:]}"
            f"\n--- {self.name} stderr:\n{self.stderr()[-chars:]}"
        )

    def started(self, timeout: float) -> bool:
        """Wait until the worker printed its start line (``True``) or exited (``False``)."""
        deadline = time.monotonic() + timeout
        while _STARTED.search(self.stdout()) is None:
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} printed no start line\n{self.tail()}")
            time.sleep(0.02)
        return True

    def owner(self, timeout: float) -> str:
        """The owner name from the worker's start line, once it printed it."""
        deadline = time.monotonic() + timeout
        while True:
            found = _STARTED.search(self.stdout())
            if found is not None:
                return found[1]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} printed no start line\n{self.tail()}")
            time.sleep(0.02)

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        """The exit status, within *timeout* seconds (else the test fails)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit in {timeout} s\n{self.tail()}"
            ) from None

    def stop(self) -> None:
        """Teardown: continue it if stopped, SIGKILL it if it still runs, reap it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=60)


def worker(name: str, folder: Path, spec: str, env: dict[str, str], *options: str) -> TetherProcess:
    """A ``tether worker`` serving this module's workflows from *spec*."""
    args = ["worker", "--store", spec, "--import", "tests._fleet", *options]
    return TetherProcess(name, folder, args, env)


class RawStore:
    """The store's tables, read by SQL from the test process (no tether code involved).

    *spec* is ``sqlite:PATH`` or a ``postgresql://`` URL (schema ``tether``).
    """

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.sqlite = spec.startswith("sqlite:")

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of *sql*, written with ``?`` placeholders and ``{s}`` for the schema."""
        if self.sqlite:
            conn = sqlite3.connect(self.spec.removeprefix("sqlite:"), timeout=30)
            try:
                return conn.execute(sql.format(s="main"), params).fetchall()
            finally:
                conn.close()
        import psycopg

        text = sql.format(s=PG_SCHEMA).replace("?", "%s")
        with psycopg.connect(self.spec, autocommit=True, connect_timeout=5) as pg:
            return pg.execute(text.encode(), params or None).fetchall()

    def statuses(self) -> Counter[str]:
        return Counter(
            {s: int(n) for s, n in self.query("SELECT status, count(*) FROM {s}.runs GROUP BY 1")}
        )

    def held_by(self, owner: str) -> list[str]:
        """The running runs whose lease holder is *owner* (live or not)."""
        rows = self.query(
            "SELECT run_id FROM {s}.runs WHERE status = 'running' AND owner = ?", owner
        )
        return [r for (r,) in rows]

    def entries(self) -> set[tuple[str, int, str, str]]:
        """Every journal entry: (run id, seq, key, value)."""
        rows = self.query("SELECT run_id, seq, data FROM {s}.entries")
        out = set()
        for run_id, seq, data in rows:
            entry = json.loads(data)
            out.add((run_id, int(seq), entry["key"], entry["value"]))
        return out


def read_log(folder: Path, name: str) -> list[list[str]]:
    """The lines of the log *name* in *folder*, split in words (none when it is missing)."""
    path = folder / name
    if not path.exists():
        return []
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def new_database(server: PostgresServer, *, owner: str | None = None) -> str:
    """A new, empty database on the test server (each fleet gets its own: the command
    line always uses the schema ``tether``); its name."""
    name = f"fleet_{os.getpid()}_{next(_databases)}"
    owned = "" if owner is None else f" OWNER {owner}"
    server.sql(f"CREATE DATABASE {name}{owned}", dbname="postgres")
    return name


def drop_database(server: PostgresServer, name: str) -> None:
    server.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", dbname="postgres")


_databases = itertools.count()
