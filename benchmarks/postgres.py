"""tether on PostgreSQL: worker scaling, pickup latency, group commit, step latency.

Run: ``python benchmarks/postgres.py [--quick]``

The server is the test suite's throwaway cluster (``tests/_postgres.py``:
``initdb`` and ``pg_ctl`` in a temporary directory, on 127.0.0.1), made
durable first: the helper starts it with ``fsync``, ``synchronous_commit``
and ``full_page_writes`` off, which this benchmark turns back on
(``ALTER SYSTEM`` on that cluster, then a reload), so that every commit is
flushed to the disk, as SQLite's ``synchronous="full"`` is. Without
PostgreSQL server binaries the benchmark prints so and exits 0.

Part 1, durable steps/s by worker processes. K ``tether worker`` processes
(K = 1, 2, 4; each ``--concurrency 16 --poll-interval 0.1``) are started on
a fresh schema and, once each is serving, stopped (SIGSTOP) while R runs of
a workflow of 10 trivial sequential steps are submitted; the clock starts as
they are all continued (SIGCONT), so the figure is the workers' rate from a
full queue, not the submitter's. It stops when no run is queued or running
(``list_runs``, looked up every 10 ms); every result is checked after. The
figure is R * 10 steps / that wall time; the ratio is against K = 1, the
configurations alternated (1 2 4 4 2 1 ...). The CPU the workers, the server
and this process used meanwhile (``/proc``) shows how much of the machine
they had.

Part 2, submit-to-start latency. One worker process (``_postgres_flows.py``,
``poll_interval=1.0``) on a fresh schema; the submitter takes ``time.time()``,
submits a run whose one step returns ``time.time()`` at its start, waits for
the run, pauses and submits the next (one run at a time; the pauses are
spread evenly over 0..J s, shuffled, so polling only they sample the phase
of the worker's poll uniformly). With notifications the store is
the plain ``PostgresStore``; polling only it is the same store in a wrapper
without ``watch()`` (``_postgres_flows.WithoutWatch``), so the worker wakes
every ``poll_interval`` and on its own runs' completions, never on a submit.

Part 3, group commit at W = 100 parallel steps. ``engine.run`` of a
workflow of rounds of ``parallel()`` blocks of 100 trivial steps, in this
process, on a fresh schema each time, alternated with the same against one
transaction per save. Group commit happens at two levels, and both are on as
the code stands: the engine appends the saves queued while one is in flight
in one ``append`` call, and the store's writer thread commits the appends
queued meanwhile in one transaction. The baseline turns both off, through
the public ``append`` only: a wrapper store whose ``append`` stores each
entry by an ``append`` of its own, one after the other, so each save is a
transaction that waits for the previous one's commit (the saves of one run
all lock its row, so transactions issued at once would queue the same way).
The grouped configuration is the same wrapper passing ``append`` through.
``steps/commit`` counts the writer's transactions (the store's ``_batches``
test hook).

Part 4, latency of one durable sequential step, PostgreSQL against SQLite
(``synchronous="full"``, a file on the same disk): ``engine.run`` of a
1-step workflow (create the run, commit the step, store the outcome), and
each ``await step(...)`` inside a workflow of sequential steps, p50 and p99.

Real time, real processes; the machine is shared, so spreads are printed.
Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TextIO

import attrs
import trio

import _postgres_flows as flows
import tether
from _env import print_environment
from tether.stores import Entry, RunStatus, Store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests/_postgres.py

from tests import _postgres as pg  # noqa: E402

TARGET_P50_MS = 50.0  # part 2: submit-to-start p50 with notifications
TARGET_GROUP = 5.0  # part 3: group commit against one transaction per save
WIDTH = 100  # part 3: parallel steps
WORKERS = (1, 2, 4)  # part 1: worker processes
WORKER_CONCURRENCY = 16
PART1_POLL = 0.1
DONE_POLL = 0.01  # part 1: how often the submitter looks whether every run is done
UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING)
PART2_POLL = 1.0
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
_ids = itertools.count()


def pct(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def spread(samples: Sequence[float], fmt: str = ",.0f") -> str:
    return f"{min(samples):{fmt}}-{max(samples):{fmt}}"


# -- the server ----------------------------------------------------------------------------


def filesystem(path: Path) -> str:
    """The type of the filesystem *path* is on (from /proc/mounts), or ``?``."""
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and str(path).startswith(fields[1]) and len(fields[1]) > len(best):
                best, kind = fields[1], fields[2]
    return kind


def make_durable(server: pg.PostgresServer) -> str:
    """Turn the cluster's commits durable again; a description of the server."""
    for name, value in DURABLE.items():
        server.sql(f"ALTER SYSTEM SET {name} = {value}")
    server.sql("SELECT pg_reload_conf()")
    time.sleep(0.2)  # the postmaster signals its children; new sessions read the file
    shown = {name: server.sql(f"SHOW {name}")[0][0] for name in DURABLE}
    if shown != DURABLE:
        raise RuntimeError(f"the server did not take the durable settings: {shown}")
    version = server.sql("SHOW server_version")[0][0]
    return (
        f"PostgreSQL {version} on {server.host} (throwaway cluster of tests/_postgres.py, "
        f"data on {filesystem(server.data)});\n          "
        + " ".join(f"{k}={v}" for k, v in shown.items())
        + " (set here: the test helper turns them off)"
    )


