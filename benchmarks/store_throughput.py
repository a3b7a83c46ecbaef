"""Committed steps per second on SQLite, with and without group commit.

Run: ``python benchmarks/store_throughput.py [--quick]``

Part 1, throughput. A tether workflow runs R rounds of a ``parallel()``
block of W trivial steps (W = 1, 10, 100, 1000); every step's result is
committed to a ``tether.SQLiteStore`` (``synchronous="full"``: each commit
is fsynced) before the step returns to the workflow. The figure is committed
steps per second of wall time for the whole ``engine.run`` (which also pays
two run-record writes). Each configuration runs on a fresh file, measured
``group_commit=True`` and ``group_commit=False`` alternately; the ratio is
group / no group. ``commits`` is the number of transactions the writer
thread committed (the store's own count), so steps/commit is the batching
group commit achieved.

Part 2, latency of one durable sequential step: ``engine.run`` of a
workflow with one trivial step, repeated (each run creates its record,
commits the step, stores the final status: three writes), and the latency of
each ``await step(...)`` inside a workflow of sequential steps (one commit
each), on SQLite FULL and SQLite NORMAL against ``MemoryStore`` as the
baseline, p50 and p99.

Real time, real threads, a real file in a temporary directory. Timing is
reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

import tether
from _env import print_environment
from tether.stores import Store

TARGET_RATIO = 5.0  # group commit vs none, at 100 parallel steps
TARGET_WIDTH = 100
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


@tether.workflow(name="benchmarks.store_throughput.one_step")
async def one_step(i: int) -> int:
    return await work(i)


step_latencies: list[float] = []  # filled by `sequential`, seconds per step


@tether.workflow(name="benchmarks.store_throughput.sequential")
async def sequential(k: int) -> int:
    total = 0
    for i in range(k):
        t0 = time.perf_counter()
        total += await work(i)
        step_latencies.append(time.perf_counter() - t0)
    return total


def sqlite(path: Path, *, group_commit: bool = True, synchronous: str = "full") -> Store:
    store: Store = tether.SQLiteStore(path, synchronous=synchronous, group_commit=group_commit)
    return store


def commits(store: object) -> str:
    batches = getattr(store, "_batches", None)  # the store's test hook, if it has one
    return "?" if batches is None else str(len(batches))


# -- part 1: throughput ------------------------------------------------------------------


async def throughput(tmp: Path, width: int, steps: int, group_commit: bool) -> tuple[float, str]:
    """(committed steps per second, commits) of one run of *steps* steps, W at a time."""
    rounds = max(1, steps // width)
    store = sqlite(tmp / f"t{next(_ids)}.db", group_commit=group_commit)
    async with tether.open_engine(store) as engine:
        await engine.run(fan_out, 1, 1, run_id="warm-up")  # opens the reader, warms caches
        before = commits(store)
        gc.collect()
        t0 = time.perf_counter()
        await engine.run(fan_out, width, rounds, run_id="measured")
        elapsed = time.perf_counter() - t0
        after = commits(store)
    n = "?" if "?" in (before, after) else str(int(after) - int(before))
    return width * rounds / elapsed, n


async def part1(tmp: Path, widths: tuple[int, ...], steps: int, repeats: int) -> float | None:
    print(
        f"part 1: committed steps/s, SQLite synchronous=FULL, {steps} steps per run "
        f"(max(steps, W) for W > steps), median of {repeats}"
    )
    cols = (
        f"{'parallel W':>10} {'steps':>6} | {'group steps/s':>13} {'us/step':>8} "
        f"{'steps/commit':>12} | {'no-group steps/s':>16} {'us/step':>8} | {'ratio':>6}"
    )
    print(cols)
    print("-" * len(cols))
    at_target = None
    for width in widths:
        n = max(steps, width)
        grouped: list[float] = []
        alone: list[float] = []
        grouped_commits = "?"
        for _ in range(repeats):  # alternated, so drift hits both alike
            rate, grouped_commits = await throughput(tmp, width, n, True)
            grouped.append(rate)
            rate, _ = await throughput(tmp, width, n, False)
            alone.append(rate)
        g, a = statistics.median(grouped), statistics.median(alone)
        ratio = g / a
        if width == TARGET_WIDTH:
            at_target = ratio
        per_commit = "?" if grouped_commits == "?" else f"{n / int(grouped_commits):.1f}"
        print(
            f"{width:>10} {n:>6} | {g:>13,.0f} {1e6 / g:>8.0f} {per_commit:>12} | "
            f"{a:>16,.0f} {1e6 / a:>8.0f} | {ratio:>5.1f}x",
            flush=True,
        )
    print(
        "steps/s = W * rounds / wall time of engine.run (two run-record writes included);\n"
        "us/step = 1e6 / steps/s; steps/commit = steps / transactions the writer committed\n"
        "(last repeat; no-group commits once per step); ratio = group / no-group steps/s"
    )
    return at_target


# -- part 2: latency -----------------------------------------------------------------------


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def latency(make: Callable[[], Store], runs: int) -> tuple[list[float], list[float]]:
    """(per-run seconds of a 1-step workflow, per-step seconds inside a sequential one)."""
    per_run: list[float] = []
    async with tether.open_engine(make()) as engine:
        for i in range(10):  # warm up
            await engine.run(one_step, i, run_id=f"warm-{i}")
        gc.collect()
        for i in range(runs):
            t0 = time.perf_counter()
            await engine.run(one_step, i, run_id=f"one-{i}")
            per_run.append(time.perf_counter() - t0)
        step_latencies.clear()
        await engine.run(sequential, runs, run_id="sequential")
    return per_run, list(step_latencies)


async def part2(tmp: Path, runs: int) -> None:
    print()
    print(f"part 2: latency of one durable sequential step, {runs} samples each")
    configs: list[tuple[str, Callable[[], Store]]] = [
        ("MemoryStore (baseline)", tether.MemoryStore),
        ("SQLite FULL", lambda: sqlite(tmp / f"l{next(_ids)}.db")),
        ("SQLite NORMAL", lambda: sqlite(tmp / f"l{next(_ids)}.db", synchronous="normal")),
    ]
    cols = (
        f"{'store':<24} {'run p50 ms':>10} {'run p99 ms':>10} {'ratio':>7}   "
        f"{'step p50 ms':>11} {'step p99 ms':>11} {'ratio':>7}"
    )
    print(cols)
    print("-" * len(cols))
    base: tuple[float, float] | None = None
    for name, make in configs:
        per_run, per_step = await latency(make, runs)
        run50, run99 = pct(per_run, 50) * 1e3, pct(per_run, 99) * 1e3
        step50, step99 = pct(per_step, 50) * 1e3, pct(per_step, 99) * 1e3
        if base is None:
            base = (run50, step50)
        print(
            f"{name:<24} {run50:>10.3f} {run99:>10.3f} {run50 / base[0]:>6.1f}x   "
            f"{step50:>11.3f} {step99:>11.3f} {step50 / base[1]:>6.1f}x",
            flush=True,
        )
    print(
        "run = engine.run of a 1-step workflow (create run + commit the step + final status);\n"
        "step = one `await work(i)` inside a workflow of sequential steps (one commit);\n"
        "ratio = p50 / MemoryStore p50"
    )


async def main(quick: bool) -> None:
    widths = (1, 10, 100) if quick else (1, 10, 100, 1000)
    steps = 100 if quick else 2000
    repeats = 1 if quick else 3
    runs = 30 if quick else 300
    print("tether benchmark: SQLite store throughput (group commit) and durable step latency")
    print(
        "measures: committed steps/s for W parallel steps, group_commit=True vs False;\n"
        "          latency of a durable sequential step, SQLite vs MemoryStore"
    )
    print_environment(quick)
    print(f"target:   group commit >= {TARGET_RATIO:g}x steps/s at W={TARGET_WIDTH}")
    print()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as name:
        tmp = Path(name)
        at_target = await part1(tmp, widths, steps, repeats)
        await part2(tmp, runs)
    print()
    if at_target is not None:
        ok = "meets" if at_target >= TARGET_RATIO else "does NOT meet"
        print(
            f"group commit at W={TARGET_WIDTH}: {at_target:.1f}x the steps/s without it "
            f"({ok} the {TARGET_RATIO:g}x target)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few steps, few repeats: a smoke run")
    ns = parser.parse_args()
    trio.run(main, ns.quick)
