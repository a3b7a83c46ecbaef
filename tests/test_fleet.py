"""Recovery with real processes: a fleet of ``tether worker`` processes (issue 12, items 2, 3, 5).

- **Fleet.** Three workers serve 200 submitted runs of ``tests._fleet.five``
  (a step, three in ``tether.parallel()``, a step; each sleeping ``PAUSE``)
  with a short lease. Mid-way one worker is SIGKILLed and another SIGSTOPped
  for 2.5 leases while the third works on, then continued. All 200 runs
  complete with their results; no step whose record was stored executes
  again (each step looks for its own record in the store's tables before it
  works, see ``tests/_fleet.py``); only runs that were taken over execute a
  step twice (at-least-once, for the steps in flight); no journal holds a key
  twice; the stopped worker logs ``LeaseLostError``. On one SQLite file and
  on PostgreSQL.
- **Restart.** The same, on PostgreSQL, with ``pg_ctl restart -m fast``
  while the second worker is stopped: every run still completes, and every
  entry stored before the restart is still there after it, and at the end.
- **Poison.** A run whose step SIGKILLs its worker, among 20 others, under
  two supervised workers with ``--max-dispatches 3``: it ends ``dead_letter``
  after killing exactly three workers, and every other run completes, also
  the runs that died beside it (a worker executes a run's last chance alone:
  without that, they were dead-lettered with it).

Each PostgreSQL fleet gets a database of its own on the session's server
(``tests/_postgres.py`` offers schemas, but the command line always uses the
schema ``tether``): :func:`fleet_database`, a local helper. Nothing here
sleeps to wait for a process; it polls a condition with a deadline. The one
sleep keeps a worker stopped for a while: that is the point.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import tether
from tether._cli._main import StoreSpec
from tether.stores import DEAD_LETTER_ERROR, EntryKind

from . import _fleet
from ._fleet import RawStore, TetherProcess, read_log
from ._poll import PATIENCE
from ._postgres import PostgresServer

RUNS = 200
#: Each step's sleep: long enough that runs are in flight whenever the test acts.
PAUSE = 0.3
TTL = 2.0
CONCURRENCY = 8
WORKER_OPTIONS = (
    "--concurrency", str(CONCURRENCY), "--lease-ttl", str(TTL),
    "--poll-interval", "0.2", "--grace", "0",
)  # fmt: skip
#: How long the whole fleet may take to finish its runs.
FLEET_DEADLINE = 150.0


# -- stores and processes --------------------------------------------------------------------


def with_app_name(url: str, name: str) -> str:
    """*url* with libpq's ``application_name``: the worker's backends are told apart."""
    return f"{url}?application_name={name}"


def submit_all(
    spec: str, runs: dict[str, tuple[tether.Workflow[..., Any], tuple[Any, ...]]]
) -> None:
    async def go() -> None:
        async with tether.open_engine(StoreSpec.parse(spec).open_for_writing()) as engine:
            for run_id, (wf, args) in runs.items():
                assert await engine.submit(wf, *args, run_id=run_id) == run_id

    trio.run(go)


def report(processes: list[TetherProcess], raw: RawStore) -> str:
    """What a failed assertion shows: the runs by status, and each worker's output."""
    try:
        statuses: object = dict(raw.statuses())
    except Exception as exc:
        statuses = f"(unreadable: {exc!r})"
    return f"\nruns by status: {statuses}\n" + "\n".join(p.tail() for p in processes)


