"""Committed steps per second with group commit, and the latency of one durable step.

Run: ``python benchmarks/store_throughput.py [--quick]``

Part 1, group commit. A tether workflow runs rounds of a ``parallel()``
block of W trivial steps (W = 1, 10, 100, 1000); every step's result is
durable (fsynced) before the block exits. The figure is committed steps per
second of wall time for the whole ``engine.run`` (which also pays two
run-record writes). Two ways of committing, alternated run by run on fresh
stores, each repeated at least five times (median, and the lowest and highest
in brackets):

* ``group``: the engine as it is: the records that wait at the same moment go
  to the store in one ``append`` (and SQLite, ``group_commit=True``, commits
  appends queued at the same moment in one transaction);
* ``one per save``: every record in an ``append`` of its own, committed alone
  (a wrapper splits each append; SQLite with ``group_commit=False``).

On SQLiteStore (``synchronous="full"``: each commit is fsynced) and on
FileStore (each append one fsynced file, whatever its number of entries,
then a fsync of its folder). ``ratio`` is group / one per save.

Part 2, latency of one durable sequential step: ``await step(...)`` inside a
workflow of sequential steps (one commit each), and, in the same loop, in
alternated chunks of 25, one bare ``sqlite3`` insert and commit with the
same settings (WAL, the same ``synchronous``, a table shaped like the
store's, a row of the same size) in another file of the same folder: the
floor. ``thread hop``: the same bare commit run in a thread that waits for it,
woken the cheapest way measured (``queue.SimpleQueue``) and waking the caller
the cheapest way (``run_sync_soon`` rescheduling the waiting task), in chunks
alternated with bare commits in the event loop's thread: the floor of any
store that keeps fsyncs off the event loop's thread. The same for the store's
``append`` alone, without the engine (the store's share). p50 and p99;
``ratio`` is step / bare at p50. MemoryStore is shown for scale.

Real time, real threads, real files in a temporary directory. Timing is
reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import queue
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import outcome
import trio

import tether
from _env import print_environment
from tether.stores import Entry, Store

#: group commit vs one commit per save at TARGET_WIDTH parallel steps, at least
TARGET_RATIO = {"sqlite full": 5.0, "file": 2.0}
TARGET_WIDTH = 100
TARGET_LATENCY = 1.3  # a durable sequential step on SQLite FULL vs a bare insert+commit, p50
_ids = itertools.count()


@tether.step(name="work")
async def work(i: int) -> int:
    return i


@tether.workflow(name="benchmarks.store_throughput.fan_out")
async def fan_out(width: int, rounds: int) -> int:
    total = 0
    for _ in range(rounds):
        async with tether.parallel() as p:
            handles = [p.start_soon(work, i) for i in range(width)]
        total += sum(h.result for h in handles)
    return total


def make_store(kind: str, folder: Path, *, grouped: bool) -> Store:
    """A fresh store of *kind* ("sqlite full" or "file") in *folder*, grouped or not."""
    path = folder / f"s{next(_ids)}"
    store: Store
    if kind == "file":
        path.mkdir()
        store = tether.FileStore(path)
    else:
        store = tether.SQLiteStore(
            path.with_suffix(".db"), synchronous=kind.split()[1], group_commit=grouped
        )
    if grouped:
        return store
    # tether.bench's wrapper (`tether bench throughput` measures the same way). Imported
    # here, not at the top: regression.py runs this file's grouped measurement under older
    # trees, which have no tether.bench.
    from tether.bench import OneCommitPerSave

    return OneCommitPerSave(store)


# -- part 1: group commit ------------------------------------------------------------------


async def throughput(kind: str, folder: Path, width: int, steps: int, grouped: bool) -> float:
    """Committed steps per second of one run of *steps* steps, *width* at a time."""
    rounds = max(1, steps // width)
    async with tether.open_engine(make_store(kind, folder, grouped=grouped)) as engine:
        await engine.run(fan_out, 1, 1, run_id="warm-up")  # opens readers, warms caches
        gc.collect()
        t0 = time.perf_counter()
        await engine.run(fan_out, width, rounds, run_id="measured")
        elapsed = time.perf_counter() - t0
    return width * rounds / elapsed


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


async def part1(
    folder: Path, plan: list[tuple[str, tuple[int, ...], int]], repeats: int
) -> dict[str, float]:
    print(
        f"part 1: committed steps/s, group commit vs one commit per save; median of {repeats} "
        "alternated repeats [lowest-highest]"
    )
    cols = (
        f"{'store':<12} {'W':>5} {'steps':>6} | {'group steps/s':>25} | "
        f"{'one per save steps/s':>25} | {'ratio':>15}"
    )
    print(cols)
    print("-" * len(cols))
    at_target: dict[str, float] = {}
    for kind, widths, steps in plan:
        for width in widths:
            n = max(steps, width)
            grouped: list[float] = []
            alone: list[float] = []
            ratios: list[float] = []
            for _ in range(repeats):  # alternated, so drift hits both alike
                grouped.append(await throughput(kind, folder, width, n, True))
                alone.append(await throughput(kind, folder, width, n, False))
                ratios.append(grouped[-1] / alone[-1])
            ratio = statistics.median(grouped) / statistics.median(alone)
            if width == TARGET_WIDTH:
                at_target[kind] = ratio
            low, high = min(ratios), max(ratios)
            print(
                f"{kind:<12} {width:>5} {n:>6} | {spread(grouped):>25} | {spread(alone):>25} | "
                f"{ratio:>5.1f}x [{low:.1f}-{high:.1f}]",
                flush=True,
            )
    print(
        "steps/s = W * rounds / wall time of engine.run (two run-record writes included);\n"
        "ratio = median group / median one per save, [lowest-highest] of the per-repeat ratios"
    )
    return at_target


# -- part 2: latency ---------------------------------------------------------------------------

step_latencies: list[float] = []  # filled by `sequential`, seconds per step
bare_latencies: list[float] = []  # ...and the bare commit between its steps
_bare: Callable[[int], None] | None = None  # one bare insert+commit, set for a run


class ThreadHop:
    """One thread that runs a call for a Trio task: the cheapest hand-off measured.

    The task queues the call (``queue.SimpleQueue``, which wakes the thread
    with one futex wake) and parks; the thread runs it and wakes the task
    with one ``run_sync_soon`` callback that reschedules it (no event).
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="thread hop", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            fn, arg, task, token = job
            token.run_sync_soon(trio.lowlevel.reschedule, task, outcome.capture(fn, arg))

    async def run(self, fn: Callable[[int], None], arg: int) -> None:
        task = trio.lowlevel.current_task()
        self.jobs.put((fn, arg, task, trio.lowlevel.current_trio_token()))
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()


