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

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio
from _protocol import (
    CancelConfig,
    CancelRecorder,
    CancelResult,
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
    main,
)

import tether
import tether.testing
from engines._common import (
    Runner,
    SiblingCase,
    SiblingFailure,
    Tally,
    best_run,
    resume_after_failure,
    trio_scenario,
)

ENGINE = "tether"
DISTRIBUTION = None  # installed from this repository


def version() -> str:
    return tether.__version__


S = Tally()


@tether.step(name="noop")
async def noop(i: int) -> int:
    S.ran += 1
    return i + 1


@tether.workflow(name="peers.sequential")
async def sequential(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await noop(total)
    S.end_of_run()  # the first run of scenario 5 fails here
    return total


@tether.workflow(name="peers.fanout")
async def fanout(n: int) -> int:
    async with tether.parallel() as p:
        for i in range(n):
            p.start_soon(noop, i)
    return n


@tether.step(name="sibling_a")
async def sibling_a() -> int:
    S.sibling.a()
    return 1


@tether.step(name="sibling_b")
async def sibling_b(wait: float) -> int:
    fails = S.sibling.b_starts()
    await trio.sleep(wait)  # A's save is in flight meanwhile
    if fails:
        S.sibling.fail()
    return 2


@tether.workflow(name="peers.sibling")
async def sibling(wait: float) -> int:
    async with tether.parallel() as p:
        a = p.start_soon(sibling_a)
        b = p.start_soon(sibling_b, wait)
    return a.result + b.result


@tether.step(name="park")
async def park(i: int) -> int:
    await S.parking.park()
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


@trio_scenario
async def scenario_cancel(cfg: CancelConfig) -> CancelResult:
    rec = CancelRecorder(cfg)

    async def hung(call: tether.testing.Call) -> None:
        await rec.hang.wait_trio()  # the current trial's

    async with sqlite_engine(tether.testing.FaultyStore) as (engine, store):
        assert store is not None
        store.inject("append", tether.testing.Do(hung))
        for i, hang in rec.trials():
            call = partial(engine.run, fanout, cfg.width, run_id=f"cancel-{i}")
            await rec.trio_trial(call, hang)
    return rec.finish("SQLiteStore; the hang is a FaultyStore Do fault in front of append")


# -- 2. sibling -----------------------------------------------------------------------------


@trio_scenario
async def scenario_sibling(cfg: SiblingConfig) -> SiblingResult:
    S.sibling = case = SiblingCase(cfg)

    async def slow(call: tether.testing.Call) -> None:
        await trio.sleep(cfg.slow_save)

    def a_save(run_id: str, entries: list[tether.stores.Entry]) -> bool:
        return "sibling_a" in entries[0].key

    async with sqlite_engine(tether.testing.FaultyStore) as (engine, store):
        assert store is not None
        store.inject("append", tether.testing.Do(slow), when=a_save)
        try:
            await engine.run(sibling, cfg.slow_save / 2, run_id="sibling")
        except* SiblingFailure:
            case.first_run_failed()
        case.fixed = True
        completed = await engine.resume("sibling") == 3
    return case.result(completed)


# -- 3. steps and 4. parallel ---------------------------------------------------------------


@asynccontextmanager
async def _memory_engine() -> AsyncIterator[tuple[tether.Engine, None]]:
    async with tether.open_engine(tether.MemoryStore()) as engine:
        yield engine, None


def _runner(engine: tether.Engine, wf: tether.Workflow[[int], int]) -> Runner:
    """``best_run``'s ``run(n, run_id)``: a run of ``wf(n)`` on *engine*."""
    return lambda n, run_id: engine.run(wf, n, run_id=run_id)


@trio_scenario
async def scenario_steps(cfg: StepsConfig) -> StepsResult:
    async with sqlite_engine() if cfg.durable else _memory_engine() as (engine, _):
        best = await best_run(S, cfg.n, cfg.repeats, _runner(engine, sequential))
    return best.steps(cfg, "SQLiteStore" if cfg.durable else "MemoryStore")


@trio_scenario
async def scenario_parallel(cfg: ParallelConfig) -> ParallelResult:
    async with sqlite_engine() as (engine, _):
        best = await best_run(S, cfg.n, cfg.repeats, _runner(engine, fanout))
    return best.parallel("SQLiteStore; one parallel() block")


# -- 5. resume ------------------------------------------------------------------------------


@trio_scenario
async def scenario_resume(cfg: ResumeConfig) -> ResumeResult:
    async with sqlite_engine() as (engine, _):
        r = await resume_after_failure(
            S,
            cfg.n,
            partial(engine.run, sequential, cfg.n, run_id="long"),
            partial(engine.resume, "long"),
        )
    return r.result(notes="SQLiteStore")


# -- 6. memory ------------------------------------------------------------------------------


@trio_scenario
async def scenario_memory(cfg: MemoryConfig) -> MemoryResult:
    S.parking.expect(cfg.runs, trio.Event)
    async with tether.open_engine(tether.MemoryStore()) as engine:
        await engine.run(sequential, 1, run_id="warm-up")  # first-use caches, outside the peak
        meter = MemoryMeter()
        async with trio.open_nursery() as nursery:
            for i in range(cfg.runs):
                nursery.start_soon(partial(engine.run, two_steps, i, run_id=f"run-{i}"))
            await S.parking.measure(meter)
    return S.parking.result(meter, notes="MemoryStore")


if __name__ == "__main__":
    main(sys.modules[__name__])