def poll(
    condition: Callable[[], bool], what: str, timeout: float, explain: Callable[[], str]
) -> None:
    """Poll *condition()* until it is true; fail with *explain()* after *timeout* seconds.

    A condition that raises (the database restarting) counts as false.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if condition():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{explain()}")
        time.sleep(0.05)


def busy(raw: RawStore, app_name: str) -> bool:
    """Whether the (stopped) worker may hold a lock other writers need.

    SQLite: the file's write lock is taken (by anyone: then the test tries
    again). PostgreSQL: a backend of that worker is inside a transaction.
    """
    if raw.sqlite:
        conn = sqlite3.connect(raw.spec.removeprefix("sqlite:"), timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()
    rows = raw.query(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = ? "
        "AND xact_start IS NOT NULL",
        app_name,
    )
    return bool(rows[0][0])


def sigstop_between_writes(p: TetherProcess, raw: RawStore, app_name: str) -> None:
    """SIGSTOP *p* at a moment it holds no lock in the store.

    A process stopped inside a write transaction holds SQLite's write lock
    (or, on PostgreSQL, its rows' locks) and blocks the other writers until
    it continues: no lease can help that, so the test does not stop it there.
    """
    if not raw.sqlite:  # the worker's backends are told apart (else this checks nothing)
        (count,) = raw.query(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?", app_name
        )[0]
        assert count > 0, f"no backend of {p.name} is named {app_name!r}"
    deadline = time.monotonic() + PATIENCE
    while True:
        p.signal(signal.SIGSTOP)
        while _state(p.pid) != "T":
            time.sleep(0.001)
        if not busy(raw, app_name):
            return
        p.signal(signal.SIGCONT)
        assert time.monotonic() < deadline, f"{p.name} always holds a lock\n{p.tail()}"
        time.sleep(0.01)


def running(raw: RawStore) -> set[str]:
    return {r for (r,) in raw.query("SELECT run_id FROM {s}.runs WHERE status = 'running'")}


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()[0]


# -- the fleet ---------------------------------------------------------------------------------


def check_runs(spec: str, run_ids: list[str]) -> None:
    """Every run completed with its result; its journal: five step entries, no key twice."""

    async def go() -> None:
        async with tether.open_engine(StoreSpec.parse(spec).open_for_writing()) as engine:
            for run_id in run_ids:
                result = await engine.wait(run_id, timeout=PATIENCE)
                assert result == _fleet.expected(run_id), run_id
                info = await engine.get_run(run_id)
                assert info is not None
                keys = Counter(e.key for e in info.entries)
                assert all(n == 1 for n in keys.values()), f"{run_id}: keys twice: {keys}"
                steps = sorted(e.value or "" for e in info.entries if e.kind is EntryKind.STEP)
                assert steps == sorted(f'"{v}"' for v in _fleet.expected(run_id)), run_id
                assert [e.seq for e in info.entries] == list(range(1, len(info.entries) + 1))
                # Fencing: no entry of an owner lands after its run was taken over.
                tokens = [e.token for e in info.entries]
                assert tokens == sorted(tokens), f"{run_id}: a late write landed: {tokens}"

    trio.run(go)


def run_fleet(tmp_path: Path, spec: str, *, while_stopped: Callable[[], None] | None) -> None:
    """Items 2 and 3: the fleet, its SIGKILL and SIGSTOP, and what must hold after.

    *while_stopped* runs while the second worker is stopped (the restart).
    """
    logs = tmp_path / "logs"
    logs.mkdir()
    raw = RawStore(spec)
    run_ids = [f"f{i:03d}" for i in range(RUNS)]
    submit_all(spec, {r: (_fleet.five, (r, PAUSE)) for r in run_ids})
    assert raw.statuses() == {"queued": RUNS}

    env = _fleet.process_env(spec, logs)
    names = [f"w{i}" for i in (1, 2, 3)]
    workers: list[TetherProcess] = []
    try:
        for name in names:
            url = spec if raw.sqlite else with_app_name(spec, f"fleet-{name}")
            workers.append(_fleet.worker(name, tmp_path, url, env, *WORKER_OPTIONS))
        w1, w2, w3 = workers
        owners = {w.name: w.owner(PATIENCE) for w in workers}

        def explain() -> str:
            return report(workers, raw)

        # Mid-way: some runs completed, and both victims hold runs in flight.
        poll(
            lambda: (
                raw.statuses()["completed"] >= 20
                and bool(raw.held_by(owners["w1"]))
                and bool(raw.held_by(owners["w2"]))
            ),
            "20 completed runs while w1 and w2 hold runs",
            PATIENCE,
            explain,
        )
        # Stopped first, so that what it holds is read exactly.
        w1.signal(signal.SIGSTOP)
        held1 = set(raw.held_by(owners["w1"]))
        w1.signal(signal.SIGKILL)
        assert w1.wait(PATIENCE) == -signal.SIGKILL
        sigstop_between_writes(w2, raw, "fleet-w2")
        stopped_at = time.monotonic()
        held2 = set(raw.held_by(owners["w2"]))
        assert held1 and held2, explain()
        running_at_restart: set[str] = set()
        if while_stopped is not None:
            running_at_restart = running(raw)
            while_stopped()
            running_at_restart |= running(raw)
        # Past its lease: w3 takes over w1's runs at once (w1's process is gone)
        # and w2's once their leases expire, while w2 sleeps on.
        time.sleep(max(0.0, stopped_at + 2.5 * TTL - time.monotonic()))
        assert w2.proc.poll() is None and w3.proc.poll() is None, explain()
        w2.signal(signal.SIGCONT)

        def finished() -> bool:
            statuses = raw.statuses()
            bad = {s: n for s, n in statuses.items() if s not in ("queued", "running", "completed")}
            assert not bad, f"runs ended otherwise: {bad}{explain()}"
            return statuses["completed"] == RUNS

        poll(finished, f"all {RUNS} runs to complete", FLEET_DEADLINE, explain)
        check_runs(spec, run_ids)
        # The steps' own check finds a stored record (else it could find none).
        try:
            assert _fleet.stored_value_count(spec, "f000", "f000:4") == 1
        finally:
            _fleet.close_connections()

        violations = read_log(logs, "violations.log")
        assert not violations, f"stored steps executed again: {violations[:20]}{explain()}"
        assert "LeaseLostError" in w2.stderr(), explain()

        # At-least-once, and only where a run was taken over: a step executes
        # twice only in a run that w1 or w2 held when they were disrupted (or,
        # in the restart test, any run that was running then: a worker whose
        # renewals failed through the restart lost its leases by its own clock).
        executions = read_log(logs, "executions.log")
        pids: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
        for run_id, i, pid in executions:
            pids[run_id, i].append(int(pid))
        assert {run_id for run_id, _ in pids} == set(run_ids)
        again = {key: p for key, p in pids.items() if len(p) > 1}
        disrupted = held1 | held2 | running_at_restart
        assert again, "no step ran twice: the test took nothing over"
        assert {r for r, _ in again} <= disrupted, f"re-executed, not taken over: {again}"
        # w2's runs were taken over while it slept: some of their steps ran elsewhere.
        assert any(p != w2.pid for (r, _), ps in pids.items() if r in held2 for p in ps)

        for w in (w2, w3):
            w.signal(signal.SIGTERM)
        for w in (w2, w3):
            assert w.wait(PATIENCE) == 0, explain()
            assert f"tether worker {owners[w.name]}: stopped; claimed " in w.stdout()
    finally:
        for w in workers:
            w.stop()


@pytest.mark.slow
def test_a_fleet_on_one_sqlite_file_recovers(tmp_path: Path) -> None:
    run_fleet(tmp_path, f"sqlite:{tmp_path / 'fleet.db'}", while_stopped=None)


@pytest.mark.slow
def test_a_fleet_on_postgres_recovers(tmp_path: Path, fleet_database: str) -> None:
    run_fleet(tmp_path, fleet_database, while_stopped=None)


@pytest.mark.slow
def test_a_fleet_on_postgres_survives_a_server_restart(
    tmp_path: Path, fleet_database: str, postgres_server: PostgresServer
) -> None:
    raw = RawStore(fleet_database)
    snapshots: list[set[tuple[str, int, str, str]]] = []

    def restart() -> None:
        snapshots.append(raw.entries())
        postgres_server.restart()
        snapshots.append(raw.entries())

    run_fleet(tmp_path, fleet_database, while_stopped=restart)
    before, after_restart = snapshots
    final = raw.entries()
    assert before, "nothing was stored before the restart: the test checks nothing"
    assert before <= after_restart <= final, sorted(before - final)[:10]
    counts = [Counter(run_id for run_id, *_ in s) for s in (before, after_restart, final)]
    for run_id, n in counts[0].items():
        assert n <= counts[1][run_id] <= counts[2][run_id], run_id


# -- a poison run ------------------------------------------------------------------------------

POISON_OTHERS = 20
POISON_WORKERS = 2
MAX_DISPATCHES = 3
#: How long the poison's step works before it kills its worker.
POISON_DELAY = 0.1


@pytest.mark.slow
def test_a_poison_run_is_dead_lettered_and_the_others_complete(
    tmp_path: Path, process_store_url: str
) -> None:
    spec = process_store_url
    logs = tmp_path / "logs"
    logs.mkdir()
    raw = RawStore(spec)
    others = [f"p{i:02d}" for i in range(POISON_OTHERS)]
    # The poison is the oldest run: claimed first, and again first after each
    # death, with the runs claimed right after it beside it (the oldest of
    # those that died with it). Their steps last longer than the poison takes
    # to kill, so they die with it each time, up to their last chance, which
    # their worker executes alone.
    runs: dict[str, tuple[tether.Workflow[..., Any], tuple[Any, ...]]] = {
        "poison": (_fleet.poison, (POISON_DELAY,))
    }
    runs.update({r: (_fleet.five, (r, PAUSE)) for r in others})
    submit_all(spec, runs)
    env = _fleet.process_env(spec, logs)
    options = ("--max-dispatches", str(MAX_DISPATCHES), "--concurrency", "8",
               "--lease-ttl", str(TTL), "--poll-interval", "0.2", "--grace", "0")  # fmt: skip
    started: list[TetherProcess] = []

    def start(slot: int) -> TetherProcess:
        p = _fleet.worker(f"w{slot}-{len(started)}", tmp_path, spec, env, *options)
        started.append(p)
        return p

    def explain() -> str:
        return report(started, raw)

    try:
        # The supervisor: two workers (started one after the other), each
        # restarted whenever it dies.
        slots: list[TetherProcess] = []
        for k in range(POISON_WORKERS):
            slots.append(start(k))
            slots[k].started(PATIENCE)
        deaths: list[int] = []
        deadline = time.monotonic() + FLEET_DEADLINE
        while True:
            for k, p in enumerate(slots):
                rc = p.proc.poll()
                if rc is not None:
                    assert rc == -signal.SIGKILL, f"{p.name} failed{explain()}"
                    deaths.append(rc)
                    slots[k] = start(k)
            statuses = raw.statuses()
            if statuses["queued"] == statuses["running"] == 0:
                break
            assert time.monotonic() < deadline, f"the runs did not finish{explain()}"
            time.sleep(0.05)
        dead = raw.query("SELECT run_id FROM {s}.runs WHERE status = 'dead_letter' ORDER BY 1")
        assert dead == [("poison",)], f"dead-lettered: {dead}{explain()}"
        assert raw.statuses() == {"completed": POISON_OTHERS, "dead_letter": 1}, explain()
        # Each of its dispatches killed a worker; the next claim set it aside.
        assert len(deaths) == MAX_DISPATCHES, explain()
        poisoned = [line for line in read_log(logs, "executions.log") if line[0] == "poison"]
        assert len(poisoned) == MAX_DISPATCHES
        # Runs died beside it (they were claimed more than once), and yet completed.
        records = raw.query("SELECT run_id, data FROM {s}.runs WHERE run_id <> 'poison'")
        beside = sorted(r for r, data in records if json.loads(data)["dispatches"] > 1)
        assert beside, f"no run died beside the poison: the test checks nothing{explain()}"

        args = ["runs", "list", "--status", "dead_letter", "--json", "--store", spec]
        listing = _fleet.TetherProcess("list", tmp_path, args, env)
        started.append(listing)
        assert listing.wait(PATIENCE) == 0, listing.tail()
        shown = json.loads(listing.stdout())
        assert [r["run_id"] for r in shown] == ["poison"]
        assert shown[0]["status"] == "dead_letter" and shown[0]["owner"] is None
        assert shown[0]["error"]["type"] == DEAD_LETTER_ERROR

        async def wait_poison() -> None:
            async with tether.open_engine(StoreSpec.parse(spec).open_for_writing()) as engine:
                with pytest.raises(tether.RunFailedError) as failed:
                    await engine.wait("poison", timeout=PATIENCE)
                assert failed.value.error.type == DEAD_LETTER_ERROR

        trio.run(wait_poison)
        check_runs(spec, others)
        assert not read_log(logs, "violations.log")
        for p in slots:
            p.signal(signal.SIGTERM)
        for p in slots:
            assert p.wait(PATIENCE) == 0, explain()
    finally:
        for p in started:
            p.stop()
