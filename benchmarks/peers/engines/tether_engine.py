"""tether, driven through its public API under ``trio.run``.

What hangs in *cancel*: ``Store.append``, the one store call that writes
journal entries, i.e. the checkpoint save of every completed step (tether's
saver hands a finished ``parallel()`` step's record to it, group-committed).
The store is ``tether.testing.FaultyStore(tether.SQLiteStore(path))`` with a
``Do`` fault in front of ``append`` that waits in the shared :class:`Hang`, so
the hang is where the engine's durable write happens and SQLite itself is
never reached. This is the shape of ``benchmarks/cancel_latency.py`` part 2
(there the inner store is a ``MemoryStore``; the hang sits in front of it, so
the inner store plays no part in the overshoot).

The durable store is ``SQLiteStore`` with its defaults (WAL,
``synchronous="full"``: every commit fsynced); in memory, ``MemoryStore``.
One engine is opened per scenario call (per width for *cancel*), a fresh
database file in a temporary directory, and every trial or repeat is a new
run id. The no-op step is ``benchmarks/step_overhead.py``'s ``trivial``
(returns its argument plus one).
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path

import trio
from _protocol import (
    CancelConfig,
    CancelRecorder,
    CancelResult,
    Hang,
    MemoryConfig,
    MemoryMeter,
    MemoryResult,
    ParallelConfig,
    ParallelResult,
    ResumeConfig,
    ResumeResult,
    SiblingConfig,
    SiblingResult,
    StepsConfig,
    StepsResult,
    ThreadCount,
    main,
    trio_deadline_trial,
    trio_task_count,
)

import tether
import tether.testing

ENGINE = "tether"
DISTRIBUTION = None  # installed from this repository


def version() -> str:
    return tether.__version__


class _State:
    """What the steps count and wait on (reset by each scenario)."""

    ran = 0
    b_ran = 0
    b_fixed = False
    fail_at_end = True
    parked = 0
    all_parked: trio.Event | None = None
    release: trio.Event | None = None
    target = 0


S = _State()


@tether.step(name="noop")
async def noop(i: int) -> int:
    S.ran += 1
    return i + 1


@tether.workflow(name="peers.sequential")
async def sequential(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await noop(total)
    return total


@tether.workflow(name="peers.fanout")
async def fanout(n: int) -> int:
    async with tether.parallel() as p:
        for i in range(n):
            p.start_soon(noop, i)
    return n


@tether.workflow(name="peers.sequential_then_fail")
async def sequential_then_fail(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await noop(total)
    if S.fail_at_end:
        raise RuntimeError("failing at the end, to be resumed")
    return total


@tether.step(name="sibling_a")
async def sibling_a() -> int:
    S.ran += 1
    return 1


@tether.step(name="sibling_b")
async def sibling_b(wait: float) -> int:
    S.b_ran += 1
    await trio.sleep(wait)  # A's save is in flight meanwhile
    if not S.b_fixed:
        raise RuntimeError("B fails")
    return 2


@tether.workflow(name="peers.sibling")
async def sibling(wait: float) -> int:
    async with tether.parallel() as p:
        a = p.start_soon(sibling_a)
        b = p.start_soon(sibling_b, wait)
    return a.result + b.result


@tether.step(name="park")
async def park(i: int) -> int:
    S.parked += 1
    if S.parked == S.target and S.all_parked is not None:
        S.all_parked.set()
    assert S.release is not None
    await S.release.wait()
    return i


@tether.workflow(name="peers.two_steps")
async def two_steps(i: int) -> int:
    first = await noop(i)
    return await park(first)


@asynccontextmanager
async def sqlite_engine(
    store_wrapper: type[tether.testing.FaultyStore] | None = None,
) -> AsyncIterator[tuple[tether.Engine, tether.testing.FaultyStore | None]]:
    with tempfile.TemporaryDirectory(prefix="peers-tether-") as folder:
        inner = tether.SQLiteStore(Path(folder) / "runs.db")
        store = None if store_wrapper is None else store_wrapper(inner)
        async with tether.open_engine(store or inner) as engine:
            yield engine, store


# -- 1. cancel ------------------------------------------------------------------------------


async def _cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)
    hang = Hang(cfg.hang_limit)

    async def hung(call: tether.testing.Call) -> None:
        await hang.wait_trio()

    async with sqlite_engine(tether.testing.FaultyStore) as (engine, store):
        assert store is not None
        store.inject("append", tether.testing.Do(hung))
        for i in rec.trials():
            hang = Hang(cfg.hang_limit)
            tasks, threads = trio_task_count(), ThreadCount()
            trial = await trio_deadline_trial(
                lambda i=i: engine.run(fanout, cfg.width, run_id=f"cancel-{i}"), cfg, rec.rng
            )
            rec.add(trial, hang, tasks=trio_task_count() - tasks, threads=threads.leftover())
            hang.release()
            if rec.done():
                break
    return rec.finish("SQLiteStore; the hang is a FaultyStore Do fault in front of append")


def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    return trio.run(_cancel, cfg)


# -- 2. sibling -----------------------------------------------------------------------------


async def _sibling(cfg: SiblingConfig) -> SiblingResult:
    S.ran, S.b_ran, S.b_fixed = 0, 0, False

    async def slow(call: tether.testing.Call) -> None:
        await trio.sleep(cfg.slow_save)

    def a_save(run_id: str, entries: list[tether.stores.Entry]) -> bool:
        return "sibling_a" in entries[0].key

    b_failed = completed = False
    async with sqlite_engine(tether.testing.FaultyStore) as (engine, store):
        assert store is not None
        store.inject("append", tether.testing.Do(slow), when=a_save)
        try:
            await engine.run(sibling, cfg.slow_save / 2, run_id="sibling")
        except* RuntimeError:
            b_failed = S.b_ran == 1
        S.b_fixed = True
        completed = await engine.resume("sibling") == 3
    return SiblingResult(a_executions=S.ran, b_failed=b_failed, completed=completed)


def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    return trio.run(_sibling, cfg)


# -- 3. steps and 4. parallel ---------------------------------------------------------------


async def _timed_runs(
    wf: tether.Workflow[[int], int], n: int, repeats: int, durable: bool
) -> tuple[float, int]:
    """Best wall time of *repeats* runs of ``wf(n)`` (after a warm-up run), and steps run."""

    async def timed(engine: tether.Engine, k: int, run_id: str) -> float:
        gc.collect()
        t0 = time.perf_counter()
        await engine.run(wf, k, run_id=run_id)
        return time.perf_counter() - t0

    best, ran = float("inf"), 0
    cm = sqlite_engine() if durable else _memory_engine()
    async with cm as (engine, _):
        await timed(engine, min(n, 200), "warm-up")
        for i in range(repeats):
            S.ran = 0
            best = min(best, await timed(engine, n, f"run-{i}"))
            ran = S.ran
    return best, ran


@asynccontextmanager
async def _memory_engine() -> AsyncIterator[tuple[tether.Engine, None]]:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        yield engine, None


def scenario_steps(cfg: StepsConfig) -> StepsResult:
    best, ran = trio.run(_timed_runs, sequential, cfg.n, cfg.repeats, cfg.durable)
    store = "SQLiteStore" if cfg.durable else "MemoryStore"
    return StepsResult(
        us_per_step=best / cfg.n * 1e6,
        steps_ran=ran,
        notes=f"{store}; best of {cfg.repeats} runs, the run's fixed cost included",
    )


def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    best, ran = trio.run(_timed_runs, fanout, cfg.n, cfg.repeats, True)
    return ParallelResult(seconds=best, steps_ran=ran, notes="SQLiteStore; one parallel() block")


# -- 5. resume ------------------------------------------------------------------------------


async def _resume(cfg: ResumeConfig) -> ResumeResult:
    S.fail_at_end = True
    async with sqlite_engine() as (engine, _):
        with suppress(RuntimeError):
            await engine.run(sequential_then_fail, cfg.n, run_id="long")
        S.fail_at_end, S.ran = False, 0
        t0 = time.perf_counter()
        result = await engine.resume("long")
        seconds = time.perf_counter() - t0
    if result != cfg.n:
        raise RuntimeError(f"the resumed run returned {result}, not {cfg.n}")
    return ResumeResult(seconds=seconds, steps_reexecuted=S.ran, notes="SQLiteStore")


def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    return trio.run(_resume, cfg)


# -- 6. memory ------------------------------------------------------------------------------


async def _memory(cfg: MemoryConfig) -> MemoryResult:
    S.parked, S.target = 0, cfg.runs
    S.all_parked, S.release = trio.Event(), trio.Event()
    async with tether.open_engine(tether.MemoryStore()) as engine:
        await engine.run(sequential, 1, run_id="warm-up")  # first-use caches, outside the peak
        meter = MemoryMeter()
        async with trio.open_nursery() as nursery:
            for i in range(cfg.runs):
                nursery.start_soon(partial(engine.run, two_steps, i, run_id=f"run-{i}"))
            await S.all_parked.wait()
            peak = meter.stop()
            started = S.parked
            S.release.set()
    return MemoryResult(peak_bytes=peak, runs_started=started, notes="MemoryStore")


def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    return trio.run(_memory, cfg)


if __name__ == "__main__":
    main(sys.modules[__name__])
