"""The chaos scorecard: tether's PostgreSQL workers under steady load, one fault at a time.

Run: ``python benchmarks/chaos.py [--quick] [--phases NAME,...] [--rate JOBS_PER_S]``

Setup. The test suite's throwaway cluster (``tests/_postgres.py``), made
durable (``make_durable`` of ``benchmarks/postgres.py``) with
``max_connections = 100``; a database of its own owned by a role that is not
a superuser (:data:`ROLE`), which every tether connection logs in as. Two
``tether worker`` processes (``--concurrency 16``, defaults otherwise), each
with ``application_name=chaos-worker-N`` on its connections. The job is
:func:`one`, a workflow of one step (``tests._fleet.work``): the step
appends ``RUN 0 PID`` to ``executions.log`` and, before it works, looks in
the store's tables whether its own record is stored already; if so it
appends a line to ``violations.log`` (a stored step executed again: fencing
makes that check race-free, see ``tests/_fleet.py``). A step that runs again
after an execution whose record was never stored (its worker died, or lost
its connection, mid-step) is tether's documented at-least-once and is
counted apart ("re-run in flight").

Load. First the clean rate: both workers stopped (SIGSTOP) while a batch is
queued, then continued, timed until the batch is completed. Then an
open-loop producer in this process (its own engine, ``chaos-producer``)
submits at 60% of that rate (or ``--rate``), whatever happens: a submit
that fails is tried again with the same run id (idempotent) while the
following ones go on. Completions are sampled every 0.1 s (a count of
completed runs, read by a superuser connection the faults leave alone).

Phases, one fault each, in this order (``--phases`` picks some):

- ``restart``: ``pg_ctl restart -m fast`` of the server;
- ``storm``: every 0.25 s, ``pg_terminate_backend`` of every connection of
  the workers (by their ``application_name``), for 30 s;
- ``exhaustion``: connections of the tether role opened until the server
  refuses more (``max_connections`` less its superuser slots) and held idle,
  for 30 s;
- ``kill``: SIGKILL of one worker, restarted 5 s later;
- ``kills``: SIGKILL of a worker (each in turn) every 5 s for 60 s, each
  restarted at once;
- ``idle``: tether's tables vacuumed, then a session idle in a transaction
  holding the xmin (``REPEATABLE READ`` with an xid) for 120 s: vacuum
  cannot remove what dies meanwhile.

Each phase: the backlog of the one before drained (at most what the load
keeps in flight), ``before`` seconds of steady load, the fault, ``after``
seconds.
Reported per phase: the completion rate in the ``before`` seconds before the
fault and in the ``after`` seconds after it, and their ratio (recovery:
above 1 when a backlog drains); the time from the fault's end until the
completions of the last second reach 95% of the before-rate; the longest
stretch without a completion from the fault's start to the window's end;
then, once every submitted run had the time to finish: runs lost (submitted
in the phase, never completed), stored steps executed again, steps re-run in
flight, and the dead tuples of tether's tables at the window's end
(``pg_stat_user_tables.n_dead_tup``) and their growth over the phase per job
completed in it. ``--quick`` shortens every phase. Without PostgreSQL
server binaries the benchmark prints so and exits 0.

Also the workflow module of its worker processes (``tether worker --import
benchmarks.chaos``, from the repository root) and the harness of
``tests/test_chaos.py`` (:func:`scorecard`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import logging
import math
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

import tether

HERE: Final = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))  # the repository root: tests/_fleet.py

from tests import _fleet  # noqa: E402
from tests import _postgres as pg  # noqa: E402
from tests._poll import PATIENCE  # noqa: E402

#: The role every tether connection logs in as: not a superuser.
ROLE: Final = "tether_chaos"
WORKERS: Final = 2
CONCURRENCY: Final = 16
#: The producer's rate, as a fraction of the clean rate measured first.
LOAD: Final = 0.6
#: How often the kill storm terminates the workers' connections.
STORM_TICK: Final = 0.25
#: How often completions are counted; the window of "back to 95%".
SAMPLE: Final = 0.1
WINDOW: Final = 1.0
#: Longer than this without a completion during the kill storm is a stall.
STALL: Final = 2.0
PHASES: Final = ("restart", "storm", "exhaustion", "kill", "kills", "idle")
#: Where the worker processes import :func:`one` from (the repository root is their cwd).
MODULE: Final = "benchmarks.chaos"


@tether.workflow(name="benchmarks.chaos.one")
async def one(run_id: str, pause: float = 0.0) -> str:
    """A 1-step job: the fleet's step, which logs its execution and checks it was not stored,
    then sleeps *pause* seconds (0: a no-op job)."""
    return await _fleet.work(run_id, 0, pause)


@attrs.frozen
class Durations:
    """Seconds of each part of the phases."""

    before: float  # steady load before the fault
    after: float  # the window after it
    storm: float  # the kill storm
    exhaustion: float  # the connections held
    kill_restart: float  # from one SIGKILL to the worker's restart
    kills_every: float  # between the SIGKILLs of the repeated kills
    kills_for: float  # the repeated kills
    idle: float  # the idle transaction
    clean_runs: int  # the batch that measures the clean rate
    drain: float  # at most, after the last phase, for every run to finish
    #: at the kill storm's start, seconds during which the role cannot log in
    #: (``CONNECTION LIMIT 0``): calls must wait for connections, then get them
    storm_blocked: float = 0.0
    #: each job's step sleeps this long (runs are in flight when a worker dies)
    step_pause: float = 0.0


FULL: Final = Durations(15, 15, 30, 30, 5, 5, 60, 120, 1000, 180)
QUICK: Final = Durations(3, 3, 6, 4, 1, 2, 6, 8, 200, 60)


@attrs.define
class Phase:
    """One phase's times (``time.monotonic()``) and figures."""

    name: str
    start: float
    fault_start: float = math.nan
    fault_end: float = math.nan
    end: float = math.nan
    note: str = ""
    dead_start: dict[str, int] = attrs.Factory(dict)
    dead_end: dict[str, int] = attrs.Factory(dict)
    # filled by `score`
    before_rate: float = math.nan
    after_rate: float = math.nan
    back_to_95: float | None = None
    longest_zero: float = math.nan
    completed: int = 0
    submitted: int = 0
    lost: int = 0
    stored_again: int = 0
    in_flight_again: int = 0
    unchecked: int = 0

    @property
    def recovery(self) -> float:
        return self.after_rate / self.before_rate if self.before_rate else math.nan

    @property
    def dead_per_job(self) -> float:
        grown = sum(self.dead_end.values()) - sum(self.dead_start.values())
        return grown / self.completed if self.completed else math.nan