# -- worker processes ------------------------------------------------------------------------


@attrs.define(eq=False)
class Spawned:
    proc: trio.Process
    log: Path
    out: bytearray = attrs.field(factory=bytearray)


async def _read_until(child: Spawned, marker: bytes) -> None:
    assert child.proc.stdout is not None
    while marker not in child.out:
        chunk = await child.proc.stdout.receive_some()
        if not chunk:
            tail = child.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"a worker exited before it was ready:\n{child.out!r}\n{tail}")
        child.out += chunk


@contextlib.asynccontextmanager
async def processes(
    argvs: Sequence[Sequence[str]], *, ready: bytes, logdir: Path, cwd: Path = HERE
) -> AsyncIterator[list[Spawned]]:
    """Start each argv (in *cwd*: this directory by default), wait until each printed
    *ready*, yield them.

    On leaving, each gets SIGTERM (a drain), then SIGKILL if it is still
    there after 15 s; their remaining output is read into ``.out``.
    """
    children: list[Spawned] = []
    try:
        for argv in argvs:
            log = logdir / f"worker-{next(_ids)}.log"
            with log.open("wb") as err:
                proc = await trio.lowlevel.open_process(
                    list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=err
                )
            children.append(Spawned(proc, log))
        with trio.fail_after(60):
            for child in children:
                await _read_until(child, ready)
        yield children
    finally:
        with trio.CancelScope(shield=True):
            for child in children:
                if child.proc.returncode is None:
                    child.proc.send_signal(signal.SIGCONT)  # a stopped one cannot drain
                    child.proc.terminate()
            with trio.move_on_after(15):
                for child in children:
                    await child.proc.wait()
            for child in children:
                if child.proc.returncode is None:
                    child.proc.kill()
                await child.proc.wait()
                assert child.proc.stdout is not None
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    with trio.move_on_after(2):
                        while chunk := await child.proc.stdout.receive_some():
                            child.out += chunk
                await child.proc.stdout.aclose()


# -- part 1: steps/s by worker processes ---------------------------------------------------


