"""Scenario 7, the queue: one drain of one system on the throwaway PostgreSQL, measured.

Run by ``run.py`` (``python _drain.py engines.queue_<name> CONFIG_JSON``, with
this repository's interpreter, which has tether's test helpers), never by the
peers' venv: the system's own processes (setup, producer, workers) run in
the peers' venv (``queue_<name>.py``, see ``engines/_queue_common.py``).
The server is started once per ``run.py`` by :func:`start_server` and named
to each call in ``$PEERS_PG`` (:func:`server_env`).

One call, on a fresh database of its own:

1. ``setup`` creates the system's tables; K worker processes start
   (``benchmarks/postgres.py``'s ``processes``) and, once each printed that
   it serves, are stopped (SIGSTOP);
2. the producer queues every job (``submit``, timed apart); after
   :data:`SETTLE` seconds (the server's backends flush their statistics
   when idle for a second) the counters are read;
3. the workers are continued (SIGCONT) and the clock starts; it stops when
   the system's own ``UNFINISHED_SQL`` counts 0, polled every
   :data:`POLL` s by a monitor session of its own role (so that
   ``pg_stat_statements`` leaves its statements out; its transactions,
   one per poll, are taken off the commits); the worker and server CPU
   (``/proc``, ``benchmarks/postgres.py``'s ``cpu_seconds``) are read there;
4. the workers get SIGTERM; once no session is left on the database, the
   counters are read again: ``xact_commit`` of ``pg_stat_database``, the
   transaction ids assigned (``pg_current_snapshot``'s xmax: transactions
   that wrote), and the calls of ``pg_stat_statements`` (top level, utility
   statements such as BEGIN, COMMIT, LISTEN and NOTIFY not tracked);
5. the workers' execution records are read: every step of every job must
   have run exactly once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(REPO)]

from _scenarios import QueueConfig, QueueResult  # noqa: E402
from _venv import venv_python  # noqa: E402
from engines._queue_common import READY, RECORD_ENV, Job, executions  # noqa: E402
from tests import _postgres as pg  # noqa: E402

import postgres as pgbench  # noqa: E402  benchmarks/postgres.py

SERVER_ENV = "PEERS_PG"  #: the server's whereabouts, as JSON (server_env)
MONITOR = "bench_monitor"  #: the role of the done-poll's session
POLL = 0.01  #: seconds between two polls of UNFINISHED_SQL
SETTLE = 1.2  #: seconds before reading the counters (idle backends flush their stats)
GONE = 30.0  #: seconds the workers' sessions may take to leave after SIGTERM


# -- the server -----------------------------------------------------------------------------


def start_server() -> tuple[dict[str, str], str]:
    """The test suite's throwaway cluster, durable, with ``pg_stat_statements`` loaded.

    Returns the environment naming it to :func:`main` and a description.
    Raises ``tests._postgres.PostgresUnavailable`` where it cannot start.
    """
    server = pg.start_once()
    described = pgbench.make_durable(server)
    server.sql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    server.restart()
    try:
        server.sql("ALTER SYSTEM SET pg_stat_statements.track_utility = off")
        server.sql("SELECT pg_reload_conf()")
        server.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", dbname="postgres")
    except Exception as exc:  # the figure says so: statements per job are then unknown
        described += f"; pg_stat_statements unavailable ({type(exc).__name__}: {exc})"
    server.sql(f"CREATE ROLE {MONITOR} LOGIN SUPERUSER", dbname="postgres")
    where = {
        "bindir": str(server.bindir),
        "directory": str(server.directory),
        "port": server.port,
        "as_postgres": os.geteuid() == 0,
    }
    return {SERVER_ENV: json.dumps(where)}, described


def server_from_env() -> pg.PostgresServer:
    where = json.loads(os.environ[SERVER_ENV])
    return pg.PostgresServer(
        Path(where["bindir"]), Path(where["directory"]), where["port"], where["as_postgres"]
    )


# -- the counters ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Counters:
    commits: int
    xid: int
    statements: int | None


def counters(server: pg.PostgresServer, db: str) -> Counters:
    """The database's counters now (read from the ``postgres`` database, so not counted)."""
    (commits,) = server.sql(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", db, dbname="postgres"
    )[0]
    (xid,) = server.sql(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint", dbname="postgres"
    )[0]
    try:
        rows = server.sql(
            "SELECT coalesce(sum(s.calls), 0)::bigint FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid "
            f"WHERE d.datname = %s AND s.userid <> '{MONITOR}'::regrole",
            db,
            dbname="postgres",
        )
        statements: int | None = int(rows[0][0])
    except Exception:
        statements = None
    return Counters(int(commits), int(xid), statements)


def sessions(server: pg.PostgresServer, db: str) -> int:
    rows = server.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", db, dbname="postgres"
    )
    return int(rows[0][0])


# -- the drain ------------------------------------------------------------------------------