CHUNK = 25  # steps, then bare commits, in alternated chunks of this many


@tether.workflow(name="benchmarks.store_throughput.sequential")
async def sequential(k: int) -> int:
    total = 0
    for start in range(0, k, CHUNK):
        for i in range(start, min(k, start + CHUNK)):
            t0 = time.perf_counter()
            total += await work(i)
            step_latencies.append(time.perf_counter() - t0)
        if _bare is not None:
            for i in range(start, min(k, start + CHUNK)):
                t0 = time.perf_counter()
                _bare(i)  # blocks the event loop, as the floor: no thread, no wake-up
                bare_latencies.append(time.perf_counter() - t0)
    return total


def bare_sqlite(path: Path, synchronous: str) -> tuple[Callable[[int], None], sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE; INSERT; COMMIT`` per call on a table like the store's."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute(
        "CREATE TABLE entries (run_id TEXT NOT NULL, seq INTEGER NOT NULL, ikey TEXT NOT NULL, "
        "data TEXT NOT NULL, PRIMARY KEY (run_id, seq), UNIQUE (run_id, ikey))"
    )
    now = tether.stores.utcnow()
    row = Entry(run_id="bare", key="work#0", value="0", started_at=now, finished_at=now, seq=1)

    seqs = itertools.count(1)

    def commit(i: int) -> None:
        data = json.dumps(row.to_json())  # the same size as the store's rows
        seq = next(seqs)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO entries VALUES (?, ?, ?, ?)", ("bare", seq, f"{seq:064d}", data))
        conn.execute("COMMIT")

    return commit, conn