@attrs.frozen
class Scaling:
    workers: int
    rate: float  # steps/s
    seconds: float
    claimed: tuple[int, ...]  # runs each worker claimed
    worker_cpu: float  # CPU seconds of the worker processes, over the measured time
    server_cpu: float  # ... of the PostgreSQL server's processes
    submitter_cpu: float  # ... of this process


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes used so far (0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


async def scaling_once(server: pg.PostgresServer, k: int, runs: int, logdir: Path) -> Scaling:
    server.sql("DROP SCHEMA IF EXISTS tether CASCADE")  # `tether worker` serves schema tether
    conninfo = server.conninfo()
    argv = [
        sys.executable,
        "-m",
        "tether",
        "worker",
        "--store",
        conninfo,
        "--import",
        "_postgres_flows",
        "--concurrency",
        str(WORKER_CONCURRENCY),
        "--poll-interval",
        str(PART1_POLL),
        "--grace",
        "0",
    ]
    # The submitter's store creates the schema before the workers open theirs.
    async with (
        tether.open_engine(tether.PostgresStore(conninfo, schema="tether")) as engine,
        processes([argv] * k, ready=b"serving", logdir=logdir) as children,
    ):
        # Frozen while the queue fills, thawed together when the clock starts: the
        # figure is the workers' own rate, from a full queue, not the submitter's.
        for child in children:
            child.proc.send_signal(signal.SIGSTOP)
        try:
            ids = [await engine.submit(flows.ten_steps, i, run_id=f"r{i}") for i in range(runs)]
            gc.collect()
            server_pids = server.pids()
            worker_pids = [child.proc.pid for child in children]
            cpu0 = (cpu_seconds(worker_pids), cpu_seconds(server_pids), time.process_time())
            t0 = time.perf_counter()
        finally:
            for child in children:
                child.proc.send_signal(signal.SIGCONT)
        with trio.fail_after(300):
            while True:
                if not await engine.store.list_runs(status=UNFINISHED, limit=1):
                    break
                await trio.sleep(DONE_POLL)
        seconds = time.perf_counter() - t0
        # Backends started meanwhile count from 0; ones that exited meanwhile are lost.
        server_pids = sorted(set(server_pids) | set(server.pids()))
        cpu1 = (cpu_seconds(worker_pids), cpu_seconds(server_pids), time.process_time())
        expected = sum(range(flows.STEPS))
        for i, run_id in enumerate(ids):
            got = await engine.wait(run_id, timeout=10)
            if got != i + expected:
                raise RuntimeError(f"run {run_id} returned {got!r}, not {i + expected}")
    claimed = []
    for child in children:
        m = re.search(rb"stopped; claimed (\d+)", child.out)
        claimed.append(int(m.group(1)) if m else -1)
    worker_cpu, server_cpu, submitter_cpu = (b - a for a, b in zip(cpu0, cpu1, strict=True))
    return Scaling(
        k,
        runs * flows.STEPS / seconds,
        seconds,
        tuple(claimed),
        worker_cpu,
        server_cpu,
        submitter_cpu,
    )


async def part1(server: pg.PostgresServer, runs: int, rounds: int, logdir: Path) -> float | None:
    print(
        f"part 1: durable steps/s by `tether worker` processes, {runs} runs x {flows.STEPS} "
        f"sequential steps,\n        each worker --concurrency {WORKER_CONCURRENCY} "
        f"--poll-interval {PART1_POLL:g}; median of {rounds}, alternated"
    )
    results: dict[int, list[Scaling]] = {k: [] for k in WORKERS}
    for r in range(rounds):
        order = WORKERS if r % 2 == 0 else tuple(reversed(WORKERS))
        for k in order:
            results[k].append(await scaling_once(server, k, runs, logdir))
    cols = (
        f"{'workers':>7} | {'steps/s':>8} {'spread':>13} {'wall s':>7} | {'ratio':>6} "
        f"{'ideal':>6} | {'cores busy: workers':>19} {'server':>6} {'submitter':>9} "
        "| runs claimed per worker (last)"
    )
    print(cols)
    print("-" * len(cols))
    base = statistics.median(s.rate for s in results[WORKERS[0]])
    at_four = None
    for k in WORKERS:
        rates = [s.rate for s in results[k]]
        rate = statistics.median(rates)
        last = results[k][-1]
        ratio = rate / base
        busy = [
            statistics.median(getattr(s, f) / s.seconds for s in results[k])
            for f in ("worker_cpu", "server_cpu", "submitter_cpu")
        ]
        if k == WORKERS[-1]:
            at_four = ratio
        print(
            f"{k:>7} | {rate:>8,.0f} {spread(rates):>13} "
            f"{statistics.median(s.seconds for s in results[k]):>7.2f} | {ratio:>5.2f}x "
            f"{min(k, os.cpu_count() or 1):>5}x | {busy[0]:>19.2f} {busy[1]:>6.2f} "
            f"{busy[2]:>9.2f} | {'/'.join(map(str, last.claimed))}",
            flush=True,
        )
    print(
        "steps/s = runs * 10 / wall time from thawing the workers (SIGCONT; every run queued\n"
        f"while they were stopped) until no run is queued or running (looked up every\n"
        f"{DONE_POLL * 1e3:g} ms; every result is checked after); ratio = steps/s / the 1-worker\n"
        "steps/s; ideal = min(workers, cpus): the workers, the server and the submitter share\n"
        "this machine's cores; cores busy = CPU seconds (user + system, /proc) / wall seconds\n"
        "of the worker processes, the server's processes, this process (median). No target\n"
        "is set for this ratio."
    )
    return at_four


# -- part 2: submit-to-start latency ---------------------------------------------------------


async def pickup(
    server: pg.PostgresServer, *, notify: bool, samples: int, jitter: float, logdir: Path
) -> list[float]:
    """Seconds from submit to the run's step starting, one run at a time."""
    schema = server.new_schema()
    conninfo = server.conninfo()
    argv = [
        sys.executable,
        str(HERE / "_postgres_flows.py"),
        conninfo,
        schema,
        "--poll-interval",
        str(PART2_POLL),
        *([] if notify else ["--polling-only"]),
    ]
    latencies: list[float] = []
    warm = 1
    # Pauses spread evenly over 0..jitter, in a shuffled order: each run samples
    # another phase of the worker's poll (exactly uniform, not just on average).
    pauses = [(i + 0.5) / (warm + samples) * jitter for i in range(warm + samples)]
    random.Random(7).shuffle(pauses)
    async with (
        tether.open_engine(tether.PostgresStore(conninfo, schema=schema)) as engine,
        processes([argv], ready=b"ready", logdir=logdir),
    ):
        for i in range(warm + samples):
            await trio.sleep(pauses[i])
            t0 = time.time()
            run_id = await engine.submit(flows.started, i, run_id=f"p{i}")
            began = await engine.wait(run_id, timeout=30)
            if i >= warm:
                latencies.append(began - t0)
    return latencies


async def part2(
    server: pg.PostgresServer, samples: tuple[int, int], logdir: Path
) -> tuple[float, float]:
    jitters = (0.1, PART2_POLL)
    print(
        f"part 2: submit-to-start latency, one worker process, poll_interval={PART2_POLL:g} s "
        "in both,\n        one run at a time, a pause before each submit (evenly over 0..J s)"
    )
    rows = [
        ("notifications (LISTEN)", True, samples[0], jitters[0]),
        ("polling only (no watch)", False, samples[1], jitters[1]),
    ]
    cols = (
        f"{'wake-up':<24} {'runs':>5} {'J s':>5} | {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'min ms':>7} | {'p50 ratio':>9} | target"
    )
    print(cols)
    print("-" * len(cols))
    p50s: list[float] = []
    for name, notify, n, jitter in rows:
        lat = [
            x * 1e3
            for x in await pickup(server, notify=notify, samples=n, jitter=jitter, logdir=logdir)
        ]
        p50s.append(pct(lat, 50))
        target = f"p50 < {TARGET_P50_MS:g} ms" if notify else "(baseline)"
        print(
            f"{name:<24} {n:>5} {jitter:>5.2g} | {pct(lat, 50):>8.1f} {pct(lat, 99):>8.1f} "
            f"{max(lat):>8.1f} {min(lat):>7.1f} | {p50s[-1] / p50s[0]:>8.2f}x | {target}",
            flush=True,
        )
    print(
        "latency = the step's time.time() at its start - the submitter's time.time() before\n"
        "engine.submit (same machine, same clock); p99 is the nearest-rank value of the runs;\n"
        "p50 ratio = this row / notifications. Polling only, a submit waits for the next poll\n"
        "(uniform over 0..poll_interval by the pauses): about poll_interval / 2"
    )
    return p50s[0], p50s[1]


# -- part 3: group commit -------------------------------------------------------------------


@tether.step(name="bench_pg.work")
async def work(i: int) -> int:
    return i


@tether.workflow(name="benchmarks.postgres.fan_out")
async def fan_out(width: int, rounds: int) -> int:
    total = 0
    for _ in range(rounds):
        async with tether.parallel() as p:
            handles = [p.start_soon(work, i) for i in range(width)]
        total += sum(h.result for h in handles)
    return total


class OneTransactionPerSave(flows.WithoutWatch):
    """The store with each entry of an append stored by an append of its own, in turn.

    So every step's save is one transaction of the store's writer, after the
    previous one committed: neither the engine's batching (the saves queued
    while one is in flight, in one append call) nor the store's (concurrent
    append calls, in one transaction) can join them.
    """

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        stored: list[Entry] = []
        for entry in entries:
            stored.extend(await self.inner.append(run_id, [entry]))
        return stored


@attrs.frozen
class FanOut:
    rate: float  # steps/s
    commits: int  # transactions of the store's writer


async def fan_out_once(server: pg.PostgresServer, grouped: bool, rounds: int) -> FanOut:
    inner = server.store(pool_size=10)
    store = flows.WithoutWatch(inner) if grouped else OneTransactionPerSave(inner)
    async with tether.open_engine(store) as engine:
        await engine.run(fan_out, WIDTH, 1, run_id="warm-up")  # connections, caches
        before = len(inner._batches)  # the store's test hook: its writer's transactions
        gc.collect()
        t0 = time.perf_counter()
        await engine.run(fan_out, WIDTH, rounds, run_id="measured")
        elapsed = time.perf_counter() - t0
        commits = len(inner._batches) - before
    return FanOut(WIDTH * rounds / elapsed, commits)


async def part3(server: pg.PostgresServer, rounds: int, repeats: int) -> float:
    configs = {"group commit (as is)": True, "one transaction per save": False}
    print(
        f"part 3: group commit, parallel() of {WIDTH} trivial steps x {rounds} rounds, "
        f"median of {repeats} alternated repeats"
    )
    got: dict[str, list[FanOut]] = {name: [] for name in configs}
    for r in range(repeats):
        names = list(configs) if r % 2 == 0 else list(reversed(configs))
        for name in names:
            got[name].append(await fan_out_once(server, configs[name], rounds))
    cols = (
        f"{'configuration':<25} | {'steps/s':>8} {'spread':>13} {'us/step':>8} "
        f"{'steps/commit':>12} | {'group ratio':>11} | target"
    )
    print(cols)
    print("-" * len(cols))
    group = statistics.median(x.rate for x in got["group commit (as is)"])
    ratio = 1.0
    for name, grouped in configs.items():
        rates = [x.rate for x in got[name]]
        rate = statistics.median(rates)
        per_commit = WIDTH * rounds / statistics.median(x.commits for x in got[name])
        ratio = group / rate
        target = "(measured)" if grouped else f"group >= {TARGET_GROUP:g}x"
        print(
            f"{name:<25} | {rate:>8,.0f} {spread(rates):>13} {1e6 / rate:>8.0f} "
            f"{per_commit:>12.1f} | {ratio:>10.1f}x | {target}",
            flush=True,
        )
    print(
        "steps/s = 100 * rounds / wall time of engine.run (plus its two run-record writes);\n"
        "steps/commit = saves / transactions that stored them (median); group ratio = group\n"
        "commit's steps/s / this row's. One transaction per save: each entry appended alone,\n"
        "in turn (the saves of one run lock its row: issued at once, they would queue anyway)"
    )
    return ratio


# -- part 4: durable step latency -------------------------------------------------------------


@tether.workflow(name="benchmarks.postgres.one_step")
async def one_step(i: int) -> int:
    return await work(i)


step_latencies: list[float] = []  # filled by `sequential`, seconds per step


@tether.workflow(name="benchmarks.postgres.sequential")
async def sequential(k: int) -> int:
    total = 0
    for i in range(k):
        t0 = time.perf_counter()
        total += await work(i)
        step_latencies.append(time.perf_counter() - t0)
    return total


async def latency(make: Callable[[], Store], runs: int) -> tuple[list[float], list[float]]:
    """(per-run seconds of a 1-step workflow, per-step seconds inside a sequential one)."""
    per_run: list[float] = []
    async with tether.open_engine(make()) as engine:
        for i in range(10):
            await engine.run(one_step, i, run_id=f"warm-{i}")
        gc.collect()
        for i in range(runs):
            t0 = time.perf_counter()
            await engine.run(one_step, i, run_id=f"one-{i}")
            per_run.append(time.perf_counter() - t0)
        step_latencies.clear()
        await engine.run(sequential, runs, run_id="sequential")
    return per_run, list(step_latencies)


async def part4(server: pg.PostgresServer, tmp: Path, runs: int, rounds: int) -> float:
    print(
        f"part 4: latency of one durable sequential step, {runs * rounds} samples each "
        f"({rounds} alternated rounds)"
    )
    configs: list[tuple[str, Callable[[], Store]]] = [
        (
            "SQLite FULL (baseline)",
            lambda: tether.SQLiteStore(tmp / f"l{next(_ids)}.db", synchronous="full"),
        ),
        ("PostgreSQL", lambda: server.store(pool_size=10)),
    ]
    samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n, _ in configs}
    for _ in range(rounds):
        for name, make in configs:
            per_run, per_step = await latency(make, runs)
            samples[name][0].extend(per_run)
            samples[name][1].extend(per_step)
    cols = (
        f"{'store':<24} {'run p50 ms':>10} {'run p99 ms':>10} {'ratio':>7}   "
        f"{'step p50 ms':>11} {'step p99 ms':>11} {'ratio':>7} | target"
    )
    print(cols)
    print("-" * len(cols))
    base: tuple[float, float] | None = None
    step_ratio = 1.0
    for name, _ in configs:
        per_run, per_step = samples[name]
        run50, run99 = pct(per_run, 50) * 1e3, pct(per_run, 99) * 1e3
        step50, step99 = pct(per_step, 50) * 1e3, pct(per_step, 99) * 1e3
        if base is None:
            base = (run50, step50)
        step_ratio = step50 / base[1]
        print(
            f"{name:<24} {run50:>10.3f} {run99:>10.3f} {run50 / base[0]:>6.1f}x   "
            f"{step50:>11.3f} {step99:>11.3f} {step_ratio:>6.1f}x | none set",
            flush=True,
        )
    print(
        "run = engine.run of a 1-step workflow (create the run + commit the step + its outcome);\n"
        "step = one `await work(i)` inside a workflow of sequential steps (one commit);\n"
        "ratio = p50 / SQLite FULL p50 (a file on the same disk as the cluster)"
    )
    return step_ratio