def driver(module: str, command: str, job: Job, timeout: float) -> str:
    """Run ``python -m <module> <command> JOB_JSON`` in the peers' venv; its stdout."""
    proc = subprocess.run(
        [str(venv_python()), "-m", module, command, job.to_json()],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-12:]
        raise RuntimeError(f"{module} {command} failed ({proc.returncode}):\n" + "\n".join(tail))
    return proc.stdout


async def drain(module: str, cfg: QueueConfig, server: pg.PostgresServer) -> dict[str, Any]:
    db = f"q_{module.rsplit('.', 1)[-1]}_{os.getpid()}"
    server.sql(f"CREATE DATABASE {db}", dbname="postgres")
    job = Job(server.conninfo(dbname=db), cfg.steps, cfg.jobs, cfg.concurrency)
    try:
        with tempfile.TemporaryDirectory(prefix="peers-queue-") as name:
            tmp = Path(name)
            (tmp / "records").mkdir()
            os.environ[RECORD_ENV] = str(tmp / "records")
            setup = json.loads(driver(module, "setup", job, 120).strip().splitlines()[-1])
            result = await measure(module, cfg, server, db, job, setup, tmp)
            runs = executions(tmp / "records", cfg.jobs, cfg.steps)
            result.executions, result.duplicates, result.lost = runs
            return {"version": setup["version"], "result": dataclasses.asdict(result)}
    finally:
        server.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", dbname="postgres")


async def measure(
    module: str,
    cfg: QueueConfig,
    server: pg.PostgresServer,
    db: str,
    job: Job,
    setup: dict[str, Any],
    tmp: Path,
) -> QueueResult:
    import psycopg

    argvs = [setup["worker"]] * cfg.workers
    async with pgbench.processes(argvs, ready=READY.encode(), logdir=tmp, cwd=HERE) as children:
        worker_pids = [child.proc.pid for child in children]
        for child in children:
            child.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.perf_counter()
            await trio.to_thread.run_sync(driver, module, "submit", job, cfg.timeout)
            submit_seconds = time.perf_counter() - t0
            await trio.sleep(SETTLE)
            monitor = psycopg.connect(server.conninfo(user=MONITOR, dbname=db), autocommit=True)
            before = counters(server, db)
            server_pids = server.pids()
            cpu0 = (pgbench.cpu_seconds(worker_pids), pgbench.cpu_seconds(server_pids))
            t0 = time.perf_counter()
        finally:
            for child in children:
                child.proc.send_signal(signal.SIGCONT)
        polls, left = 0, -1
        with monitor, trio.move_on_after(cfg.timeout) as waited:
            while True:
                polls += 1
                (left,) = monitor.execute(setup["unfinished"].encode()).fetchone() or (1,)
                if not left:
                    break
                await trio.sleep(POLL)
        if waited.cancelled_caught:
            raise RuntimeError(
                f"not drained within the {cfg.timeout:g} s timeout: {left} of {cfg.jobs} jobs "
                "still queued or running"
            )
        seconds = time.perf_counter() - t0
        server_pids = sorted(set(server_pids) | set(server.pids()))
        cpu1 = (pgbench.cpu_seconds(worker_pids), pgbench.cpu_seconds(server_pids))
    with trio.fail_after(GONE):
        while sessions(server, db):  # noqa: ASYNC110  the server's, no event to wait on
            await trio.sleep(0.05)
    await trio.sleep(0.3)  # a session's statistics are flushed as it exits
    after = counters(server, db)
    notes = []
    if before.statements is None or after.statements is None:
        notes.append("pg_stat_statements unavailable: statements not counted")
    for child in children:
        if child.proc.returncode not in (0, -signal.SIGTERM):
            tail = child.log.read_text(errors="replace").strip().splitlines()[-3:]
            notes.append(f"a worker exited with {child.proc.returncode}: {' / '.join(tail)}")
    return QueueResult(
        seconds=seconds,
        submit_seconds=submit_seconds,
        worker_cpu=cpu1[0] - cpu0[0],
        server_cpu=cpu1[1] - cpu0[1],
        commits=after.commits - before.commits - polls,
        write_xacts=after.xid - before.xid,
        statements=(
            None
            if before.statements is None or after.statements is None
            else after.statements - before.statements
        ),
        executions=0,
        duplicates=0,
        lost=0,
        notes="; ".join(notes),
    )


def main() -> None:
    """``python _drain.py engines.queue_<name> CONFIG_JSON``: one JSON object, last line."""
    module, config = sys.argv[1], sys.argv[2]
    cfg = QueueConfig(**json.loads(config))
    out: dict[str, Any] = {"scenario": "queue", "config": dataclasses.asdict(cfg)}
    t0 = time.perf_counter()
    try:
        out.update(trio.run(drain, module, cfg, server_from_env()), status="ok")
    except BaseException as exc:
        out.update(
            status="error",
            reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
            traceback=traceback.format_exc()[-4000:],
        )
        print(out["traceback"], file=sys.stderr)
    out["wall_seconds"] = time.perf_counter() - t0
    print()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