async def latency(kind: str, folder: Path, runs: int) -> tuple[list[float], list[float]]:
    """(per-step seconds, per bare commit seconds) of a workflow of *runs* sequential steps."""
    global _bare
    conn = None
    if kind == "memory":
        store: Store = tether.MemoryStore()
    else:
        synchronous = kind.split()[1]
        store = tether.SQLiteStore(folder / f"l{next(_ids)}.db", synchronous=synchronous)
        _bare, conn = bare_sqlite(folder / f"bare{next(_ids)}.db", synchronous)
    try:
        async with tether.open_engine(store) as engine:
            await engine.run(sequential, 10, run_id="warm-up")
            step_latencies.clear()
            bare_latencies.clear()
            gc.collect()
            await engine.run(sequential, runs, run_id="sequential")
    finally:
        _bare = None
        if conn is not None:
            conn.close()
    return list(step_latencies), list(bare_latencies)


async def hop_alone(synchronous: str, folder: Path, runs: int) -> tuple[list[float], list[float]]:
    """(seconds per bare commit through a :class:`ThreadHop`; in the event loop), interleaved."""
    hop = ThreadHop()
    bare, conn = bare_sqlite(folder / f"bare{next(_ids)}.db", synchronous)
    hopped: list[float] = []
    bares: list[float] = []
    try:
        for i in range(10):  # warm up
            await hop.run(bare, i)
        gc.collect()
        for start in range(0, runs, CHUNK):
            for i in range(start, min(runs, start + CHUNK)):
                t0 = time.perf_counter()
                await hop.run(bare, i)
                hopped.append(time.perf_counter() - t0)
            for i in range(start, min(runs, start + CHUNK)):
                t0 = time.perf_counter()
                bare(i)
                bares.append(time.perf_counter() - t0)
    finally:
        hop.close()
        conn.close()
    return hopped, bares


def _entry(run_id: str, i: int, now: Any) -> Entry:
    return Entry(run_id=run_id, key=f"work#{i}", value=str(i), started_at=now, finished_at=now)


async def append_alone(
    synchronous: str, folder: Path, runs: int
) -> tuple[list[float], list[float]]:
    """(seconds per ``store.append`` of one entry, no engine; per bare commit), interleaved."""
    store = tether.SQLiteStore(folder / f"a{next(_ids)}.db", synchronous=synchronous)
    bare, conn = bare_sqlite(folder / f"bare{next(_ids)}.db", synchronous)
    appends: list[float] = []
    bares: list[float] = []
    now = tether.stores.utcnow()
    await store.open()
    try:
        record = tether.stores.RunRecord(
            run_id="alone", workflow="w", args="[]", created_at=now, updated_at=now
        )
        await store.create_run(record)
        for i in range(10):  # warm up
            await store.append("alone", [_entry("alone", -1 - i, now)])
        for start in range(0, runs, CHUNK):
            for i in range(start, min(runs, start + CHUNK)):
                entry = _entry("alone", i, now)
                t0 = time.perf_counter()
                await store.append("alone", [entry])
                appends.append(time.perf_counter() - t0)
            for i in range(start, min(runs, start + CHUNK)):
                t0 = time.perf_counter()
                bare(i)
                bares.append(time.perf_counter() - t0)
    finally:
        await store.close()
        conn.close()
    return appends, bares


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def part2(folder: Path, runs: int, repeats: int) -> list[tuple[float, float]]:
    """The table of part 2; per repeat on sqlite full: (step / bare, thread hop / bare) at p50."""
    print()
    print(
        f"part 2: latency of one durable sequential step, {runs} steps, against as many bare "
        f"sqlite3\n        inserts+commits with the same settings (the floor), in alternated "
        f"chunks of {CHUNK};\n        sqlite full: {repeats} runs of {runs} steps, samples pooled"
    )
    cols = (
        f"{'store':<14} {'step p50 ms':>11} {'step p99 ms':>11} | {'bare p50 ms':>11} "
        f"{'bare p99 ms':>11} | {'step/bare p50':>13}"
    )
    print(cols)
    print("-" * len(cols))
    at_target: list[tuple[float, float]] = []

    async def sqlite_full() -> tuple[list[float], list[float]]:
        pooled: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):  # a step's run, then the thread hop's, alternated
            steps, bare = await latency("sqlite full", folder, runs)
            hopped, hop_bare = await hop_alone("full", folder, runs)
            at_target.append((pct(steps, 50) / pct(bare, 50), pct(hopped, 50) / pct(hop_bare, 50)))
            pooled[0].extend(steps)
            pooled[1].extend(bare)
            hops[0].extend(hopped)
            hops[1].extend(hop_bare)
        return pooled

    hops: tuple[list[float], list[float]] = ([], [])

    async def full_hops() -> tuple[list[float], list[float]]:
        await trio.lowlevel.checkpoint()
        return hops  # measured by sqlite_full, alternated with its steps

    rows: list[tuple[str, Callable[[], Any]]] = [
        ("memory", lambda: latency("memory", folder, runs)),
        ("sqlite full", sqlite_full),
        ("  thread hop", full_hops),
        ("  append alone", lambda: append_alone("full", folder, runs)),
        ("sqlite normal", lambda: latency("sqlite normal", folder, runs)),
        ("  thread hop", lambda: hop_alone("normal", folder, runs)),
        ("  append alone", lambda: append_alone("normal", folder, runs)),
    ]
    for kind, measure in rows:
        steps, bare = await measure()
        s50, s99 = pct(steps, 50) * 1e3, pct(steps, 99) * 1e3
        if bare:
            b50, b99 = pct(bare, 50) * 1e3, pct(bare, 99) * 1e3
            rest = f"{b50:>11.3f} {b99:>11.3f} | {s50 / b50:>12.2f}x"
        else:
            rest = f"{'-':>11} {'-':>11} | {'-':>13}"
        print(f"{kind:<14} {s50:>11.3f} {s99:>11.3f} | {rest}", flush=True)
    print(
        "step = one `await work(i)` inside a workflow of sequential steps (one commit);\n"
        "append alone = one `await store.append(run_id, [entry])`, no engine (the store's share);\n"
        "bare = one BEGIN IMMEDIATE / INSERT / COMMIT on its own connection in the event loop's\n"
        "thread (WAL, the same synchronous, a row of the same size); thread hop = the same bare\n"
        "commit run in a waiting thread, handed over and back the cheapest way (the floor of\n"
        "keeping the fsync off the event loop's thread)"
    )
    return at_target