# -- main ---------------------------------------------------------------------------------


def cannot_run(reason: str, out: TextIO) -> None:
    print(f"postgres benchmark: cannot run: {reason}", file=out, flush=True)


async def run_all(server: pg.PostgresServer, quick: bool, tmp: Path) -> list[str]:
    at_four = await part1(server, runs=40 if quick else 300, rounds=1 if quick else 2, logdir=tmp)
    print()
    with_notify, polling = await part2(server, (10, 2) if quick else (100, 25), tmp)
    print()
    group = await part3(server, rounds=2 if quick else 5, repeats=1 if quick else 5)
    print()
    step_ratio = await part4(server, tmp, runs=30 if quick else 150, rounds=1 if quick else 2)
    print()

    def verdict(ok: bool) -> str:
        return "meets" if ok else "does NOT meet"

    return [
        f"workers: {WORKERS[-1]} processes give {at_four:.2f}x the steps/s of one "
        f"(no target; {os.cpu_count()} cpus)",
        f"submit-to-start p50 with notifications: {with_notify:.1f} ms "
        f"({verdict(with_notify < TARGET_P50_MS)} the < {TARGET_P50_MS:g} ms target); "
        f"polling only {polling:.0f} ms ({polling / with_notify:.0f}x)",
        f"group commit at W={WIDTH}: {group:.1f}x the steps/s of one transaction per save "
        f"({verdict(group >= TARGET_GROUP)} the {TARGET_GROUP:g}x target)",
        f"durable step on PostgreSQL: {step_ratio:.1f}x SQLite FULL's p50 (no target)",
    ]