# -- connections of the harness ---------------------------------------------------------------


class Admin:
    """A superuser connection of the harness (reconnected when the server drops it).

    Superuser: it uses the slots the server keeps for superusers, and no
    fault aims at its ``application_name``.
    """

    def __init__(self, conninfo: str, name: str) -> None:
        self.conninfo = conninfo
        self.name = name
        self.conn: Any = None
        self.lock = threading.Lock()

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of *sql* (blocking); raises psycopg's error when the server is away."""
        import psycopg

        with self.lock:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(
                        self.conninfo,
                        autocommit=True,
                        connect_timeout=5,
                        application_name=self.name,
                    )
                cur = self.conn.execute(sql.encode(), params or None)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self.close_locked()
                raise

    def close_locked(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        with self.lock:
            self.close_locked()


def ensure_role(server: pg.PostgresServer) -> None:
    """Create :data:`ROLE` (a login role, not a superuser) unless it exists."""
    server.sql(
        f"DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
        dbname="postgres",
    )


# -- the fleet: workers, producer, observer --------------------------------------------------


class Fleet:
    """Two workers, the producer and the completion counter, on a database of their own."""

    def __init__(self, server: pg.PostgresServer, logdir: Path) -> None:
        self.server = server
        self.logdir = logdir
        ensure_role(server)
        self.dbname = _fleet.new_database(server, owner=ROLE)
        self.url = server.conninfo(user=ROLE, dbname=self.dbname)
        admin = server.conninfo(dbname=self.dbname)
        self.env = _fleet.process_env(f"{admin}?application_name=chaos-check", logdir)
        self.observer = Admin(admin, "chaos-observer")
        self.faults = Admin(admin, "chaos-faults")
        self.workers: list[_fleet.TetherProcess] = []
        self.retired: list[_fleet.TetherProcess] = []
        self.generations = itertools.count()
        self.samples: list[tuple[float, int]] = []
        self.sampled = trio.Event()  # set at each sample, then replaced
        self.phase = "setup"
        self.submitted: dict[str, list[str]] = {}
        self.submit_errors = 0
        self.producing = False
        self.rate = 0.0  # the producer's jobs/s
        self.pause = 0.0  # each job's step sleep

    # -- workers --

    def spawn(self, i: int) -> _fleet.TetherProcess:
        spec = f"{self.url}?application_name=chaos-worker-{i}"
        args = ["worker", "--store", spec, "--import", MODULE]
        args += ["--concurrency", str(CONCURRENCY), "--grace", "0"]
        return _fleet.TetherProcess(
            f"worker{i}.{next(self.generations)}", self.logdir, args, self.env
        )

    async def start_workers(self) -> None:
        self.workers = [self.spawn(i) for i in range(WORKERS)]
        await self.serving()

    async def serving(self) -> None:
        for w in self.workers:
            if not await trio.to_thread.run_sync(w.started, PATIENCE):
                raise RuntimeError(f"a worker exited before serving\n{w.tail()}")

    def sigkill(self, i: int, *, restart: bool) -> None:
        """SIGKILL worker *i*; start its replacement (not waited for) if *restart*."""
        w = self.workers[i]
        w.signal(signal.SIGKILL)
        w.proc.wait()
        self.retired.append(w)
        if restart:
            self.workers[i] = self.spawn(i)

    def all_workers(self) -> list[_fleet.TetherProcess]:
        return [*self.retired, *self.workers]

    def stop_workers(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.proc.wait(timeout=30)
            except Exception:
                w.stop()

    # -- completions --

    def role_limit(self, n: int) -> None:
        """``ALTER ROLE`` :data:`ROLE` ``CONNECTION LIMIT`` *n* (-1: none)."""
        self.faults.query(f"ALTER ROLE {ROLE} CONNECTION LIMIT {int(n)}")

    def completed_count(self) -> int:
        (n,), *_ = self.observer.query(
            "SELECT count(*) FROM tether.runs WHERE status = 'completed'"
        )
        return int(n)

    async def observe(self) -> None:
        """Count the completed runs every :data:`SAMPLE` s, forever (skips while unreachable)."""
        while True:
            with contextlib.suppress(Exception):
                n = await trio.to_thread.run_sync(self.completed_count)
                self.samples.append((time.monotonic(), n))
                self.sampled.set()
                self.sampled = trio.Event()
            await trio.sleep(SAMPLE)

    def count_at(self, t: float) -> int:
        """The last count sampled at or before *t*."""
        n = 0
        for ts, c in self.samples:
            if ts > t:
                break
            n = c
        return n

    def backlog(self) -> int:
        """Runs submitted and not completed yet (as last sampled)."""
        done = self.samples[-1][1] if self.samples else 0
        return sum(len(ids) for ids in self.submitted.values()) - done

    async def settle(self, timeout: float) -> None:
        """Wait (at most *timeout* s) until the backlog is what the load keeps in flight."""
        steady = max(self.rate, WORKERS * CONCURRENCY)
        with trio.move_on_after(timeout):
            while self.backlog() > steady:
                await self.sampled.wait()

    async def until_count(self, n: int, timeout: float) -> bool:
        """Wait until at least *n* runs are completed; whether they were."""
        with trio.move_on_after(timeout):
            while not self.samples or self.samples[-1][1] < n:
                await self.sampled.wait()
            return True
        return False

    def vacuum(self) -> None:
        """``VACUUM`` tether's tables (their dead tuples counted from 0)."""
        rows = self.observer.query("SELECT tablename FROM pg_tables WHERE schemaname = 'tether'")
        for (table,) in rows:
            self.observer.query(f'VACUUM tether."{table}"')

    def dead_tuples(self) -> dict[str, int]:
        rows = self.observer.query(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'tether'"
        )
        return {name: int(n) for name, n in rows}

    # -- the producer --

    async def submit(
        self, engine: tether.Engine, run_id: str, limiter: trio.CapacityLimiter
    ) -> None:
        async with limiter:
            while True:
                try:
                    await engine.submit(one, run_id, self.pause, run_id=run_id)
                except tether.TetherError:
                    self.submit_errors += 1
                    await trio.sleep(0.2)
                    continue
                self.submitted.setdefault(run_id.split("-")[0], []).append(run_id)
                return

    async def produce(self, engine: tether.Engine, rate: float) -> None:
        """Submit :func:`one` at *rate* per second (open loop) while :attr:`producing`."""
        limiter = trio.CapacityLimiter(64)
        start = trio.current_time()
        self.producing = True
        self.rate = rate
        async with trio.open_nursery() as nursery:
            for i in itertools.count():
                await trio.sleep_until(start + i / rate)
                if not self.producing:
                    break
                nursery.start_soon(self.submit, engine, f"{self.phase}-{i}", limiter)

    async def clean_rate(self, engine: tether.Engine, runs: int) -> float:
        """Completions/s of the workers draining *runs* queued while they were stopped."""
        for w in self.workers:
            w.signal(signal.SIGSTOP)
        try:
            limiter = trio.CapacityLimiter(16)
            async with trio.open_nursery() as nursery:
                for i in range(runs):
                    nursery.start_soon(self.submit, engine, f"clean-{i}", limiter)
            base = await trio.to_thread.run_sync(self.completed_count)
        finally:
            for w in self.workers:
                w.signal(signal.SIGCONT)
        t0 = time.monotonic()
        if not await self.until_count(base + runs, 300):
            raise RuntimeError("the clean batch did not complete in 300 s")
        return runs / (time.monotonic() - t0)


# -- the faults --------------------------------------------------------------------------------


async def restart(fleet: Fleet, d: Durations) -> str:
    await trio.to_thread.run_sync(fleet.server.restart)
    return "pg_ctl restart -m fast"


async def storm(fleet: Fleet, d: Durations) -> str:
    killed = 0
    ticks = 0
    now = trio.current_time()
    end, unblock = now + d.storm, now + d.storm_blocked
    blocked = d.storm_blocked > 0
    if blocked:
        await trio.to_thread.run_sync(fleet.role_limit, 0)
    try:
        while trio.current_time() < end:
            if blocked and trio.current_time() >= unblock:
                blocked = False
                await trio.to_thread.run_sync(fleet.role_limit, -1)
            killed += await kill_backends(fleet)
            ticks += 1
            await trio.sleep(STORM_TICK)
    finally:
        if d.storm_blocked > 0:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(fleet.role_limit, -1)
    extra = f", logins refused for the first {d.storm_blocked:g} s" if d.storm_blocked else ""
    return f"{killed} backends terminated in {ticks} ticks{extra}"


async def kill_backends(fleet: Fleet) -> int:
    """``pg_terminate_backend`` every connection of the workers; how many (0 on failure)."""
    with contextlib.suppress(Exception):
        rows = await trio.to_thread.run_sync(
            fleet.faults.query,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE usename = %s AND application_name LIKE 'chaos-worker-%%'",
            ROLE,
        )
        return int(rows[0][0])
    return 0


def _hog(conninfo: str, held: list[Any]) -> str:
    import psycopg

    while True:
        try:
            held.append(psycopg.connect(conninfo, connect_timeout=5, application_name="chaos-hog"))
        except psycopg.OperationalError as exc:
            return " ".join(str(exc).split())[-60:]


async def exhaustion(fleet: Fleet, d: Durations) -> str:
    held: list[Any] = []
    try:
        why = await trio.to_thread.run_sync(_hog, fleet.url, held)
        (total,), *_ = await trio.to_thread.run_sync(
            fleet.faults.query,
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
        )
        (limit,), *_ = await trio.to_thread.run_sync(fleet.faults.query, "SHOW max_connections")
        await trio.sleep(d.exhaustion)
    finally:
        for conn in held:
            conn.close()
    return f"{len(held)} held idle, {total} of {limit} connections in use; then: {why}"


async def kill(fleet: Fleet, d: Durations) -> str:
    fleet.sigkill(0, restart=False)
    await trio.sleep(d.kill_restart)
    fleet.workers[0] = fleet.spawn(0)
    await fleet.serving()  # the fault ends when the replacement serves
    return f"SIGKILL of worker 0, a replacement started {d.kill_restart:g} s later"


async def kills(fleet: Fleet, d: Durations) -> str:
    n = 0
    end = trio.current_time() + d.kills_for
    while trio.current_time() < end:
        fleet.sigkill(n % WORKERS, restart=True)
        n += 1
        await trio.sleep(d.kills_every)
    await fleet.serving()
    return f"{n} SIGKILLs, every {d.kills_every:g} s, each worker restarted at once"


async def idle(fleet: Fleet, d: Durations) -> str:
    import psycopg

    def begin() -> Any:
        admin = fleet.server.conninfo(dbname=fleet.dbname)
        conn = psycopg.connect(admin, autocommit=True, application_name="chaos-idle")
        conn.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute(b"SELECT txid_current(), (SELECT count(*) FROM tether.runs)")
        return conn

    conn = await trio.to_thread.run_sync(begin)
    try:
        await trio.sleep(d.idle)
        (xmin,), *_ = await trio.to_thread.run_sync(
            fleet.faults.query,
            "SELECT backend_xmin FROM pg_stat_activity WHERE application_name = 'chaos-idle'",
        )
    finally:
        await trio.to_thread.run_sync(conn.close)
    return f"a session idle in transaction for {d.idle:g} s, its xmin {xmin}"


FAULTS: Final[dict[str, Callable[[Fleet, Durations], Awaitable[str]]]] = {
    "restart": restart,
    "storm": storm,
    "exhaustion": exhaustion,
    "kill": kill,
    "kills": kills,
    "idle": idle,
}


# -- the phases and their figures -------------------------------------------------------------


async def run_phase(fleet: Fleet, name: str, d: Durations) -> Phase:
    # The backlog of the phase before drains first: the before-rate is the steady one.
    await fleet.settle(d.drain)
    fleet.phase = name
    phase = Phase(name, time.monotonic())
    await trio.sleep(d.before)
    if name == "idle":  # what dies from now on stays: count it from a vacuumed table
        await trio.to_thread.run_sync(fleet.vacuum)
    phase.dead_start = await trio.to_thread.run_sync(fleet.dead_tuples)
    phase.fault_start = time.monotonic()
    phase.note = await FAULTS[name](fleet, d)
    phase.fault_end = time.monotonic()
    await trio.sleep(d.after)
    phase.end = time.monotonic()
    with trio.move_on_after(30):
        while True:  # the server may still be coming back (restart)
            with contextlib.suppress(Exception):
                phase.dead_end = await trio.to_thread.run_sync(fleet.dead_tuples)
                break
            await trio.sleep(0.5)
    return phase


def score(fleet: Fleet, phase: Phase, d: Durations) -> None:
    """Fill *phase*'s rates, times and zero stretch from the fleet's samples."""
    at = fleet.count_at
    phase.before_rate = (at(phase.fault_start) - at(phase.fault_start - d.before)) / d.before
    phase.after_rate = (at(phase.fault_end + d.after) - at(phase.fault_end)) / d.after
    phase.completed = at(phase.end) - at(phase.start)
    target = 0.95 * phase.before_rate
    phase.back_to_95 = None
    for t, _ in fleet.samples:
        if phase.fault_end <= t <= phase.end and at(t) - at(t - WINDOW) >= target * WINDOW:
            phase.back_to_95 = t - phase.fault_end
            break
    longest, last_change, last = 0.0, phase.fault_start, at(phase.fault_start)
    for t, n in fleet.samples:
        if phase.fault_start < t <= phase.end and n != last:
            longest = max(longest, t - last_change)
            last_change, last = t, n
    phase.longest_zero = max(longest, phase.end - last_change)


def tally(fleet: Fleet, phases: Sequence[Phase]) -> None:
    """Fill each phase's lost runs and re-executions, from the store and the step logs."""
    rows = fleet.observer.query("SELECT run_id, status FROM tether.runs")
    status = dict(rows)
    executions = Counter(r for r, *_ in _fleet.read_log(fleet.logdir, "executions.log"))
    violations = _fleet.read_log(fleet.logdir, "violations.log")
    stored_again = Counter(v[0] for v in violations if "already" in v)
    unchecked = Counter(v[0] for v in violations if "already" not in v)
    for phase in phases:
        ids = fleet.submitted.get(phase.name, [])
        phase.submitted = len(ids)
        phase.lost = sum(status.get(r) != "completed" for r in ids)
        phase.stored_again = sum(stored_again[r] for r in ids)
        phase.unchecked = sum(unchecked[r] for r in ids)
        phase.in_flight_again = sum(max(0, executions[r] - 1) for r in ids) - phase.stored_again


async def scorecard(
    server: pg.PostgresServer,
    phases: Sequence[str],
    d: Durations,
    rate: float | None,
    logdir: Path,
    out: Any = sys.stdout,
) -> tuple[list[Phase], Fleet]:
    """Run *phases* under load on a new database of *server*; the scored phases and the fleet.

    *rate*: the producer's jobs/s; ``None``: :data:`LOAD` times the clean rate
    measured first. The fleet's workers are stopped and its database dropped
    when this returns; their logs stay in *logdir*.
    """
    fleet = Fleet(server, logdir)
    fleet.pause = d.step_pause
    store = tether.PostgresStore(f"{fleet.url}?application_name=chaos-producer", pool_size=16)
    try:
        async with tether.open_engine(store) as engine, trio.open_nursery() as nursery:
            nursery.start_soon(fleet.observe)
            await fleet.start_workers()
            if rate is None:
                clean = await fleet.clean_rate(engine, d.clean_runs)
                rate = LOAD * clean
                print(
                    f"clean rate: {clean:.0f} jobs/s ({d.clean_runs} queued jobs drained by "
                    f"{WORKERS} workers); producer: {rate:.0f} jobs/s",
                    file=out,
                    flush=True,
                )
            nursery.start_soon(fleet.produce, engine, rate)
            done: list[Phase] = []
            for name in phases:
                phase = await run_phase(fleet, name, d)
                score(fleet, phase, d)
                done.append(phase)
                print(f"  {name}: {phase.note}", file=out, flush=True)
            fleet.producing = False
            await trio.sleep(0.1)
            every = sum(len(ids) for ids in fleet.submitted.values())
            await fleet.until_count(every, d.drain)
            nursery.cancel_scope.cancel()
        tally(fleet, done)
    finally:
        fleet.stop_workers()
        fleet.observer.close()
        fleet.faults.close()
        with contextlib.suppress(Exception):
            _fleet.drop_database(server, fleet.dbname)
    return done, fleet


def table(phases: Sequence[Phase], out: Any = sys.stdout) -> None:
    def num(x: float | None, fmt: str) -> str:
        return (
            "never"
            if x is None
            else "-"
            if isinstance(x, float) and math.isnan(x)
            else f"{x:{fmt}}"
        )

    cols = (
        f"{'phase':<10} | {'before/s':>8} {'after/s':>8} {'recovery':>8} {'to 95% s':>8} "
        f"{'longest 0 s':>11} | {'runs':>6} {'lost':>5} {'stored again':>12} "
        f"{'in flight again':>15} | {'dead tuples':>11} {'dead/job':>8}"
    )
    print(cols, file=out)
    print("-" * len(cols), file=out)
    for p in phases:
        print(
            f"{p.name:<10} | {p.before_rate:>8.1f} {p.after_rate:>8.1f} "
            f"{num(p.recovery, '.2f'):>8} "
            f"{num(p.back_to_95, '.1f'):>8} {p.longest_zero:>11.1f} | {p.submitted:>6} "
            f"{p.lost:>5} {p.stored_again:>12} {p.in_flight_again:>15} | "
            f"{sum(p.dead_end.values()):>11,} {num(p.dead_per_job, '.2f'):>8}",
            file=out,
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short phases: a smoke run")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated, in order")
    parser.add_argument("--rate", type=float, help=f"jobs/s (default: {LOAD:g} x the clean rate)")
    parser.add_argument("--logdir", type=Path, help="keep the workers' logs there")
    ns = parser.parse_args(argv)
    phases = [p for p in ns.phases.split(",") if p]
    unknown = [p for p in phases if p not in FAULTS]
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}; the phases: {', '.join(PHASES)}")
    d = QUICK if ns.quick else FULL
    for name in ("tether", "psycopg"):  # the producer's retries: not the table's business
        logging.getLogger(name).addHandler(logging.NullHandler())
    sys.path.insert(0, str(HERE))  # the other benchmarks' modules, imported as scripts do
    print_environment = importlib.import_module("_env").print_environment
    make_durable = importlib.import_module("postgres").make_durable

    print("tether benchmark: chaos scorecard (PostgreSQL, two worker processes, one fault a phase)")
    print_environment(ns.quick)
    if pg.find_bindir() is None:
        print("chaos benchmark: cannot run: no PostgreSQL server binaries on this machine")
        return 0
    try:
        server = pg.start_once()
    except pg.PostgresUnavailable as exc:
        print(f"chaos benchmark: cannot run: {exc}", file=sys.stderr)
        return 1
    try:
        server.sql("ALTER SYSTEM SET max_connections = 100")
        server.restart()
        print(f"server:   {make_durable(server)}; max_connections=100")
        print(
            f"phases:   before {d.before:g} s, fault, after {d.after:g} s; storm {d.storm:g} s "
            f"every {STORM_TICK:g} s; exhaustion {d.exhaustion:g} s; kill: restart after "
            f"{d.kill_restart:g} s;\n          kills every {d.kills_every:g} s for "
            f"{d.kills_for:g} s; idle transaction {d.idle:g} s",
            flush=True,
        )
        with tempfile.TemporaryDirectory(prefix="tether-chaos-") as name:
            logdir = ns.logdir or Path(name)
            logdir.mkdir(parents=True, exist_ok=True)
            done, fleet = trio.run(scorecard, server, phases, d, ns.rate, logdir)
            print()
            table(done)
            idle_phases = [p for p in done if p.name == "idle"]
            for p in idle_phases:
                grown = {
                    t: p.dead_end.get(t, 0) - p.dead_start.get(t, 0)
                    for t in sorted(p.dead_end)
                    if p.dead_end.get(t, 0) - p.dead_start.get(t, 0)
                }
                print(f"dead tuples grown during the idle transaction, by table: {grown}")
            print(
                "before/s, after/s: completions/s in the window before the fault and after its\n"
                "end; recovery = after/before; to 95% s: from the fault's end until the last\n"
                f"{WINDOW:g} s held 95% of before/s; longest 0 s: the longest stretch without a\n"
                "completion from the fault's start to the window's end (sampled every "
                f"{SAMPLE:g} s);\nlost: submitted in the phase, not completed at the end; stored "
                "again: a step run\nalthough its record was stored (must be 0); in flight again: "
                "a step run again\nwhose earlier execution was never stored (at-least-once); "
                "dead tuples: n_dead_tup\nof tether's tables at the window's end; dead/job: their "
                "growth over the phase per\njob completed in it"
            )
            storms = [p for p in done if p.name == "storm"]
            for p in storms:
                verdict = "NO" if p.longest_zero <= STALL else "YES"
                print(f"kill storm: completions at 0 for more than {STALL:g} s: {verdict}")
            waits = sum(w.stderr().count("waiting for a connection") for w in fleet.all_workers())
            print(f"worker log lines about waiting for a connection: {waits}")
            if fleet.submit_errors:
                print(f"producer: {fleet.submit_errors} submits failed and were tried again")
            if any(p.unchecked for p in done):
                print(f"steps whose check could not run: {sum(p.unchecked for p in done)}")
    finally:
        pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