async def main(quick: bool) -> None:
    repeats = 5 if quick else 7
    if quick:
        plan = [("sqlite full", (1, 10, 100), 100), ("file", (10, 100), 100)]
    else:
        plan = [("sqlite full", (1, 10, 100, 1000), 1000), ("file", (1, 10, 100), 300)]
    runs = 50 if quick else 500
    print("tether benchmark: store throughput (group commit) and durable step latency")
    print(
        "measures: committed steps/s for W parallel steps, group commit vs one commit per save;\n"
        "          latency of a durable sequential step against a bare sqlite3 commit"
    )
    print_environment(quick)
    targets = ", ".join(f"{kind} >= {r:g}x" for kind, r in TARGET_RATIO.items())
    print(
        f"target:   group commit at W={TARGET_WIDTH}: {targets} one commit per save; a step "
        f"on sqlite full\n          <= {TARGET_LATENCY:g}x a bare insert+commit (p50)"
    )
    print()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as name:
        folder = Path(name)
        at_target = await part1(folder, plan, repeats)
        step_ratios = await part2(folder, runs, 1 if quick else 3)
    print()
    for kind, ratio in at_target.items():
        ok = "meets" if ratio >= TARGET_RATIO[kind] else "does NOT meet"
        print(
            f"group commit at W={TARGET_WIDTH} on {kind}: {ratio:.1f}x the steps/s of one commit "
            f"per save ({ok} the {TARGET_RATIO[kind]:g}x target)"
        )
    ratios = sorted(step for step, _ in step_ratios)
    ratio = statistics.median(ratios)
    ok = "meets" if ratios[-1] <= TARGET_LATENCY else "does NOT meet"
    print(
        f"durable sequential step on sqlite full: {ratio:.2f}x a bare insert+commit at p50, "
        f"median of {len(ratios)} runs [{ratios[0]:.2f}-{ratios[-1]:.2f}] ({ok} the "
        f"{TARGET_LATENCY:g}x target in every run)"
    )
    hops = sorted(hop for _, hop in step_ratios)
    above = sorted(step / hop for step, hop in step_ratios)
    print(
        f"  of which the thread hop alone (the same bare commit through the cheapest hand-off): "
        f"{statistics.median(hops):.2f}x [{hops[0]:.2f}-{hops[-1]:.2f}];\n"
        f"  the step over that floor: {statistics.median(above):.2f}x "
        f"[{above[0]:.2f}-{above[-1]:.2f}]"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few steps, few repeats: a smoke run")
    ns = parser.parse_args()
    trio.run(main, ns.quick)