def main(quick: bool) -> int:
    print("tether benchmark: PostgreSQL store and workers")
    print(
        "measures: durable steps/s by 1, 2, 4 worker processes; submit-to-start latency,\n"
        "          notifications vs polling; group commit vs one transaction per save;\n"
        "          durable step latency, PostgreSQL vs SQLite FULL"
    )
    print_environment(quick)
    print(
        f"target:   submit-to-start p50 < {TARGET_P50_MS:g} ms with notifications; group commit "
        f">= {TARGET_GROUP:g}x at W={WIDTH};\n          worker scaling and Postgres/SQLite "
        "step latency: ratios reported, no target"
    )
    if pg.find_bindir() is None:
        cannot_run("no PostgreSQL server binaries (initdb, pg_ctl) on this machine", sys.stdout)
        return 0
    try:
        import psycopg  # noqa: F401
    except ImportError:
        cannot_run("psycopg is not installed (pip install 'tether[postgres]')", sys.stdout)
        return 0
    try:
        server = pg.start_once()
    except pg.PostgresUnavailable as exc:
        cannot_run(str(exc), sys.stderr)
        return 1
    try:
        print(f"server:   {make_durable(server)}")
        print()
        with tempfile.TemporaryDirectory(prefix="tether-bench-pg-") as name:
            summary = trio.run(run_all, server, quick, Path(name))
    finally:
        pg.stop()
    for line in summary:
        print(line)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few runs, few repeats: a smoke run")
    ns = parser.parse_args()
    sys.exit(main(ns.quick))
